//! Anonymous structs inside classes and unions (`union { struct { half d; half m; }; half2 dm; }`,
//! ggml's and candle's quantised blocks). Clang accepts them (a GNU extension) with members of
//! any trivially constructible type; GCC and NVRTC refuse a member whose type has constructors,
//! which kiln's `half` and `bfloat` have (they convert from float, double and the integers).
//! So each one becomes what it means: a union of its members, each placed at the offset it has
//! in the struct (`kiln::placed<offset, T>`, T itself at offset 0, else T behind padding), beside
//! bytes of the struct's size and alignment. Offsets, size and alignment are the standard layout
//! of the members' types in order (`kiln::offset_of_last`, `struct_size`, `struct_align`, in
//! the prelude). Members are read and written by their own names as before.

use crate::source::cursor::Cursor;
use crate::source::parse::{first_declarator, join};
use crate::source::tokens::Kind;

/// Rewrites every anonymous struct member of a class or union in `out` (the text of each token,
/// trivia included, as the rewriter has it so far).
pub(super) fn lower(src: &Cursor, out: &mut [String]) {
    let text = |out: &[String], k: usize| out[src.sig[k]].clone();
    for k in 0..src.len() {
        if !(src.is(k, "struct") && src.is(k + 1, "{")) {
            continue;
        }
        let Some(close) = src.matching(k + 1) else { continue };
        if !src.is(close + 1, ";") || !in_class_body(src, k) {
            continue;
        }
        let Some(members) = members(src, k + 2, close) else { continue };
        // Every member's type in order, as the struct lays them out.
        let mut types: Vec<String> = Vec::new();
        let mut placed: Vec<(usize, usize, String)> = Vec::new();
        for (from, to, decl) in &members {
            let ty: Vec<String> = decl.ty.iter().map(|&j| text(out, j)).collect();
            let ty = ty.join(" ");
            let mut line = Vec::new();
            for (n, dims) in &decl.names {
                types.push(format!("{ty}{dims}"));
                line.push(format!("kiln::placed<kiln::offset_of_last<{}>, {ty}{dims}> {n};", types.join(", ")));
            }
            placed.push((*from, *to, line.join(" ")));
        }
        let all = types.join(", ");
        out[src.sig[k]] = format!(
            "union {{ alignas(kiln::struct_align<{all}>) unsigned char kiln_anon_{k}[kiln::struct_size<{all}>];"
        );
        out[src.sig[k + 1]] = String::new();
        for (from, to, line) in placed {
            out[src.sig[from]] = line;
            for j in from + 1..=to {
                out[src.sig[j]] = String::new();
            }
        }
        out[src.sig[close]] = "}".into();
    }
}

/// Whether the `struct` at `k` is a member of a class or union (not at namespace scope or in a
/// function): the innermost open brace before it opens a class body, and the member starts at `k`.
fn in_class_body(src: &Cursor, k: usize) -> bool {
    if k == 0 || !(src.is(k - 1, ";") || src.is(k - 1, "{") || src.is(k - 1, "}") || src.is(k - 1, ":")) {
        return false;
    }
    let mut depth = 0i32;
    let mut j = k;
    while j > 0 {
        j -= 1;
        if src.is(j, "}") {
            depth += 1;
        } else if src.is(j, "{") {
            if depth == 0 {
                return class_brace(src, j);
            }
            depth -= 1;
        }
    }
    false
}

/// Whether the `{` at `open` opens a class, struct or union body.
fn class_brace(src: &Cursor, open: usize) -> bool {
    let mut j = open;
    while j > 0 {
        j -= 1;
        let t = src.tok(j);
        if t.is(";") || t.is("{") || t.is("}") || t.is(")") || t.is("=") {
            return false;
        }
        if t.is("struct") || t.is("union") || t.is("class") {
            return true;
        }
    }
    false
}

/// One member declaration: its type's token positions and its names with their array bounds.
struct Decl {
    ty: Vec<usize>,
    names: Vec<(String, String)>,
}

/// The member declarations between `from` and `to` (as (first, last token, declaration)), or
/// `None` when one is not a plain data member (a bit-field, a nested type, a function).
fn members(src: &Cursor, from: usize, to: usize) -> Option<Vec<(usize, usize, Decl)>> {
    let mut out = Vec::new();
    let mut j = from;
    while j < to {
        let end = src.semicolon(j).filter(|&e| e < to)?;
        let toks = src.toks_in(j, end);
        if toks.iter().any(|t| ["{", "(", ":", "="].iter().any(|s| t.is(s)) || t.kind == Kind::Preproc) {
            return None;
        }
        let name_at = first_declarator(&toks)?;
        let ty: Vec<usize> = (j..j + name_at).collect();
        let mut names = Vec::new();
        let mut k = j + name_at;
        while k < end {
            if !src.ident(k) {
                return None;
            }
            let n = src.tok(k).text.clone();
            k += 1;
            let dims_from = k;
            while src.is(k, "[") {
                k = src.matching(k)? + 1;
            }
            let dims = join(&src.toks_in(dims_from, k));
            names.push((n, dims));
            if src.is(k, ",") {
                k += 1;
            } else if k != end {
                return None;
            }
        }
        out.push((j, end, Decl { ty, names }));
        j = end + 1;
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(src: &str) -> String {
        let c = Cursor::new(src);
        let mut out: Vec<String> = c.toks.iter().map(|t| t.text.clone()).collect();
        lower(&c, &mut out);
        out.concat()
    }

    #[test]
    fn anonymous_structs_become_placed_members() {
        let src = "typedef struct {\n  union {\n    struct {\n      half d;\n      half m;\n    };\n    half2 dm;\n  };\n  uint8_t qs[16];\n} block_q4_1;\n";
        let out = lowered(src);
        assert_eq!(out.lines().count(), src.lines().count(), "{out}");
        assert!(out.contains("alignas(kiln::struct_align<half, half>)"), "{out}");
        assert!(out.contains("kiln::placed<kiln::offset_of_last<half>, half> d;"), "{out}");
        assert!(out.contains("kiln::placed<kiln::offset_of_last<half, half>, half> m;"), "{out}");
        assert!(out.contains("half2 dm;"), "{out}");
        let plain = "struct S { int a; struct T { int b; } t; };\nvoid f() { struct { int x; } y; }\n";
        assert_eq!(lowered(plain), plain, "named structs and variables stay");
    }
}
