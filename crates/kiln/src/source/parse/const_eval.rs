//! Compile-time values of a Metal kernel that launch validation needs before any compiler
//! runs: integer constant expressions (array extents such as `BK * (D + 1)`) and the byte size
//! of a type (`float4` 16, `half3` 8, `atomic<uint>` 4, a template parameter bound to `float`).
//!
//! Names resolve through the kernel's template arguments, `constexpr`/`const` locals of its
//! body, file-scope constants and `#define`s. Anything else (a struct's size, a function call,
//! a floating-point value) is unknown (`None`): callers treat unknown as "cannot tell", never
//! as zero.

use std::collections::HashMap;

use super::outline::Outline;
use crate::source::cursor::split_commas;
use crate::source::limits::MAX_NESTING;
use crate::source::tokens::{is_float_literal, Kind, Token};

/// The index of a `[[function_constant(expr)]]` attribute (its inner text): an integer
/// constant expression (`FC_ROPE + 1` in ggml, its macro expanded by the preprocessing), its
/// names resolved in `outline`'s file scope where one is given.
pub(crate) fn constant_index(inner: &str, outline: Option<&Outline>) -> Option<u32> {
    let expr = inner.strip_prefix("function_constant")?.trim();
    let expr = expr.strip_prefix('(')?.strip_suffix(')')?;
    let toks: Vec<Token> = crate::source::tokens::tokenize(expr).into_iter().filter(|t| !t.is_trivia()).collect();
    let empty;
    let outline = match outline {
        Some(o) => o,
        None => {
            empty = Outline::of_tokens(Vec::new());
            &empty
        }
    };
    Scope::file_scope(outline).eval(&toks).and_then(|v| u32::try_from(v).ok())
}

/// What a template parameter of the kernel is bound to by its instantiation.
#[derive(Clone, Debug)]
pub(crate) enum Bound {
    Value(i128),
    Type(Vec<Token>),
}

/// Names visible to the expressions of one kernel.
pub(crate) struct Scope<'a> {
    outline: &'a Outline,
    template: HashMap<String, Bound>,
    /// Initialisers of constants: the kernel's locals over file-scope ones.
    constants: HashMap<String, Vec<Token>>,
}

/// How deep names may refer to names before the evaluation gives up.
const MAX_DEPTH: u32 = 32;

