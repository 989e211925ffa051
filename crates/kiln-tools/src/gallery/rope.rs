//! Rotary position embedding, split-half form (GPT-NeoX / MLX `traditional=False`):
//! for position `p = offset + l` and pair `i < D/2`, with `theta = p * base^(-2i/D)`,
//! `out[i] = x[i] cos(theta) - x[i + D/2] sin(theta)` and
//! `out[i + D/2] = x[i + D/2] cos(theta) + x[i] sin(theta)`; base 10000.
//!
//! One threadgroup per (l, h) row; its threads stride over the D/2 pairs. The angle is formed
//! in f32, as real kernels do, so positions are kept to a few dozen in the checks (the f32
//! angle error grows with the position).
//! Layout: `x` (L, H, D) of f32/f16/bf16 with D even, `offset` a 0-d int32; output (L, H, D)
//! in the dtype of `x`.
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "rope", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const BASE: f64 = 10000.0;

const SOURCE: &str = r#"
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint H = x_shape[1];
    uint D = x_shape[2];
    uint half_d = D / 2;
    float pos = static_cast<float>(offset + static_cast<int>(row / H));
    for (uint i = tid; i < half_d; i += threads_per_threadgroup.x) {
        float freq = metal::pow(10000.0f, -static_cast<float>(2 * i) / static_cast<float>(D));
        float theta = pos * freq;
        float c = metal::cos(theta);
        float s = metal::sin(theta);
        float x0 = static_cast<float>(x[row * D + i]);
        float x1 = static_cast<float>(x[row * D + i + half_d]);
        out[row * D + i] = static_cast<T>(x0 * c - x1 * s);
        out[row * D + i + half_d] = static_cast<T>(x1 * c + x0 * s);
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array, offset: i32, threads: usize) -> Result<Prepared> {
    let op = "rope";
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    let &[l, h, d] = x.shape() else {
        return Err(Error::shape(op, format!("x must be 3-D (L, H, D), got {:?}", x.shape())));
    };
    if d % 2 != 0 {
        return Err(Error::shape(op, format!("the last axis must be even, got {d}")));
    }
    if threads == 0 || threads > 1024 {
        return Err(Error::invalid(op, format!("threads per row must be in 1..=1024, got {threads}")));
    }
    let kernel = KERNEL.one(op, || MetalKernel::new("gallery_rope", &["x", "offset"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim(op, l * h * threads)?, 1, 1], [threads as u32, 1, 1])
        .output(x.shape(), x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into(), offset.into()], spec))
}

/// Rotates `x` (L, H, D) for positions `offset..offset + L`.
pub fn rope(x: &Array, offset: i32, threads: usize) -> Result<Array> {
    prepare(x, offset, threads)?.run_one()
}

pub fn reference(x: &[f64], h: usize, d: usize, offset: i32) -> Vec<f64> {
    let half = d / 2;
    let mut out = vec![0.0; x.len()];
    for (row, (xr, or)) in x.chunks(d).zip(out.chunks_mut(d)).enumerate() {
        let pos = offset as f64 + (row / h) as f64;
        for i in 0..half {
            let theta = pos * BASE.powf(-2.0 * i as f64 / d as f64);
            let (s, c) = theta.sin_cos();
            or[i] = xr[i] * c - xr[i + half] * s;
            or[i + half] = xr[i + half] * c + xr[i] * s;
        }
    }
    out
}

/// One verified run on (l, h, d) with `threads` per row.
#[allow(clippy::too_many_arguments)]
pub fn check(
    device: Device,
    dtype: DType,
    l: usize,
    h: usize,
    d: usize,
    offset: i32,
    threads: usize,
    seed: u64,
) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (x, xv) = normal_input(&mut rng, device, dtype, &[l, h, d], 1.0)?;
    let (outs, time) = prepare(&x, offset, threads)?.poisoned().timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&xv, h, d, offset) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 13, 5, 96, 7, 32, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_preserves_pair_norms_and_is_identity_at_position_zero() {
        let x = [0.3, -1.2, 2.0, 0.5, 1.0, 1.5, -0.7, 0.2];
        let same = super::reference(&x, 2, 4, 0);
        assert!(same.iter().zip(&x[..4]).all(|(a, b)| (a - b).abs() < 1e-15));
        let out = super::reference(&x, 1, 4, 3);
        for (row_in, row_out) in x.chunks(4).zip(out.chunks(4)) {
            for i in 0..2 {
                let n_in = row_in[i].hypot(row_in[i + 2]);
                let n_out = row_out[i].hypot(row_out[i + 2]);
                assert!((n_in - n_out).abs() < 1e-12);
            }
        }
        // Pair 0 turns by exactly the position (frequency 1).
        let theta = 3.0f64;
        assert!((out[0] - (x[0] * theta.cos() - x[2] * theta.sin())).abs() < 1e-12);
    }
}
