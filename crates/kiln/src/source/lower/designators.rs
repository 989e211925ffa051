//! GNU array designators in a local array's initialiser (`float s[N] = { [0 ... N - 1] = 0.0f }`,
//! ggml's accumulators; clang accepts them, C++ has none for arrays): the array is
//! value-initialised and each designated range then assigned, on the declaration's own line
//! (`float s[N] = {}; kiln::fill_range(s, 0, N - 1, 0.0f);`). Elements no designator names
//! stay zero, as the initialiser leaves them.

use crate::source::cursor::Cursor;
use crate::source::parse::{first_declarator, ProgramParse};

/// Rewrites the designated initialisers of local arrays in `out`.
pub(super) fn lower(parse: &ProgramParse, out: &mut [String]) {
    let src = &parse.cursor;
    for k in 0..src.len() {
        if !(src.is(k, "=") && src.is(k + 1, "{") && src.is(k + 2, "[") && parse.context[k].in_function) {
            continue;
        }
        let Some(close) = src.matching(k + 1) else { continue };
        if !src.is(close + 1, ";") {
            continue;
        }
        let Some(ranges) = designators(src, k + 2, close) else { continue };
        let Some(name) = declared_array(src, k) else { continue };
        let fills: Vec<String> = {
            let text = |j: usize| out[src.sig[j]].clone();
            let span =
                |from: usize, to: usize| (from..to).map(text).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" ");
            ranges
                .iter()
                .map(|r| {
                    let hi = r.hi.map_or_else(|| span(r.lo.0, r.lo.1), |(a, b)| span(a, b));
                    format!("kiln::fill_range({name}, {}, {hi}, {});", span(r.lo.0, r.lo.1), span(r.value.0, r.value.1))
                })
                .collect()
        };
        out[src.sig[k + 1]] = "{}".into();
        for j in k + 2..=close {
            out[src.sig[j]] = String::new();
        }
        let semi = out[src.sig[close + 1]].clone();
        out[src.sig[close + 1]] = format!("{semi} {}", fills.join(" "));
    }
}

/// One `[lo ... hi] = value` (or `[i] = value`): token ranges (from, to exclusive).
struct Range {
    lo: (usize, usize),
    hi: Option<(usize, usize)>,
    value: (usize, usize),
}

/// The designators between `from` (a `[`) and `close` (the `}`), or `None` unless every item
/// is one.
fn designators(src: &Cursor, from: usize, close: usize) -> Option<Vec<Range>> {
    let mut out = Vec::new();
    let mut j = from;
    while j < close {
        if !src.is(j, "[") {
            return None;
        }
        let rb = src.matching(j)?;
        let dots = (j + 1..rb).find(|&d| src.is(d, "..."));
        let (lo, hi) = match dots {
            Some(d) => ((j + 1, d), Some((d + 1, rb))),
            None => ((j + 1, rb), None),
        };
        if !src.is(rb + 1, "=") || src.is(rb + 2, "{") {
            return None;
        }
        // The value runs to the next comma outside brackets.
        let mut v = rb + 2;
        while v < close && !src.is(v, ",") {
            v = if src.is(v, "(") || src.is(v, "[") { src.matching(v)? + 1 } else { v + 1 };
        }
        out.push(Range { lo, hi, value: (rb + 2, v) });
        j = v + usize::from(src.is(v, ","));
    }
    (!out.is_empty()).then_some(out)
}

/// The name of the one-dimensional array whose declaration's `=` is at `eq`.
fn declared_array(src: &Cursor, eq: usize) -> Option<String> {
    let mut start = eq;
    while start > 0 && !(src.is(start - 1, ";") || src.is(start - 1, "{") || src.is(start - 1, "}")) {
        start -= 1;
    }
    let decl = src.toks_in(start, eq);
    let name = first_declarator(&decl)?;
    let dims = &decl[name + 1..];
    let one_dim = dims.first().is_some_and(|t| t.is("["))
        && dims.last().is_some_and(|t| t.is("]"))
        && dims.iter().filter(|t| t.is("[")).count() == 1;
    one_dim.then(|| decl[name].text.clone())
}

#[cfg(test)]
mod tests {
    use crate::program::{MathMode, MetalProgram, ProgramKind};
    use crate::source::lower::{lower, LowerTarget};

    #[test]
    fn range_designators_fill_the_array_on_its_line() {
        let source = "kernel void k(device float* y [[buffer(0)]]) {\n  float s[4] = { [0 ... 3] = 0.5f };\n  float t[8] = { [0 ... 1] = 1.0f, [5] = 2.0f };\n  y[0] = s[1] + t[5];\n}\n";
        let program = MetalProgram {
            kernel: "k".into(),
            source: source.into(),
            kind: ProgramKind::FullFile,
            function: "k".into(),
            math_mode: MathMode::Safe,
            constants: vec![],
        };
        let code = lower(&program, LowerTarget::Cuda).unwrap().code;
        let lines: Vec<&str> = code.lines().collect();
        assert_eq!(lines.len(), 5, "{code}");
        assert!(
            lines[1].contains("float s[4] = {}") && lines[1].contains("; kiln::fill_range(s, 0, 3, 0.5f);"),
            "{code}"
        );
        assert!(lines[2].contains("kiln::fill_range(t, 0, 1, 1.0f); kiln::fill_range(t, 5, 5, 2.0f);"), "{code}");
    }
}
