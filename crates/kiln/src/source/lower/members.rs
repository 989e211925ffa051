//! Data members of the program's own structs whose names look like swizzles (`struct P { float2
//! xy; }`). The rewriter turns every `.xy` into `.xy()` / `.xy_ref()`, which is right for vectors
//! and would break such members, so these members are renamed to `kiln_m_xy` and the struct
//! gains `xy()` and `xy_ref()` accessors returning a reference: `p.xy` then works whatever `p` is.

use std::collections::HashMap;

use crate::source::cursor::{split_commas, Cursor};
use crate::source::tokens::{Kind, Token};

/// Text edits at significant-token positions.
#[derive(Default)]
pub struct MemberEdits {
    /// New text for a token (a declaration or a bare use inside the struct).
    pub rename: HashMap<usize, String>,
    /// Text appended after a token (the `;` ending a member declaration).
    pub append: HashMap<usize, String>,
}

/// True for a 2–4 letter swizzle name (`xy`, `rgba`, `zyx`); one letter names are plain
/// members of the vector types and need nothing.
pub fn is_swizzle(s: &str) -> bool {
    (2..=4).contains(&s.len()) && (s.chars().all(|c| "xyzw".contains(c)) || s.chars().all(|c| "rgba".contains(c)))
}

pub fn stored_name(name: &str) -> String {
    format!("kiln_m_{name}")
}

fn accessors(name: &str) -> String {
    let m = stored_name(name);
    format!(
        " KILN_HD constexpr auto& {name}() {{ return {m}; }} KILN_HD constexpr const auto& {name}() const {{ return {m}; }} KILN_HD constexpr auto& {name}_ref() {{ return {m}; }}"
    )
}

/// Finds the swizzle-named data members of every struct, class and union defined in the
/// program.
pub fn swizzle_members(src: &Cursor) -> MemberEdits {
    let tok = |k: usize| src.tok(k);
    let mut edits = MemberEdits::default();
    for k in 0..src.len() {
        if !["struct", "class", "union"].iter().any(|s| tok(k).is(s)) {
            continue;
        }
        // A definition: the keyword, a name, maybe bases, then `{` before any `;`, `(` or `=`.
        let Some(open) = (k + 1..src.len()).find(|&j| [";", "{", "(", "=", ")"].iter().any(|s| tok(j).is(s))) else {
            continue;
        };
        if !tok(open).is("{") {
            continue;
        }
        let Some(close) = src.matching(open) else { continue };
        let names = members_of(src, open, close, &mut edits);
        if names.is_empty() {
            continue;
        }
        // Bare uses inside the struct (member functions, constructor initialisers).
        for j in open + 1..close {
            let t = tok(j);
            let qualified = [".", "->", "::"].iter().any(|s| tok(j - 1).is(s));
            if t.kind == Kind::Ident && !qualified && names.contains(&t.text) {
                edits.rename.entry(j).or_insert_with(|| stored_name(&t.text));
            }
        }
    }
    edits
}

/// The swizzle-named data members declared directly in the body `open..close`; records their
/// renames and accessors.
fn members_of(src: &Cursor, open: usize, close: usize, edits: &mut MemberEdits) -> Vec<String> {
    let tok = |k: usize| src.tok(k);
    let mut names = Vec::new();
    let mut seg_start = open + 1;
    let mut j = open + 1;
    while j < close {
        let t = tok(j);
        if t.is("{") {
            let end = src.matching(j).unwrap_or(close);
            // A member function body ends its declaration; a brace initialiser does not.
            if (seg_start..j).any(|p| tok(p).is("(")) {
                seg_start = end + 1;
            }
            j = end + 1;
            continue;
        }
        if t.is(":") && j > seg_start && ["public", "private", "protected"].iter().any(|s| tok(j - 1).is(s)) {
            seg_start = j + 1;
        } else if t.is(";") {
            let decl: Vec<(usize, &Token)> = (seg_start..j).map(|p| (p, tok(p))).collect();
            let found = data_members(&decl);
            if !found.is_empty() {
                let text: String = found.iter().map(|(_, n)| accessors(n)).collect();
                edits.append.insert(j, text);
                for (pos, name) in found {
                    edits.rename.insert(pos, stored_name(&name));
                    names.push(name);
                }
            }
            seg_start = j + 1;
        }
        j += 1;
    }
    names
}

/// The swizzle-named declarators of one member declaration (without its `;`), with their
/// positions; none for functions, static members, types, bit-fields and friends.
fn data_members(decl: &[(usize, &Token)]) -> Vec<(usize, String)> {
    let skip = ["static", "typedef", "using", "friend", "template", "struct", "class", "union", "enum", "operator"];
    if decl.is_empty() || decl.iter().any(|(_, t)| skip.iter().any(|s| t.is(s)) || t.is("(")) {
        return Vec::new();
    }
    let toks: Vec<&Token> = decl.iter().map(|(_, t)| *t).collect();
    let mut found = Vec::new();
    let mut offset = 0;
    for (i, part) in split_commas(&toks).iter().enumerate() {
        let start = offset;
        offset += part.len() + 1;
        if part.iter().any(|t| t.is(":")) {
            continue;
        }
        // The declarator's name: the identifier before the first `[`, `=` or `{`.
        let stop = part.iter().position(|t| t.is("[") || t.is("=") || t.is("{")).unwrap_or(part.len());
        let name_at = if i == 0 { stop.checked_sub(1) } else { part.iter().position(|t| t.kind == Kind::Ident) };
        let Some(n) = name_at else { continue };
        if part[n].kind == Kind::Ident && is_swizzle(&part[n].text) {
            found.push((decl[start + n].0, part[n].text.clone()));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edited(src: &str) -> String {
        let src = Cursor::new(src);
        let edits = swizzle_members(&src);
        let mut out: Vec<String> = src.toks.iter().map(|t| t.text.clone()).collect();
        for (k, text) in edits.rename {
            out[src.sig[k]] = text;
        }
        for (k, text) in edits.append {
            out[src.sig[k]].push_str(&text);
        }
        out.concat()
    }

    #[test]
    fn renames_swizzle_named_members_and_their_bare_uses() {
        let e = edited("struct P {\n  vec<float, 2> xy, zw;\n  float a;\n  P() : xy(0) {}\n  float2 f() const { return xy + this->zw; }\n};");
        assert!(e.contains("vec<float, 2> kiln_m_xy, kiln_m_zw;"), "{e}");
        assert!(e.contains("auto& xy_ref() { return kiln_m_xy; }") && e.contains("const auto& zw() const"), "{e}");
        assert!(e.contains("P() : kiln_m_xy(0) {}"), "{e}");
        assert!(e.contains("return kiln_m_xy + this->zw;"), "{e}");
        assert!(e.contains("float a;\n"), "{e}");
        assert_eq!(e.lines().count(), 6);
    }

    #[test]
    fn leaves_methods_statics_bitfields_and_declarations_alone() {
        for src in [
            "struct P { float2 xy() const; };",
            "struct P { static constant int xy = 2; };",
            "struct P { uint xy : 4; };",
            "struct P p; float2 xy;",
            "float2 f(P p) { float2 xy = p.v; return xy; }",
        ] {
            assert_eq!(edited(src), src);
        }
    }
}
