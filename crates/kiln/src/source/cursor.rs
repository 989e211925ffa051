//! The one token cursor every MSL pass reads through: the significant tokens of a text with
//! their bracket structure found once, so matching a bracket, finding the end of a statement or
//! the top-level commas of a list costs no scan of its own.

use std::collections::HashMap;

use super::limits::{exceeded, MAX_NESTING};
use super::tokens::{tokenize, Kind, Token};

/// `(`, `[`, `{` and, when asked for, `<` with their closers.
const BRACKETS: [(&str, &str); 4] = [("(", ")"), ("[", "]"), ("{", "}"), ("<", ">")];

/// What a token is to the bracket structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// `(`, `[` or `{`.
    Open,
    /// `)`, `]` or `}`.
    Close,
    /// `<` (counted only when angles are asked for).
    AngleOpen,
    /// `>` or `>>` (idem).
    AngleClose,
    Semicolon,
    Other,
}

/// The bracket structure of a sequence of tokens, by position.
pub(crate) struct Brackets {
    role: Vec<Role>,
    /// For each opener and closer: its partner, counting each kind on its own (as a scan that
    /// counts only that kind would find it; `>>` closes two `<`).
    partner: Vec<Option<usize>>,
    /// For each position: the next `;` at its own depth before the enclosing bracket closes,
    /// stepping over matched `(`, `[` and `{`.
    semicolon: Vec<Option<usize>>,
}

impl Brackets {
    /// The structure of `tokens`; with `angles`, `<` pairs with `>` too (never for `;`).
    pub fn new<'t>(tokens: impl IntoIterator<Item = &'t Token>, angles: bool) -> Brackets {
        let kinds = if angles { 4 } else { 3 };
        let mut role = Vec::new();
        let mut partner = Vec::new();
        let mut open: [Vec<usize>; 4] = Default::default();
        for (k, t) in tokens.into_iter().enumerate() {
            partner.push(None);
            let mut r = if t.is(";") && t.kind == Kind::Punct { Role::Semicolon } else { Role::Other };
            if t.kind == Kind::Punct {
                for (b, (o, c)) in BRACKETS[..kinds].iter().enumerate() {
                    let closes = usize::from(t.text == *c) + 2 * usize::from(b == 3 && t.text == ">>");
                    if t.text == *o {
                        open[b].push(k);
                        r = if b == 3 { Role::AngleOpen } else { Role::Open };
                    }
                    if closes > 0 {
                        r = if b == 3 { Role::AngleClose } else { Role::Close };
                    }
                    for _ in 0..closes {
                        if let Some(j) = open[b].pop() {
                            partner[j] = Some(k);
                            partner[k] = Some(j);
                        }
                    }
                }
            }
            role.push(r);
        }
        let n = role.len();
        let mut semicolon = vec![None; n + 1];
        for k in (0..n).rev() {
            semicolon[k] = match role[k] {
                Role::Semicolon => Some(k),
                Role::Open => partner[k].and_then(|c| semicolon[c + 1]),
                Role::Close => None,
                _ => semicolon[k + 1],
            };
        }
        Brackets { role, partner, semicolon }
    }

    /// The bracket closing the one opened at `k`.
    pub fn closing(&self, k: usize) -> Option<usize> {
        matches!(self.role.get(k), Some(Role::Open | Role::AngleOpen)).then(|| self.partner[k]).flatten()
    }

    /// The bracket opening the one closed at `k`.
    pub fn opening(&self, k: usize) -> Option<usize> {
        matches!(self.role.get(k), Some(Role::Close | Role::AngleClose)).then(|| self.partner[k]).flatten()
    }

    /// The next `;` at the depth of `k` (from `k` on).
    pub fn semicolon(&self, k: usize) -> Option<usize> {
        self.semicolon.get(k).copied().flatten()
    }

    /// The first position where `(`, `[` and `{` nest deeper than `limit`.
    fn first_deeper_than(&self, limit: usize) -> Option<usize> {
        let mut depth = 0usize;
        self.role.iter().position(|r| {
            match r {
                Role::Open => depth += 1,
                Role::Close => depth = depth.saturating_sub(1),
                _ => {}
            }
            depth > limit
        })
    }
}

