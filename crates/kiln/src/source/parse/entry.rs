//! Kernel signatures: turns the parameter list of a `kernel` function into [`EntryParam`]s
//! (what to bind at each `[[buffer(n)]]`, `[[threadgroup(n)]]` and which builtins to pass).

use super::{AddressSpace, EntryParam};
use crate::source::cursor::split_commas;
use crate::source::tokens::{Kind, Token};

/// Joins tokens into readable C++ text: a space only where two words would otherwise merge.
pub(crate) fn join(tokens: &[&Token]) -> String {
    let mut out = String::new();
    let mut prev_word = false;
    for t in tokens {
        let word = matches!(t.kind, Kind::Ident | Kind::Number);
        if word && prev_word {
            out.push(' ');
        }
        out.push_str(&t.text);
        prev_word = word;
    }
    out
}

/// In a declaration after its keyword (`T a[N][M], b`, without the `;`), the position of the
/// first declarator's name: the identifier before the first top-level `[`, `,`, `=` or `{` (or
/// the end). `None` when no identifier stands there.
pub(crate) fn first_declarator(decl: &[&Token]) -> Option<usize> {
    let mut depth = 0i32;
    let stop = decl
        .iter()
        .position(|t| {
            match t.text.as_str() {
                "<" | "(" => depth += 1,
                ">" | ")" => depth -= 1,
                ">>" => depth -= 2,
                "[" | "," | "=" | "{" => return depth == 0,
                _ => {}
            }
            false
        })
        .unwrap_or(decl.len());
    (stop > 0 && decl[stop - 1].kind == Kind::Ident).then(|| stop - 1)
}

/// The integer inside `name(n)`, when the attribute has that form.
fn attr_index(inner: &str, name: &str) -> Option<u32> {
    let rest = inner.strip_prefix(name)?.trim_start();
    let rest = rest.strip_prefix('(')?;
    rest.split(')').next()?.trim().parse().ok()
}

/// Parses the parameters of kernel `kernel` (the tokens between its parentheses, trivia
/// removed). Parameters without an attribute take the next free buffer slot, as Metal does.
pub(super) fn parse_params(kernel: &str, tokens: &[&Token]) -> Result<Vec<EntryParam>, String> {
    let mut params = Vec::new();
    let mut pending_auto: Vec<(usize, Vec<&Token>)> = Vec::new();
    for part in split_commas(tokens) {
        if part.len() == 1 && part[0].is("void") {
            continue;
        }
        let attr_pos = part.iter().position(|t| t.kind == Kind::Attr);
        let decl = &part[..attr_pos.unwrap_or(part.len())];
        let name_pos = decl
            .iter()
            .rposition(|t| t.kind == Kind::Ident)
            .ok_or_else(|| format!("kernel {kernel}: cannot find the name of parameter `{}`", join(&part)))?;
        let name = decl[name_pos].text.clone();
        let ty = &decl[..name_pos];
        // `function_constant(c)` only says whether the parameter exists; a parameter with no
        // other attribute takes the next free buffer slot like one with none.
        let attr = attr_pos
            .map(|p| {
                let parts = crate::source::cursor::split_text_commas(part[p].attr_inner());
                parts.into_iter().filter(|a| !a.starts_with("function_constant")).collect::<Vec<_>>().join(", ")
            })
            .filter(|inner| !inner.is_empty());
        match attr {
            Some(inner) => {
                let first = inner.split(',').next().unwrap_or("").trim().to_string();
                if let Some(index) = attr_index(&first, "buffer") {
                    params.push(buffer_param(name, index, ty));
                } else if let Some(index) = attr_index(&first, "threadgroup") {
                    params.push(EntryParam::Threadgroup { name, index, pointee: pointee(ty) });
                } else {
                    let attribute = first.split('(').next().unwrap_or("").trim().to_string();
                    params.push(EntryParam::Builtin { name, attribute, ty: join(ty) });
                }
            }
            None => {
                pending_auto.push((params.len(), ty.to_vec()));
                params.push(EntryParam::Buffer {
                    name,
                    index: u32::MAX,
                    pointee: String::new(),
                    space: AddressSpace::Device,
                    is_const: false,
                    by_ref: false,
                });
            }
        }
    }
    // Metal gives attribute-less buffer parameters the lowest unused indices, in order.
    let mut used: Vec<u32> = params
        .iter()
        .filter_map(|p| match p {
            EntryParam::Buffer { index, .. } if *index != u32::MAX => Some(*index),
            _ => None,
        })
        .collect();
    for (pos, ty) in pending_auto {
        let mut next = 0;
        while used.contains(&next) {
            next += 1;
        }
        used.push(next);
        if let Some(EntryParam::Buffer { name, .. }) = params.get(pos) {
            let name = name.clone();
            params[pos] = buffer_param(name, next, &ty);
        }
    }
    Ok(params)
}

fn buffer_param(name: String, index: u32, ty: &[&Token]) -> EntryParam {
    let space = if ty.iter().any(|t| t.is("constant")) { AddressSpace::Constant } else { AddressSpace::Device };
    let is_const = space == AddressSpace::Constant || ty.iter().any(|t| t.is("const"));
    let by_ref = ty.iter().any(|t| t.is("&")) && !ty.iter().any(|t| t.is("*"));
    EntryParam::Buffer { name, index, pointee: pointee(ty), space, is_const, by_ref }
}

/// The element type of a pointer or reference parameter without qualifiers.
fn pointee(ty: &[&Token]) -> String {
    // Metal 3.2's `coherent(scope)` qualifier goes with the address space.
    let coherent: Vec<usize> =
        (0..ty.len()).filter(|&k| ty[k].is("coherent") && ty.get(k + 1).is_some_and(|t| t.is("("))).collect();
    let kept: Vec<&Token> = ty
        .iter()
        .enumerate()
        .filter(|&(k, t)| {
            !coherent.iter().any(|&c| (c..c + 4).contains(&k))
                && !["device", "constant", "threadgroup", "thread", "const", "*", "&", "volatile"]
                    .iter()
                    .any(|q| t.is(q))
        })
        .map(|(_, t)| *t)
        .collect();
    join(&kept)
}
