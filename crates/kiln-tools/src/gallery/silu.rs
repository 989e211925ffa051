//! SiLU (swish) activation: `out = x * sigmoid(x) = x / (1 + exp(-x))`.
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
    Entry { name: "silu", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::BF16], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    float v = static_cast<float>(x[i]);
    out[i] = static_cast<T>(v / (1.0f + metal::exp(-v)));
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array) -> Result<Prepared> {
    check_dtype("silu", x.dtype(), &FLOAT_DTYPES)?;
    let kernel = KERNEL.one("silu", || MetalKernel::new("gallery_silu", &["x"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim("silu", x.size())?, 1, 1], [256, 1, 1])
        .output(x.shape(), x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into()], spec))
}

/// `x * sigmoid(x)` elementwise.
pub fn silu(x: &Array) -> Result<Array> {
    prepare(x)?.run_one()
}

pub fn reference(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| v / (1.0 + (-v).exp())).collect()
}

/// One verified run over `shape`.
pub fn check(device: Device, dtype: DType, shape: &[usize], seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = host_input(dtype, shape, &rng.normals(shape.iter().product(), 3.0))?;
    let (outs, time) = prepare(&x.to_device(device)?)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, &[3, 1001], seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_matches_sigmoid_form() {
        for &v in &[-7.5, -1.0, 0.0, 0.3, 4.0] {
            let sigmoid = 1.0 / (1.0 + f64::exp(-v));
            assert!((super::reference(&[v])[0] - v * sigmoid).abs() < 1e-15);
        }
    }
}
