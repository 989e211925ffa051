//! The statements of a function body as the region pass reads them (`lower::regions`): the
//! statements of a block, whether one is a variable declaration (its specifiers and
//! declarators) or plainly declares nothing, and the source line a position stands on under
//! the `#line` directives before it.

use crate::source::cursor::Cursor;
use crate::source::tokens::Kind;

/// Names after which a statement is no declaration.
pub(super) const STATEMENT_KEYWORDS: [&str; 24] = [
    "return",
    "if",
    "for",
    "while",
    "do",
    "switch",
    "break",
    "continue",
    "else",
    "case",
    "default",
    "throw",
    "delete",
    "goto",
    "sizeof",
    "alignof",
    "co_await",
    "co_return",
    "co_yield",
    "new",
    "operator",
    "this",
    "static_assert",
    "KILN_CO_RETURN",
];
/// One declarator of a declaration: its `*`/`const` tokens, its name and its array sizes.
pub(super) struct Declarator {
    pub(super) ptr: (usize, usize),
    pub(super) name: usize,
    pub(super) dims: (usize, usize),
}

/// A statement read as a declaration: its specifiers `spec.0..spec.1` and declarators.
pub(super) struct Declaration {
    pub(super) spec: (usize, usize),
    pub(super) declarators: Vec<Declarator>,
    pub(super) constexpr: bool,
}

/// The statements of the block `open..close` (its braces' positions), each `(first, last)`.
pub(super) fn statements_in(src: &Cursor, open: usize, close: usize) -> Option<Vec<(usize, usize)>> {
    let mut statements = Vec::new();
    let mut k = open + 1;
    while k < close {
        let end = if src.tok(k).kind == Kind::Preproc { k } else { src.statement_end(k)? };
        if end >= close {
            return None;
        }
        statements.push((k, end));
        k = end + 1;
    }
    Some(statements)
}

/// Whether the statement `a..=e` plainly declares nothing: a control statement, a block, an
/// expression that starts with one name and an operator, a preprocessor line.
pub(super) fn plain_statement(src: &Cursor, a: usize, e: usize) -> bool {
    let t = src.tok(a);
    if t.kind == Kind::Preproc || src.is(a, "{") || src.is(a, ";") || STATEMENT_KEYWORDS.contains(&t.text.as_str()) {
        return true;
    }
    if t.kind == Kind::Punct {
        return !src.is(a, "::");
    }
    t.kind == Kind::Ident
        && a < e
        && src.tok(a + 1).kind == Kind::Punct
        && !src.is(a + 1, "<")
        && !src.is(a + 1, "::")
        && !src.is(a + 1, "*")
        && !src.is(a + 1, "&")
}

/// The statement `a..=e` read as a variable declaration: specifiers (names, `::`, template
/// arguments), then declarators `[*|const]* name [sizes] [= init | (init) | {init}]` split at
/// top-level commas.
pub(super) fn declaration(src: &Cursor, a: usize, e: usize) -> Option<Declaration> {
    let first = src.tok(a);
    if first.kind != Kind::Ident || STATEMENT_KEYWORDS.contains(&first.text.as_str()) {
        return None;
    }
    // The head: up to the first `=`, `(`, `[`, `{`, `,` or `;` outside template arguments.
    let mut j = a;
    let mut angles = 0usize;
    while j <= e {
        let t = src.tok(j);
        if src.is(j, "<") {
            if j == a || !src.ident(j - 1) {
                return None;
            }
            angles += 1;
        } else if angles > 0 {
            if src.is(j, ">") {
                angles -= 1;
            } else if src.is(j, ">>") {
                angles = angles.checked_sub(2)?;
            } else if src.is(j, "(") {
                j = src.matching(j)?;
            } else if src.is(j, ";") || src.is(j, "{") || src.is(j, "}") {
                return None;
            }
        } else if ["=", "(", "[", "{", ",", ";"].iter().any(|s| t.is(s)) {
            break;
        } else if !(t.kind == Kind::Ident || src.is(j, "::") || src.is(j, "*") || src.is(j, "&") || src.is(j, "&&")) {
            return None;
        }
        j += 1;
    }
    if angles != 0 || j > e || j < a + 2 || !src.ident(j - 1) {
        return None;
    }
    let name = j - 1;
    let before = src.tok(name - 1);
    if !(before.kind == Kind::Ident || ["<", ">", "*", "&", "&&"].iter().any(|s| before.is(s)) || src.is(name - 1, ">"))
    {
        return None;
    }
    if STATEMENT_KEYWORDS.contains(&src.tok(name).text.as_str()) || src.tok(name).text == "const" {
        return None;
    }
    // The first declarator's `*`/`const` run back from its name.
    let mut ptr_start = name;
    while ptr_start > a
        && (src.is(ptr_start - 1, "*")
            || src.is(ptr_start - 1, "&")
            || src.is(ptr_start - 1, "&&")
            || (src.is(ptr_start - 1, "const") && ptr_start - 1 > a && src.is(ptr_start - 2, "*")))
    {
        ptr_start -= 1;
    }
    let spec = (a, ptr_start);
    if spec.1 <= spec.0 {
        return None;
    }
    let constexpr = (spec.0..spec.1).any(|k| src.is(k, "constexpr"));
    let mut declarators = Vec::new();
    let mut d = Declarator { ptr: (ptr_start, name), name, dims: (name + 1, name + 1) };
    let mut k = name + 1;
    loop {
        // Sizes, then an initializer, then `,` or `;`.
        while src.is(k, "[") {
            k = src.matching(k)? + 1;
        }
        d.dims.1 = k;
        if src.is(k, "=") {
            k += 1;
            while k < e && !src.is(k, ",") {
                if ["(", "[", "{"].iter().any(|s| src.is(k, s)) {
                    k = src.matching(k)?;
                } else if src.is(k, "<") || src.is(k, ">") {
                    // A comparison or template arguments in the initializer: a comma after it
                    // could be either.
                    if (k..e).any(|c| src.is(c, ",")) {
                        return None;
                    }
                }
                k += 1;
            }
        } else if src.is(k, "(") || src.is(k, "{") {
            k = src.matching(k)? + 1;
        }
        declarators.push(d);
        if k == e && src.is(k, ";") {
            break;
        }
        if !src.is(k, ",") {
            return None;
        }
        // The next declarator: `*`/`const` tokens, then its name.
        let ptr0 = k + 1;
        let mut n = ptr0;
        while src.is(n, "*") || src.is(n, "&") || src.is(n, "const") {
            n += 1;
        }
        if !src.ident(n) {
            return None;
        }
        d = Declarator { ptr: (ptr0, n), name: n, dims: (n + 1, n + 1) };
        k = n + 1;
    }
    Some(Declaration { spec, declarators, constexpr })
}

