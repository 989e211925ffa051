//! A C++/MSL tokenizer that keeps everything: whitespace, newlines, comments and preprocessor
//! lines survive as tokens, so the rewriter can re-emit the text with every line where it was
//! (compiler errors then point at the user's own lines).

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword.
    Ident,
    /// A numeric literal with its suffix (`1.0h`, `2u`, `0x1p-3f`).
    Number,
    /// A string or character literal.
    Str,
    /// An operator or punctuator (`::`, `->`, `<<=`, `(`, ...).
    Punct,
    /// A whole `[[...]]` attribute group.
    Attr,
    /// A preprocessor line including its continuations.
    Preproc,
    /// A `//` or `/* */` comment.
    Comment,
    /// Spaces and tabs.
    Space,
    /// A line break.
    Newline,
}

/// One token: its kind, its exact text and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// What the token is.
    pub kind: Kind,
    /// The token's exact source text.
    pub text: String,
    /// The 1-based line the token starts on.
    pub line: u32,
}

impl Token {
    /// True for tokens with no meaning to the parser.
    pub fn is_trivia(&self) -> bool {
        matches!(self.kind, Kind::Space | Kind::Newline | Kind::Comment)
    }

    /// True when this is the punctuator or identifier `s`.
    pub fn is(&self, s: &str) -> bool {
        matches!(self.kind, Kind::Punct | Kind::Ident) && self.text == s
    }

    /// What the token leaves open where its line or the text ends first: a string or
    /// character literal without its closing quote, a `[[` group without `]]`, a `/*` comment
    /// without `*/` (the tokenizer runs each of them to the end of its line or of the text).
    pub fn unclosed(&self) -> Option<&'static str> {
        let t = self.text.as_bytes();
        match self.kind {
            Kind::Str => {
                let quote = *t.first()?;
                let mut i = 1;
                while i < t.len() && t[i] != quote && t[i] != b'\n' {
                    i += if t[i] == b'\\' { 2 } else { 1 };
                }
                let closed = t.get(i) == Some(&quote);
                (!closed).then_some(if quote == b'"' { "string literal" } else { "character literal" })
            }
            Kind::Attr => (t.len() < 4 || !t.ends_with(b"]]")).then_some("attribute `[[`"),
            Kind::Comment if t.starts_with(b"/*") => (t.len() < 4 || !t.ends_with(b"*/")).then_some("comment `/*`"),
            _ => None,
        }
    }

    /// The inside of an attribute group, trimmed (`buffer(0)` for `[[ buffer(0) ]]`).
    pub fn attr_inner(&self) -> &str {
        let t = self.text.as_str();
        t.strip_prefix("[[").and_then(|t| t.strip_suffix("]]")).unwrap_or(t).trim()
    }
}

const PUNCTS: [&str; 25] = [
    "<<=", ">>=", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=",
    "*=", "/=", "%=", "&=", "|=", "^=", ".*",
];

/// Splits `src` into tokens. Never fails: an unknown character becomes a one-character
/// punctuator and an unterminated literal or comment runs to the end of the line or text.
pub fn tokenize(src: &str) -> Vec<Token> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1u32;
    // A `#` starts a directive only as the first non-blank character of a line.
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind;
        if c == b'\n' {
            i += 1;
            kind = Kind::Newline;
        } else if c == b' ' || c == b'\t' || c == b'\r' || c == 0x0c {
            while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | 0x0c) {
                i += 1;
            }
            kind = Kind::Space;
        } else if c == b'#' && line_start {
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\n' {
                    i += 2;
                } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    i = skip_block_comment(b, i);
                } else {
                    i += 1;
                }
            }
            kind = Kind::Preproc;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            kind = Kind::Comment;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = skip_block_comment(b, i);
            kind = Kind::Comment;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            kind = Kind::Str;
        } else if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            kind = Kind::Ident;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            i = scan_number(b, i);
            kind = Kind::Number;
        } else if c == b'[' && b.get(i + 1) == Some(&b'[') {
            i += 2;
            let mut depth = 0i32;
            while i < b.len() {
                if b[i] == b'[' {
                    depth += 1;
                } else if b[i] == b']' {
                    if depth == 0 && b.get(i + 1) == Some(&b']') {
                        i += 2;
                        break;
                    }
                    depth -= 1;
                }
                i += 1;
            }
            kind = Kind::Attr;
        } else {
            let rest = &src[i..];
            let len = PUNCTS.iter().find(|p| rest.starts_with(**p)).map_or(1, |p| p.len());
            // Step over a whole UTF-8 character when the byte is not ASCII.
            i += len.max(rest.chars().next().map_or(1, char::len_utf8));
            kind = Kind::Punct;
        }
        let text = &src[start..i];
        out.push(Token { kind, text: text.to_string(), line });
        line += text.matches('\n').count() as u32;
        match kind {
            Kind::Newline => line_start = true,
            Kind::Space => {}
            Kind::Comment if !text.contains('\n') && text.starts_with("/*") => {}
            _ => line_start = text.ends_with('\n'),
        }
    }
    out
}

fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    i += 2;
    while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
        i += 1;
    }
    (i + 2).min(b.len())
}

fn scan_number(b: &[u8], mut i: usize) -> usize {
    let hex = b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
    if hex {
        i += 2;
    }
    while i < b.len() {
        let c = b[i];
        let exp = if hex { matches!(c, b'p' | b'P') } else { matches!(c, b'e' | b'E') };
        if exp && matches!(b.get(i + 1), Some(b'+' | b'-')) {
            i += 2;
        } else if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'\'' {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// For a number token: true when it is a floating literal (has a point or an exponent).
pub fn is_float_literal(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    if t.starts_with("0x") {
        return t.contains('p');
    }
    t.contains('.') || t.contains('e')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, String)> {
        tokenize(src).into_iter().filter(|t| !t.is_trivia()).map(|t| (t.kind, t.text)).collect()
    }

    #[test]
    fn splits_attributes_numbers_and_directives() {
        let src = "#include <metal_stdlib>\nkernel void f(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) { a[i] = 1.0h + 2u + 1e-3f; }";
        let toks = kinds(src);
        assert_eq!(toks[0], (Kind::Preproc, "#include <metal_stdlib>".into()));
        assert!(toks.contains(&(Kind::Attr, "[[buffer(0)]]".into())));
        assert!(toks.contains(&(Kind::Number, "1.0h".into())));
        assert!(toks.contains(&(Kind::Number, "1e-3f".into())));
        assert!(toks.contains(&(Kind::Number, "2u".into())));
    }

    #[test]
    fn keeps_lines_and_text() {
        let src = "a /* x\ny */ b\n  # define X 1 \\\n 2\nc";
        let toks = tokenize(src);
        let joined: String = toks.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(joined, src);
        let c = toks.iter().find(|t| t.text == "c").map(|t| t.line);
        assert_eq!(c, Some(5));
        assert!(toks.iter().any(|t| t.kind == Kind::Preproc && t.text.contains("2")));
    }

    #[test]
    fn literals_attributes_and_comments_left_open_are_told() {
        let first = |src: &str| tokenize(src).into_iter().find(|t| !t.is_trivia() || t.kind == Kind::Comment).unwrap();
        for closed in ["\"a\\\"b\"", "'x'", "'\\''", "[[kernel]]", "/* a */", "/**/", "\"a\\\nb\""] {
            assert_eq!(first(closed).unclosed(), None, "{closed:?}");
        }
        for (open, what) in [
            ("\"abc\n", "string literal"),
            ("\"abc\\\"", "string literal"),
            ("\"", "string literal"),
            ("'a", "character literal"),
            ("[[kernel", "attribute `[[`"),
            ("[[kernel]", "attribute `[[`"),
            ("/*/", "comment `/*`"),
            ("/* a *", "comment `/*`"),
        ] {
            assert_eq!(first(open).unclosed(), Some(what), "{open:?}");
        }
    }

    #[test]
    fn float_literals_are_recognised() {
        assert!(is_float_literal("1.0"));
        assert!(is_float_literal("1e5"));
        assert!(!is_float_literal("0xff"));
        assert!(is_float_literal("0x1p3"));
        assert!(!is_float_literal("12u"));
    }
}
