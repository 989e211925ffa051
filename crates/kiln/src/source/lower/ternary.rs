//! Conditional operators with mixed half/bfloat arms. `c ? f : h` with a `float` and a `half` is
//! valid Metal (the usual arithmetic conversions give `float`) but ambiguous C++ with a class
//! `half` that converts both ways. Each arm is cast to the type `kiln::tern_arm` (lowering.h)
//! picks: Metal's common type for mixed scalar arms, else the arm's own `decltype`, which keeps
//! its type, value category and `void`-ness. Runs on already-rewritten code; adds no newlines.

use super::tokens::{tokenize, Kind, Token};

/// Arms whose wrapped text would exceed this many bytes stay as they are (deep chains of
/// conditionals copy their arms into `decltype`s, growing by a factor of three per level).
const MAX_ARM_TEXT: usize = 4096;

/// Casts the arms of every `?:` in `code` through `kiln::tern_arm`.
pub fn wrap_conditionals(code: &str) -> String {
    if !code.contains('?') {
        return code.to_string();
    }
    let toks = tokenize(code);
    let sig: Vec<usize> = (0..toks.len()).filter(|&i| !toks[i].is_trivia()).collect();
    let closes = template_closers(&toks, &sig);
    let mut is_closer = vec![false; sig.len()];
    for &c in closes.iter().flatten() {
        is_closer[c] = true;
    }
    let n = sig.len();
    let mut cond = Conditionals {
        toks: &toks,
        sig: &sig,
        closes,
        is_closer,
        pre: vec![String::new(); n],
        post: vec![String::new(); n],
    };
    // Innermost first: a conditional nested in an arm lies after the outer `?`, and the outer
    // arm's `decltype` copy must see the inner one already wrapped.
    for q in (0..sig.len()).rev() {
        if toks[sig[q]].kind == Kind::Punct && toks[sig[q]].text == "?" {
            cond.wrap(q);
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

struct Conditionals<'a> {
    toks: &'a [Token],
    sig: &'a [usize],
    /// For a `<` that opens a template argument list, the position of its closing `>`/`>>`.
    closes: Vec<Option<usize>>,
    /// True at the `>`/`>>` that close a template argument list.
    is_closer: Vec<bool>,
    /// Text inserted before / after each significant token.
    pre: Vec<String>,
    post: Vec<String>,
}

impl Conditionals<'_> {
    fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }

    fn punct(&self, k: usize, s: &str) -> bool {
        let t = self.tok(k);
        t.kind == Kind::Punct && t.text == s
    }

    /// The position after the bracketed group opening at `k`, or `None` when `k` opens none.
    fn skip_group(&self, k: usize) -> Option<usize> {
        if let Some(close) = self.closes[k] {
            return Some(close + 1);
        }
        let t = self.tok(k);
        if t.kind != Kind::Punct || !["(", "[", "{"].contains(&t.text.as_str()) {
            return None;
        }
        let mut depth = 0i32;
        for j in k..self.sig.len() {
            let u = self.tok(j);
            if u.kind != Kind::Punct {
                continue;
            }
            match u.text.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
        }
        Some(self.sig.len())
    }

    /// The end (exclusive) of the operand starting at `from`: the first depth-0 token that
    /// ends it. `middle` operands end at their own `:`; false operands at `,`, `;`, a closer or
    /// an unmatched `:`. Nested conditionals belong to the operand.
    fn operand_end(&self, from: usize, middle: bool) -> Option<usize> {
        let mut nested = 0u32;
        let mut j = from;
        while j < self.sig.len() {
            if let Some(next) = self.skip_group(j) {
                j = next;
                continue;
            }
            let t = self.tok(j);
            match t.kind {
                Kind::Preproc => return None,
                Kind::Punct => match t.text.as_str() {
                    "?" => nested += 1,
                    ":" if nested == 0 => return Some(j),
                    ":" => nested -= 1,
                    ";" | ")" | "]" | "}" => return (!middle).then_some(j),
                    ">" | ">>" if self.is_closer[j] => return (!middle).then_some(j),
                    "," if !middle => return Some(j),
                    _ => {}
                },
                _ => {}
            }
            j += 1;
        }
        None
    }

    /// The arm `from..to` as it will be emitted, on one line: comments and line breaks become
    /// single spaces.
    fn arm_text(&self, from: usize, to: usize) -> String {
        let mut out = String::new();
        for k in from..to {
            if k > from && self.sig[k] > self.sig[k - 1] + 1 {
                out.push(' ');
            }
            out.push_str(&self.pre[k]);
            out.push_str(&self.tok(k).text);
            out.push_str(&self.post[k]);
        }
        out
    }

    fn wrap(&mut self, q: usize) {
        let m0 = q + 1;
        let Some(colon) = self.operand_end(m0, true) else { return };
        let f0 = colon + 1;
        let Some(f1) = self.operand_end(f0, false) else { return };
        if colon == m0 || f1 == f0 {
            return;
        }
        let (m, f) = ((m0, colon), (f0, f1));
        // Literal against literal already has C++'s (and Metal's) usual conversions.
        let literal = |(a, b): (usize, usize)| b == a + 1 && self.tok(a).kind == Kind::Number;
        if (literal(m) && literal(f)) || self.has_lambda(m) || self.has_lambda(f) {
            return;
        }
        let (mt, ft) = (self.arm_text(m.0, m.1), self.arm_text(f.0, f.1));
        if mt.len() + ft.len() > MAX_ARM_TEXT || mt.contains('\n') || ft.contains('\n') {
            return;
        }
        let cast =
            |own: &str, other: &str| format!("static_cast<kiln::tern_arm<decltype(({own})), decltype(({other}))>>((");
        self.pre[m.0] = format!("{}{}", cast(&mt, &ft), self.pre[m.0]);
        self.post[m.1 - 1].push_str("))");
        self.pre[f.0] = format!("{}{}", cast(&ft, &mt), self.pre[f.0]);
        self.post[f.1 - 1].push_str("))");
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
/// before any `;`, `{`, `}`, `&&`, `||` or unbalanced closer), the position of its closer.
fn template_closers(toks: &[Token], sig: &[usize]) -> Vec<Option<usize>> {
    (0..sig.len()).map(|k| template_close(toks, sig, k)).collect()
}

fn template_close(toks: &[Token], sig: &[usize], k: usize) -> Option<usize> {
    let tok = |k: usize| &toks[sig[k]];
    let t = tok(k);
    if k == 0 || t.kind != Kind::Punct || t.text != "<" || tok(k - 1).kind != Kind::Ident {
        return None;
    }
    if tok(k - 1).is("operator") || (k >= 2 && tok(k - 2).is("operator")) {
        return None;
    }
    let (mut angle, mut depth) = (1i32, 0i32);
    for j in k + 1..sig.len() {
        let u = tok(j);
        if u.kind == Kind::Preproc {
            return None;
        }
        if u.kind != Kind::Punct {
            continue;
        }
        match u.text.as_str() {
            "(" | "[" => depth += 1,
            ")" | "]" if depth == 0 => return None,
            ")" | "]" => depth -= 1,
            ";" | "{" | "}" => return None,
            "&&" | "||" if depth == 0 => return None,
            "<" if depth == 0 && tok(j - 1).kind == Kind::Ident => angle += 1,
            ">" if depth == 0 => {
                angle -= 1;
                if angle == 0 {
                    return Some(j);
                }
            }
            ">>" if depth == 0 => {
                angle -= 2;
                if angle <= 0 {
                    return (angle == 0).then_some(j);
                }
            }
            _ => {}
        }
    }
    None
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
