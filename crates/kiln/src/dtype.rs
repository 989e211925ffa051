//! Element types, named as MLX names them, with their Metal, C++ and `.npy` spellings.

use std::fmt;

use half::{bf16, f16};
// float16 and bfloat16 values are rounded by kiln_convert, once from the exact source value:
// `half`'s f64 conversions drop the sticky bits below the rounding position.
use kiln_convert::Format;

/// An element type. The names are MLX's (`float16`, `bfloat16`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`, one byte.
    Bool,
    /// `uint8`.
    U8,
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
    /// `uint64`.
    U64,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `float16` (IEEE half; Metal's `half`, Rust's `half::f16`).
    F16,
    /// `bfloat16` (Metal's `bfloat`, Rust's `half::bf16`).
    BF16,
    /// `float32`.
    F32,
}

impl DType {
    /// Every dtype, in MLX's order.
    pub const ALL: [DType; 12] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
    ];

    /// MLX's name (`float16`, `uint32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
        }
    }

    /// Parses MLX's name.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 => 8,
        }
    }

    /// The type string MLX uses in generated Metal source and in kernel names.
    pub fn metal_type(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8_t",
            DType::U16 => "uint16_t",
            DType::U32 => "uint32_t",
            DType::U64 => "uint64_t",
            DType::I8 => "int8_t",
            DType::I16 => "int16_t",
            DType::I32 => "int32_t",
            DType::I64 => "int64_t",
            DType::F16 => "float16_t",
            DType::BF16 => "bfloat16_t",
            DType::F32 => "float",
        }
    }

    /// True for float16, bfloat16 and float32.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }

    /// True for the signed integer types.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// True for the unsigned integer types (bool excluded).
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rust element types that map onto a [`DType`]: `bool`, `u8`..`u64`, `i8`..`i64`, `f32`,
/// `half::f16` and `half::bf16` (re-exported as `kiln::f16`, `kiln::bf16`). `f64` is not one:
/// kiln has no float64 dtype (Metal has no `double`), so `f64` data is converted explicitly with
/// `Array::from_f64(dtype, ..)` and read back with `Array::to_f64_vec`:
///
/// ```compile_fail
/// // error: `f64` is not a kiln element type (with a note naming Array::from_f64)
/// let a = kiln::Array::from_slice(&[2], &[1.0f64, 2.0]);
/// ```
///
/// ```
/// let a = kiln::Array::from_f64(kiln::DType::F32, &[2], &[1.0f64, 2.0])?;
/// assert_eq!(a.to_f64_vec()?, [1.0, 2.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kiln element type",
    label = "kiln has no dtype for `{Self}`",
    note = "for f64 data use Array::from_f64(DType::F32, shape, values) (one rounding to the dtype named) and Array::to_f64_vec()"
)]
pub trait Element: Copy + Send + Sync + 'static {
    /// The dtype of arrays of this element type.
    const DTYPE: DType;
    /// Little-endian bytes of the value.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads a value from the first `DTYPE.size()` little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}
element!(u8, DType::U8);
element!(u16, DType::U16);
element!(u32, DType::U32);
element!(u64, DType::U64);
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(f32, DType::F32);
element!(f16, DType::F16);
element!(bf16, DType::BF16);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Converts an `f64` to the bytes of one element of `dtype` with a plain numeric cast (MLX's rule
/// for `init_value` and scalar conversion): floats round once to nearest even, ints truncate
/// toward zero and saturate, bool is `value != 0`.
pub fn f64_to_element_bytes(value: f64, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    match dtype {
        DType::Bool => (value != 0.0).write_le(&mut out),
        DType::U8 => (value as u8).write_le(&mut out),
        DType::U16 => (value as u16).write_le(&mut out),
        DType::U32 => (value as u32).write_le(&mut out),
        DType::U64 => (value as u64).write_le(&mut out),
        DType::I8 => (value as i8).write_le(&mut out),
        DType::I16 => (value as i16).write_le(&mut out),
        DType::I32 => (value as i32).write_le(&mut out),
        DType::I64 => (value as i64).write_le(&mut out),
        DType::F16 => Format::F16.round_f64(value).write_le(&mut out),
        DType::BF16 => Format::BF16.round_f64(value).write_le(&mut out),
        DType::F32 => (value as f32).write_le(&mut out),
    }
    out
}

/// Converts an `f32` to one element of `dtype`: float16 and bfloat16 round once from the
/// float32's own bits; other dtypes as [`f64_to_element_bytes`] (the f64 holds it exactly).
pub fn f32_to_element_bytes(value: f32, dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => Format::F16.round_f32(value).to_le_bytes().to_vec(),
        DType::BF16 => Format::BF16.round_f32(value).to_le_bytes().to_vec(),
        DType::F32 => value.to_le_bytes().to_vec(),
        _ => f64_to_element_bytes(f64::from(value), dtype),
    }
}

