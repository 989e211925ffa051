//! The integer constant expressions of `#if` and `#elif` (C++ [cpp.cond]), after macro
//! expansion: integer and character literals, `defined`, identifiers (0, except `true`),
//! and the operators of C with C's precedence. Arithmetic is done in `intmax_t` or, when an
//! operand is unsigned, `uintmax_t` (both 64 bits), as the preprocessor does; `&&`, `||` and
//! `?:` do not evaluate (or complain about) the operand they skip.

use super::lex::{PpKind, PpToken};
use crate::source::limits::{exceeded, MAX_NESTING};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Value {
    bits: u64,
    unsigned: bool,
}

impl Value {
    fn signed(v: i64) -> Self {
        Value { bits: v as u64, unsigned: false }
    }

    fn truth(self) -> bool {
        self.bits != 0
    }
}

struct Parser<'a> {
    toks: Vec<&'a PpToken>,
    pos: usize,
    line: u32,
    is_defined: &'a dyn Fn(&str) -> bool,
    /// Nested parentheses, conditionals and unary operators being parsed (each is a recursion).
    depth: usize,
}

/// Evaluates a `#if` expression on `line` (`tokens` are macro-expanded; `defined X` may still
/// appear where a macro produced it).
pub fn evaluate(tokens: &[PpToken], line: u32, is_defined: &dyn Fn(&str) -> bool) -> Result<bool, String> {
    let toks: Vec<&PpToken> = tokens.iter().filter(|t| !t.is_blank() && t.kind != PpKind::Placemarker).collect();
    if toks.is_empty() {
        return Err(format!("line {line}: `#if` with no expression"));
    }
    let mut p = Parser { toks, pos: 0, line, is_defined, depth: 0 };
    let v = p.conditional(true)?;
    if let Some(t) = p.peek() {
        return Err(format!("line {line}: unexpected `{}` in `#if` expression", t.text));
    }
    Ok(v.truth())
}

