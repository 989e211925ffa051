//! GELU, tanh approximation: `out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
//! (MSL has no `erf`, so real Metal kernels use this form; the reference is the same formula).
//!
//! Layout: input any shape of f32/f16/bf16, flattened; one thread per element, computed in f32
//! and rounded once to `T`; output the same shape and dtype.
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, host_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "gelu", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F16], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    float v = static_cast<float>(x[i]);
    float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
    out[i] = static_cast<T>(0.5f * v * (1.0f + metal::tanh(inner)));
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array) -> Result<Prepared> {
    check_dtype("gelu", x.dtype(), &FLOAT_DTYPES)?;
    let kernel = KERNEL.one("gelu", || MetalKernel::new("gallery_gelu", &["x"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim("gelu", x.size())?, 1, 1], [256, 1, 1])
        .output(x.shape(), x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into()], spec))
}

/// Tanh-approximated GELU elementwise.
pub fn gelu(x: &Array) -> Result<Array> {
    prepare(x)?.run_one()
}

pub fn reference(x: &[f64]) -> Vec<f64> {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    x.iter().map(|&v| 0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())).collect()
}

/// One verified run over `shape`.
pub fn check(device: Device, dtype: DType, shape: &[usize], seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = host_input(dtype, shape, &rng.normals(shape.iter().product(), 2.0))?;
    let (outs, time) = prepare(&x.to_device(device)?)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, &[7, 333], seed)
}

#[cfg(test)]
mod tests {
    /// The tanh form stays within 1e-3 of the exact GELU `x * Phi(x)`; Phi by midpoint rule.
    #[test]
    fn reference_approximates_exact_gelu() {
        for &v in &[-3.0f64, -1.0, -0.2, 0.0, 0.7, 2.5] {
            let (lo, n) = (-12.0, 200_000);
            let h = (v - lo) / n as f64;
            let phi: f64 = (0..n)
                .map(|i| {
                    let t = lo + (i as f64 + 0.5) * h;
                    (-t * t / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt() * h
                })
                .sum();
            assert!((super::reference(&[v])[0] - v * phi).abs() < 1e-3, "at {v}");
        }
    }
}