/// The significant tokens (no spaces, newlines or comments; preprocessor lines stay) of a
/// text, addressed by position `k`, with their bracket structure.
pub(crate) struct Cursor {
    /// Every token of the text, trivia included, so it can be re-emitted.
    pub toks: Vec<Token>,
    /// Indices into `toks` of the significant tokens.
    pub sig: Vec<usize>,
    brackets: Brackets,
}

impl Cursor {
    /// The cursor over `source`.
    pub fn new(source: &str) -> Cursor {
        let toks = tokenize(source);
        let sig: Vec<usize> = (0..toks.len()).filter(|&i| !toks[i].is_trivia()).collect();
        let brackets = Brackets::new(sig.iter().map(|&i| &toks[i]), false);
        Cursor { toks, sig, brackets }
    }

    /// The significant token at position `k`.
    pub fn tok(&self, k: usize) -> &Token {
        &self.toks[self.sig[k]]
    }

    /// The 1-based byte column where the significant token at `k` starts on its line.
    pub fn column(&self, k: usize) -> usize {
        let mut column = 1;
        for t in self.toks[..self.sig[k]].iter().rev() {
            match t.text.rfind('\n') {
                Some(i) => return column + t.text.len() - i - 1,
                None => column += t.text.len(),
            }
        }
        column
    }

    /// Whether position `k` exists and is the punctuator or identifier `s`.
    pub fn is(&self, k: usize, s: &str) -> bool {
        k < self.sig.len() && self.tok(k).is(s)
    }

    /// Whether position `k` exists and is an identifier.
    pub fn ident(&self, k: usize) -> bool {
        k < self.sig.len() && self.tok(k).kind == Kind::Ident
    }

    /// How many significant tokens there are.
    pub fn len(&self) -> usize {
        self.sig.len()
    }

    /// The tokens at positions `from..to`.
    pub fn toks_in(&self, from: usize, to: usize) -> Vec<&Token> {
        (from..to).map(|k| self.tok(k)).collect()
    }

    /// The bracket closing the one opened at `k`.
    pub fn matching(&self, k: usize) -> Option<usize> {
        self.brackets.closing(k)
    }

    /// The bracket opening the one closed at `k` (`)` or `]`).
    pub fn matching_back(&self, k: usize) -> Option<usize> {
        if self.is(k, "}") {
            return None;
        }
        self.brackets.opening(k)
    }

    /// The next `;` at the bracket depth of `k`.
    pub fn semicolon(&self, k: usize) -> Option<usize> {
        self.brackets.semicolon(k)
    }

    /// The last token of the statement starting at `k` (through `if`/`else` chains, loops and
    /// blocks).
    pub fn statement_end(&self, k: usize) -> Option<usize> {
        self.statement_end_at(k, 0)
    }

    /// `statement_end` for a statement nested `depth` statements deep (`if (a) for (..) x;`),
    /// which gives up past `MAX_NESTING`.
    fn statement_end_at(&self, k: usize, depth: usize) -> Option<usize> {
        if k >= self.len() || depth > MAX_NESTING {
            return None;
        }
        let inner = |k: usize| self.statement_end_at(k, depth + 1);
        match self.tok(k).text.as_str() {
            "{" => self.matching(k),
            ";" => Some(k),
            "if" => {
                // `else if` chains are followed in a loop: they may be long, but are not deep.
                let mut k = k;
                loop {
                    let open = if self.is(k + 1, "constexpr") { k + 2 } else { k + 1 };
                    let end = inner(self.matching(open)? + 1)?;
                    if !self.is(end + 1, "else") {
                        return Some(end);
                    }
                    if !self.is(end + 2, "if") {
                        return inner(end + 2);
                    }
                    k = end + 2;
                }
            }
            "for" | "while" | "switch" => inner(self.matching(k + 1)? + 1),
            "do" => {
                let end = inner(k + 1)?;
                let close = self.matching(end + 2).filter(|_| self.is(end + 1, "while"))?;
                self.is(close + 1, ";").then_some(close + 1)
            }
            _ => self.semicolon(k),
        }
    }

