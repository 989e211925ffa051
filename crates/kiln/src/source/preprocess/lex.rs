//! Preprocessing tokens (C++ [lex.pptoken]): identifiers, pp-numbers, string and character
//! literals, punctuators, and the whitespace, comments and newlines between them, which are kept
//! so that text outside macro invocations is re-emitted exactly as written. Unlike the
//! rewriter's tokenizer, `[[` is two tokens here, so macro parameters inside attributes
//! (`[[host_name(name)]]`) are substituted.

use std::rc::Rc;

/// What a preprocessing token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PpKind {
    Ident,
    Number,
    /// A string or character literal.
    Str,
    Punct,
    /// Spaces, tabs and line splices (`\` before a newline).
    Space,
    Comment,
    Newline,
    /// The empty result of an empty macro argument next to `##` (removed before output).
    Placemarker,
}

/// The names (ids) of the macros a token may not expand, sorted; shared between the tokens of
/// one expansion, so deep expansions cost no memory per token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HideSet(Option<Rc<[u32]>>);

impl HideSet {
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |h| h.len())
    }

    pub fn contains(&self, id: u32) -> bool {
        self.0.as_ref().is_some_and(|h| h.binary_search(&id).is_ok())
    }

    fn ids(&self) -> &[u32] {
        self.0.as_deref().unwrap_or(&[])
    }

    fn from_sorted(ids: Vec<u32>) -> HideSet {
        HideSet((!ids.is_empty()).then(|| Rc::from(ids)))
    }

    /// This set with `id` added.
    pub fn with(&self, id: u32) -> HideSet {
        let mut ids = self.ids().to_vec();
        if let Err(at) = ids.binary_search(&id) {
            ids.insert(at, id);
        }
        HideSet::from_sorted(ids)
    }

    /// The ids in both sets.
    pub fn intersection(&self, other: &HideSet) -> HideSet {
        HideSet::from_sorted(self.ids().iter().copied().filter(|&h| other.contains(h)).collect())
    }

    /// The ids in either set (shared with one of them when it holds the other).
    pub fn union(&self, other: &HideSet) -> HideSet {
        let (a, b) = (self.ids(), other.ids());
        if b.iter().all(|&h| self.contains(h)) {
            return self.clone();
        }
        if a.iter().all(|&h| other.contains(h)) {
            return other.clone();
        }
        let mut ids = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let next = match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) if x == y => {
                    i += 1;
                    j += 1;
                    x
                }
                (Some(&x), Some(&y)) if x < y => {
                    i += 1;
                    x
                }
                (Some(&x), None) => {
                    i += 1;
                    x
                }
                (_, Some(&y)) => {
                    j += 1;
                    y
                }
                (None, None) => break,
            };
            ids.push(next);
        }
        HideSet::from_sorted(ids)
    }

    /// True when both are the same shared set (or both empty).
    pub fn same(&self, other: &HideSet) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Rc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

/// One preprocessing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PpToken {
    pub kind: PpKind,
    pub text: String,
    /// Whitespace precedes the token where it is re-emitted away from its source (in a macro
    /// body or argument); tokens in the source keep their whitespace as separate tokens.
    pub space: bool,
    /// The macros whose expansion produced this token and that may not expand it again.
    pub hide: HideSet,
    /// The 1-based line the token starts on.
    pub line: u32,
}

impl PpToken {
    /// True for whitespace, comments and newlines.
    pub fn is_blank(&self) -> bool {
        matches!(self.kind, PpKind::Space | PpKind::Comment | PpKind::Newline)
    }

    /// True when this is the punctuator `s`.
    pub fn is_punct(&self, s: &str) -> bool {
        self.kind == PpKind::Punct && self.text == s
    }

    /// The number of newlines in the token's text.
    pub fn newlines(&self) -> usize {
        self.text.matches('\n').count()
    }

    /// True for a `/*` comment that runs to the end of the text without its `*/`.
    pub fn is_open_comment(&self) -> bool {
        self.kind == PpKind::Comment
            && self.text.starts_with("/*")
            && (self.text.len() < 4 || !self.text.ends_with("*/"))
    }
}

const PUNCTS: [&str; 26] = [
    "<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##",
];

/// Splits `src` into preprocessing tokens. Never fails: an unterminated literal or comment runs
/// to the end of its line or of the text, any other character is a one-character punctuator.
pub fn lex(src: &str) -> Vec<PpToken> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1u32;
    while i < b.len() {
        let start = i;
        let kind = scan(src, &mut i);
        let text = &src[start..i];
        out.push(PpToken { kind, text: text.to_string(), space: false, hide: HideSet::default(), line });
        line += text.matches('\n').count() as u32;
    }
    out
}

