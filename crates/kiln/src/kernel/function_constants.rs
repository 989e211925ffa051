//! Metal's rules for `[[function_constant(i)]]` values, checked before a kernel is built.
//!
//! - A value is looked up by the constant's index first, then by its name; values that match no
//!   declared constant are ignored (as Metal ignores them).
//! - A constant is optional only when the file tests it with `is_function_constant_defined`;
//!   any other constant the kernel uses (directly or through file-scope constants, helpers and
//!   macros it reaches) is required, and building the kernel without its value fails.
//! - A value must have the constant's type: `bool` takes a boolean; an integer type takes an
//!   integer within its range; `half`, `bfloat` and `float` take a number that stays finite in
//!   that type. Metal refuses other conversions rather than truncating or wrapping.

use std::collections::HashSet;

use crate::dtype::{element_bytes_to_f64, f64_to_element_bytes, DType};
use crate::error::{Error, Result};
use crate::program::{ConstantKey, ConstantValue};
use crate::source::cursor::split_text_commas;
use crate::source::parse::{constant_index, Outline};
use crate::source::tokens::Kind;

/// One `constant T name [[function_constant(index)]];` declaration.
#[derive(Clone, Debug)]
pub(crate) struct FunctionConstant {
    pub name: String,
    pub index: Option<u32>,
    /// The declared type as written (`int`, `metal::half`, `uint32_t`).
    pub ty: String,
}

/// The function constants the file declares, in order.
pub(crate) fn declared(outline: &Outline) -> Vec<FunctionConstant> {
    let mut out = Vec::new();
    for item in outline.items.iter().filter(|i| i.function.is_none()) {
        let toks = &outline.toks[item.range.clone()];
        let Some(attr) =
            toks.iter().position(|t| t.kind == Kind::Attr && t.attr_inner().starts_with("function_constant"))
        else {
            continue;
        };
        let Some(first) = toks.iter().position(|t| t.is("constant")) else { continue };
        if attr < first + 3 || toks[attr - 1].kind != Kind::Ident {
            continue;
        }
        let inner = toks[attr].attr_inner();
        let index = constant_index(inner, Some(outline));
        let ty = toks[first + 1..attr - 1].iter().map(|t| t.text.as_str()).collect::<Vec<_>>().join(" ");
        out.push(FunctionConstant { name: toks[attr - 1].text.clone(), index, ty });
    }
    out
}

/// The value given for `c`: by index first, then by name.
fn value_of<'v>(c: &FunctionConstant, values: &'v [(ConstantKey, ConstantValue)]) -> Option<&'v ConstantValue> {
    let by_index = values.iter().find(|(k, _)| matches!(k, ConstantKey::Index(i) if Some(*i) == c.index));
    let by_name = || values.iter().find(|(k, _)| matches!(k, ConstantKey::Name(n) if *n == c.name));
    by_index.or_else(by_name).map(|(_, v)| v)
}

/// The parameters of function item `item` that exist only when a function constant is true
/// (`[[buffer(2), function_constant(use_bias)]]`) and whose constant is false or unset here.
pub(crate) fn absent_params(outline: &Outline, item: usize, values: &[(ConstantKey, ConstantValue)]) -> Vec<String> {
    let Some(f) = outline.items[item].function.as_ref() else { return Vec::new() };
    let declared = declared(outline);
    let mut out = Vec::new();
    let params = &outline.toks[f.params.clone()];
    for (k, t) in params.iter().enumerate() {
        if t.kind != Kind::Attr || k == 0 || params[k - 1].kind != Kind::Ident {
            continue;
        }
        for part in split_text_commas(t.attr_inner()) {
            let Some(cond) = part.strip_prefix("function_constant") else { continue };
            let cond = cond.trim().trim_start_matches('(').trim_end_matches(')').trim();
            let value = declared.iter().find(|c| c.name == cond).and_then(|c| value_of(c, values));
            if !matches!(value, Some(ConstantValue::Bool(true))) {
                out.push(params[k - 1].text.clone());
            }
        }
    }
    out
}

/// Checks the values of `kernel`'s function constants; `reach` is every name the kernel uses.
pub(crate) fn check(
    op: &str,
    kernel: &str,
    outline: &Outline,
    reach: &HashSet<String>,
    values: &[(ConstantKey, ConstantValue)],
) -> Result<()> {
    let tested = outline.tested_for_definition();
    for c in declared(outline) {
        let label = match c.index {
            Some(i) => format!("`{}` [[function_constant({i})]] ({})", c.name, c.ty),
            None => format!("`{}` ({})", c.name, c.ty),
        };
        match value_of(&c, values) {
            Some(v) => {
                if let Err(why) = fits(&c.ty, v) {
                    return Err(Error::invalid(op, format!("kernel {kernel}: function constant {label}: {why}")));
                }
            }
            None if reach.contains(&c.name) && !tested.contains(&c.name) => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "kernel {kernel} uses function constant {label}, which has no value; it is required \
                         (only a constant tested with is_function_constant_defined may stay unset): give it \
                         by index or by name in the library's constants"
                    ),
                ));
            }
            None => {}
        }
    }
    Ok(())
}

/// What a declared type accepts.
enum Accepts {
    Bool,
    Int(i128, i128),
    Float(DType),
}

