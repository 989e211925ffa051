//! Conditional operators with mixed half/bfloat arms. `c ? f : h` with a `float` and a `half` is
//! valid Metal (the usual arithmetic conversions give `float`) but ambiguous C++ with a class
//! `half` that converts both ways. Each arm is cast to the type `kiln::tern_arm` (lowering.h)
//! picks: Metal's common type for mixed scalar arms, else the arm's own `decltype`, which keeps
//! its type, value category and `void`-ness. Runs on already-rewritten code; adds no newlines.

use crate::source::cursor::Cursor;
use crate::source::tokens::{Kind, Token};

/// Arms whose wrapped text would exceed this many bytes stay as they are (deep chains of
/// conditionals copy their arms into `decltype`s, growing by a factor of three per level).
const MAX_ARM_TEXT: usize = 4096;

/// Casts the arms of every `?:` in `code` through `kiln::tern_arm`.
pub fn wrap_conditionals(code: &str) -> String {
    if !code.contains('?') {
        return code.to_string();
    }
    let cursor = Cursor::new(code);
    let (toks, sig) = (&cursor.toks, &cursor.sig);
    let closes = template_closers(toks, sig);
    let group_end: Vec<Option<usize>> = (0..sig.len())
        .map(|k| match closes[k] {
            Some(close) => Some(close + 1),
            None => cursor.matching(k).map(|c| c + 1).or_else(|| {
                let t = &toks[sig[k]];
                (t.kind == Kind::Punct && ["(", "[", "{"].contains(&t.text.as_str())).then_some(sig.len())
            }),
        })
        .collect();
    let operands = operand_ends(toks, sig, &group_end, &closes);
    let n = sig.len();
    let mut cond = Conditionals {
        toks,
        sig,
        pre: vec![String::new(); n],
        post: vec![String::new(); n],
        group_end: &group_end,
        operands: &operands,
        literal: vec![false; n],
    };
    // Innermost first: a conditional nested in an arm lies after the outer `?`, and the outer
    // arm's `decltype` copy must see the inner one already wrapped.
    for q in (0..sig.len()).rev() {
        if let Some((colon, end)) = operands[q] {
            cond.wrap(q, colon, end);
        }
    }
    let mut out = String::with_capacity(code.len() * 2);
    let mut k = 0;
    for (i, t) in toks.iter().enumerate() {
        if k < sig.len() && sig[k] == i {
            out.push_str(&cond.pre[k]);
            out.push_str(&t.text);
            out.push_str(&cond.post[k]);
            k += 1;
        } else {
            out.push_str(&t.text);
        }
    }
    out
}

/// The conditionals waiting for the end of an operand at one bracket level.
#[derive(Default)]
struct Level {
    /// The `?`s whose `:` has not come yet.
    questions: Vec<usize>,
    /// `(?, :)` of the conditionals whose false operand has not ended yet, the latest `?` last.
    false_operands: Vec<(usize, usize)>,
    /// The position just past the group this level is inside.
    end: usize,
}

/// For each `?` at position q: its `:` and the end (exclusive) of its false operand, the first
/// token at its level that ends it (`,`, `;`, a closer or an unmatched `:`), found in one pass.
/// `None` when the middle operand does not end at its own `:`, or an operand runs into a
/// preprocessor line or the end of the text.
fn operand_ends(
    toks: &[Token],
    sig: &[usize],
    group_end: &[Option<usize>],
    closes: &[Option<usize>],
) -> Vec<Option<(usize, usize)>> {
    let n = sig.len();
    let mut found = vec![None; n];
    let mut levels = vec![Level { end: usize::MAX, ..Level::default() }];
    // Ends the level's false operands at `j`; its open questions never get their `:`.
    let stop = |level: &mut Level, found: &mut Vec<Option<(usize, usize)>>, j: usize| {
        for (q, colon) in level.false_operands.drain(..) {
            found[q] = Some((colon, j));
        }
        level.questions.clear();
    };
    let mut is_closer = vec![false; n];
    for &c in closes.iter().flatten() {
        is_closer[c] = true;
    }
    for j in 0..n {
        // Groups that end here (their closer is the token before `j`) are done.
        while levels.len() > 1 && levels.last().is_some_and(|l| l.end == j) {
            levels.pop();
        }
        let t = &toks[sig[j]];
        let Some(level) = levels.last_mut() else { break };
        if t.kind == Kind::Preproc {
            level.false_operands.clear();
            level.questions.clear();
            continue;
        }
        if t.kind != Kind::Punct {
            continue;
        }
        match t.text.as_str() {
            "?" => level.questions.push(j),
            ":" => match level.questions.pop() {
                Some(q) => {
                    while level.false_operands.last().is_some_and(|&(p, _)| p > q) {
                        if let Some((p, colon)) = level.false_operands.pop() {
                            found[p] = Some((colon, j));
                        }
                    }
                    level.false_operands.push((q, j));
                }
                None => stop(level, &mut found, j),
            },
            "," => {
                for (q, colon) in level.false_operands.drain(..) {
                    found[q] = Some((colon, j));
                }
            }
            ";" | ")" | "]" | "}" => stop(level, &mut found, j),
            ">" | ">>" if is_closer[j] => stop(level, &mut found, j),
            _ => {}
        }
        if let Some(end) = group_end[j] {
            levels.push(Level { end, ..Level::default() });
        }
    }
    found
}

