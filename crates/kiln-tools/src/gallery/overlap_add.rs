//! Overlap-add (the inverse-STFT synthesis step): `out[b, k*hop + i] += frames[b, k, i]` for
//! every frame `k` and sample `i < frame_len`; `out_len = (n_frames - 1) * hop + frame_len`.
//!
//! Runtime sizes come in a small int32 parameter buffer `[hop, frame_len, n_frames, out_len]`
//! (under 8 elements, so it is bound in `constant` space), as kernels do to avoid recompiling
//! per size. A 2-D grid of (out_len, B) threads, each gathering the frames that cover its
//! sample, so no atomics are needed; 2-D threadgroups leave partial edge groups in x and y.
//! Layout: `frames` (B, n_frames, frame_len) of f32/f16/bf16; output (B, out_len) in its dtype.
//! Reference: f64 scatter of the dtype-rounded frames. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, host_input, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng,
    FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "overlap_add", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    int t = static_cast<int>(thread_position_in_grid.x);
    int b = static_cast<int>(thread_position_in_grid.y);
    int hop = params[0];
    int frame_len = params[1];
    int n_frames = params[2];
    int out_len = params[3];
    if (t >= out_len) {
        return;
    }
    // Frames k with k*hop <= t < k*hop + frame_len.
    int k_first = t < frame_len ? 0 : (t - frame_len) / hop + 1;
    int k_last = metal::min(t / hop, n_frames - 1);
    float acc = 0.0f;
    for (int k = k_first; k <= k_last; ++k) {
        acc += static_cast<float>(frames[(b * n_frames + k) * frame_len + (t - k * hop)]);
    }
    out[b * out_len + t] = static_cast<T>(acc);
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(frames: &Array, hop: usize) -> Result<Prepared> {
    let op = "overlap_add";
    check_dtype(op, frames.dtype(), &FLOAT_DTYPES)?;
    let &[b, n_frames, frame_len] = frames.shape() else {
        return Err(Error::shape(op, format!("frames must be 3-D (B, n_frames, frame_len), got {:?}", frames.shape())));
    };
    if hop == 0 || n_frames == 0 || frame_len == 0 {
        return Err(Error::invalid(op, "hop, n_frames and frame_len must be positive"));
    }
    let out_len = (n_frames - 1) * hop + frame_len;
    let p: Vec<f64> = [hop, frame_len, n_frames, out_len].iter().map(|&v| v as f64).collect();
    let (params, _) = host_input(DType::I32, &[4], &p)?;
    let kernel = KERNEL.one(op, || MetalKernel::new("gallery_overlap_add", &["frames", "params"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim(op, out_len)?, dim(op, b)?, 1], [64, 2, 1])
        .output(&[b, out_len], frames.dtype())
        .template("T", frames.dtype());
    Ok(Prepared::new(kernel, vec![frames.into(), params.to_device(frames.device())?.into()], spec))
}

/// Overlap-adds `frames` (B, n_frames, frame_len) at stride `hop`; returns (B, out_len).
pub fn overlap_add(frames: &Array, hop: usize) -> Result<Array> {
    prepare(frames, hop)?.run_one()
}

pub fn reference(frames: &[f64], b: usize, n_frames: usize, frame_len: usize, hop: usize) -> Vec<f64> {
    let out_len = (n_frames - 1) * hop + frame_len;
    let mut out = vec![0.0; b * out_len];
    for bi in 0..b {
        for k in 0..n_frames {
            for i in 0..frame_len {
                out[bi * out_len + k * hop + i] += frames[(bi * n_frames + k) * frame_len + i];
            }
        }
    }
    out
}

/// One verified run on (b, n_frames, frame_len) frames at stride `hop`.
pub fn check(
    device: Device,
    dtype: DType,
    b: usize,
    n_frames: usize,
    frame_len: usize,
    hop: usize,
    seed: u64,
) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (frames, fv) = normal_input(&mut rng, device, dtype, &[b, n_frames, frame_len], 1.0)?;
    let (outs, time) = prepare(&frames, hop)?.poisoned().timed()?;
    let parts =
        vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&fv, b, n_frames, frame_len, hop) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 3, 40, 100, 37, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_sums_overlaps() {
        // Two frames of 3 at hop 2 overlap in one sample.
        let out = super::reference(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0], 1, 2, 3, 2);
        assert_eq!(out, vec![1.0, 2.0, 13.0, 20.0, 30.0]);
    }
}
