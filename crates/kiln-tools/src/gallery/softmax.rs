//! Row softmax, numerically stable: `out[r, i] = exp(x[r, i] - max_r) / sum_j exp(x[r, j] - max_r)`.
//!
//! One threadgroup per row, three passes: the row max (`simd_max`, then across simdgroups
//! through threadgroup memory), the sum of exponentials (`simd_sum`, likewise), then the
//! normalised store. The max and the sum use separate threadgroup slots, so the second
//! reduction cannot overwrite the max while another simdgroup still reads it; the last pass
//! recomputes the exponential instead of re-reading the rounded output.
//! Layout: `x` (rows, D) of f32/f16/bf16; output (rows, D) in its dtype; f32 accumulation.
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};
/// The f64 reference, shared with the library op.
pub use kiln::ops::softmax::reference;

pub const ENTRY: Entry =
    Entry { name: "softmax", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint n_sg = simdgroups_per_threadgroup;
    uint n_threads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    const device T* xr = x + row * D;
    threadgroup float max_parts[33];
    threadgroup float sum_parts[33];

    float m = -INFINITY;
    for (uint i = tid; i < D; i += n_threads) {
        m = metal::max(m, static_cast<float>(xr[i]));
    }
    m = simd_max(m);
    if (lane == 0) {
        max_parts[sg] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float p = simd_max(lane < n_sg ? max_parts[lane] : -INFINITY);
        if (lane == 0) {
            max_parts[32] = p;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float row_max = max_parts[32];

    float s = 0.0f;
    for (uint i = tid; i < D; i += n_threads) {
        s += metal::exp(static_cast<float>(xr[i]) - row_max);
    }
    s = simd_sum(s);
    if (lane == 0) {
        sum_parts[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float p = simd_sum(lane < n_sg ? sum_parts[lane] : 0.0f);
        if (lane == 0) {
            sum_parts[32] = p;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float inv_sum = 1.0f / sum_parts[32];

    for (uint i = tid; i < D; i += n_threads) {
        out[row * D + i] = static_cast<T>(metal::exp(static_cast<float>(xr[i]) - row_max) * inv_sum);
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array, threads: usize) -> Result<Prepared> {
    let op = "softmax";
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    let &[rows, _] = x.shape() else {
        return Err(Error::shape(op, format!("x must be 2-D (rows, D), got {:?}", x.shape())));
    };
    if threads == 0 || threads > 1024 {
        return Err(Error::invalid(op, format!("threads per row must be in 1..=1024, got {threads}")));
    }
    let kernel = KERNEL.one(op, || MetalKernel::new("gallery_softmax", &["x"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim(op, rows * threads)?, 1, 1], [threads as u32, 1, 1])
        .output(x.shape(), x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into()], spec))
}

/// Softmax of each row of `x` (rows, D), one threadgroup of `threads` per row.
pub fn softmax(x: &Array, threads: usize) -> Result<Array> {
    prepare(x, threads)?.run_one()
}

/// One verified run on (rows, d) with `threads` per row; inputs have a spread of 4 so the
/// max subtraction matters.
pub fn check(device: Device, dtype: DType, rows: usize, d: usize, threads: usize, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = normal_input(&mut rng, device, dtype, &[rows, d], 4.0)?;
    let (outs, time) = prepare(&x, threads)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv, d) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 17, 1000, 96, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_rows_sum_to_one_and_ignore_shifts() {
        let x = [1.0, 2.0, 3.0, 1001.0, 1002.0, 1003.0];
        let out = super::reference(&x, 3);
        assert!((out[..3].iter().sum::<f64>() - 1.0).abs() < 1e-12);
        for i in 0..3 {
            assert!((out[i] - out[i + 3]).abs() < 1e-12);
        }
        let naive = 1f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp());
        assert!((out[0] - naive).abs() < 1e-12);
    }
}
