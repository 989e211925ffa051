//! The reference: the representable value nearest to x by exact distance (f64 or integer
//! arithmetic, not bit manipulation), ties to the even mantissa, then encoded from its value.

#![allow(dead_code)]

use kiln_convert::Format;

/// Format parameters: mantissa bits, smallest normal exponent, largest finite exponent.
fn params(f: Format) -> (i32, i32, i32) {
    match f {
        Format::F16 => (10, -14, 15),
        Format::BF16 => (7, -126, 127),
    }
}

/// 2^e for a normal f64 exponent (exact, without a libm call).
fn pow2(e: i32) -> f64 {
    assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The exponent of |x|'s leading bit (x a finite nonzero f64).
fn exponent(x: f64) -> i32 {
    let a = x.abs();
    let field = ((a.to_bits() >> 52) & 0x7ff) as i32;
    if field == 0 {
        // f64 subnormal: scale up exactly first.
        return exponent(a * pow2(64)) - 64;
    }
    field - 1023
}

/// The bits of a value `v >= 0` that the format holds exactly (or its overflow threshold).
fn encode(f: Format, v: f64) -> u16 {
    let (m, emin, emax) = params(f);
    let inf = f.infinity();
    if v == 0.0 {
        return 0;
    }
    if v >= pow2(emax + 1) {
        return inf;
    }
    let e = exponent(v);
    if e < emin {
        let units = v * pow2(m - emin);
        assert_eq!(units.fract(), 0.0, "{v:e} is not a subnormal of {f:?}");
        return units as u16;
    }
    let units = v * pow2(m - e);
    assert_eq!(units.fract(), 0.0, "{v:e} is not a value of {f:?}");
    (((e - emin + 1) as u16) << m) | (units as u16 - (1 << m))
}

/// Nearest of the two neighbours `lo = k·q` and `lo + q` of `a`, where `d_lo = a - lo` and
/// `d_hi = lo + q - a` are exact; ties take the even `k`.
fn pick(k_even: bool, d_lo: f64, d_hi: f64) -> bool {
    d_hi < d_lo || (d_hi == d_lo && !k_even)
}

/// `x` rounded to `f` (finite and infinite x; NaN maps to the rule in the crate docs).
pub fn from_f64(f: Format, x: f64) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_nan() {
        let payload = x.to_bits() << 12;
        return match f {
            Format::F16 => sign | 0x7e00 | (payload >> 54) as u16 & 0x1ff,
            Format::BF16 => sign | 0x7fc0,
        };
    }
    let a = x.abs();
    if a.is_infinite() {
        return sign | f.infinity();
    }
    if a == 0.0 {
        return sign;
    }
    let (m, emin, emax) = params(f);
    // The step between neighbours at a's binade (the subnormal step below the normal range).
    let qe = exponent(a).max(emin) - m;
    let q = pow2(qe);
    let k = (a * pow2(-qe)).floor();
    let lo = k * q;
    let hi = lo + q;
    let up = pick(k % 2.0 == 0.0, a - lo, hi - a);
    let v = if up { hi } else { lo };
    // Past the largest finite value (emax, all mantissa ones) only infinity is left.
    let max = (2.0 - pow2(-m)) * pow2(emax);
    if v > max {
        return sign | f.infinity();
    }
    sign | encode(f, v)
}

/// `x` rounded to `f` (through its exact f64 value).
pub fn from_f32(f: Format, x: f32) -> u16 {
    if x.is_nan() {
        // The f32 payload left-aligned as an f64 payload, without relying on `as f64` for NaN.
        let bits = x.to_bits();
        let payload = u64::from(bits & 0x7f_ffff) << 29;
        let sign = u64::from(bits >> 31) << 63;
        return from_f64(f, f64::from_bits(sign | 0x7ff0_0000_0000_0000 | payload));
    }
    from_f64(f, f64::from(x))
}

/// The integer `v` rounded to `f` with integer arithmetic.
pub fn from_int(f: Format, v: i128) -> u16 {
    let sign: u16 = if v < 0 { 0x8000 } else { 0 };
    let a = v.unsigned_abs();
    if a < 1 << 53 {
        return sign | from_f64(f, a as f64);
    }
    let (m, _, emax) = params(f);
    let e = 127 - a.leading_zeros() as i32;
    if e > emax {
        return sign | f.infinity();
    }
    let q = 1u128 << (e - m);
    let k = a / q;
    let lo = k * q;
    let up = lo + q - a < a - lo || (lo + q - a == a - lo && k % 2 == 1);
    let k = if up { k + 1 } else { k };
    // k·q in [2^e, 2^(e + 1)]: exact in f64 (k has at most m + 2 bits).
    let v = k as f64 * pow2(e - m);
    let max = (2.0 - pow2(-m)) * pow2(emax);
    if v > max {
        return sign | f.infinity();
    }
    sign | encode(f, v)
}

/// The values of every non-negative finite pattern of `f`, in order (they increase with the
/// bits), decoded from the bit fields.
pub fn values(f: Format) -> Vec<f64> {
    let (m, emin, _) = params(f);
    (0..f.infinity())
        .map(|h| {
            let (field, frac) = (i32::from(h >> m), f64::from(h & ((1 << m) - 1)));
            if field == 0 {
                frac * pow2(emin - m)
            } else {
                (pow2(m) + frac) * pow2(field - 1 + emin - m)
            }
        })
        .collect()
}

/// Rounds an increasing run of non-negative values by walking the midpoints between
/// neighbouring representable values: a value rounds up past a midpoint when it lies above it,
/// or on it with an odd lower neighbour.
pub struct Sweep {
    mids: Vec<f64>,
    next: usize,
}

impl Sweep {
    /// A walk starting below `start` (any non-negative value).
    pub fn new(f: Format, start: f64) -> Sweep {
        let (_, _, emax) = params(f);
        let mut vals = values(f);
        vals.push(pow2(emax + 1)); // where infinity would be with one more exponent
        let mids: Vec<f64> = vals.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
        let next = mids.partition_point(|&mid| mid < start).saturating_sub(1);
        Sweep { mids, next }
    }

    /// The bits of `x`, which is at least every value given before.
    pub fn round(&mut self, x: f64) -> u16 {
        while self.next < self.mids.len() {
            let mid = self.mids[self.next];
            if x > mid || (x == mid && self.next % 2 == 1) {
                self.next += 1;
            } else {
                break;
            }
        }
        self.next as u16
    }
}