fn accepts(ty: &str) -> Option<Accepts> {
    let words: Vec<&str> = ty.split_whitespace().filter(|w| !["const", "metal", "::"].contains(w)).collect();
    let name = match words.as_slice() {
        ["unsigned"] | ["unsigned", "int"] => "uint",
        [one] => one.trim_start_matches("metal::"),
        ["unsigned", "short"] => "ushort",
        ["unsigned", "char"] => "uchar",
        _ => return None,
    };
    let int = |lo: i128, hi: i128| Some(Accepts::Int(lo, hi));
    match name {
        "bool" => Some(Accepts::Bool),
        "char" | "int8_t" => int(i8::MIN.into(), i8::MAX.into()),
        "uchar" | "uint8_t" => int(0, u8::MAX.into()),
        "short" | "int16_t" => int(i16::MIN.into(), i16::MAX.into()),
        "ushort" | "uint16_t" => int(0, u16::MAX.into()),
        "int" | "int32_t" => int(i32::MIN.into(), i32::MAX.into()),
        "uint" | "uint32_t" => int(0, u32::MAX.into()),
        "long" | "int64_t" => int(i64::MIN.into(), i64::MAX.into()),
        "ulong" | "uint64_t" | "size_t" => int(0, u64::MAX.into()),
        "half" | "float16_t" => Some(Accepts::Float(DType::F16)),
        "bfloat" | "bfloat16_t" => Some(Accepts::Float(DType::BF16)),
        "float" => Some(Accepts::Float(DType::F32)),
        _ => None,
    }
}

/// Whether `v` is a value of type `ty` (see the module documentation); the reason when not.
fn fits(ty: &str, v: &ConstantValue) -> std::result::Result<(), String> {
    let shown = match v {
        ConstantValue::Bool(b) => format!("the boolean {b}"),
        ConstantValue::Int(i) => format!("the integer {i}"),
        ConstantValue::Float(f) => format!("the number {f:?}"),
    };
    let Some(accepts) = accepts(ty) else {
        return Err(format!("{shown} cannot be given: only bool, integer and half/bfloat/float constants can be set"));
    };
    match (accepts, v) {
        (Accepts::Bool, ConstantValue::Bool(_)) => Ok(()),
        (Accepts::Bool, _) => Err(format!("{shown} is not a boolean (the constant's type is {ty})")),
        (Accepts::Int(lo, hi), ConstantValue::Int(i)) => {
            let i = i128::from(*i);
            if (lo..=hi).contains(&i) {
                Ok(())
            } else {
                Err(format!("{shown} is out of range for type {ty} ({lo}..={hi})"))
            }
        }
        (Accepts::Int(..), ConstantValue::Float(_)) => {
            Err(format!("{shown} is not an integer, but the constant's type is {ty} (Metal does not truncate it)"))
        }
        (Accepts::Int(..), ConstantValue::Bool(_)) => {
            Err(format!("{shown} is not an integer (the constant's type is {ty})"))
        }
        (Accepts::Float(_), ConstantValue::Bool(_)) => {
            Err(format!("{shown} is not a number (the constant's type is {ty})"))
        }
        (Accepts::Float(dtype), ConstantValue::Int(_) | ConstantValue::Float(_)) => {
            let x = match v {
                ConstantValue::Int(i) => *i as f64,
                ConstantValue::Float(f) => *f,
                ConstantValue::Bool(_) => 0.0,
            };
            let rounded = element_bytes_to_f64(&f64_to_element_bytes(x, dtype), dtype);
            if x.is_finite() && rounded.is_infinite() {
                Err(format!("{shown} is out of range for type {ty} (it would round to infinity)"))
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_must_have_the_declared_type() {
        assert!(fits("int", &ConstantValue::Int(-2_147_483_648)).is_ok());
        assert!(fits("int", &ConstantValue::Int(3_000_000_000)).unwrap_err().contains("out of range"));
        assert!(fits("uint", &ConstantValue::Int(3_000_000_000)).is_ok());
        assert!(fits("uint", &ConstantValue::Int(-1)).is_err());
        assert!(fits("uchar", &ConstantValue::Int(256)).is_err());
        assert!(fits("int", &ConstantValue::Float(1.5)).unwrap_err().contains("not an integer"));
        assert!(fits("bool", &ConstantValue::Int(1)).is_err());
        assert!(fits("float", &ConstantValue::Int(3)).is_ok());
        assert!(fits("half", &ConstantValue::Float(0.1)).is_ok());
        assert!(fits("half", &ConstantValue::Float(70000.0)).unwrap_err().contains("infinity"));
        assert!(fits("float", &ConstantValue::Float(f64::INFINITY)).is_ok());
        assert!(fits("float2", &ConstantValue::Float(1.0)).is_err());
        assert!(fits("metal::uint32_t", &ConstantValue::Int(7)).is_ok());
    }

    #[test]
    fn declarations_are_read_with_index_and_type() {
        let o = Outline::new(
            "constant int n [[function_constant(1)]];\nconstant metal::half h [[function_constant(4)]];\nconstant int m = 3;",
        );
        let d = declared(&o);
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].name.as_str(), d[0].index, d[0].ty.as_str()), ("n", Some(1), "int"));
        assert_eq!((d[1].name.as_str(), d[1].index), ("h", Some(4)));
    }
}
