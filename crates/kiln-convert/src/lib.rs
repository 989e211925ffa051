//! Correctly rounded conversions to IEEE binary16 (`float16`) and `bfloat16`, as bit patterns:
//! every conversion rounds once, to nearest with ties to even, from the exact source value —
//! float32 and float64 from their own bits, integers of up to 128 bits without a wider float in
//! between (an `i64` through `f64` would round twice past 2^53).
//!
//! The `half` crate's types hold the results, but not its f64 conversions: they drop the sticky
//! bits below the rounding position, so values just above a midpoint round down.
//!
//! NaN stays NaN with its sign and comes out quiet. float16 keeps the top 9 payload bits under
//! the quiet bit (NumPy's bits for every quiet NaN; a signalling NaN is quieted, as x86 F16C and
//! Arm do); bfloat16 is the quiet NaN `0x7fc0` with the sign (ml_dtypes' rule).
//!
//! Method: the value is `±mag · 2^exp` with an integer `mag`; `mag` is shifted right to the
//! format's last mantissa bit (the subnormal one below the normal range), rounding on the bit
//! shifted out first and the OR of the rest; exponent and mantissa are then added as one integer,
//! so a carry out of the mantissa lands in the exponent (and past the largest finite in infinity).

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

/// A 16-bit floating-point format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// IEEE binary16: 5 exponent bits, 10 mantissa bits.
    F16,
    /// bfloat16: 8 exponent bits, 7 mantissa bits (the upper half of a binary32).
    BF16,
}

impl Format {
    /// Stored mantissa bits.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Format::F16 => 10,
            Format::BF16 => 7,
        }
    }

    /// Exponent bias (also the largest finite exponent).
    pub const fn bias(self) -> i32 {
        match self {
            Format::F16 => 15,
            Format::BF16 => 127,
        }
    }

    /// The bits of +infinity.
    pub const fn infinity(self) -> u16 {
        match self {
            Format::F16 => 0x7c00,
            Format::BF16 => 0x7f80,
        }
    }

    /// The quiet NaN for a source NaN of sign `neg` whose payload, left-aligned in 64 bits with
    /// the quiet bit first, is `payload`.
    const fn nan(self, neg: bool, payload: u64) -> u16 {
        let sign = if neg { 0x8000 } else { 0 };
        match self {
            Format::F16 => sign | 0x7e00 | ((payload >> 54) as u16 & 0x1ff),
            Format::BF16 => sign | 0x7fc0,
        }
    }

    /// `x` rounded once to this format.
    #[inline]
    pub fn round_f32(self, x: f32) -> u16 {
        self.round_ieee(u64::from(x.to_bits()), 23, 8)
    }

    /// `x` rounded once to this format.
    #[inline]
    pub fn round_f64(self, x: f64) -> u16 {
        self.round_ieee(x.to_bits(), 52, 11)
    }

    /// The integer `v` rounded once to this format (every `i64` and `u64` fits `i128`).
    #[inline]
    pub fn round_int(self, v: i128) -> u16 {
        // Keep the top 64 bits, ORing what falls off into the lowest (it only acts as sticky bit).
        let mag = v.unsigned_abs();
        let drop = 64u32.saturating_sub(mag.leading_zeros());
        let low = mag & ((1u128 << drop) - 1) != 0;
        self.round(v < 0, (mag >> drop) as u64 | u64::from(low), drop as i32)
    }

    /// A binary interchange value of `man` mantissa and `exp` exponent bits.
    #[inline]
    fn round_ieee(self, bits: u64, man: u32, exp: u32) -> u16 {
        let neg = (bits >> (man + exp)) & 1 == 1;
        let field = ((bits >> man) & ((1 << exp) - 1)) as i32;
        let frac = bits & ((1 << man) - 1);
        let bias = (1 << (exp - 1)) - 1;
        if field == (1 << exp) - 1 {
            if frac == 0 {
                return self.infinity() | if neg { 0x8000 } else { 0 };
            }
            return self.nan(neg, frac << (64 - man));
        }
        let (mag, e) = if field == 0 { (frac, 1 - bias) } else { (frac | 1 << man, field - bias) };
        self.round(neg, mag, e - man as i32)
    }

    /// `±mag · 2^exp` rounded to nearest even.
    #[inline]
    fn round(self, neg: bool, mag: u64, exp: i32) -> u16 {
        let sign = if neg { 0x8000 } else { 0 };
        if mag == 0 {
            return sign;
        }
        let top = 63 - mag.leading_zeros() as i32;
        let e = top + exp; // the value lies in [2^e, 2^(e + 1))
        if e > self.bias() {
            return sign | self.infinity();
        }
        let m = self.mantissa_bits() as i32;
        let emin = 1 - self.bias();
        let last = e.max(emin) - m; // exponent of the result's last mantissa bit
        let shift = last - exp;
        let r = if shift <= 0 {
            mag << -shift // exact: at most m + 1 bits
        } else if shift > top + 1 {
            0 // below half the smallest step
        } else {
            let kept = mag.checked_shr(shift as u32).unwrap_or(0);
            let rest = mag & ((1u64 << (shift - 1)) << 1).wrapping_sub(1);
            let half = 1u64 << (shift - 1);
            kept + u64::from(rest > half || (rest == half && kept & 1 == 1))
        };
        let bits = (((e.max(emin) - emin) as u64) << m) + r;
        if bits >= u64::from(self.infinity()) {
            sign | self.infinity()
        } else {
            sign | bits as u16
        }
    }
}
