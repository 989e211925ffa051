//! Overloads and template specialisations that differ only in address spaces. Metal allows
//! `f(device const float*)` next to `f(thread const float*)`, and `S<device T*>` next to
//! `S<threadgroup T*>`; the lowering turns address spaces into plain C++ pointers and
//! references, where the two are one, and C++ would report a bare redefinition. Overloads with
//! different definitions are refused with the function named and the reason. Specialisations whose text is the same but
//! for the address spaces (MLX's `pointer_element<device T*>`, `<threadgroup T*>`, ...) mean
//! the same thing in the lowered C++, so all but the first are dropped; ones that differ
//! otherwise are refused with the template named. Function overloads whose whole definitions
//! are the same but for their parameters' address spaces (candle's `elem_to_loc` for `device`
//! and `constant` shapes) are one function too, and fold the same way.

use std::collections::HashMap;

use super::entry::join;
use super::program::is_function_qualifier;
use crate::source::cursor::{split_commas, Cursor};
use crate::source::tokens::{Kind, Token};

const ADDRESS_SPACES: [&str; 4] = ["device", "constant", "thread", "threadgroup"];

/// A function as C++ sees it after lowering: its scope, name and lowered parameter types.
type Signature = (usize, String, Vec<String>);
/// The first declaration of a signature: its parameters' address spaces, as written, its line
/// and its whole text without the parameters' address spaces.
type Declared = (Vec<String>, Vec<String>, u32, String);

/// One parameter: its type as the lowering sees it and its address spaces.
struct Param {
    lowered: String,
    spaces: String,
    written: String,
}

/// Checks every function declared at namespace or class scope and every template
/// specialisation. Returns the ranges of significant tokens (inclusive) that repeat a
/// specialisation and must be dropped.
pub(crate) fn check(src: &Cursor) -> Result<Vec<(usize, usize)>, String> {
    let tok = |k: usize| src.tok(k);
    let is = |k: usize, s: &str| src.is(k, s);
    let sig = &src.sig;
    let mut seen: HashMap<Signature, Declared> = HashMap::new();
    let mut specialisations: HashMap<Signature, Specialisation> = HashMap::new();
    let mut repeats = Vec::new();
    let mut scopes = vec![0usize];
    let mut next_scope = 1;
    let mut k = 0;
    while k < sig.len() {
        let t = tok(k);
        if t.is("{") {
            let opens_body = k > 0
                && (["=", ")", "mutable"].iter().any(|s| is(k - 1, s)) || is_function_qualifier(&tok(k - 1).text));
            if opens_body || k == 0 {
                k = src.matching(k).map_or(sig.len(), |c| c + 1);
                continue;
            }
            scopes.push(next_scope);
            next_scope += 1;
        } else if t.is("}") {
            if scopes.len() > 1 {
                scopes.pop();
            }
        } else if (t.is("struct") || t.is("class")) && is(k + 2, "<") && tok(k + 1).kind == Kind::Ident {
            let scope = scopes.last().copied().unwrap_or(0);
            if let Some(found) = specialisation(src, k, scope)? {
                match specialisations.get(&found.key) {
                    None => {
                        specialisations.insert(found.key.clone(), found);
                    }
                    Some(first) if first.spaces == found.spaces => {}
                    Some(first) if first.text == found.text => repeats.push(found.range),
                    Some(first) => {
                        return Err(format!(
                            "template `{}` is specialised for `{}` (line {}) and for `{}` (line {}), which differ only \
                             in address spaces and have different definitions: kiln lowers Metal's address spaces to \
                             plain C++ pointers and references, where these specialisations are one",
                            found.key.1, first.written, first.line, found.written, found.line
                        ));
                    }
                }
            }
        } else if let Some((name, open)) = function_name(src, k).filter(|_| k > 0) {
            let before = tok(k - 1);
            let after_type = before.kind == Kind::Ident || ["*", "&", "&&", ">", ">>"].iter().any(|s| before.is(s));
            let Some(close) = src.matching(open) else { break };
            if after_type {
                let params: Vec<Param> = {
                    let inner: Vec<&Token> = (open + 1..close).map(tok).filter(|t| t.kind != Kind::Attr).collect();
                    split_commas(&inner).iter().map(|p| param(p)).collect()
                };
                if params.iter().any(|p| !p.spaces.is_empty()) {
                    let scope = scopes.last().copied().unwrap_or(0);
                    let key = (scope, name.clone(), params.iter().map(|p| p.lowered.clone()).collect());
                    let spaces: Vec<String> = params.iter().map(|p| p.spaces.clone()).collect();
                    let written: Vec<String> = params.iter().map(|p| p.written.clone()).collect();
                    let (from, to) = declaration(src, k, close);
                    let text = without_spaces(src, from, to);
                    if let Some((other, other_written, line, other_text)) = seen.get(&key) {
                        if *other != spaces && *other_text == text {
                            // The same definition but for address spaces: one function lowered.
                            repeats.push((from, to));
                        } else if *other != spaces {
                            return Err(format!(
                                "function `{}` (lines {line} and {}) is overloaded only on address spaces (`{}` and `{}`): \
                                 kiln lowers Metal's address spaces to plain C++ pointers and references, where these \
                                 overloads are one function; give them different names",
                                name,
                                t.line,
                                other_written.join(", "),
                                written.join(", ")
                            ));
                        }
                    } else {
                        seen.insert(key, (spaces, written, t.line, text));
                    }
                }
            }
            k = close + 1;
            continue;
        }
        k += 1;
    }
    Ok(repeats)
}

