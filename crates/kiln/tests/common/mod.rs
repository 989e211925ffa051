//! Shared test fixtures: the tolerance table, relative L2 error, seeded random inputs and the
//! macro that instantiates one test body for every backend.
#![allow(dead_code)]

use kiln::{Array, DType, Device};

/// Relative L2 tolerance per dtype: ‖out − ref‖ / ‖ref‖ must not exceed it.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        _ => 0.0,
    }
}

/// ‖out − reference‖ / ‖reference‖; infinite when `out` holds a NaN or the lengths differ.
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

/// Asserts `out` matches `reference` within the tolerance of `dtype` (exact for non-floats).
#[track_caller]
pub fn assert_close(what: &str, out: &Array, reference: &[f64], dtype: DType) {
    let host = out.to_host().expect("download output");
    let got = host.to_f64_vec().expect("read output");
    let err = rel_l2(&got, reference);
    let tol = tolerance(dtype);
    assert!(
        err <= tol,
        "{what}: relative L2 error {err:e} exceeds {tol:e} for {dtype} (first values got {:?}, want {:?})",
        &got[..got.len().min(6)],
        &reference[..reference.len().min(6)]
    );
}

/// A small deterministic generator (SplitMix64) so failures reproduce from the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
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
    pub fn normals(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// A host array of `dtype` with standard-normal values (rounded to the dtype).
pub fn random_array(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_f64(dtype, shape, &rng.normals(n)).expect("random array")
}

/// The device for a backend name. The CPU backend must always be available (a missing emulator
/// fails the test). Another backend that is unavailable gives `None` (the test is skipped with a
/// message), unless `KILN_REQUIRE_BACKEND` names it, which turns unavailability into a failure.
pub fn device_or_skip(backend: &str) -> Option<Device> {
    let device: Device = backend.parse().expect("backend name");
    match kiln::backend::backend_for(device) {
        Ok(_) => Some(device),
        Err(e) => {
            if backend == "cpu" || kiln::config::required_backend().as_deref() == Some(backend) {
                panic!("KILN_REQUIRE_BACKEND={backend} but the backend is unavailable: {e}");
            }
            eprintln!("skipping on {backend}: {e}");
            None
        }
    }
}

/// Instantiates `fn $name(device: Device)` once per backend: `$name::cpu` always runs;
/// `$name::cuda` needs an NVIDIA GPU and is ignored unless run with `--include-ignored`
/// (then `KILN_REQUIRE_BACKEND=cuda` turns a missing GPU into a failure).
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    if let Some(device) = $crate::common::device_or_skip("cpu") {
                        super::$name(device);
                    }
                }
                #[test]
                #[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
                fn cuda() {
                    if let Some(device) = $crate::common::device_or_skip("cuda") {
                        super::$name(device);
                    }
                }
            }
        )*
    };
}
