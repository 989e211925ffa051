//! Fused residual add + RMSNorm: `h = x + residual`, `out = h * w / sqrt(mean(h^2) + eps)`,
//! returning both `out` and `h` (the new residual stream), as transformer blocks use it.
//!
//! One threadgroup per row; the sum of squares is reduced with `simd_sum` per simdgroup and
//! combined through threadgroup memory. `h` is recomputed from the inputs in the second pass,
//! so `out` is rounded to `T` once and does not inherit the rounding of the stored `h`.
//! Layout: `x`, `residual` (rows, D), `w` (D,) of f32/f16/bf16, `eps` a 0-d f32; outputs `out`
//! and `h` (rows, D) in the dtype of `x`. Accumulation in f32.
//! Reference: the formulas in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, check_shape, dim, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng,
    FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};
/// The f64 reference, shared with the library op.
pub use kiln::ops::residual_rms_norm::reference;

pub const ENTRY: Entry =
    Entry { name: "residual_rms_norm", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint n_threads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    threadgroup float partials[33];

    float sum_sq = 0.0f;
    for (uint i = tid; i < D; i += n_threads) {
        float h = static_cast<float>(x[row * D + i]) + static_cast<float>(residual[row * D + i]);
        h_out[row * D + i] = static_cast<T>(h);
        sum_sq += h * h;
    }
    sum_sq = simd_sum(sum_sq);
    if (lane == 0) {
        partials[sg] = sum_sq;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float p = lane < simdgroups_per_threadgroup ? partials[lane] : 0.0f;
        p = simd_sum(p);
        if (lane == 0) {
            partials[32] = p;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float scale = metal::rsqrt(partials[32] / float(D) + eps);
    for (uint i = tid; i < D; i += n_threads) {
        float h = static_cast<float>(x[row * D + i]) + static_cast<float>(residual[row * D + i]);
        out[row * D + i] = static_cast<T>(h * scale * static_cast<float>(w[i]));
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array, residual: &Array, w: &Array, eps: f32, threads: usize) -> Result<Prepared> {
    let op = "residual_rms_norm";
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, residual.dtype(), &[x.dtype()])?;
    check_dtype(op, w.dtype(), &[x.dtype()])?;
    let &[rows, d] = x.shape() else {
        return Err(Error::shape(op, format!("x must be 2-D (rows, D), got {:?}", x.shape())));
    };
    check_shape(op, "residual", residual, &[rows, d])?;
    check_shape(op, "w", w, &[d])?;
    if threads == 0 || threads > 1024 {
        return Err(Error::invalid(op, format!("threads per row must be in 1..=1024, got {threads}")));
    }
    let kernel = KERNEL.one(op, || {
        MetalKernel::new("gallery_residual_rms_norm", &["x", "residual", "w", "eps"], &["out", "h_out"], SOURCE)
    })?;
    let spec = LaunchSpec::new([dim(op, rows * threads)?, 1, 1], [threads as u32, 1, 1])
        .output(x.shape(), x.dtype())
        .output(x.shape(), x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into(), residual.into(), w.into(), eps.into()], spec))
}

/// Returns `(out, h)`: the normalised rows of `h = x + residual`, and `h` itself.
pub fn residual_rms_norm(x: &Array, residual: &Array, w: &Array, eps: f32, threads: usize) -> Result<(Array, Array)> {
    let mut outs = prepare(x, residual, w, eps, threads)?.run()?;
    let h = outs.pop();
    let out = outs.pop();
    match (out, h) {
        (Some(out), Some(h)) => Ok((out, h)),
        _ => Err(Error::invalid("residual_rms_norm", "the kernel returned fewer than two outputs")),
    }
}

/// One verified run on (rows, d) with `threads` per row.
pub fn check(device: Device, dtype: DType, rows: usize, d: usize, threads: usize, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = normal_input(&mut rng, device, dtype, &[rows, d], 1.0)?;
    let (r, rv) = normal_input(&mut rng, device, dtype, &[rows, d], 2.0)?;
    let (w, wv) = normal_input(&mut rng, device, dtype, &[d], 1.0)?;
    let eps = 1e-6f32;
    let (outs, time) = prepare(&x, &r, &w, eps, threads)?.poisoned().timed()?;
    let (out_ref, h_ref) = reference(&xv, &rv, &wv, d, eps as f64);
    let parts = vec![
        Part { name: "out", output: values(&outs[0])?, reference: out_ref },
        Part { name: "h", output: values(&outs[1])?, reference: h_ref },
    ];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 23, 700, 128, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_adds_then_normalises() {
        let (out, h) = super::reference(&[1.0, 2.0], &[2.0, 2.0], &[1.0, 2.0], 2, 0.0);
        assert_eq!(h, vec![3.0, 4.0]);
        let rms = ((9.0 + 16.0) / 2.0f64).sqrt();
        assert!((out[0] - 3.0 / rms).abs() < 1e-12 && (out[1] - 8.0 / rms).abs() < 1e-12);
    }
}