    /// The first token of every element of the list in brackets `open..close` (none for `()`).
    /// With `angles`, `<` after a name opens template arguments (in parameter lists; in call
    /// arguments it may be a comparison).
    pub fn arg_starts(&self, open: usize, close: usize, angles: bool) -> Vec<usize> {
        if close <= open + 1 {
            return Vec::new();
        }
        let angles = if angles { Angles::AfterName } else { Angles::Never };
        let commas = top_level_commas(&self.toks_in(open + 1, close), angles);
        std::iter::once(open + 1).chain(commas.into_iter().map(|c| open + 2 + c)).collect()
    }

    /// The `;` positions at the top level of `open..close` (a `for` header's two).
    pub fn semicolons_in(&self, open: usize, close: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut k = open + 1;
        while let Some(s) = self.semicolon(k).filter(|&s| s < close) {
            out.push(s);
            k = s + 1;
        }
        out
    }

    /// Refuses brackets nested deeper than `MAX_NESTING` (the passes that follow the nesting
    /// would otherwise take time or stack in proportion to it).
    pub fn check_nesting(&self) -> Result<(), String> {
        match self.brackets.first_deeper_than(MAX_NESTING) {
            Some(k) => Err(format!("line {}: {}", self.tok(k).line, exceeded("the nesting of brackets", MAX_NESTING))),
            None => Ok(()),
        }
    }
}