/// The first and last significant tokens of the function declaration whose name is at `name`
/// and whose parameters close at `close`: from after the previous declaration to its body's
/// `}` or its `;`.
fn declaration(src: &Cursor, name: usize, close: usize) -> (usize, usize) {
    let mut from = name;
    while from > 0 && !(src.is(from - 1, ";") || src.is(from - 1, "{") || src.is(from - 1, "}")) {
        from -= 1;
    }
    let mut j = close + 1;
    while j < src.len() && !(src.is(j, "{") || src.is(j, ";")) {
        j += 1;
    }
    let to = if src.is(j, "{") { src.matching(j).unwrap_or(j) } else { j };
    (from, to.min(src.len().saturating_sub(1)))
}

/// The text of tokens `from..=to` without address spaces (as lowered: both sides of a pair
/// that differ only there are one function).
fn without_spaces(src: &Cursor, from: usize, to: usize) -> String {
    let mut out: Vec<&str> = Vec::new();
    for j in from..=to {
        let t = src.tok(j);
        if !ADDRESS_SPACES.iter().any(|s| t.is(s)) {
            out.push(&t.text);
        }
    }
    out.join(" ")
}

/// The function name at `k` and the `(` of its parameters: `name(`, or an operator
/// (`operator+=(`, `operator()(`, `operator[](`).
fn function_name(src: &Cursor, k: usize) -> Option<(String, usize)> {
    let t = src.tok(k);
    if t.kind != Kind::Ident {
        return None;
    }
    if !t.is("operator") {
        return src.is(k + 1, "(").then(|| (t.text.clone(), k + 1));
    }
    let mut j = k + 1;
    if (src.is(j, "(") && src.is(j + 1, ")")) || (src.is(j, "[") && src.is(j + 1, "]")) {
        j += 2;
    } else {
        while j < src.len() && src.tok(j).kind == Kind::Punct && !src.is(j, "(") {
            j += 1;
        }
    }
    src.is(j, "(").then(|| ((k..j).map(|i| src.tok(i).text.as_str()).collect(), j))
}

/// A class template specialisation whose arguments name address spaces.
struct Specialisation {
    /// Scope, template name and the arguments as lowered.
    key: Signature,
    /// The address spaces of the arguments, as written.
    spaces: Vec<String>,
    /// The arguments as written, for messages.
    written: String,
    /// The declaration's text with the address spaces left out: equal texts mean one thing.
    text: String,
    /// The declaration from `template` to its `;`, in significant tokens.
    range: (usize, usize),
    line: u32,
}

/// The specialisation declared by `struct NAME<...>` at `k`, if it is one with address spaces
/// in its arguments and a body.
fn specialisation(src: &Cursor, k: usize, scope: usize) -> Result<Option<Specialisation>, String> {
    let tok = |j: usize| src.tok(j);
    let is = |j: usize, s: &str| src.is(j, s);
    let sig = &src.sig;
    // The template header before `struct`: `template <...>`.
    if k < 2 || !is(k - 1, ">") {
        return Ok(None);
    }
    let mut depth = 0i32;
    let mut start = None;
    for j in (0..k).rev() {
        match tok(j).text.as_str() {
            ">" => depth += 1,
            ">>" => depth += 2,
            "<" => depth -= 1,
            ";" | "{" | "}" => break,
            _ => {}
        }
        if depth == 0 {
            start = (j > 0 && is(j - 1, "template")).then(|| j - 1);
            break;
        }
    }
    let Some(start) = start else { return Ok(None) };
    let open = k + 2;
    let mut depth = 0i32;
    let mut close = None;
    for j in open..sig.len() {
        match tok(j).text.as_str() {
            "<" | "(" | "[" => depth += 1,
            ">" | ")" | "]" => depth -= 1,
            ">>" => depth -= 2,
            ";" | "{" | "}" => break,
            _ => {}
        }
        if depth <= 0 {
            close = Some(j);
            break;
        }
    }
    let Some(close) = close.filter(|&c| tok(c).is(">")) else { return Ok(None) };
    let args: Vec<&Token> = (open + 1..close).map(tok).collect();
    if !args.iter().any(|t| ADDRESS_SPACES.iter().any(|s| t.is(s))) {
        return Ok(None);
    }
    let Some(body) = (close + 1..sig.len()).take_while(|&j| !is(j, ";")).find(|&j| is(j, "{")) else {
        return Ok(None);
    };
    let end = src.matching(body).ok_or_else(|| format!("line {}: unbalanced braces", tok(body).line))?;
    let end = if is(end + 1, ";") { end + 1 } else { end };
    let params: Vec<Param> = split_commas(&args).iter().map(|p| argument(p)).collect();
    let key = (scope, tok(k + 1).text.clone(), params.iter().map(|p| p.lowered.clone()).collect());
    let text: Vec<&str> = (start..=end)
        .filter(|&j| !(open < j && j < close && ADDRESS_SPACES.iter().any(|s| is(j, s))))
        .map(|j| tok(j).text.as_str())
        .collect();
    Ok(Some(Specialisation {
        key,
        spaces: params.iter().map(|p| p.spaces.clone()).collect(),
        written: spelled(&args),
        text: text.join(" "),
        range: (start, end),
        line: tok(k).line,
    }))
}

