//! Members overloaded on the address space of `this`. Metal lets a class declare a
//! constructor or member function once per address space of the object (`complex_t() thread`
//! beside `complex_t() threadgroup`, `MD() = default` beside `MD() threadgroup = default`) and
//! picks the one of the object's space. Lowered, address spaces are gone and every object is
//! in one space, so such a set is one C++ member: the members that differ only in that
//! qualifier are one definition (the first is kept, the rest dropped); ones that differ
//! otherwise are refused, naming both. A constructor keeps no `constant` qualifier (C++ has no
//! const constructors).

use std::collections::HashMap;

use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

const ADDRESS_SPACES: [&str; 4] = ["device", "constant", "thread", "threadgroup"];

/// What to drop from the lowered text: inclusive ranges of significant tokens.
pub(super) fn repeats(src: &Cursor) -> Result<Vec<(usize, usize)>, String> {
    let mut out = Vec::new();
    for (open, close) in class_bodies(src) {
        fold_members(src, open, close, &mut out)?;
    }
    Ok(out)
}

/// The bodies of classes that declare a member with an address space after its parameters.
fn class_bodies(src: &Cursor) -> Vec<(usize, usize)> {
    let mut stack: Vec<usize> = Vec::new();
    let mut bodies: Vec<(usize, usize)> = Vec::new();
    for k in 0..src.len() {
        if src.is(k, "{") {
            stack.push(k);
        } else if src.is(k, "}") {
            stack.pop();
        } else if src.is(k, ")") && this_qualifier(src, k).is_some() {
            if let Some(&open) = stack.last() {
                if bodies.last().is_none_or(|&(o, _)| o != open) && is_class_body(src, open) {
                    if let Some(close) = src.matching(open) {
                        bodies.push((open, close));
                    }
                }
            }
        }
    }
    bodies.sort();
    bodies.dedup();
    bodies
}

/// After the `)` at `k`: the qualifiers up to the body, initialisers, `= default` or `;`, when
/// they hold an address space (the positions of the qualifiers, and of the address spaces).
fn this_qualifier(src: &Cursor, k: usize) -> Option<(usize, Vec<usize>)> {
    let mut j = k + 1;
    let mut spaces = Vec::new();
    while j < src.len() {
        let t = src.tok(j);
        if ADDRESS_SPACES.iter().any(|s| t.is(s)) {
            spaces.push(j);
        } else if !(t.is("const") || t.is("volatile") || t.is("noexcept") || t.is("&") || t.is("&&")) {
            break;
        }
        j += 1;
    }
    let ends = src.is(j, "{") || src.is(j, ":") || src.is(j, "=") || src.is(j, ";");
    (ends && !spaces.is_empty()).then_some((j, spaces))
}

/// Whether the `{` at `open` opens a class body (`struct S {`, `struct S<T*> : B {`).
fn is_class_body(src: &Cursor, open: usize) -> bool {
    class_name(src, open).is_some()
}

/// The name of the class whose body opens at `open`.
fn class_name(src: &Cursor, open: usize) -> Option<String> {
    let mut j = open;
    while j > 0 {
        j -= 1;
        let t = src.tok(j);
        if t.is(";") || t.is("{") || t.is("}") {
            return None;
        }
        if (t.is("struct") || t.is("class") || t.is("union")) && src.ident(j + 1) {
            return Some(src.tok(j + 1).text.clone());
        }
    }
    None
}

/// One member declaration of a class body.
struct Member {
    /// Its first and last significant tokens.
    from: usize,
    to: usize,
    /// The `)` closing its parameters, when it is a function.
    params_close: Option<usize>,
}

/// The member declarations of the class body `open..close`.
fn members(src: &Cursor, open: usize, close: usize) -> Vec<Member> {
    let mut out = Vec::new();
    let mut j = open + 1;
    while j < close {
        let from = j;
        let mut params_close = None;
        let mut in_init = false;
        loop {
            if j >= close {
                out.push(Member { from, to: close - 1, params_close });
                break;
            }
            let t = src.tok(j);
            if t.is(";") {
                out.push(Member { from, to: j, params_close });
                j += 1;
                break;
            }
            if t.kind == Kind::Ident
                && ["public", "private", "protected"].contains(&t.text.as_str())
                && src.is(j + 1, ":")
            {
                j += 2;
                break;
            }
            if t.is("(") || t.is("[") {
                let end = src.matching(j).unwrap_or(close);
                if t.is("(") && params_close.is_none() && j > from {
                    params_close = Some(end);
                }
                j = end + 1;
                continue;
            }
            if t.is(":") && params_close.is_some() {
                in_init = true;
            }
            if t.is("{") {
                let end = src.matching(j).unwrap_or(close);
                let prev = src.tok(j - 1);
                let brace_init = in_init && (prev.kind == Kind::Ident || prev.is(">"));
                let body = params_close.is_some() && !brace_init && (!in_init || prev.is(")") || prev.is("}"));
                if body {
                    let to = if src.is(end + 1, ";") { end + 1 } else { end };
                    out.push(Member { from, to, params_close });
                    j = to + 1;
                    break;
                }
                j = end + 1;
                continue;
            }
            j += 1;
        }
    }
    out
}