struct Conditionals<'a> {
    toks: &'a [Token],
    sig: &'a [usize],
    /// Text inserted before / after each significant token.
    pre: Vec<String>,
    post: Vec<String>,
    /// Just past the group each opener starts.
    group_end: &'a [Option<usize>],
    /// Each `?`'s `:` and the end of its false operand.
    operands: &'a [Option<(usize, usize)>],
    /// The `?`s of conditionals whose arms are both literal-typed (see `literal_typed`).
    literal: Vec<bool>,
}

impl Conditionals<'_> {
    fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }

    fn punct(&self, k: usize, s: &str) -> bool {
        let t = self.tok(k);
        t.kind == Kind::Punct && t.text == s
    }

    /// The arm `from..to` as it will be emitted, on one line: comments and line breaks become
    /// single spaces. `None` once it passes `limit` bytes.
    fn arm_text(&self, from: usize, to: usize, limit: usize) -> Option<String> {
        let mut out = String::new();
        for k in from..to {
            if k > from && self.sig[k] > self.sig[k - 1] + 1 {
                out.push(' ');
            }
            out.push_str(&self.pre[k]);
            out.push_str(&self.tok(k).text);
            out.push_str(&self.post[k]);
            if out.len() > limit {
                return None;
            }
        }
        Some(out)
    }

    /// Wraps the arms of the conditional whose `?` is at `q`, `:` at `colon`, and whose false
    /// operand ends before `f1`.
    fn wrap(&mut self, q: usize, colon: usize, f1: usize) {
        let m0 = q + 1;
        let f0 = colon + 1;
        if colon == m0 || f1 <= f0 {
            return;
        }
        let (m, f) = ((m0, colon), (f0, f1));
        // Every token is at least a byte: longer arms would pass the limit below anyway.
        if (colon - m0) + (f1 - f0) > MAX_ARM_TEXT {
            return;
        }
        // Literal against literal already has C++'s (and Metal's) usual conversions, and a
        // `decltype` of such a conditional on template parameters can crash GCC (MLX's steel
        // conv loaders: `(BN == 8) ? 1 : (n / (R * C) >= 8 ? 8 : 4)` in a class template).
        if self.literal_typed(m) && self.literal_typed(f) {
            self.literal[q] = true;
            return;
        }
        if self.has_lambda(m) || self.has_lambda(f) {
            return;
        }
        let Some(mt) = self.arm_text(m.0, m.1, MAX_ARM_TEXT) else { return };
        let Some(ft) = self.arm_text(f.0, f.1, MAX_ARM_TEXT - mt.len()) else { return };
        if mt.contains('\n') || ft.contains('\n') {
            return;
        }
        let cast =
            |own: &str, other: &str| format!("static_cast<kiln::tern_arm<decltype(({own})), decltype(({other}))>>((");
        self.pre[m.0] = format!("{}{}", cast(&mt, &ft), self.pre[m.0]);
        self.post[m.1 - 1].push_str("))");
        self.pre[f.0] = format!("{}{}", cast(&ft, &mt), self.pre[f.0]);
        self.post[f.1 - 1].push_str("))");
    }

    /// Whether the arm `from..to` has a literal's type: a number (with a sign), in parentheses
    /// or not, or a conditional whose arms both have one (already seen: innermost go first).
    fn literal_typed(&self, (mut from, mut to): (usize, usize)) -> bool {
        while to > from + 1 && self.punct(from, "(") && self.group_end[from] == Some(to) {
            (from, to) = (from + 1, to - 1);
        }
        let signed = to == from + 2 && (self.punct(from, "-") || self.punct(from, "+"));
        if (to == from + 1 || signed) && self.tok(to - 1).kind == Kind::Number {
            return true;
        }
        // The arm's outermost conditional is its first `?` outside brackets.
        let mut k = from;
        while k < to {
            if self.punct(k, "?") {
                return self.literal[k] && self.operands[k].is_some_and(|(_, end)| end == to);
            }
            let t = self.tok(k);
            k = match self.group_end[k] {
                Some(end) if t.kind == Kind::Punct && ["(", "[", "{"].contains(&t.text.as_str()) => end,
                _ => k + 1,
            };
        }
        false
    }

    /// True when the arm holds a lambda, which C++17 forbids inside `decltype`.
    fn has_lambda(&self, (from, to): (usize, usize)) -> bool {
        (from..to).any(|k| {
            self.punct(k, "[")
                && (k == from || {
                    let p = self.tok(k - 1);
                    !(matches!(p.kind, Kind::Ident | Kind::Number | Kind::Str) || [")", "]"].contains(&p.text.as_str()))
                })
        })
    }
}