impl<'a> Scope<'a> {
    /// The scope of the kernel whose function item is `item`, its template parameters bound to
    /// `args` (the text between the instantiation's angle brackets, split at top-level commas).
    pub fn new(outline: &'a Outline, item: usize, args: &[Vec<Token>]) -> Scope<'a> {
        let mut constants = HashMap::new();
        for it in &outline.items {
            if it.function.is_none() {
                if let Some((name, init)) = constant_definition(&outline.toks[it.range.clone()]) {
                    constants.insert(name, init);
                }
            }
        }
        let mut template = HashMap::new();
        if let Some(f) = &outline.items[item].function {
            let body = &outline.toks[f.body.clone()];
            for (k, t) in body.iter().enumerate() {
                let starts = k == 0 || [";", "{", "}"].iter().any(|s| body[k - 1].is(s));
                let qualifier = t.is("constexpr") || t.is("const") || t.is("static");
                if starts && qualifier {
                    // A `;` past the body (brackets paired across it) ends the definition with the body.
                    let end = outline
                        .semicolon(f.body.start + k)
                        .map_or(body.len(), |p| (p - f.body.start + 1).min(body.len()));
                    if let Some((name, init)) = constant_definition(&body[k..end]) {
                        constants.insert(name, init);
                    }
                }
            }
            for (param, arg) in f.template.iter().zip(args) {
                let bound = if param.is_type {
                    Some(Bound::Type(arg.clone()))
                } else {
                    let scope = Scope { outline, template: HashMap::new(), constants: HashMap::new() };
                    scope.eval(arg).map(Bound::Value)
                };
                if let Some(b) = bound {
                    template.insert(param.name.clone(), b);
                }
            }
        }
        Scope { outline, template, constants }
    }

    /// The scope of file-scope constants and `#define`s only.
    pub fn file_scope(outline: &'a Outline) -> Scope<'a> {
        let mut constants = HashMap::new();
        for it in outline.items.iter().filter(|it| it.function.is_none()) {
            if let Some((name, init)) = constant_definition(&outline.toks[it.range.clone()]) {
                constants.insert(name, init);
            }
        }
        Scope { outline, template: HashMap::new(), constants }
    }

    /// The value of an integer constant expression.
    pub fn eval(&self, toks: &[Token]) -> Option<i128> {
        let mut p = Parser { toks, pos: 0, scope: self, depth: 0, nesting: 0 };
        let v = p.expr()?;
        (p.pos == toks.len()).then_some(v)
    }

    fn eval_at(&self, toks: &[Token], depth: u32) -> Option<i128> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut p = Parser { toks, pos: 0, scope: self, depth, nesting: 0 };
        let v = p.expr()?;
        (p.pos == toks.len()).then_some(v)
    }

    /// The value a name stands for.
    fn lookup(&self, name: &str, depth: u32) -> Option<i128> {
        if let Some(Bound::Value(v)) = self.template.get(name) {
            return Some(*v);
        }
        if let Some(init) = self.constants.get(name) {
            return self.eval_at(init, depth + 1);
        }
        let body = self.outline.defines.get(name)?;
        self.eval_at(body, depth + 1)
    }

    /// The size in bytes of the type spelled by `toks`.
    pub fn type_size(&self, toks: &[Token]) -> Option<u64> {
        self.type_size_at(toks, 0)
    }

    fn type_size_at(&self, toks: &[Token], depth: u32) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut t: Vec<&Token> =
            toks.iter().filter(|t| !["const", "volatile", "typename"].iter().any(|q| t.is(q))).collect();
        while t.len() >= 2 && (t[0].is("metal") || t[0].is("::")) {
            t.remove(0);
            if t.first().is_some_and(|x| x.is("::")) {
                t.remove(0);
            }
        }
        match t.as_slice() {
            [] => None,
            [one] => match self.template.get(&one.text) {
                Some(Bound::Type(bound)) => self.type_size_at(bound, depth + 1),
                Some(Bound::Value(_)) => None,
                None => named_type_size(&one.text)
                    .or_else(|| self.outline.defines.get(&one.text).and_then(|b| self.type_size_at(b, depth + 1))),
            },
            [u, rest @ ..] if u.is("unsigned") || u.is("signed") => {
                if rest.is_empty() {
                    Some(4)
                } else {
                    let owned: Vec<Token> = rest.iter().map(|t| (*t).clone()).collect();
                    self.type_size_at(&owned, depth + 1)
                }
            }
            [name, open, inner @ .., close] if open.is("<") && close.is(">") => {
                let args = split_args(inner);
                match (name.text.as_str(), args.as_slice()) {
                    ("atomic", [ty]) => self.type_size_at(ty, depth + 1),
                    ("vec", [ty, n]) => {
                        let n = u64::try_from(self.eval_at(n, depth + 1)?).ok()?;
                        Some(self.type_size_at(ty, depth + 1)? * if n == 3 { 4 } else { n })
                    }
                    ("array", [ty, n]) => {
                        let n = u64::try_from(self.eval_at(n, depth + 1)?).ok()?;
                        self.type_size_at(ty, depth + 1)?.checked_mul(n)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// `[static] (constexpr | const | constant)... TYPE NAME = EXPR ;` → (NAME, EXPR); not arrays,
/// not function constants, not functions.
fn constant_definition(toks: &[Token]) -> Option<(String, Vec<Token>)> {
    let qualified = toks.iter().take(4).any(|t| t.is("constexpr") || t.is("const") || t.is("constant"));
    if !qualified || toks.iter().any(|t| t.kind == Kind::Attr) {
        return None;
    }
    let eq = toks.iter().position(|t| t.is("="))?;
    if toks[..eq].iter().any(|t| t.is("(") || t.is("[") || t.is("*") || t.is("&")) {
        return None;
    }
    let name = toks[..eq].last().filter(|t| t.kind == Kind::Ident)?;
    let end = if toks.last().is_some_and(|t| t.is(";")) { toks.len() - 1 } else { toks.len() };
    Some((name.text.clone(), toks.get(eq + 1..end)?.to_vec()))
}

/// Splits template arguments at top-level commas, as owned tokens.
pub(crate) fn split_args(toks: &[&Token]) -> Vec<Vec<Token>> {
    split_commas(toks).into_iter().map(|arg| arg.into_iter().cloned().collect()).collect()
}

/// Sizes of Metal's scalar, vector, packed-vector, matrix and atomic type names.
fn named_type_size(name: &str) -> Option<u64> {
    let scalar = |s: &str| -> Option<u64> {
        Some(match s {
            "bool" | "char" | "uchar" | "int8_t" | "uint8_t" => 1,
            "short" | "ushort" | "half" | "bfloat" | "float16_t" | "bfloat16_t" | "int16_t" | "uint16_t" => 2,
            "int" | "uint" | "float" | "int32_t" | "uint32_t" => 4,
            "long" | "ulong" | "int64_t" | "uint64_t" | "size_t" | "ptrdiff_t" => 8,
            _ => return None,
        })
    };
    if let Some(s) = scalar(name) {
        return Some(s);
    }
    if let Some(base) = name.strip_prefix("atomic_") {
        return scalar(base);
    }
    let (packed, rest) = match name.strip_prefix("packed_") {
        Some(r) => (true, r),
        None => (false, name),
    };
    let digits = rest.find(|c: char| c.is_ascii_digit())?;
    let (base, dims) = rest.split_at(digits);
    let elem = scalar(base)?;
    let vec_size = |n: u64| elem * if n == 3 && !packed { 4 } else { n };
    match dims.split_once('x') {
        None => {
            let n: u64 = dims.parse().ok().filter(|n| (2..=4).contains(n))?;
            Some(vec_size(n))
        }
        Some((cols, rows)) if !packed => {
            let cols: u64 = cols.parse().ok().filter(|n| (2..=4).contains(n))?;
            let rows: u64 = rows.parse().ok().filter(|n| (2..=4).contains(n))?;
            Some(cols * vec_size(rows))
        }
        _ => None,
    }
}

/// Recursive descent over C's integer operators, from the conditional down to primaries.
struct Parser<'t, 's> {
    toks: &'t [Token],
    pos: usize,
    scope: &'s Scope<'s>,
    depth: u32,
    /// Unary operators and conditional arms being parsed, each a recursion: past
    /// `MAX_NESTING` the value is unknown.
    nesting: usize,
}

/// Binary operators by precedence level, loosest first.
const LEVELS: [&[&str]; 9] =
    [&["||"], &["&&"], &["|"], &["^"], &["&"], &["==", "!="], &["<", ">", "<=", ">="], &["<<", ">>"], &["+", "-"]];

impl<'t> Parser<'t, '_> {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.peek().is_some_and(|t| t.is(s)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Runs `parse` one nesting level deeper; `None` past `MAX_NESTING`.
    fn nested(&mut self, parse: impl FnOnce(&mut Self) -> Option<i128>) -> Option<i128> {
        if self.nesting >= MAX_NESTING {
            return None;
        }
        self.nesting += 1;
        let v = parse(self);
        self.nesting -= 1;
        v
    }

    fn expr(&mut self) -> Option<i128> {
        let c = self.binary(0)?;
        if self.eat("?") {
            let a = self.nested(Self::expr)?;
            if !self.eat(":") {
                return None;
            }
            let b = self.nested(Self::expr)?;
            return Some(if c != 0 { a } else { b });
        }
        Some(c)
    }

    fn binary(&mut self, level: usize) -> Option<i128> {
        if level == LEVELS.len() {
            return self.product();
        }
        let mut v = self.binary(level + 1)?;
        while let Some(op) = self.peek().filter(|t| t.kind == Kind::Punct).map(|t| t.text.clone()) {
            if !LEVELS[level].contains(&op.as_str()) {
                break;
            }
            self.pos += 1;
            let r = self.binary(level + 1)?;
            v = match op.as_str() {
                "||" => i128::from(v != 0 || r != 0),
                "&&" => i128::from(v != 0 && r != 0),
                "|" => v | r,
                "^" => v ^ r,
                "&" => v & r,
                "==" => i128::from(v == r),
                "!=" => i128::from(v != r),
                "<" => i128::from(v < r),
                ">" => i128::from(v > r),
                "<=" => i128::from(v <= r),
                ">=" => i128::from(v >= r),
                "<<" => v.checked_shl(u32::try_from(r).ok()?)?,
                ">>" => v.checked_shr(u32::try_from(r).ok()?)?,
                "+" => v.checked_add(r)?,
                _ => v.checked_sub(r)?,
            };
        }
        Some(v)
    }

    fn product(&mut self) -> Option<i128> {
        let mut v = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(t) if t.is("*") || t.is("/") || t.is("%") => t.text.clone(),
                _ => return Some(v),
            };
            self.pos += 1;
            let r = self.unary()?;
            v = match op.as_str() {
                "*" => v.checked_mul(r)?,
                "/" => v.checked_div(r)?,
                _ => v.checked_rem(r)?,
            };
        }
    }

    fn unary(&mut self) -> Option<i128> {
        if self.eat("-") {
            return self.nested(Self::unary)?.checked_neg();
        }
        if self.eat("+") {
            return self.nested(Self::unary);
        }
        if self.eat("!") {
            return Some(i128::from(self.nested(Self::unary)? == 0));
        }
        if self.eat("~") {
            return Some(!self.nested(Self::unary)?);
        }
        self.nested(Self::primary)
    }

    /// The tokens inside the parentheses opening at the current position; moves past them.
    fn parenthesised(&mut self) -> Option<&'t [Token]> {
        let open = self.pos;
        if !self.peek()?.is("(") {
            return None;
        }
        let mut depth = 0;
        for j in open..self.toks.len() {
            if self.toks[j].is("(") {
                depth += 1;
            } else if self.toks[j].is(")") {
                depth -= 1;
                if depth == 0 {
                    self.pos = j + 1;
                    let toks: &'t [Token] = self.toks;
                    return Some(&toks[open + 1..j]);
                }
            }
        }
        None
    }

    fn primary(&mut self) -> Option<i128> {
        let t = self.peek()?.clone();
        match t.kind {
            Kind::Number => {
                self.pos += 1;
                int_literal(&t.text)
            }
            Kind::Punct if t.is("(") => {
                let inner = self.parenthesised()?;
                self.scope.eval_at(inner, self.depth + 1)
            }
            Kind::Ident => {
                self.pos += 1;
                match t.text.as_str() {
                    "true" => Some(1),
                    "false" => Some(0),
                    "metal" if self.eat("::") => self.nested(Self::primary),
                    "sizeof" => {
                        let inner = self.parenthesised()?;
                        self.scope.type_size_at(inner, self.depth + 1).map(i128::from)
                    }
                    "static_cast" => {
                        // static_cast<T>(e): the value of e (extents are non-negative and small).
                        while !self.eat(">") {
                            self.pos += 1;
                            if self.pos >= self.toks.len() {
                                return None;
                            }
                        }
                        let inner = self.parenthesised()?;
                        self.scope.eval_at(inner, self.depth + 1)
                    }
                    "min" | "max" => {
                        let inner = self.parenthesised()?;
                        let refs: Vec<&Token> = inner.iter().collect();
                        let args = split_args(&refs);
                        let [a, b] = args.as_slice() else { return None };
                        let (a, b) = (self.scope.eval_at(a, self.depth + 1)?, self.scope.eval_at(b, self.depth + 1)?);
                        Some(if t.text == "min" { a.min(b) } else { a.max(b) })
                    }
                    name if named_type_size(name).is_some() && self.peek().is_some_and(|n| n.is("(")) => {
                        // A functional cast such as int(N) or uint(BK * 2).
                        let inner = self.parenthesised()?;
                        self.scope.eval_at(inner, self.depth + 1)
                    }
                    name => self.scope.lookup(name, self.depth),
                }
            }
            _ => None,
        }
    }
}

/// A C integer literal (`42`, `0x20u`, `010`, `1'000`, `8ul`); `None` for floating literals.
fn int_literal(text: &str) -> Option<i128> {
    if is_float_literal(text) {
        return None;
    }
    let t: String = text.chars().filter(|&c| c != '\'').collect();
    let t = t.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i128::from_str_radix(hex, 16).ok()
    } else if let Some(bin) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        i128::from_str_radix(bin, 2).ok()
    } else if t.len() > 1 && t.starts_with('0') {
        i128::from_str_radix(&t[1..], 8).ok()
    } else {
        t.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tokens::tokenize;

    fn toks(s: &str) -> Vec<Token> {
        tokenize(s).into_iter().filter(|t| !t.is_trivia()).collect()
    }

    const FILE: &str = r#"
#define BK 16
constant constexpr int TILE = BK * 4;
constexpr uint SHIFT = 3;
template <typename T, int D, bool FLAG>
[[kernel]] void k(device T* a [[buffer(0)]]) {
  constexpr int KS = D + 1;
  const int WIDE = FLAG ? 2 * KS : KS;
  threadgroup T s[BK * KS];
}
"#;

    #[test]
    fn deep_expressions_are_unknown_on_a_small_stack() {
        let run = || {
            let o = Outline::new(FILE);
            let scope = Scope::new(&o, o.function("k").unwrap(), &[toks("half"), toks("64"), toks("true")]);
            let deep = |prefix: &str, n: usize, rest: &str| toks(&format!("{}{rest}", prefix.repeat(n)));
            [
                scope.eval(&deep("- ", 100_000, "1")),
                scope.eval(&deep("1 ? ", 100_000, &" : 0".repeat(100_000))),
                scope.eval(&deep("metal::", 100_000, "1")),
                scope.eval(&deep("- ", 100, "1")),
                scope.eval(&deep("1 ? ", 100, &format!("D{}", " : 0".repeat(100)))),
            ]
        };
        let got = std::thread::Builder::new().stack_size(2 << 20).spawn(run).unwrap().join().unwrap();
        assert_eq!(got, [None, None, None, Some(1), Some(64)]);
    }

    #[test]
    fn extents_resolve_through_templates_locals_constants_and_macros() {
        let o = Outline::new(FILE);
        let item = o.function("k").unwrap();
        let scope = Scope::new(&o, item, &[toks("half"), toks("64"), toks("true")]);
        assert_eq!(scope.eval(&toks("BK * KS")), Some(16 * 65));
        assert_eq!(scope.eval(&toks("TILE << SHIFT")), Some(64 << 3));
        assert_eq!(scope.eval(&toks("WIDE / 2 - 1")), Some(64));
        assert_eq!(scope.eval(&toks("(D > 32 ? D : 32) % 7")), Some(64 % 7));
        assert_eq!(scope.eval(&toks("int(D) + metal::max(3, 5u) + static_cast<int>(0x10)")), Some(64 + 5 + 16));
        assert_eq!(scope.eval(&toks("sizeof(T) * 2")), Some(4));
        assert_eq!(scope.eval(&toks("UNKNOWN + 1")), None);
        assert_eq!(scope.eval(&toks("1.5")), None);
        assert_eq!(scope.eval(&toks("1 / 0")), None);
    }

    #[test]
    fn kernels_left_open_in_the_raw_text_give_ranges_that_hold() {
        // The outline reads the raw text, where an inactive `#if` branch may leave brackets open.
        for src in [
            "kernel void k(device float* y) {",
            "kernel void k(device float* y) { constexpr int N = 4; y[0] = N;",
            "kernel void k( { ) }",
            "kernel void k() { const int A = f( }; int x; )",
        ] {
            let o = Outline::new(src);
            for (item, it) in o.items.iter().enumerate() {
                let Some(f) = &it.function else { continue };
                let (params, body) = (&f.params, &f.body);
                assert!(params.start <= params.end && body.start <= body.end && body.end <= o.toks.len(), "{src:?}");
                assert_eq!(Scope::new(&o, item, &[]).eval(&toks("2 + 2")), Some(4), "{src:?}");
            }
        }
    }

    #[test]
    fn type_sizes_follow_metal() {
        let o = Outline::new(FILE);
        let scope = Scope::new(&o, o.function("k").unwrap(), &[toks("bfloat16_t"), toks("8"), toks("false")]);
        for (ty, size) in [
            ("T", 2),
            ("float", 4),
            ("half3", 8),
            ("packed_half3", 6),
            ("float4", 16),
            ("metal::uchar2", 2),
            ("atomic<uint>", 4),
            ("atomic_int", 4),
            ("vec<T, 3>", 8),
            ("float2x3", 32),
            ("const long", 8),
            ("unsigned int", 4),
        ] {
            assert_eq!(scope.type_size(&toks(ty)), Some(size), "{ty}");
        }
        assert_eq!(scope.type_size(&toks("MyStruct")), None);
    }
}