impl Cursor {
    /// Refuses what the text leaves open or closes twice: a string or character literal, a
    /// `[[` group or a `/*` comment not closed, and `(`, `[`, `{` not closed or closed by
    /// another kind. Brackets pair within each part of the text (`part` of a line: a body
    /// kernel's header, its body, the lines kiln wrote around them), so an error names the
    /// user's own line. Branches of a `#if` left to the target compiler each start where the
    /// group did; the group ends as its first branch does. Of the brackets left open, the one
    /// named is the first whose closer stood left of its line's indentation (that closer was
    /// most likely meant for an outer bracket), else the innermost.
    pub fn check_closed(&self, part: impl Fn(u32) -> usize) -> Result<(), String> {
        let at = |k: usize| format!("line {}, column {}", self.tok(k).line, self.column(k));
        for k in 0..self.len() {
            if let Some(what) = self.tok(k).unclosed() {
                return Err(format!("{}: this {what} is never closed", at(k)));
            }
        }
        // The open brackets of each part, innermost last.
        let mut open: OpenBrackets = Vec::new();
        // For each `#if` group left open: the open brackets at its `#if`, and after its first
        // branch.
        let mut groups: Vec<(OpenBrackets, Option<OpenBrackets>)> = Vec::new();
        // Per part, the first opener closed left of its line's indentation.
        let mut misindented: Vec<Option<usize>> = Vec::new();
        let mut indents = HashMap::new();
        for k in 0..self.len() {
            let t = self.tok(k);
            match t.kind {
                Kind::Preproc => match directive_name(&t.text) {
                    "if" | "ifdef" | "ifndef" => groups.push((open.clone(), None)),
                    "elif" | "elifdef" | "elifndef" | "else" => {
                        if let Some((start, first)) = groups.last_mut() {
                            let ended = std::mem::replace(&mut open, start.clone());
                            first.get_or_insert(ended);
                        }
                    }
                    "endif" => {
                        if let Some((_, Some(first))) = groups.pop() {
                            open = first;
                        }
                    }
                    _ => {}
                },
                Kind::Punct => {
                    let Some(b) = BRACKETS[..3].iter().position(|(o, c)| t.text == *o || t.text == *c) else {
                        continue;
                    };
                    let p = part(t.line);
                    if open.len() <= p {
                        open.resize_with(p + 1, Vec::new);
                        misindented.resize(p + 1, None);
                    }
                    let (opener, closer) = BRACKETS[b];
                    if t.text == opener {
                        open[p].push(k);
                        continue;
                    }
                    match open[p].pop() {
                        None => return Err(format!("{}: this `{closer}` closes no `{opener}`", at(k))),
                        Some(o) if self.tok(o).text != opener => {
                            let o_text = &self.tok(o).text;
                            return Err(format!(
                                "{}: this `{o_text}` is not closed before a `{closer}`\n{}: the `{closer}`",
                                at(o),
                                at(k)
                            ));
                        }
                        Some(o) => {
                            let starts_line = k == 0 || self.tok(k - 1).line < t.line;
                            if misindented[p].is_none() && starts_line && self.column(k) < self.indent(o, &mut indents)
                            {
                                misindented[p] = Some(o);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        let left_open = (0..open.len()).filter_map(|p| Some((p, *open[p].last()?))).max_by_key(|&(_, o)| o);
        match left_open {
            Some((p, o)) => {
                let o = misindented[p].unwrap_or(o);
                Err(format!("{}: this `{}` is never closed", at(o), self.tok(o).text))
            }
            None => Ok(()),
        }
    }

    /// The column of the first significant token on the line of the token at `k`, kept per
    /// line in `memo`.
    fn indent(&self, k: usize, memo: &mut HashMap<u32, usize>) -> usize {
        let line = self.tok(k).line;
        *memo.entry(line).or_insert_with(|| {
            let mut first = k;
            while first > 0 && self.tok(first - 1).line == line {
                first -= 1;
            }
            self.column(first)
        })
    }
}

/// The positions of the brackets open in each part of a text, innermost last.
type OpenBrackets = Vec<Vec<usize>>;

/// The name of a preprocessor directive (`if` for `#  if X`).
pub(crate) fn directive_name(text: &str) -> &str {
    let rest = text.trim_start().strip_prefix('#').unwrap_or("").trim_start();
    let end = rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '_').unwrap_or(rest.len());
    &rest[..end]
}

/// How `<` and `>` nest when a list is split at its commas.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Angles {
    /// Every `<` opens and every `>` closes (template arguments, declarations).
    Always,
    /// A `<` after a name opens; a `>` closes only an open one.
    AfterName,
    /// Angles are comparisons.
    Never,
}

/// The indices in `tokens` of the commas outside any brackets.
fn top_level_commas(tokens: &[&Token], angles: Angles) -> Vec<usize> {
    let mut depth = 0i32;
    let mut commas = Vec::new();
    for (j, t) in tokens.iter().enumerate() {
        if t.kind != Kind::Punct {
            continue;
        }
        let after_name = j > 0 && tokens[j - 1].kind == Kind::Ident;
        let open_angle = angles == Angles::Always || (angles == Angles::AfterName && depth > 0);
        match t.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "<" if angles == Angles::Always || (angles == Angles::AfterName && after_name) => depth += 1,
            ">" if open_angle => depth -= 1,
            ">>" if open_angle => depth -= 2,
            "," if depth == 0 => commas.push(j),
            _ => {}
        }
    }
    commas
}

/// Splits `tokens` (the inside of a bracketed list) at top-level commas; `<` and `>` nest.
/// Empty elements are dropped.
pub(crate) fn split_commas<'a>(tokens: &[&'a Token]) -> Vec<Vec<&'a Token>> {
    let mut parts = Vec::new();
    let mut from = 0;
    for c in top_level_commas(tokens, Angles::Always).into_iter().chain([tokens.len()]) {
        parts.push(tokens[from..c].to_vec());
        from = c + 1;
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// `a, b(c, d), e` → `["a", "b(c, d)", "e"]` (trimmed): the elements of an attribute list.
pub(crate) fn split_text_commas(text: &str) -> Vec<String> {
    let toks = tokenize(text);
    let refs: Vec<&Token> = toks.iter().collect();
    split_commas(&refs)
        .iter()
        .map(|part| part.iter().map(|t| t.text.as_str()).collect::<String>().trim().to_string())
        .filter(|part| !part.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_match_per_kind_and_statements_end_at_their_depth() {
        let c = Cursor::new("f(a[1], g(b)) { x = {1, 2}; } y;");
        let close = c.matching(1).unwrap_or(0);
        assert!(c.is(close, ")") && close == 11, "{close}");
        assert_eq!(c.matching_back(close), Some(1));
        assert_eq!(c.matching(12).map(|k| c.tok(k).text.as_str()), Some("}"));
        // From `x`, the `;` after `{1, 2}`; from `f`, the `;` after `y` (the block is stepped over).
        assert_eq!(c.semicolon(13).map(|k| c.tok(k - 1).text.as_str()), Some("}"));
        assert_eq!(c.semicolon(0).map(|k| c.tok(k - 1).text.as_str()), Some("y"));
        assert_eq!(c.statement_end(12).map(|k| c.tok(k).text.as_str()), Some("}"));
    }

    #[test]
    fn angle_brackets_pair_only_when_asked() {
        let toks: Vec<Token> = tokenize("a<b<c>> d").into_iter().filter(|t| !t.is_trivia()).collect();
        let with = Brackets::new(&toks, true);
        assert_eq!((with.closing(1), with.closing(3)), (Some(5), Some(5)));
        assert_eq!(Brackets::new(&toks, false).closing(1), None);
    }

    #[test]
    fn lists_split_at_top_level_commas() {
        let c = Cursor::new("(a, b<c, d> x, f(g, h), [i, j])");
        let close = c.len() - 1;
        let starts = c.arg_starts(0, close, true);
        let firsts: Vec<&str> = starts.iter().map(|&k| c.tok(k).text.as_str()).collect();
        assert_eq!(firsts, ["a", "b", "f", "["]);
        assert_eq!(c.arg_starts(0, close, false).len(), 5, "without angles `c, d` splits");
        let parts = split_commas(&c.toks_in(1, close));
        assert_eq!(parts.len(), 4);
        assert_eq!(split_text_commas("kernel, max_total_threads_per_threadgroup(64)").len(), 2);
        assert_eq!(split_text_commas("buffer(2), function_constant(x)")[1], "function_constant(x)");
    }

    #[test]
    fn brackets_and_literals_left_open_are_refused_with_their_line() {
        let one_part = |_: u32| 0;
        for closed in ["f(a[1]) { x = {1}; }", "#if KILN_CUDA\nf(a, {\n#else\nf(b, {\n#endif\n});", "\"(\" ')'"] {
            assert_eq!(Cursor::new(closed).check_closed(one_part), Ok(()), "{closed:?}");
        }
        for (open, want) in [
            ("a\nf(x, {\n", "line 2, column 6: this `{` is never closed"),
            ("f(x]\n", "line 1, column 2: this `(` is not closed before a `]`\nline 1, column 4: the `]`"),
            ("x;\n  }\n", "line 2, column 3: this `}` closes no `{`"),
            ("x = \"ab;\ny;", "line 1, column 5: this string literal is never closed"),
            ("x = 'a;", "line 1, column 5: this character literal is never closed"),
            ("void f() [[kernel { }", "line 1, column 10: this attribute `[[` is never closed"),
        ] {
            assert_eq!(Cursor::new(open).check_closed(one_part).unwrap_err(), want, "{open:?}");
        }
        // The brace whose closer stands left of its line's indentation is the one named.
        let src = "void k() {\n  for (;;) {\n    if (c) {\n      x();\n  }\n}\n";
        assert_eq!(Cursor::new(src).check_closed(one_part).unwrap_err(), "line 3, column 12: this `{` is never closed");
        // Each part pairs its own brackets: a body's `{` left open is its own line's, not the
        // signature's.
        let src = "void k() {\n  if (c) {\n}\n";
        let body_part = |line: u32| usize::from(line == 2);
        assert_eq!(
            Cursor::new(src).check_closed(body_part).unwrap_err(),
            "line 2, column 10: this `{` is never closed"
        );
    }

    #[test]
    fn deep_nesting_is_refused_with_its_line() {
        let deep = format!("\n{}{}", "(".repeat(MAX_NESTING + 1), ")".repeat(MAX_NESTING + 1));
        let err = Cursor::new(&deep).check_nesting().unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        assert!(Cursor::new("((()))").check_nesting().is_ok());
    }
}
