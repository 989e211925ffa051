//! RMSNorm over the last axis: `out[r, i] = x[r, i] * w[i] / sqrt(mean_i(x[r, i]^2) + eps)`.
//!
//! Two kernels with the same maths:
//! - basic: one simdgroup of 32 lanes per row (several rows per threadgroup of 128), the sum of
//!   squares reduced with `simd_sum`; rows that do not fill the last threadgroup leave it partial.
//! - multi-simdgroup: one threadgroup of any size per row, `simd_sum` per simdgroup, then the
//!   simdgroup partials combined through threadgroup memory between two barriers. Sizes that are
//!   not a multiple of 32 leave the last simdgroup partial.
//!
//! Layout: `x` (rows, D) and `w` (D,) of f32/f16/bf16, `eps` a 0-d f32; output (rows, D) in the
//! dtype of `x`. Accumulation in f32, one rounding to `T` on store.
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

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
pub use kiln::ops::rms_norm::reference;

pub const BASIC_ENTRY: Entry = Entry {
    name: "rms_norm",
    dtypes: &FLOAT_DTYPES,
    demo_dtypes: &[DType::F32, DType::BF16],
    demo: Demo::Kernel(demo_basic),
};
pub const MULTI_SIMDGROUP_ENTRY: Entry = Entry {
    name: "rms_norm_multi_sg",
    dtypes: &FLOAT_DTYPES,
    demo_dtypes: &[DType::F16],
    demo: Demo::Kernel(demo_multi),
};

const BASIC_SOURCE: &str = r#"
    uint row = thread_position_in_grid.x / 32;
    uint lane = thread_index_in_simdgroup;
    uint D = x_shape[1];
    float sum_sq = 0.0f;
    for (uint i = lane; i < D; i += 32) {
        float v = static_cast<float>(x[row * D + i]);
        sum_sq += v * v;
    }
    sum_sq = simd_sum(sum_sq);
    float scale = metal::rsqrt(sum_sq / float(D) + eps);
    for (uint i = lane; i < D; i += 32) {
        float v = static_cast<float>(x[row * D + i]);
        out[row * D + i] = static_cast<T>(v * scale * static_cast<float>(w[i]));
    }
"#;

// Slot 32 of `partials` holds the row total, so no thread overwrites a partial another
// simdgroup may still be reading.
const MULTI_SOURCE: &str = r#"
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint n_threads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    threadgroup float partials[33];

    float sum_sq = 0.0f;
    for (uint i = tid; i < D; i += n_threads) {
        float v = static_cast<float>(x[row * D + i]);
        sum_sq += v * v;
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
        float v = static_cast<float>(x[row * D + i]);
        out[row * D + i] = static_cast<T>(v * scale * static_cast<float>(w[i]));
    }
"#;

static BASIC: KernelCache<MetalKernel> = KernelCache::new();
static MULTI: KernelCache<MetalKernel> = KernelCache::new();

/// Rows per threadgroup of the basic kernel (one simdgroup each).
const BASIC_ROWS_PER_GROUP: u32 = 4;

fn prepare(x: &Array, w: &Array, eps: f32, threads: Option<usize>) -> Result<Prepared> {
    let op = if threads.is_some() { "rms_norm_multi_sg" } else { "rms_norm" };
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, w.dtype(), &[x.dtype()])?;
    let &[rows, d] = x.shape() else {
        return Err(Error::shape(op, format!("x must be 2-D (rows, D), got {:?}", x.shape())));
    };
    check_shape(op, "w", w, &[d])?;
    let (kernel, grid, group) = match threads {
        None => {
            let k =
                BASIC.one(op, || MetalKernel::new("gallery_rms_norm", &["x", "w", "eps"], &["out"], BASIC_SOURCE))?;
            (k, dim(op, rows * 32)?, 32 * BASIC_ROWS_PER_GROUP)
        }
        Some(t) => {
            if t == 0 || t > 1024 {
                return Err(Error::invalid(op, format!("threads per row must be in 1..=1024, got {t}")));
            }
            let k = MULTI.one(op, || {
                MetalKernel::new("gallery_rms_norm_multi_sg", &["x", "w", "eps"], &["out"], MULTI_SOURCE)
            })?;
            (k, dim(op, rows * t)?, t as u32)
        }
    };
    let spec = LaunchSpec::new([grid, 1, 1], [group, 1, 1]).output(x.shape(), x.dtype()).template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into(), w.into(), eps.into()], spec))
}

/// RMSNorm of each row of `x` (rows, D), one simdgroup per row.
pub fn rms_norm(x: &Array, w: &Array, eps: f32) -> Result<Array> {
    prepare(x, w, eps, None)?.run_one()
}

/// RMSNorm of each row of `x` (rows, D), one threadgroup of `threads` per row.
pub fn rms_norm_multi_simdgroup(x: &Array, w: &Array, eps: f32, threads: usize) -> Result<Array> {
    prepare(x, w, eps, Some(threads))?.run_one()
}

/// One verified run on (rows, d); `threads` picks the multi-simdgroup kernel.
pub fn check(
    device: Device,
    dtype: DType,
    rows: usize,
    d: usize,
    threads: Option<usize>,
    seed: u64,
) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = normal_input(&mut rng, device, dtype, &[rows, d], 2.0)?;
    let (w, wv) = normal_input(&mut rng, device, dtype, &[d], 1.0)?;
    let eps = 1e-5f32;
    let (outs, time) = prepare(&x, &w, eps, threads)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv, &wv, d, eps as f64) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo_basic(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 37, 300, None, seed)
}

fn demo_multi(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 19, 1000, Some(208), seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_rows_have_unit_rms_before_weighting() {
        let x = [3.0, -4.0, 1.0, 2.0, 2.0, -1.0];
        let out = super::reference(&x, &[1.0, 1.0, 1.0], 3, 0.0);
        for row in out.chunks(3) {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / 3.0;
            assert!((ms - 1.0).abs() < 1e-12);
        }
        let naive = 3.0 / ((9.0 + 16.0 + 1.0) / 3.0f64).sqrt();
        assert!((out[0] - naive).abs() < 1e-12);
    }
}
