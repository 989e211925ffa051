//! Private arrays for the sanitizer, on the CPU: after each array a function declares in thread
//! memory without an initialiser (`float acc[4];`, `thread T v[N][M];`) the lowering writes
//! `KILN_PRIVATE_ARRAY(name);`, which in the sanitizer's libraries registers the array for the
//! thread's scope (reads of elements the thread never wrote are reported) and elsewhere is
//! nothing. Declarations the pass is unsure of are left alone: a miss costs a finding, a wrong
//! guess a compile error. Text is only appended after the declaration's `;`, never a newline.

use crate::source::cursor::split_commas;
use crate::source::parse::{first_declarator, ProgramParse};
use crate::source::tokens::{Kind, Token};

/// Words that start statements which are not private array declarations.
const NOT_A_DECLARATION: [&str; 28] = [
    "static",
    "threadgroup",
    "constant",
    "device",
    "typedef",
    "using",
    "return",
    "extern",
    "struct",
    "class",
    "enum",
    "union",
    "goto",
    "case",
    "default",
    "delete",
    "throw",
    "else",
    "do",
    "template",
    "friend",
    "namespace",
    "break",
    "continue",
    "const",
    "constexpr",
    "if",
    "new",
];

/// Appends the registration after every private array declaration in function bodies.
pub fn register(parse: &ProgramParse, out: &mut [String]) {
    let src = &parse.cursor;
    for k in 1..src.len() {
        let context = parse.context[k];
        if !context.in_function || context.in_parens || !src.ident(k) {
            continue;
        }
        if ![";", "{", "}"].iter().any(|s| src.is(k - 1, s)) || NOT_A_DECLARATION.contains(&src.tok(k).text.as_str()) {
            continue;
        }
        let Some(end) = src.semicolon(k) else { continue };
        let span = src.toks_in(k, end);
        let Some(names) = array_names(&span) else { continue };
        if !in_plain_block(parse, k) {
            continue;
        }
        let text: String = names.iter().map(|n| format!(" KILN_PRIVATE_ARRAY({n});")).collect();
        out[src.sig[end]].push_str(&text);
    }
}

/// The names a declaration `T a[N], b[M][K]` (the tokens before its `;`) declares, when it is
/// one: a type of names, `::` and template arguments, then declarators of a name and sizes only.
fn array_names(span: &[&Token]) -> Option<Vec<String>> {
    let name = first_declarator(span)?;
    let ty = &span[..name];
    let type_like = |t: &&Token| {
        t.kind == Kind::Ident || t.kind == Kind::Number || [":", "::", "<", ">", ">>", ","].contains(&t.text.as_str())
    };
    if ty.is_empty() || !ty.iter().all(type_like) || !(ty[ty.len() - 1].kind == Kind::Ident || ty[ty.len() - 1].is(">"))
    {
        return None;
    }
    // A `,` of the type lies inside template arguments.
    let mut depth = 0i32;
    for t in ty {
        match t.text.as_str() {
            "<" => depth += 1,
            ">" => depth -= 1,
            ">>" => depth -= 2,
            "," | ":" if depth == 0 => return None,
            _ => {}
        }
    }
    let mut names = Vec::new();
    for part in split_commas(&span[name..]) {
        let first = part.first().filter(|t| t.kind == Kind::Ident)?;
        if part.len() < 3 || !part[1].is("[") || part.iter().any(|t| ["=", "{", "(", "}"].contains(&t.text.as_str())) {
            return None;
        }
        // Only bracketed sizes after the name.
        let mut depth = 0i32;
        for t in &part[1..] {
            match t.text.as_str() {
                "[" => depth += 1,
                "]" => depth -= 1,
                _ if depth == 0 => return None,
                _ => {}
            }
        }
        names.push(first.text.clone());
    }
    Some(names)
}

/// Whether the innermost block around `k` is a function body or a statement's block (not a
/// class body, where a statement cannot stand, nor a `switch` body, whose labels may jump past
/// the registration).
fn in_plain_block(parse: &ProgramParse, k: usize) -> bool {
    let src = &parse.cursor;
    let mut depth = 0usize;
    let mut j = k;
    let open = loop {
        if j == 0 {
            return false;
        }
        j -= 1;
        if src.is(j, "}") {
            depth += 1;
        } else if src.is(j, "{") {
            if depth == 0 {
                break j;
            }
            depth -= 1;
        }
    };
    if open == 0 {
        return false;
    }
    let before = src.tok(open - 1);
    if before.is(")") {
        let Some(paren) = src.matching_back(open - 1) else { return false };
        return !(paren > 0 && src.is(paren - 1, "switch"));
    }
    ["else", "do", "{", "}", ";", "mutable", "noexcept"].contains(&before.text.as_str())
}

#[cfg(test)]
mod tests {
    use crate::program::MetalProgram;
    use crate::source::lower::{lower, LowerTarget};
    use crate::{Array, DType, LaunchSpec, MetalKernel};

    fn lowered(body: &str) -> String {
        let kernel = MetalKernel::new("k", &["inp"], &["out"], body).unwrap();
        let a = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
        let program: MetalProgram = kernel.program(&kernel.generate(&[a], &spec).unwrap());
        lower(&program, LowerTarget::Cpu).unwrap().code
    }

    #[test]
    fn arrays_without_initialisers_are_registered_and_others_are_not() {
        let code = lowered(
            "uint i = thread_position_in_grid.x;\n\
             float acc[4];\n\
             thread vec<float, 2> pairs[2][3], more[5];\n\
             float given[2] = {1.0f, 2.0f};\n\
             threadgroup float shared_tile[8];\n\
             struct Local { float member[3]; };\n\
             switch (i) { case 0: float in_case[2]; in_case[0] = 1.0f; out[i] = in_case[0]; break; default: break; }\n\
             acc[0] = inp[i]; acc[i % 4];\n\
             out[i] = acc[0] + given[0] + pairs[0][0].x + more[0].y;",
        );
        for name in ["acc", "pairs", "more"] {
            assert!(code.contains(&format!("KILN_PRIVATE_ARRAY({name});")), "{name}:\n{code}");
        }
        for name in ["given", "shared_tile", "member", "in_case", "i"] {
            assert!(!code.contains(&format!("KILN_PRIVATE_ARRAY({name});")), "{name}:\n{code}");
        }
    }
}
