//! How kiln decides that a result is right: the tolerance table (relative L2 error per dtype),
//! the error measure itself, and a seeded generator for fresh, reproducible inputs. Shared by
//! the gallery, the ops' tests, the benchmarks and the test suite.

use crate::dtype::DType;

/// Relative L2 tolerance per dtype: ‖out − ref‖ / ‖ref‖ must not exceed it. Integer and bool
/// results must be exact.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        _ => 0.0,
    }
}

/// ‖out − reference‖ / ‖reference‖; infinite when `out` holds a NaN or the lengths differ, so a
/// NaN never passes.
pub fn rel_l2(out: &[f64], reference: &[f64]) -> f64 {
    if out.len() != reference.len() || out.iter().any(|v| v.is_nan()) {
        return f64::INFINITY;
    }
    let num: f64 = out.iter().zip(reference).map(|(a, b)| (a - b) * (a - b)).sum();
    let den: f64 = reference.iter().map(|b| b * b).sum();
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}

/// A small deterministic generator (SplitMix64), so every input reproduces from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform(f64::MIN_POSITIVE, 1.0);
        let u2 = self.uniform(0.0, 1.0);
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// `n` normal values scaled by `scale`.
    pub fn normals(&mut self, n: usize, scale: f64) -> Vec<f64> {
        (0..n).map(|_| scale * self.normal()).collect()
    }

    /// `n` uniform values in [lo, hi).
    pub fn uniforms(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_never_passes_and_exact_is_zero() {
        assert_eq!(rel_l2(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(rel_l2(&[f64::NAN, 2.0], &[1.0, 2.0]).is_infinite());
        assert!(rel_l2(&[1.0], &[1.0, 2.0]).is_infinite());
        assert!((rel_l2(&[1.0, 2.0], &[1.0, 2.2]) - 0.2 / (1.0f64 + 4.84).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn generator_reproduces_from_its_seed() {
        let a: Vec<f64> = Rng::new(3).normals(8, 1.0);
        assert_eq!(a, Rng::new(3).normals(8, 1.0));
        assert_ne!(a, Rng::new(4).normals(8, 1.0));
        assert!(a.iter().all(|v| v.is_finite() && *v != 0.0));
    }
}
