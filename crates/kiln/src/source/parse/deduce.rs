//! Template arguments of an explicit instantiation that names none: `template [[host_name("x")]]
//! [[kernel]] void f(const device float* in, constant P<1>* p);` instantiates `template <typename
//! T, int N> kernel void f(const device T* in, constant P<N>* p)` with `T = float, N = 1`, as
//! C++ deduces them from the declared function type (MLX's conv.metal). Each template
//! parameter's type is matched token by token against the instantiation's parameter of the same
//! position; a template parameter matches a balanced run of tokens. Parameters deduced from no
//! parameter take their defaults; when one has neither, no deduction is made.

use crate::source::cursor::split_commas;
use crate::source::tokens::{Kind, Token};

/// A kernel template's parameter names with their defaults (as text), and its function
/// parameters' types (attributes and names dropped).
#[derive(Clone, Debug, Default)]
pub struct KernelTemplate {
    pub params: Vec<(String, Option<String>)>,
    pub arg_types: Vec<Vec<String>>,
}

impl KernelTemplate {
    /// From the tokens inside `template < ... >` and inside the kernel's parentheses.
    pub fn new(template_params: &[&Token], function_params: &[&Token]) -> KernelTemplate {
        let params = split_commas(template_params)
            .iter()
            .filter_map(|part| {
                let eq = part.iter().position(|t| t.is("=")).unwrap_or(part.len());
                let name = part[..eq].iter().rev().find(|t| t.kind == Kind::Ident)?.text.clone();
                let default = (eq < part.len()).then(|| super::entry::join(&part[eq + 1..]));
                Some((name, default))
            })
            .collect();
        KernelTemplate { params, arg_types: types_of(function_params) }
    }

    /// The template arguments (as text, in order) that make this kernel's parameters the
    /// instantiation's `function_params`; `None` when some cannot be found.
    pub fn deduce(&self, function_params: &[&Token]) -> Option<Vec<String>> {
        let concrete = types_of(function_params);
        if concrete.len() != self.arg_types.len() {
            return None;
        }
        let names: Vec<&str> = self.params.iter().map(|(n, _)| n.as_str()).collect();
        let mut bound: Vec<Option<Vec<String>>> = vec![None; names.len()];
        for (pattern, given) in self.arg_types.iter().zip(&concrete) {
            if !unify(pattern, given, &names, &mut bound) {
                return None;
            }
        }
        bound
            .into_iter()
            .zip(&self.params)
            .map(|(b, (_, default))| b.map(|toks| join_text(&toks)).or_else(|| default.clone()))
            .collect()
    }
}

/// Each parameter's type: its tokens without attributes and without its name (the last
/// identifier, when more than one token is left and it follows a type).
fn types_of(params: &[&Token]) -> Vec<Vec<String>> {
    split_commas(params)
        .into_iter()
        .filter(|p| !(p.len() == 1 && p[0].is("void")))
        .map(|part| {
            let mut toks: Vec<&Token> = part.into_iter().filter(|t| t.kind != Kind::Attr).collect();
            if toks.len() > 1 && toks.last().is_some_and(|t| t.kind == Kind::Ident) && !toks[toks.len() - 2].is("::") {
                toks.pop();
            }
            toks.iter().map(|t| t.text.clone()).collect()
        })
        .collect()
}

/// Matches `pattern` (which may hold template parameter names) against `given`.
fn unify(pattern: &[String], given: &[String], names: &[&str], bound: &mut Vec<Option<Vec<String>>>) -> bool {
    let Some(first) = pattern.first() else { return given.is_empty() };
    let Some(i) = names.iter().position(|n| n == first) else {
        return given.first() == Some(first) && unify(&pattern[1..], &given[1..], names, bound);
    };
    if let Some(value) = bound[i].clone() {
        return given.starts_with(&value) && unify(&pattern[1..], &given[value.len()..], names, bound);
    }
    // The shortest balanced run of tokens after which the rest matches.
    let mut depth = 0i32;
    for len in 1..=given.len() {
        match given[len - 1].as_str() {
            "<" | "(" | "[" => depth += 1,
            ">" | ")" | "]" => depth -= 1,
            ">>" => depth -= 2,
            _ => {}
        }
        if depth != 0 {
            continue;
        }
        let saved = bound.clone();
        bound[i] = Some(given[..len].to_vec());
        if unify(&pattern[1..], &given[len..], names, bound) {
            return true;
        }
        *bound = saved;
    }
    false
}

/// Tokens as C++ text: a space only between two words.
fn join_text(toks: &[String]) -> String {
    let word = |s: &str| s.starts_with(|c: char| c.is_alphanumeric() || c == '_');
    let mut out = String::new();
    for (k, t) in toks.iter().enumerate() {
        if k > 0 && word(t) && word(&toks[k - 1]) {
            out.push(' ');
        }
        out.push_str(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tokens::tokenize;

    fn toks(s: &str) -> Vec<Token> {
        tokenize(s).into_iter().filter(|t| !t.is_trivia()).collect()
    }

    #[test]
    fn deduces_types_and_values_from_the_parameters() {
        let (tp, fp) = (
            toks("typename T, int N, int BC = 32"),
            toks("const device T* in [[buffer(0)]], constant P<N>* p [[buffer(2)]], uint3 gid [[thread_position_in_grid]]"),
        );
        let t = KernelTemplate::new(&tp.iter().collect::<Vec<_>>(), &fp.iter().collect::<Vec<_>>());
        let given = toks("const device metal::bfloat* x [[buffer(0)]], constant P<3>* q [[buffer(2)]], uint3 g");
        let args = t.deduce(&given.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(args, vec!["metal::bfloat", "3", "32"]);
        // A parameter that does not fit the pattern: no deduction.
        let wrong = toks("const device float* x, device P<3>* q, uint3 g");
        assert_eq!(t.deduce(&wrong.iter().collect::<Vec<_>>()), None);
        // A template parameter deduced from nothing and without a default: none.
        let t2 = KernelTemplate::new(
            &toks("typename T, int N").iter().collect::<Vec<_>>(),
            &toks("device T* x").iter().collect::<Vec<_>>(),
        );
        assert_eq!(t2.deduce(&toks("device half* x").iter().collect::<Vec<_>>()), None);
    }
}