/// Folds the members of one class body that differ only in the address space of `this`.
fn fold_members(src: &Cursor, open: usize, close: usize, out: &mut Vec<(usize, usize)>) -> Result<(), String> {
    let class = class_name(src, open).unwrap_or_default();
    // Head (the declaration up to its body, without the qualifier's address spaces) → (the
    // whole member's text likewise, its first token).
    let mut seen: HashMap<String, (String, usize)> = HashMap::new();
    for m in members(src, open, close) {
        let Some(params_close) = m.params_close else { continue };
        let qualifier = this_qualifier(src, params_close);
        let spaces: Vec<usize> = qualifier.as_ref().map(|(_, s)| s.clone()).unwrap_or_default();
        let head_end = qualifier.as_ref().map_or_else(|| head_end(src, params_close, m.to), |(end, _)| *end);
        let text = |from: usize, to: usize| -> String {
            (from..to).filter(|j| !spaces.contains(j)).map(|j| src.tok(j).text.as_str()).collect::<Vec<_>>().join(" ")
        };
        let head = text(m.from, head_end);
        let whole = text(m.from, m.to + 1);
        if constructor(src, m.from, params_close, &class) {
            out.extend(spaces.iter().filter(|&&s| src.is(s, "constant")).map(|&s| (s, s)));
        }
        match seen.get(&head) {
            None => {
                seen.insert(head, (whole, m.from));
            }
            Some((first, _)) if *first == whole => out.push((m.from, m.to)),
            Some((_, line_of)) if !spaces.is_empty() => {
                return Err(format!(
                    "line {}: `{}` is declared for another address space of `this` on line {} with a different \
                     definition: kiln runs every object in one address space, where these are one member; make \
                     them the same or give them different names",
                    src.tok(m.from).line,
                    name_of(src, m.from, params_close),
                    src.tok(*line_of).line
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Where the head of a member without an address space ends: its body, initialisers, `=` or
/// `;` after the qualifiers.
fn head_end(src: &Cursor, params_close: usize, to: usize) -> usize {
    let mut j = params_close + 1;
    while j < to && !(src.is(j, "{") || src.is(j, ":") || src.is(j, "=") || src.is(j, ";")) {
        j += 1;
    }
    j
}

/// Whether the member from `from` with parameters closing at `params_close` is a constructor
/// of `class`: its name is the class's, with nothing but specifiers before it.
fn constructor(src: &Cursor, from: usize, params_close: usize, class: &str) -> bool {
    let Some(open) = src.matching_back(params_close) else { return false };
    let mut j = from;
    if src.is(j, "template") && src.is(j + 1, "<") {
        // The template header's `>` (the cursor does not pair angles).
        let mut depth = 0i32;
        while j < open {
            match src.tok(j).text.as_str() {
                "<" => depth += 1,
                ">" => depth -= 1,
                ">>" => depth -= 2,
                _ => {}
            }
            j += 1;
            if depth <= 0 && j > from + 1 {
                break;
            }
        }
    }
    while j < open
        && (["constexpr", "explicit", "inline", "METAL_FUNC"].iter().any(|s| src.is(j, s))
            || src.tok(j).kind == Kind::Attr)
    {
        j += 1;
    }
    src.is(j, class) && (j + 1 == open || src.is(j + 1, "<"))
}

/// The member's name for messages: the tokens before its parameters, after its specifiers.
fn name_of(src: &Cursor, from: usize, params_close: usize) -> String {
    let open = src.matching_back(params_close).unwrap_or(params_close);
    let start = (from..open).rev().find(|&j| src.ident(j) && !src.is(j, "operator")).unwrap_or(from);
    let start = if start > from && src.is(start - 1, "operator") { start - 1 } else { start };
    (start..open).map(|j| src.tok(j).text.as_str()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dropped(src: &str) -> Vec<(u32, String)> {
        let c = Cursor::new(src);
        repeats(&c)
            .unwrap()
            .iter()
            .map(|&(a, b)| (c.tok(a).line, (a..=b).map(|j| c.tok(j).text.as_str()).collect::<Vec<_>>().join(" ")))
            .collect()
    }

    #[test]
    fn members_that_differ_only_in_the_space_of_this_are_one() {
        let src = "template <typename T> struct MD {\n  T m;\n  constexpr MD<T>() = default;\n  constexpr MD<T>() threadgroup = default;\n};\n";
        assert_eq!(dropped(src), [(4, "constexpr MD < T > ( ) threadgroup = default ;".to_string())]);
        let src = "template <typename T> struct complex_t {\n  T real; T imag;\n  constexpr complex_t() thread : real(0), imag(0) {};\n  constexpr complex_t() threadgroup : real(0), imag(0) {};\n  constexpr operator float() const device { return real; }\n  constexpr operator float() const constant { return real; }\n};\n";
        let d = dropped(src);
        assert_eq!(d.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [4, 6], "{d:?}");
        let src = "struct HybridTaus {\n  uint z;\n  HybridTaus() constant = default;\n  HybridTaus() thread = default;\n};\n";
        let d = dropped(src);
        assert_eq!(d, [(3, "constant".to_string()), (4, "HybridTaus ( ) thread = default ;".to_string())], "{d:?}");
    }

    #[test]
    fn different_definitions_are_refused_by_name() {
        let src =
            "struct S {\n  float get() const device { return 1; }\n  float get() const threadgroup { return 2; }\n};\n";
        let err = repeats(&Cursor::new(src)).unwrap_err();
        assert!(err.contains("line 3: `get` is declared for another address space of `this` on line 2"), "{err}");
    }
}