/// Scans one token starting at `*i`, advancing `*i` past it.
fn scan(src: &str, i: &mut usize) -> PpKind {
    let b = src.as_bytes();
    let c = b[*i];
    let next = b.get(*i + 1).copied();
    if c == b'\n' {
        *i += 1;
        PpKind::Newline
    } else if matches!(c, b' ' | b'\t' | b'\r' | 0x0b | 0x0c) || is_splice(b, *i) {
        while *i < b.len() {
            if is_splice(b, *i) {
                *i += if b[*i + 1] == b'\r' { 3 } else { 2 };
            } else if matches!(b[*i], b' ' | b'\t' | b'\r' | 0x0b | 0x0c) {
                *i += 1;
            } else {
                break;
            }
        }
        PpKind::Space
    } else if c == b'/' && next == Some(b'/') {
        while *i < b.len() && b[*i] != b'\n' {
            *i += 1;
        }
        PpKind::Comment
    } else if c == b'/' && next == Some(b'*') {
        *i += 2;
        while *i < b.len() && !(b[*i] == b'*' && b.get(*i + 1) == Some(&b'/')) {
            *i += 1;
        }
        *i = (*i + 2).min(b.len());
        PpKind::Comment
    } else if c == b'"' || c == b'\'' {
        *i += 1;
        while *i < b.len() && b[*i] != c && b[*i] != b'\n' {
            *i += if b[*i] == b'\\' && b.get(*i + 1).is_some_and(|&n| n != b'\n') { 2 } else { 1 };
        }
        if *i < b.len() && b[*i] == c {
            *i += 1;
        }
        PpKind::Str
    } else if is_ident_start(c) {
        while *i < b.len() && is_ident_continue(b[*i]) {
            *i += 1;
        }
        PpKind::Ident
    } else if c.is_ascii_digit() || (c == b'.' && next.is_some_and(|n| n.is_ascii_digit())) {
        *i += 1;
        while *i < b.len() {
            let d = b[*i];
            let signed_exponent = matches!(d, b'e' | b'E' | b'p' | b'P') && matches!(b.get(*i + 1), Some(b'+' | b'-'));
            let separator = d == b'\'' && b.get(*i + 1).is_some_and(|n| n.is_ascii_alphanumeric());
            if signed_exponent || separator {
                *i += 2;
            } else if is_ident_continue(d) || d == b'.' {
                *i += 1;
            } else {
                break;
            }
        }
        PpKind::Number
    } else {
        let rest = &src[*i..];
        let len = PUNCTS.iter().find(|p| rest.starts_with(**p)).map_or(1, |p| p.len());
        // A whole UTF-8 character when the byte is not ASCII.
        *i += len.max(rest.chars().next().map_or(1, char::len_utf8));
        PpKind::Punct
    }
}

fn is_splice(b: &[u8], i: usize) -> bool {
    b[i] == b'\\' && (b.get(i + 1) == Some(&b'\n') || (b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n')))
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80
}

fn is_ident_continue(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// True when `a` written directly before `b` would be read back as other tokens (`-` `-`,
/// `a` `b`, `1` `u`, `/` `*`), so a space must separate them.
pub fn would_merge(a: &PpToken, b: &PpToken) -> bool {
    let joined = format!("{}{}", a.text, b.text);
    let mut i = 0;
    scan(&joined, &mut i);
    i != a.text.len()
}

/// Writes significant tokens as text: a space where the token had whitespace before it or where
/// it would otherwise merge with the previous one; blank tokens are written as they are.
pub fn render(tokens: &[PpToken], out: &mut String) {
    let mut prev: Option<&PpToken> = None;
    for t in tokens {
        match t.kind {
            PpKind::Placemarker => continue,
            PpKind::Space | PpKind::Comment | PpKind::Newline => {
                out.push_str(&t.text);
                prev = None;
                continue;
            }
            _ => {}
        }
        let spaced = out.ends_with(|c: char| c.is_ascii_whitespace()) || out.is_empty();
        if !spaced && (t.space || prev.is_some_and(|p| would_merge(p, t))) {
            out.push(' ');
        }
        out.push_str(&t.text);
        prev = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(PpKind, &str)> {
        let toks = lex(src);
        let mut at = 0;
        toks.iter()
            .map(|t| {
                let s = &src[at..at + t.text.len()];
                at += t.text.len();
                (t.kind, s)
            })
            .filter(|(k, _)| !matches!(k, PpKind::Space))
            .collect()
    }

    #[test]
    fn attributes_split_and_numbers_keep_suffixes() {
        let k = kinds("[[host_name(n)]] 1.0h 0x1p-3f 1'000u a##b");
        assert_eq!(k[0], (PpKind::Punct, "["));
        assert_eq!(k[1], (PpKind::Punct, "["));
        assert!(k.contains(&(PpKind::Number, "1.0h")));
        assert!(k.contains(&(PpKind::Number, "0x1p-3f")));
        assert!(k.contains(&(PpKind::Number, "1'000u")));
        assert!(k.contains(&(PpKind::Punct, "##")));
    }

    #[test]
    fn text_and_lines_survive() {
        let src = "a /* x\ny */ b \\\n c // d\n'it''s' \"q\\\"\"\n";
        let toks = lex(src);
        assert_eq!(toks.iter().map(|t| t.text.as_str()).collect::<String>(), src);
        assert_eq!(toks.iter().find(|t| t.text == "c").map(|t| t.line), Some(3));
        assert_eq!(toks.iter().filter(|t| t.kind == PpKind::Str).count(), 3);
    }

    #[test]
    fn open_comments_are_told_from_closed_ones() {
        let comment = |s: &str| lex(s).into_iter().find(|t| t.kind == PpKind::Comment).unwrap();
        assert!(!comment("a /* b */ c").is_open_comment());
        assert!(!comment("/**/").is_open_comment());
        assert!(comment("a /* b").is_open_comment());
        assert!(comment("/*/").is_open_comment());
        assert!(comment("/* b *").is_open_comment());
        assert!(!comment("// b").is_open_comment());
    }

    #[test]
    fn merging_neighbours_get_a_space() {
        let t = |s: &str| lex(s).remove(0);
        assert!(would_merge(&t("-"), &t("-")));
        assert!(would_merge(&t("a"), &t("b")));
        assert!(would_merge(&t("1"), &t("u")));
        assert!(would_merge(&t("/"), &t("*")));
        assert!(!would_merge(&t("["), &t("[")));
        assert!(!would_merge(&t("a"), &t("(")));
    }
}