/// The line of the user's source that position `k` is on, and the file, as the last `#line`
/// directive before it (`#line N "file"` or `# N "file"`) numbers them; the text's own line
/// without one.
pub(super) fn presumed_line(src: &Cursor, k: usize) -> (u32, Option<String>) {
    let line = src.tok(k).line;
    for j in (0..k).rev() {
        let t = src.tok(j);
        if t.kind != Kind::Preproc {
            continue;
        }
        let rest = t.text.trim_start_matches('#').trim_start();
        let rest = rest.strip_prefix("line").unwrap_or(rest).trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let Ok(n) = digits.parse::<u32>() else { continue };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let after = rest[digits.len()..].trim();
        let file = after.strip_prefix('"').and_then(|f| f.split('"').next()).map(str::to_string);
        let directive_lines = t.text.matches('\n').count() as u32;
        return (n + line.saturating_sub(t.line + directive_lines + 1), file);
    }
    (line, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declarators' names of the one statement `code`, if it reads as a declaration.
    fn declared(code: &str) -> Option<Vec<String>> {
        let src = Cursor::new(code);
        let decl = declaration(&src, 0, src.len() - 1)?;
        Some(decl.declarators.iter().map(|d| src.tok(d.name).text.clone()).collect())
    }

    #[test]
    fn declarations_are_told_from_expressions() {
        assert_eq!(declared("float v = x[i];"), Some(vec!["v".into()]));
        assert_eq!(declared("const float* const p = x + 1, q = 2.0f;"), Some(vec!["p".into(), "q".into()]));
        assert_eq!(declared("metal::vec<float, 4> v(1.0f);"), Some(vec!["v".into()]));
        assert_eq!(declared("float acc[4][2];"), Some(vec!["acc".into()]));
        assert_eq!(declared("uint a = min(b, c), d;"), Some(vec!["a".into(), "d".into()]));
        for expression in
            ["v = 1.0f;", "out[i] = v;", "f(x, y);", "ns::f(x);", "a.b = c;", "return;", "++i;", "*p = 1;"]
        {
            assert_eq!(declared(expression), None, "{expression}");
        }
        // A comma after a `<` in an initializer could end a declarator or not: not read.
        assert_eq!(declared("bool b = a < c, d = 1;"), None);
    }

    #[test]
    fn a_line_directive_numbers_what_follows_it() {
        let src = Cursor::new("int a;\n#line 40 \"lib.metal\"\nint b;\nint c;\n");
        let c = (0..src.len()).find(|&k| src.tok(k).text == "c").unwrap();
        assert_eq!(presumed_line(&src, c), (41, Some("lib.metal".to_string())));
        let a = (0..src.len()).find(|&k| src.tok(k).text == "a").unwrap();
        assert_eq!(presumed_line(&src, a), (1, None));
    }
}
