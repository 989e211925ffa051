//! What one kernel of a large file needs: the top-level declarations its entry reaches (by
//! name, transitively, through what each reached declaration mentions), so a dispatch compiles
//! that and not the whole library (ggml's file is 14,000 lines, MLX's pull in thousands of
//! lines of headers). The rest is blanked after the rewrite, lines kept. The reach errs on the
//! side of more: every declaration of a reached name is kept (overloads, specialisations), and
//! declarations that name nothing (`using namespace`, `static_assert`, partial
//! specialisations), enums and operators are always kept.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::source::parse::{Entry, Outline, ProgramParse};
use crate::source::tokens::{tokenize, Kind};

/// The ranges of significant tokens (`from..to`, cursor positions) that `entry` does not reach.
pub(super) fn unreached(parse: &ProgramParse, entry: &Entry) -> Vec<(usize, usize)> {
    let (outline, at) = parse.outline();
    let mut declared: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, item) in outline.items.iter().enumerate() {
        for n in &item.names {
            declared.entry(n.as_str()).or_default().push(i);
        }
    }
    // The roots: every name in the entry's callee (`kernel_mul_mv_id<mmv_fn<impl<8>>>`).
    let mut work: VecDeque<String> =
        tokenize(&entry.callee).into_iter().filter(|t| t.kind == Kind::Ident).map(|t| t.text).collect();
    let mut names: HashSet<String> = HashSet::new();
    let mut kept = vec![false; outline.items.len()];
    for (i, item) in outline.items.iter().enumerate() {
        if always_kept(outline, i) {
            kept[i] = true;
            work.extend(item.refs.iter().cloned());
        }
    }
    while let Some(name) = work.pop_front() {
        if !names.insert(name.clone()) {
            continue;
        }
        for &i in declared.get(name.as_str()).into_iter().flatten() {
            if !kept[i] {
                kept[i] = true;
                work.extend(outline.items[i].refs.iter().cloned());
            }
        }
    }
    let mut out = Vec::new();
    for (i, item) in outline.items.iter().enumerate() {
        if !kept[i] && !item.range.is_empty() {
            let (from, to) = (at[item.range.start], at[item.range.end - 1] + 1);
            out.push((from, to));
        }
    }
    out
}

/// Declarations kept whatever the entry reaches. Explicit instantiations are not among them:
/// the rewrite leaves none (each is an entry, and the entry's callee is a root).
fn always_kept(outline: &Outline, i: usize) -> bool {
    let item = &outline.items[i];
    let toks = &outline.toks[item.range.clone()];
    let instantiation =
        toks.first().is_some_and(|t| t.is("template")) && toks.get(1).is_some_and(|t| t.kind == Kind::Attr);
    !instantiation && item.names.is_empty()
        || toks.first().is_some_and(|t| t.is("using") && toks.get(1).is_some_and(|n| n.is("namespace")))
        || toks.iter().any(|t| t.is("enum") || t.is("operator"))
}