/// A template argument's lowered type and address spaces (like a parameter, without a name).
fn argument(tokens: &[&Token]) -> Param {
    let has_const = tokens.iter().any(|t| t.is("const") || t.is("constant"));
    let kept: Vec<&Token> =
        tokens.iter().copied().filter(|t| !t.is("const") && !ADDRESS_SPACES.iter().any(|s| t.is(s))).collect();
    let spaces: Vec<&str> = tokens.iter().filter_map(|t| ADDRESS_SPACES.iter().find(|s| t.is(s)).copied()).collect();
    let lowered = format!("{}{}", if has_const { "const " } else { "" }, join(&kept));
    Param { lowered, spaces: spaces.join(" "), written: spelled(tokens) }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> Result<(), String> {
        check(&Cursor::new(src)).map(|_| ())
    }

    #[test]
    fn address_space_only_overloads_are_named() {
        let src = "inline int which(device const float* p) { return 1; }\ninline int which(constant float* q) { return 4; }\n";
        let err = run(src).unwrap_err();
        assert!(err.contains("function `which` (lines 1 and 2)") && err.contains("address spaces"), "{err}");
        assert!(err.contains("`device const float* p` and `constant float* q`"), "{err}");
        let src = "struct S {\n  float get(thread float& r) const { return r; }\n  float get(threadgroup float& r) const { return -r; }\n};";
        assert!(run(src).unwrap_err().contains("`get` (lines 2 and 3)"));
        let same = "struct S {\n  float get(thread float& r) const { return r; }\n  float get(threadgroup float& r) const { return r; }\n};";
        assert_eq!(check(&Cursor::new(same)).map(|r| r.len()), Ok(1), "one definition but for address spaces folds");
    }

    #[test]
    fn address_space_only_specialisations_fold_or_are_named() {
        let same = "template <typename T> struct pe {};\n\
                    template <typename T> struct pe<thread T*> { using type = T; };\n\
                    template <typename T> struct pe<device T*> { using type = T; };\n\
                    template <typename T> struct pe<constant T*> { using type = T; };\n\
                    template <typename T> struct pe<threadgroup T*> { using type = T; };\n";
        let src = Cursor::new(same);
        let repeats = check(&src).unwrap();
        let dropped: Vec<u32> = repeats.iter().map(|&(from, _)| src.tok(from).line).collect();
        assert_eq!(dropped, [3, 5], "the device and threadgroup forms repeat the thread one");
        for &(from, to) in &repeats {
            assert!(src.tok(from).is("template") && src.tok(to).is(";"));
        }
        let differ = "template <typename T> struct pe {};\n\
                      template <typename T> struct pe<device T*> { static constexpr int v = 1; };\n\
                      template <typename T> struct pe<threadgroup T*> { static constexpr int v = 3; };\n";
        let err = run(differ).unwrap_err();
        assert!(
            err.contains("template `pe` is specialised for `device T*` (line 2) and for `threadgroup T*` (line 3)"),
            "{err}"
        );
        assert_eq!(
            run("template <typename T> struct pe<device T*> { using type = T; };\nstruct pe<float> {};"),
            Ok(())
        );
    }

    #[test]
    fn overloads_with_one_definition_but_for_address_spaces_fold() {
        let src = "template <typename S> inline S at(uint e, device const int* shape, device const S* strides) {\n  return e * strides[0] + shape[0];\n}\n\
                   template <typename S> inline S at(uint e, constant const int* shape, constant const S* strides) {\n  return e * strides[0] + shape[0];\n}\n";
        let c = Cursor::new(src);
        let repeats = check(&c).unwrap();
        assert_eq!(repeats.len(), 1);
        let (from, to) = repeats[0];
        assert!(c.tok(from).is("template") && c.tok(from).line == 4 && c.tok(to).is("}"), "{repeats:?}");
        let ops = "template <typename T> constexpr thread C<T>& operator+=(thread C<T>& a, C<T> b) { a.x += b.x; return a; }\n\
                   template <typename T> constexpr device C<T>& operator+=(device C<T>& a, C<T> b) { a.x += b.x; return a; }\n";
        assert_eq!(check(&Cursor::new(ops)).map(|r| r.len()), Ok(1), "operators fold like functions");
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
            "struct S {\n  float get(thread float& r) const thread { return r; }\n  float get(thread int& r) const thread { return 1; }\n};",
        ] {
            assert_eq!(run(src), Ok(()), "{src}");
        }
    }
}