fn precedence(op: &str) -> Option<u8> {
    Some(match op {
        "*" | "/" | "%" => 10,
        "+" | "-" => 9,
        "<<" | ">>" => 8,
        "<" | ">" | "<=" | ">=" => 7,
        "==" | "!=" => 6,
        "&" => 5,
        "^" => 4,
        "|" => 3,
        "&&" => 2,
        "||" => 1,
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a PpToken> {
        self.toks.get(self.pos).copied()
    }

    fn next(&mut self) -> Result<&'a PpToken, String> {
        let t = self.peek().ok_or_else(|| format!("line {}: `#if` expression ends early", self.line))?;
        self.pos += 1;
        Ok(t)
    }

    fn expect(&mut self, s: &str) -> Result<(), String> {
        let t = self.next()?;
        if t.is_punct(s) {
            Ok(())
        } else {
            Err(format!("line {}: expected `{s}` in `#if` expression, found `{}`", self.line, t.text))
        }
    }

    /// Runs `parse` one nesting level deeper, refusing to pass `MAX_NESTING`.
    fn nested(&mut self, parse: impl FnOnce(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        if self.depth >= MAX_NESTING {
            return Err(format!(
                "line {}: {}",
                self.line,
                exceeded("the nesting of the `#if` expression", MAX_NESTING)
            ));
        }
        self.depth += 1;
        let v = parse(self);
        self.depth -= 1;
        v
    }

    /// `c ? a : b`, or a binary expression. `live` is false inside an operand that is skipped.
    fn conditional(&mut self, live: bool) -> Result<Value, String> {
        let c = self.binary(0, live)?;
        if !self.peek().is_some_and(|t| t.is_punct("?")) {
            return Ok(c);
        }
        self.pos += 1;
        let a = self.nested(|p| p.conditional(live && c.truth()))?;
        self.expect(":")?;
        let b = self.nested(|p| p.conditional(live && !c.truth()))?;
        let unsigned = a.unsigned || b.unsigned;
        let v = if c.truth() { a } else { b };
        Ok(Value { bits: v.bits, unsigned })
    }

    fn binary(&mut self, min: u8, live: bool) -> Result<Value, String> {
        let mut lhs = self.unary(live)?;
        while let Some(t) = self.peek() {
            let Some(prec) = (t.kind == PpKind::Punct).then(|| precedence(&t.text)).flatten() else { break };
            if prec <= min {
                break;
            }
            self.pos += 1;
            let op = t.text.as_str();
            let rhs_live = match op {
                "&&" => live && lhs.truth(),
                "||" => live && !lhs.truth(),
                _ => live,
            };
            let rhs = self.binary(prec, rhs_live)?;
            lhs = self.apply(op, lhs, rhs, live)?;
        }
        Ok(lhs)
    }

    fn apply(&self, op: &str, a: Value, b: Value, live: bool) -> Result<Value, String> {
        let unsigned = a.unsigned || b.unsigned;
        let (x, y) = (a.bits, b.bits);
        let (sx, sy) = (x as i64, y as i64);
        let cmp = |r: bool| Value::signed(i64::from(r));
        let arith = |bits: u64| Value { bits, unsigned };
        Ok(match op {
            "*" => arith(x.wrapping_mul(y)),
            "/" | "%" => {
                if y == 0 {
                    if live {
                        return Err(format!("line {}: division by zero in `#if` expression", self.line));
                    }
                    return Ok(arith(0));
                }
                let bits = match (op, unsigned) {
                    ("/", true) => x / y,
                    ("/", false) => sx.wrapping_div(sy) as u64,
                    (_, true) => x % y,
                    _ => sx.wrapping_rem(sy) as u64,
                };
                arith(bits)
            }
            "+" => arith(x.wrapping_add(y)),
            "-" => arith(x.wrapping_sub(y)),
            // Shifts keep the left operand's type; counts past the width give 0 (or the sign).
            "<<" => Value { bits: if y >= 64 { 0 } else { x << y }, unsigned: a.unsigned },
            ">>" => {
                let bits = match (a.unsigned, y >= 64) {
                    (true, true) => 0,
                    (true, false) => x >> y,
                    (false, true) => (sx >> 63) as u64,
                    (false, false) => (sx >> y) as u64,
                };
                Value { bits, unsigned: a.unsigned }
            }
            "<" => cmp(if unsigned { x < y } else { sx < sy }),
            ">" => cmp(if unsigned { x > y } else { sx > sy }),
            "<=" => cmp(if unsigned { x <= y } else { sx <= sy }),
            ">=" => cmp(if unsigned { x >= y } else { sx >= sy }),
            "==" => cmp(x == y),
            "!=" => cmp(x != y),
            "&" => arith(x & y),
            "^" => arith(x ^ y),
            "|" => arith(x | y),
            "&&" => cmp(a.truth() && b.truth()),
            _ => cmp(a.truth() || b.truth()),
        })
    }

    fn unary(&mut self, live: bool) -> Result<Value, String> {
        let t = self.next()?;
        match t.kind {
            PpKind::Punct => match t.text.as_str() {
                "(" => self.nested(|p| {
                    let v = p.conditional(live)?;
                    p.expect(")")?;
                    Ok(v)
                }),
                "+" => self.nested(|p| p.unary(live)),
                "-" => {
                    let v = self.nested(|p| p.unary(live))?;
                    Ok(Value { bits: v.bits.wrapping_neg(), unsigned: v.unsigned })
                }
                "~" => {
                    let v = self.nested(|p| p.unary(live))?;
                    Ok(Value { bits: !v.bits, unsigned: v.unsigned })
                }
                "!" => Ok(Value::signed(i64::from(!self.nested(|p| p.unary(live))?.truth()))),
                _ => Err(format!("line {}: unexpected `{}` in `#if` expression", self.line, t.text)),
            },
            PpKind::Number => number(&t.text).ok_or_else(|| {
                format!("line {}: `{}` is not an integer constant (in `#if` expression)", self.line, t.text)
            }),
            PpKind::Str => character(&t.text)
                .ok_or_else(|| format!("line {}: `{}` cannot appear in a `#if` expression", self.line, t.text)),
            PpKind::Ident => match t.text.as_str() {
                "defined" => {
                    let paren = self.peek().is_some_and(|n| n.is_punct("("));
                    if paren {
                        self.pos += 1;
                    }
                    let name = self.next()?;
                    if name.kind != PpKind::Ident {
                        return Err(format!("line {}: `defined` needs a macro name", self.line));
                    }
                    if paren {
                        self.expect(")")?;
                    }
                    Ok(Value::signed(i64::from((self.is_defined)(&name.text))))
                }
                "true" => Ok(Value::signed(1)),
                name if name.starts_with("__has_") => Err(format!(
                    "line {}: `{name}` is not supported in `#if` expressions (kiln cannot answer it for Metal)",
                    self.line
                )),
                // Identifiers that are not macros are 0.
                _ => Ok(Value::signed(0)),
            },
            _ => Err(format!("line {}: unexpected `{}` in `#if` expression", self.line, t.text)),
        }
    }
}

/// An integer literal: decimal, octal, hexadecimal or binary, with digit separators and
/// `u`/`l` suffixes. `None` for a floating literal or a malformed one.
fn number(text: &str) -> Option<Value> {
    let t: String = text.chars().filter(|&c| c != '\'').collect();
    let lower = t.to_ascii_lowercase();
    let digits_end = lower.trim_end_matches(['u', 'l']).len();
    let (digits, suffix) = lower.split_at(digits_end);
    let (radix, body) = if let Some(h) = digits.strip_prefix("0x") {
        (16, h)
    } else if let Some(b) = digits.strip_prefix("0b") {
        (2, b)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    let bits = u64::from_str_radix(body, radix).ok()?;
    Some(Value { bits, unsigned: suffix.contains('u') || bits > i64::MAX as u64 })
}

/// The value of a character literal such as `'a'` or `'\n'`.
fn character(text: &str) -> Option<Value> {
    let inner = text.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut chars = inner.chars();
    let c = chars.next()?;
    let v = if c == '\\' {
        let e = chars.next()?;
        let rest: String = chars.collect();
        match e {
            'n' => 10,
            't' => 9,
            'r' => 13,
            'a' => 7,
            'b' => 8,
            'f' => 12,
            'v' => 11,
            'x' => return u64::from_str_radix(&rest, 16).ok().map(|b| Value::signed(b as i8 as i64)),
            '0'..='7' => {
                let oct = format!("{e}{rest}");
                return u64::from_str_radix(&oct, 8).ok().map(|b| Value::signed(b as i8 as i64));
            }
            other if rest.is_empty() => other as i64,
            _ => return None,
        }
    } else {
        if chars.next().is_some() {
            return None;
        }
        c as i64
    };
    Some(Value::signed(v))
}

#[cfg(test)]
mod tests {
    use super::super::lex::lex;
    use super::*;

    fn eval(s: &str) -> Result<bool, String> {
        evaluate(&lex(s), 1, &|n| n == "X")
    }

    #[test]
    fn arithmetic_follows_c() {
        assert_eq!(eval("1 + 2 * 3 == 7"), Ok(true));
        assert_eq!(eval("(1 << 4) - 1 == 0xf && 010 == 8 && 0b101 == 5"), Ok(true));
        assert_eq!(eval("-1 < 0"), Ok(true));
        assert_eq!(eval("-1 < 0u"), Ok(false), "mixed comparison is unsigned");
        assert_eq!(eval("-7 / 2 == -3 && -7 % 2 == -1"), Ok(true));
        assert_eq!(eval("1 ? 2 : 0"), Ok(true));
        assert_eq!(eval("0 ? 1 : 0"), Ok(false));
        assert_eq!(eval("'a' == 97 && '\\n' == 10"), Ok(true));
        assert_eq!(eval("1'000 == 1000ull"), Ok(true));
    }

    #[test]
    fn defined_identifiers_and_short_circuits() {
        assert_eq!(eval("defined(X) && defined X && !defined(Y)"), Ok(true));
        assert_eq!(eval("UNKNOWN == 0 && true && !false"), Ok(true));
        assert_eq!(eval("0 && 1 / 0"), Ok(false));
        assert_eq!(eval("1 || 1 / 0"), Ok(true));
        assert!(eval("1 / 0").is_err());
        assert!(eval("1.5 > 1").is_err());
        assert!(eval("__has_include(<metal_stdlib>)").is_err());
        assert!(eval("1 +").is_err());
        assert!(eval("(1").is_err());
    }
}
