//! Overloads that differ only in address spaces. Metal allows `f(device const float*)` next to
//! `f(thread const float*)`; the lowering turns address spaces into plain C++ pointers and
//! references, where the two are one function, and C++ would report a bare redefinition. The
//! program is refused with the function named and the reason instead.

use std::collections::HashMap;

use super::entry::{join, split_commas};
use super::tokens::{Kind, Token};

const ADDRESS_SPACES: [&str; 4] = ["device", "constant", "thread", "threadgroup"];

/// A function as C++ sees it after lowering: its scope, name and lowered parameter types.
type Signature = (usize, String, Vec<String>);
/// The first declaration of a signature: its parameters' address spaces, as written, and line.
type Declared = (Vec<String>, Vec<String>, u32);

/// One parameter: its type as the lowering sees it and its address spaces.
struct Param {
    lowered: String,
    spaces: String,
    written: String,
}

/// Checks every function declared at namespace or class scope (`sig` indexes the significant
/// tokens of `toks`).
pub fn check(toks: &[Token], sig: &[usize]) -> Result<(), String> {
    let tok = |k: usize| &toks[sig[k]];
    let is = |k: usize, s: &str| k < sig.len() && tok(k).is(s);
    let mut seen: HashMap<Signature, Declared> = HashMap::new();
    let mut scopes = vec![0usize];
    let mut next_scope = 1;
    let mut k = 0;
    while k < sig.len() {
        let t = tok(k);
        if t.is("{") {
            let opens_body =
                k > 0 && ["=", ")", "const", "noexcept", "override", "final", "mutable"].iter().any(|s| is(k - 1, s));
            if opens_body || k == 0 {
                k = matching(toks, sig, k).map_or(sig.len(), |c| c + 1);
                continue;
            }
            scopes.push(next_scope);
            next_scope += 1;
        } else if t.is("}") {
            if scopes.len() > 1 {
                scopes.pop();
            }
        } else if t.kind == Kind::Ident && is(k + 1, "(") && k > 0 {
            let before = tok(k - 1);
            let after_type = before.kind == Kind::Ident || ["*", "&", "&&", ">", ">>"].iter().any(|s| before.is(s));
            let Some(close) = matching(toks, sig, k + 1) else { break };
            if after_type {
                let params: Vec<Param> = {
                    let inner: Vec<&Token> = (k + 2..close).map(tok).filter(|t| t.kind != Kind::Attr).collect();
                    split_commas(&inner).iter().map(|p| param(p)).collect()
                };
                if params.iter().any(|p| !p.spaces.is_empty()) {
                    let scope = scopes.last().copied().unwrap_or(0);
                    let key = (scope, t.text.clone(), params.iter().map(|p| p.lowered.clone()).collect());
                    let spaces: Vec<String> = params.iter().map(|p| p.spaces.clone()).collect();
                    let written: Vec<String> = params.iter().map(|p| p.written.clone()).collect();
                    if let Some((other, other_written, line)) = seen.get(&key) {
                        if *other != spaces {
                            return Err(format!(
                                "function `{}` (lines {line} and {}) is overloaded only on address spaces (`{}` and `{}`): \
                                 kiln lowers Metal's address spaces to plain C++ pointers and references, where these \
                                 overloads are one function; give them different names",
                                t.text,
                                t.line,
                                other_written.join(", "),
                                written.join(", ")
                            ));
                        }
                    } else {
                        seen.insert(key, (spaces, written, t.line));
                    }
                }
            }
            k = close + 1;
            continue;
        }
        k += 1;
    }
    Ok(())
}

/// A parameter's lowered type (address spaces gone, `constant` read as `const`, no name or
/// default argument) and its address spaces.
fn param(tokens: &[&Token]) -> Param {
    let end = tokens.iter().position(|t| t.is("=")).unwrap_or(tokens.len());
    let decl = &tokens[..end];
    let no_const: Vec<&Token> = decl.iter().copied().filter(|t| !t.is("const")).collect();
    let has_const = decl.iter().any(|t| t.is("const") || t.is("constant"));
    let mut kept: Vec<&Token> = no_const.iter().copied().filter(|t| !ADDRESS_SPACES.iter().any(|s| t.is(s))).collect();
    // The name: a last identifier after a type.
    if kept.len() >= 2 {
        let before = kept[kept.len() - 2];
        let named = kept[kept.len() - 1].kind == Kind::Ident
            && (before.kind == Kind::Ident || ["*", "&", "&&", ">", ">>"].iter().any(|s| before.is(s)));
        if named {
            kept.pop();
        }
    }
    let spaces: Vec<&str> = decl.iter().filter_map(|t| ADDRESS_SPACES.iter().find(|s| t.is(s)).copied()).collect();
    let lowered = format!("{}{}", if has_const { "const " } else { "" }, join(&kept));
    Param { lowered, spaces: spaces.join(" "), written: spelled(decl) }
}

/// A parameter as written, with single spaces (`device const float* p`).
fn spelled(tokens: &[&Token]) -> String {
    let mut out = String::new();
    let mut prev: Option<&Token> = None;
    for t in tokens {
        let tight = ["*", "&", "&&", "<", ">", ",", "::"].iter().any(|s| t.is(s))
            || prev.is_some_and(|p| p.is("<") || p.is("::"));
        if prev.is_some() && !tight {
            out.push(' ');
        }
        out.push_str(&t.text);
        prev = Some(t);
    }
    out
}

fn matching(toks: &[Token], sig: &[usize], open: usize) -> Option<usize> {
    let (o, c) = match toks[sig[open]].text.as_str() {
        "(" => ("(", ")"),
        "{" => ("{", "}"),
        _ => return None,
    };
    let mut depth = 0i32;
    for (j, &i) in sig.iter().enumerate().skip(open) {
        let t = &toks[i];
        if t.is(o) {
            depth += 1;
        } else if t.is(c) {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::lower::tokens::tokenize;

    fn run(src: &str) -> Result<(), String> {
        let toks = tokenize(src);
        let sig: Vec<usize> = (0..toks.len()).filter(|&i| !toks[i].is_trivia()).collect();
        check(&toks, &sig)
    }

    #[test]
    fn address_space_only_overloads_are_named() {
        let src = "inline int which(device const float* p) { return 1; }\ninline int which(constant float* q) { return 4; }\n";
        let err = run(src).unwrap_err();
        assert!(err.contains("function `which` (lines 1 and 2)") && err.contains("address spaces"), "{err}");
        assert!(err.contains("`device const float* p` and `constant float* q`"), "{err}");
        let src = "struct S {\n  float get(thread float& r) const { return r; }\n  float get(threadgroup float& r) const { return r; }\n};";
        assert!(run(src).unwrap_err().contains("`get` (lines 2 and 3)"));
    }

    #[test]
    fn real_overloads_and_redeclarations_pass() {
        for src in [
            "int f(device float* p);\nint f(device float* q) { return 0; }",
            "int f(device float* p) { return 0; }\nint f(device int* p) { return 1; }",
            "int f(device float* p) { return 0; }\nint f(thread float* p, int n) { return 1; }",
            "namespace a { int f(device float* p); }\nnamespace b { int f(thread float* p); }",
            "kernel void k(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) { a[i] = g(i); }",
            "void f(thread float* p) { auto l = [](device float* q) { return q; }; }\nvoid g(device float* p) {}",
        ] {
            assert_eq!(run(src), Ok(()), "{src}");
        }
    }
}
