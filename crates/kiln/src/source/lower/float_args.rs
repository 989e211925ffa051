//! `half` and `bfloat` arguments to a program's own functions of `float`. Metal's half and
//! bfloat are built-in types: passing one to `float log1p(float)` is a standard conversion,
//! better than any user-defined one, so beside MLX's `complex64_t log1p(complex64_t)` (whose
//! constructor takes anything convertible to float) the float overload wins. kiln's half and
//! bfloat are classes, so both conversions are user-defined and the call is ambiguous. After
//! each non-template function defined at namespace scope with `float` parameters (by value),
//! the lowering adds a companion template taking half or bfloat in those positions exactly and
//! forwarding them as floats: an exact match, chosen over both conversions, that calls the
//! function Metal would have. Functions the program also overloads on half or bfloat keep
//! those overloads (a non-template exact match beats the template); names the program also
//! declares as function templates get no companion (their template takes half as it is).

use crate::source::parse::ProgramParse;
use crate::source::tokens::{Kind, Token};

/// The address-space words of a parameter type, which the lowered C++ does not have.
const ADDRESS_SPACES: [&str; 4] = ["device", "constant", "thread", "threadgroup"];

/// Appends the companions to the closing braces of the functions that need one.
pub(super) fn companions(parse: &ProgramParse, out: &mut [String]) {
    let src = &parse.cursor;
    if !src.toks.iter().any(|t| t.kind == Kind::Ident && t.text == "float") {
        return;
    }
    let (outline, at) = parse.outline();
    // Names the program also declares as function templates take small floats as they are (a
    // companion would be as good a match as the program's template: ambiguous).
    let templates: std::collections::HashSet<&str> = outline
        .items
        .iter()
        .filter_map(|item| {
            let f = item.function.as_ref()?;
            outline.toks[item.range.start].is("template").then_some(f.name.as_str())
        })
        .collect();
    for item in &outline.items {
        let Some(f) = &item.function else { continue };
        let head = &outline.toks[item.range.start..f.params.start];
        let starts_template = head.first().is_some_and(|t| t.is("template"));
        let name_at = f.params.start.checked_sub(2);
        let qualified = name_at.and_then(|n| n.checked_sub(1)).is_some_and(|p| outline.toks[p].is("::"));
        if f.is_kernel
            || starts_template
            || qualified
            || f.name == "operator"
            || templates.contains(f.name.as_str())
            || f.body.end >= outline.toks.len()
        {
            continue;
        }
        let params: Vec<&Token> = outline.toks[f.params.clone()].iter().collect();
        if let Some(text) = companion(&f.name, &params) {
            out[src.sig[at[f.body.end]]].push_str(&text);
        }
    }
}

/// The companion of `name(params)`, when a parameter is a `float` by value and every other
/// parameter's type can be written again.
fn companion(name: &str, params: &[&Token]) -> Option<String> {
    let mut template = Vec::new();
    let mut declared = Vec::new();
    let mut forwarded = Vec::new();
    for (i, part) in crate::source::cursor::split_commas(params).into_iter().enumerate() {
        let mut part: Vec<&Token> = part.into_iter().filter(|t| t.kind != Kind::Attr).collect();
        if let Some(eq) = part.iter().position(|t| t.is("=")) {
            part.truncate(eq);
        }
        if part.len() == 1 && part[0].is("void") {
            continue;
        }
        if part.iter().any(|t| ["(", "[", "...", "{"].contains(&t.text.as_str())) {
            return None;
        }
        let arg = format!("kiln_a{i}");
        let words: Vec<&str> = part.iter().map(|t| t.text.as_str()).collect();
        // The type without its name (the last identifier, when one follows the type).
        let ty = match words.split_last() {
            Some((last, rest)) if !rest.is_empty() && part.last().is_some_and(|t| t.kind == Kind::Ident) => {
                let _ = last;
                rest
            }
            _ => &words[..],
        };
        if matches!(ty, ["float"] | ["const", "float"] | ["float", "const"]) {
            template.push(format!("K{i}"));
            declared.push(format!("K{i} {arg}"));
            forwarded.push(format!("float({arg})"));
        } else {
            // Written after the rewrite: without Metal's address spaces, as the rewrite leaves
            // the function's own parameters.
            let kept: Vec<&str> = ty.iter().copied().filter(|w| !ADDRESS_SPACES.contains(w)).collect();
            declared.push(format!("{} {arg}", kept.join(" ")));
            forwarded.push(arg);
        }
    }
    if template.is_empty() {
        return None;
    }
    let classes: Vec<String> = template.iter().map(|k| format!("class {k}")).collect();
    let small: Vec<String> = template.iter().map(|k| format!("kiln::is_small_float<{k}>::value")).collect();
    let call = format!("{name}({})", forwarded.join(", "));
    Some(format!(
        " template <{}, class = typename kiln::enable_if<{}>::type> constexpr inline auto {name}({}) -> decltype({call}) {{ return {call}; }}",
        classes.join(", "),
        small.join(" && "),
        declared.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tokens::tokenize;

    fn params(s: &str) -> Vec<Token> {
        tokenize(s).into_iter().filter(|t| !t.is_trivia()).collect()
    }

    #[test]
    fn companions_take_small_floats_where_the_function_takes_float() {
        let p = params("float x, const device int* n [[buffer(0)]], const float y = 2.0f");
        let c = companion("f", &p.iter().collect::<Vec<_>>()).unwrap();
        assert!(c.contains("template <class K0, class K2, class = typename kiln::enable_if<kiln::is_small_float<K0>::value && kiln::is_small_float<K2>::value>::type>"), "{c}");
        assert!(c.contains("auto f(K0 kiln_a0, const int * kiln_a1, K2 kiln_a2) -> decltype(f(float(kiln_a0), kiln_a1, float(kiln_a2)))"), "{c}");
        // No float by value: no companion; a parameter that cannot be written again: none.
        assert_eq!(companion("g", &params("thread float& x").iter().collect::<Vec<_>>()), None);
        assert_eq!(companion("h", &params("float x, int a[4]").iter().collect::<Vec<_>>()), None);
    }
}