/// Converts an integer to one element of `dtype`: floats round once from the exact integer
/// (through f64 an i64 would round twice past 2^53), integers wrap (two's complement, as NumPy's
/// and MLX's `astype`), bool is `value != 0`.
pub fn int_to_element_bytes(value: i128, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    match dtype {
        DType::Bool => (value != 0).write_le(&mut out),
        DType::U8 => (value as u8).write_le(&mut out),
        DType::U16 => (value as u16).write_le(&mut out),
        DType::U32 => (value as u32).write_le(&mut out),
        DType::U64 => (value as u64).write_le(&mut out),
        DType::I8 => (value as i8).write_le(&mut out),
        DType::I16 => (value as i16).write_le(&mut out),
        DType::I32 => (value as i32).write_le(&mut out),
        DType::I64 => (value as i64).write_le(&mut out),
        DType::F16 => Format::F16.round_int(value).write_le(&mut out),
        DType::BF16 => Format::BF16.round_int(value).write_le(&mut out),
        // Rust's integer-to-float `as` rounds once to nearest even.
        DType::F32 => (value as f32).write_le(&mut out),
    }
    out
}

/// Converts an integer written as a number (a spec's `scalar`, `values` or `fields`) to one
/// element of `dtype`: as [`int_to_element_bytes`], except that integers saturate at the
/// dtype's range, as a float number's cast does.
pub fn int_literal_to_element_bytes(value: i64, dtype: DType) -> Vec<u8> {
    let value = i128::from(value);
    let bits = 8 * dtype.size() as u32;
    let clamped = if dtype.is_signed_int() {
        value.clamp(-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else if dtype.is_unsigned_int() {
        value.clamp(0, (1i128 << bits) - 1)
    } else {
        value
    };
    int_to_element_bytes(clamped, dtype)
}

/// Converts one element of `from` (its little-endian bytes) to `to`, rounding at most once from
/// the exact source value: floats through their float32 value (float16 and bfloat16 widen to it
/// exactly), bool and integers through [`int_to_element_bytes`].
pub fn convert_element_bytes(bytes: &[u8], from: DType, to: DType) -> Vec<u8> {
    match from {
        DType::F32 => f32_to_element_bytes(f32::read_le(bytes), to),
        DType::F16 => f32_to_element_bytes(f16::read_le(bytes).to_f32(), to),
        DType::BF16 => f32_to_element_bytes(bf16::read_le(bytes).to_f32(), to),
        DType::Bool => int_to_element_bytes(i128::from(bool::read_le(bytes)), to),
        DType::U8 => int_to_element_bytes(i128::from(u8::read_le(bytes)), to),
        DType::U16 => int_to_element_bytes(i128::from(u16::read_le(bytes)), to),
        DType::U32 => int_to_element_bytes(i128::from(u32::read_le(bytes)), to),
        DType::U64 => int_to_element_bytes(i128::from(u64::read_le(bytes)), to),
        DType::I8 => int_to_element_bytes(i128::from(i8::read_le(bytes)), to),
        DType::I16 => int_to_element_bytes(i128::from(i16::read_le(bytes)), to),
        DType::I32 => int_to_element_bytes(i128::from(i32::read_le(bytes)), to),
        DType::I64 => int_to_element_bytes(i128::from(i64::read_le(bytes)), to),
    }
}

/// Reads one element of `dtype` as `f64` (exact for every dtype except 64-bit ints beyond 2^53).
pub fn element_bytes_to_f64(bytes: &[u8], dtype: DType) -> f64 {
    match dtype {
        DType::Bool => bool::read_le(bytes) as u8 as f64,
        DType::U8 => u8::read_le(bytes) as f64,
        DType::U16 => u16::read_le(bytes) as f64,
        DType::U32 => u32::read_le(bytes) as f64,
        DType::U64 => u64::read_le(bytes) as f64,
        DType::I8 => i8::read_le(bytes) as f64,
        DType::I16 => i16::read_le(bytes) as f64,
        DType::I32 => i32::read_le(bytes) as f64,
        DType::I64 => i64::read_le(bytes) as f64,
        DType::F16 => f16::read_le(bytes).to_f64(),
        DType::BF16 => bf16::read_le(bytes).to_f64(),
        DType::F32 => f32::read_le(bytes) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float64"), None);
    }

    #[test]
    fn bfloat16_conversion_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bfloat16 values (1 and 1 + 2^-7): ties go to even (1).
        let tie_down = 1.0f64 + 2f64.powi(-8);
        assert_eq!(f64_to_element_bytes(tie_down, DType::BF16), bf16::from_f32(1.0).to_le_bytes());
        // 1 + 3·2^-8 lies between 1 + 2^-7 (odd mantissa) and 1 + 2^-6: ties go to the even one.
        let tie_up = 1.0f64 + 3.0 * 2f64.powi(-8);
        let expect = bf16::from_f32(1.0 + 2f32.powi(-6));
        assert_eq!(f64_to_element_bytes(tie_up, DType::BF16), expect.to_le_bytes());
        // Just above the tie rounds up.
        let above = 1.0f64 + 2f64.powi(-8) + 2f64.powi(-20);
        let expect = bf16::from_f32(1.0 + 2f32.powi(-7));
        assert_eq!(f64_to_element_bytes(above, DType::BF16), expect.to_le_bytes());
    }

    #[test]
    fn conversions_round_once_from_the_exact_value() {
        // 2^-40 above the float16 midpoint 1 + 2^-11 rounds up (half's f64 conversion drops it).
        let x = 1.0f64 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_element_bytes(x, DType::F16), 0x3c01u16.to_le_bytes());
        assert_eq!(f32_to_element_bytes(f32::from_bits(0x3eaa_8003), DType::BF16), 0x3eabu16.to_le_bytes());
        // 2^60 + 2^52 + 1: through f64 it would be the bfloat16 midpoint and round down.
        let v = (1i64 << 60) + (1 << 52) + 1;
        assert_eq!(convert_element_bytes(&v.to_le_bytes(), DType::I64, DType::BF16), 0x5d81u16.to_le_bytes());
        // 2^60 + 2^36 + 1: through f64 it would be the float32 midpoint and round down.
        let v = (1i64 << 60) + (1 << 36) + 1;
        let want = ((1i64 << 60) + (1 << 37)) as f32;
        assert_eq!(convert_element_bytes(&v.to_le_bytes(), DType::I64, DType::F32), want.to_le_bytes());
    }

    #[test]
    fn integer_numbers_saturate_and_integers_wrap() {
        assert_eq!(int_literal_to_element_bytes(300, DType::U8), vec![255]);
        assert_eq!(int_literal_to_element_bytes(-5, DType::U32), 0u32.to_le_bytes());
        assert_eq!(int_literal_to_element_bytes(i64::MAX, DType::I64), i64::MAX.to_le_bytes());
        assert_eq!(int_literal_to_element_bytes((1 << 53) + 1, DType::I64), ((1i64 << 53) + 1).to_le_bytes());
        assert_eq!(convert_element_bytes(&300i32.to_le_bytes(), DType::I32, DType::U8), vec![44]);
        assert_eq!(convert_element_bytes(&(-2.7f32).to_le_bytes(), DType::F32, DType::I8), vec![(-2i8) as u8]);
        assert_eq!(convert_element_bytes(&1e10f32.to_le_bytes(), DType::F32, DType::I32), i32::MAX.to_le_bytes());
    }

    #[test]
    fn init_value_casts_follow_numeric_rules() {
        assert_eq!(f64_to_element_bytes(-2.7, DType::I32), (-2i32).to_le_bytes());
        assert_eq!(f64_to_element_bytes(0.5, DType::Bool), vec![1]);
        assert_eq!(f64_to_element_bytes(0.0, DType::Bool), vec![0]);
        assert_eq!(element_bytes_to_f64(&f64_to_element_bytes(1.5, DType::F16), DType::F16), 1.5);
    }
}
