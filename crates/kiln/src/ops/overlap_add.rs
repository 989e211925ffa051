//! Overlap-add (the synthesis step of an inverse STFT):
//! `y[b, t] = Σ_f frames[b, f, t − f·hop]` over the frames `f` with `0 ≤ t − f·hop < frame_len`,
//! for `t < out_len = (n_frames − 1)·hop + frame_len`. Samples no frame covers (hop >
//! frame_len) are zero.
//!
//! Layout: `frames` (..., n_frames, frame_len) of f32/f16/bf16, any batch axes (a
//! non-contiguous input is copied to row-contiguous first); `hop` ≥ 1. Output (..., out_len)
//! row-contiguous in the dtype of `frames`; sums in f32, one rounding on store.
//!
//! Kernel `kiln_overlap_add`: gather form, one thread per output sample, summing the at most
//! ⌈frame_len / hop⌉ frames that cover it. No atomics and a fixed summation order (the result
//! is deterministic); consecutive threads read consecutive elements of each frame and write
//! consecutive samples, and every input element is read exactly once.
//!
//! Reference: the scatter form in f64 (each frame added at its offset) on the dtype-rounded
//! inputs. Tolerance: the dtype table.

use super::kernel_cache::KernelCache;
use super::plan::OpCall;
use super::util::{check_float, check_nonempty, grid_dim, index_i32};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};

const OP: &str = "overlap_add";

const SOURCE: &str = r#"
    uint gid = thread_position_in_grid.x;
    uint OL = uint(out_len);
    uint F = uint(n_frames);
    uint FL = uint(frame_len);
    uint H = uint(hop);
    uint b = gid / OL;
    uint t = gid % OL;
    uint f_lo = t >= FL ? (t - FL) / H + 1 : 0;
    uint f_hi = metal::min(t / H, F - 1);
    int64_t batch = int64_t(b) * F * FL;
    float acc = 0.0f;
    for (uint f = f_lo; f <= f_hi; ++f) {
        acc += static_cast<float>(frames[batch + int64_t(f) * FL + (t - f * H)]);
    }
    out[gid] = static_cast<T>(acc);
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

/// The output length for `n_frames` frames of `frame_len` samples `hop` apart.
pub fn output_len(n_frames: usize, frame_len: usize, hop: usize) -> usize {
    (n_frames - 1) * hop + frame_len
}

/// The validated call (see the module header).
pub fn overlap_add_call(frames: &Array, hop: usize) -> Result<OpCall> {
    check_float(OP, "frames", frames)?;
    check_nonempty(OP, "frames", frames, 2)?;
    if hop == 0 {
        return Err(Error::invalid(OP, "hop must be at least 1"));
    }
    let nd = frames.ndim();
    let (n_frames, frame_len) = (frames.shape()[nd - 2], frames.shape()[nd - 1]);
    let out_len = (n_frames - 1)
        .checked_mul(hop)
        .and_then(|v| v.checked_add(frame_len))
        .ok_or_else(|| Error::invalid(OP, "the output length overflows"))?;
    let batch = frames.size() / (n_frames * frame_len);
    let mut out_shape = frames.shape()[..nd - 2].to_vec();
    out_shape.push(out_len);
    let kernel = KERNEL.one(OP, || {
        MetalKernel::new("kiln_overlap_add", &["frames", "n_frames", "frame_len", "hop", "out_len"], &["out"], SOURCE)
    })?;
    let threads = batch.checked_mul(out_len).ok_or_else(|| Error::invalid(OP, "the output size overflows"))?;
    let spec = LaunchSpec::new([grid_dim(OP, threads)?, 1, 1], [256, 1, 1])
        .output(&out_shape, frames.dtype())
        .template("T", frames.dtype());
    let inputs = vec![
        frames.into(),
        index_i32(OP, "n_frames", n_frames)?.into(),
        index_i32(OP, "frame_len", frame_len)?.into(),
        index_i32(OP, "hop", hop)?.into(),
        index_i32(OP, "out_len", out_len)?.into(),
    ];
    Ok(OpCall::new(kernel, inputs, spec))
}

/// Overlap-adds the frames of `frames` (..., n_frames, frame_len) `hop` samples apart; the
/// result (..., out_len) lives on the device of `frames`.
pub fn overlap_add(frames: &Array, hop: usize) -> Result<Array> {
    overlap_add_call(frames, hop)?.run_one()
}

/// The scatter form in f64 over `batch` × `n_frames` frames of `frame_len` values.
pub fn reference(frames: &[f64], n_frames: usize, frame_len: usize, hop: usize) -> Vec<f64> {
    let out_len = output_len(n_frames, frame_len, hop);
    let batch = frames.len() / (n_frames * frame_len);
    let mut out = vec![0.0; batch * out_len];
    for (b, signal) in out.chunks_mut(out_len).enumerate() {
        for f in 0..n_frames {
            let frame = &frames[(b * n_frames + f) * frame_len..][..frame_len];
            for (o, v) in signal[f * hop..][..frame_len].iter_mut().zip(frame) {
                *o += v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_adds_overlaps_and_leaves_gaps_zero() {
        let out = super::reference(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0], 2, 3, 2);
        assert_eq!(out, vec![1.0, 2.0, 13.0, 20.0, 30.0]);
        let gaps = super::reference(&[1.0, 2.0, 3.0, 4.0], 2, 2, 3);
        assert_eq!(gaps, vec![1.0, 2.0, 0.0, 3.0, 4.0]);
    }
}