/// For each `<` that opens a template argument list (after an identifier, with a matching `>`
/// before any `;`, `{`, `}`, `&&`, `||` or unbalanced closer), the position of its closer. One
/// pass: the `<`s still open are kept per parenthesis level, innermost last.
fn template_closers(toks: &[Token], sig: &[usize]) -> Vec<Option<usize>> {
    let tok = |k: usize| &toks[sig[k]];
    let mut closes = vec![None; sig.len()];
    // Per level: (position, whether it may open a list); a `<` after `operator` counts for the
    // lists around it but opens none itself.
    let mut levels: Vec<Vec<(usize, bool)>> = vec![Vec::new()];
    for j in 0..sig.len() {
        let u = tok(j);
        if u.kind == Kind::Preproc {
            levels = vec![Vec::new()];
            continue;
        }
        if u.kind != Kind::Punct {
            continue;
        }
        match u.text.as_str() {
            "(" | "[" => levels.push(Vec::new()),
            ")" | "]" => {
                if levels.len() > 1 {
                    levels.pop();
                } else {
                    levels[0].clear();
                }
            }
            ";" | "{" | "}" => levels = vec![Vec::new()],
            _ => {
                let Some(open) = levels.last_mut() else { continue };
                match u.text.as_str() {
                    "&&" | "||" => open.clear(),
                    "<" if j > 0 && tok(j - 1).kind == Kind::Ident => {
                        let operator = tok(j - 1).is("operator") || (j >= 2 && tok(j - 2).is("operator"));
                        open.push((j, !operator));
                    }
                    ">" => {
                        if let Some((k, true)) = open.pop() {
                            closes[k] = Some(j);
                        }
                    }
                    ">>" => {
                        // Closes two lists: the inner one is not a list of its own.
                        open.pop();
                        if let Some((k, true)) = open.pop() {
                            closes[k] = Some(j);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    closes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms(code: &str) -> usize {
        wrap_conditionals(code).matches("kiln::tern_arm").count()
    }

    #[test]
    fn wraps_both_arms_and_keeps_lines() {
        let src = "out[i] = flag ? scale * count\n  : halfscale;\nint k = 3;";
        let w = wrap_conditionals(src);
        assert_eq!(w.lines().count(), src.lines().count());
        assert!(w.contains("static_cast<kiln::tern_arm<decltype((scale * count)), decltype((halfscale))>>((scale"));
        assert!(
            w.contains("static_cast<kiln::tern_arm<decltype((halfscale)), decltype((scale * count))>>((halfscale))")
        );
        assert!(w.ends_with(";\nint k = 3;"));
    }

    #[test]
    fn leaves_conditionals_of_literals_alone() {
        // Arms that are literals, in parentheses or in conditionals of their own, whatever the
        // conditions read.
        let src = "const short v = (BN == 8) ? 1 : (n / (R * C) >= 8 ? 8 : -4);";
        assert_eq!(wrap_conditionals(src), src);
        // One arm that is not a literal still wraps the conditional it is in.
        let w = wrap_conditionals("x = c ? 1 : (d ? 2 : y);");
        assert!(w.contains("decltype((1))"), "{w}");
        assert!(w.contains("decltype((y))"), "{w}");
    }

    #[test]
    fn finds_the_right_colon_and_operand_ends() {
        // Nested in the false arm, inside a call, after `::`, with template commas.
        let w = wrap_conditionals("f(a ? metal::max(x, y) : b ? c : vec<float, 2>(d), e);");
        assert!(w.contains("decltype((metal::max(x, y)))"), "{w}");
        assert!(w.contains("decltype((vec<float, 2>(d)))"), "{w}");
        assert!(w.trim_end().ends_with(", e);"), "{w}");
        // Both levels wrapped; the outer arms' `decltype`s copy the wrapped inner one.
        assert_eq!(arms("x = a ? (b ? c : d) : e;"), 8);
        assert_eq!(arms("x = a ? b ? c : d : e;"), 8);
        assert!(wrap_conditionals("x = a ? b > c : d;").contains("decltype((b > c))"));
        assert!(wrap_conditionals("f<a ? b : c>(x);").contains("decltype((b))>>((c))>(x);"));
        assert!(wrap_conditionals("g<vec<int, 2>>(a ? b : c, d);").contains("decltype((b))>>((c)), d);"));
    }

    #[test]
    fn leaves_literals_lambdas_and_directives_alone() {
        assert_eq!(arms("int n = c ? 1 : 2;"), 0);
        assert_eq!(arms("auto f = c ? [](){ return 1; } : g;"), 0);
        assert_eq!(arms("x = c ? a :\n#if X\n b\n#else\n d\n#endif\n;"), 0);
        assert_eq!(arms("int a[3]; x = c ? a[1] : b;"), 2);
    }
}
