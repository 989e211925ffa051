//! Gated delta net `chunk_scaled_dot_kkt`: the gated, beta-scaled key Gram matrix of each chunk.
//!
//! For batch b, value head h (reading key head `h / (H / Hg)`) and chunk `[t0, t0 + 64)`:
//! ```text
//! kb[i, :] = round_to_dtype(f32(k[i, :]) * beta[i])          (one f32 product, one RNE rounding)
//! A[b, t0+i, h, j] = j < i ? exp(g[i] - g[j]) * sum_c kb[i, c] * k[j, c] : 0      (0 <= j < 64)
//! ```
//! Rows past the sequence end (a partial last chunk) do not exist; columns past it are zero.
//! `g[i] - g[j]` is formed with its rounding error (TwoSum) so cumulative gates of large
//! magnitude do not lose accuracy in the exponent.
//! Layout: `k` (B, T, Hg, K) of bf16 (or f16, f32), any K; `beta`, `g` (B, T, H) f32, H a
//! multiple of Hg; output `A` (B, T, H, 64) f32.
//!
//! Two kernels, picked by a deterministic rule ([`path`]):
//! - [`Path::CudaMma`] ([`cuda`]): tensor-core `mma.sync` through `CudaKernel`, when the device
//!   is CUDA, k is bfloat16 or float16, K is a multiple of 16 in [16, 256], H / Hg <= 8 and k's
//!   first element is 16-byte aligned (a row-contiguous view at an offset that is a multiple
//!   of 8 elements, or a strided view, which is copied). One block per (chunk, key head, batch)
//!   reads the key tile once for all H / Hg value heads that share it.
//! - [`Path::Portable`]: the Metal kernel below, for everything else (CPU, f32 keys, other K).
//!   One threadgroup of 256 threads per (chunk, h, b) computes the 64 x 64 block in 4 x 4
//!   register tiles (upper tiles skipped), K staged through threadgroup memory 32 columns at a
//!   time as f32. It is the reference implementation of the op.
//!
//! Both form `kb` with one f32 product and one RNE rounding, and the products of two bf16/f16
//! values are exact in f32, so they differ from each other and from the reference only in the
//! order of the f32 sums.
//! Reference: [`reference`](fn@reference), f64 sums of the same rounded `kb`, f64 gates.
//! Tolerance: 1e-5 relative L2 for every input dtype (the output is f32 and the rounding of `kb`
//! is reproduced).

use super::kernel_cache::KernelCache;
use super::plan::{OpCall, OpPlan};

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};

pub mod cuda;

const OP: &str = "gdn_chunk_scaled_dot_kkt";

/// Tokens per chunk (A's last axis).
pub const CHUNK: usize = 64;
const THREADS: usize = 256;

const SOURCE: &str = r#"
    constexpr int BT = 64;
    constexpr int BK = 32;
    constexpr int LD = BK + 1;
    constexpr int TILE = BT * LD;
    threadgroup float kb_s[TILE];
    threadgroup float k_s[TILE];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int chunk = static_cast<int>(threadgroup_position_in_grid.x);
    int h = static_cast<int>(threadgroup_position_in_grid.y);
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int seq = k_shape[1];
    int HG = k_shape[2];
    int K = k_shape[3];
    int H = beta_shape[2];
    int t0 = chunk * BT;
    int valid = metal::min(BT, seq - t0);
    int hk = h / (H / HG);
    int ty = tid / 16;
    int tx = tid % 16;
    bool lower = ty >= tx;

    float acc[4][4];
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int e = tid; e < BT * BK; e += 256) {
            int r = e / BK;
            int c = e % BK;
            float kv = 0.0f;
            float kbv = 0.0f;
            if (r < valid && k0 + c < K) {
                int t = b * seq + t0 + r;
                kv = static_cast<float>(k[(t * HG + hk) * K + k0 + c]);
                float prod = kv * beta[t * H + h];
                kbv = static_cast<float>(static_cast<T>(prod));
            }
            k_s[r * LD + c] = kv;
            kb_s[r * LD + c] = kbv;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lower) {
            for (int c = 0; c < BK; ++c) {
                float a[4];
                float bb[4];
                for (int i = 0; i < 4; ++i) {
                    a[i] = kb_s[(ty * 4 + i) * LD + c];
                    bb[i] = k_s[(tx * 4 + i) * LD + c];
                }
                for (int i = 0; i < 4; ++i) {
                    for (int j = 0; j < 4; ++j) {
                        acc[i][j] += a[i] * bb[j];
                    }
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    for (int i = 0; i < 4; ++i) {
        int row = ty * 4 + i;
        if (row >= valid) {
            continue;
        }
        int t = b * seq + t0 + row;
        float gi = g[t * H + h];
        for (int j = 0; j < 4; ++j) {
            int col = tx * 4 + j;
            float v = 0.0f;
            if (col < row) {
                float mgj = -g[(t - row + col) * H + h];
                // TwoSum: d + err == gi - gj exactly.
                float d = gi + mgj;
                float bv = d - gi;
                float err = (gi - (d - bv)) + (mgj - bv);
                v = acc[i][j] * (metal::exp(d) * (1.0f + err));
            }
            A[t * H * BT + h * BT + col] = v;
        }
    }
"#;

fn kernel() -> Result<&'static MetalKernel> {
    static KERNEL: KernelCache<MetalKernel> = KernelCache::new();
    KERNEL.one(OP, || MetalKernel::new("kiln_gdn_kkt", &["k", "beta", "g"], &["A"], SOURCE))
}

/// The validated call: kernel, launch and the arrays it binds.
fn prepare(k: &Array, beta: &Array, g: &Array, chunk: usize) -> Result<LaunchSpec> {
    if chunk != CHUNK {
        return Err(Error::invalid(OP, format!("chunk must be {CHUNK}, got {chunk}")));
    }
    if !matches!(k.dtype(), DType::BF16 | DType::F16 | DType::F32) {
        return Err(Error::dtype(OP, k.dtype(), "k must be bfloat16, float16 or float32"));
    }
    for (name, a) in [("beta", beta), ("g", g)] {
        if a.dtype() != DType::F32 {
            return Err(Error::dtype(OP, a.dtype(), format!("{name} must be float32")));
        }
    }
    let &[b, t, hg, kd] = k.shape() else {
        return Err(Error::shape(OP, format!("k must be (B, T, Hg, K), got {:?}", k.shape())));
    };
    let &[bb, tb, h] = beta.shape() else {
        return Err(Error::shape(OP, format!("beta must be (B, T, H), got {:?}", beta.shape())));
    };
    if (bb, tb) != (b, t) || g.shape() != beta.shape() {
        return Err(Error::shape(
            OP,
            format!("k {:?}, beta {:?} and g {:?} disagree on (B, T, H)", k.shape(), beta.shape(), g.shape()),
        ));
    }
    if b == 0 || t == 0 || hg == 0 || kd == 0 || h == 0 {
        return Err(Error::shape(OP, format!("empty input: k {:?}, beta {:?}", k.shape(), beta.shape())));
    }
    if h % hg != 0 {
        return Err(Error::shape(OP, format!("H ({h}) must be a multiple of Hg ({hg})")));
    }
    if k.device() != beta.device() || k.device() != g.device() {
        return Err(Error::invalid(OP, "k, beta and g must live on one device"));
    }
    // Indices are int32 in the kernel.
    if k.size().max(b * t * h * CHUNK) >= i32::MAX as usize {
        return Err(Error::invalid(OP, "inputs too large for 32-bit indexing"));
    }
    let chunks = t.div_ceil(CHUNK);
    let dim = |n: usize| u32::try_from(n).map_err(|_| Error::invalid(OP, format!("grid extent {n} exceeds u32")));
    Ok(LaunchSpec::new([dim(chunks * THREADS)?, dim(h)?, dim(b)?], [THREADS as u32, 1, 1])
        .output(&[b, t, h, CHUNK], DType::F32)
        .template("T", k.dtype()))
}

/// `A` (B, T, H, 64) f32 for keys `k` (B, T, Hg, K), `beta` and gates `g` (B, T, H) f32.
/// `chunk` must be 64. The result lives on the inputs' device.
pub fn gdn_chunk_scaled_dot_kkt(k: &Array, beta: &Array, g: &Array, chunk: usize) -> Result<Array> {
    gdn_chunk_scaled_dot_kkt_with(k, beta, g, chunk, None)
}

/// As [`gdn_chunk_scaled_dot_kkt`], with every output element first set to `init` (tests
/// poison the output with NaN this way).
pub fn gdn_chunk_scaled_dot_kkt_with(
    k: &Array,
    beta: &Array,
    g: &Array,
    chunk: usize,
    init: Option<f64>,
) -> Result<Array> {
    OpPlan::from(gdn_chunk_scaled_dot_kkt_call(k, beta, g, chunk)?).with_init(init).run_one()
}

/// The validated call of the kernel the rule in the module header picks ([`path`]).
pub fn gdn_chunk_scaled_dot_kkt_call(k: &Array, beta: &Array, g: &Array, chunk: usize) -> Result<OpCall> {
    let spec = prepare(k, beta, g, chunk)?;
    let inputs = vec![k.into(), beta.into(), g.into()];
    if path(k, beta) == Path::CudaMma {
        return Ok(OpCall::cuda(cuda::kernel()?, inputs, cuda::spec(k, beta)?.device(k.device())));
    }
    Ok(OpCall::new(kernel()?, inputs, spec.device(k.device())))
}

/// The kernel that computes a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The portable Metal kernel (any device, any key dtype and K).
    Portable,
    /// Tensor-core `mma.sync` in CUDA ([`cuda`]).
    CudaMma,
}

/// The kernel [`gdn_chunk_scaled_dot_kkt`] uses for `k` (B, T, Hg, K) and `beta` (B, T, H),
/// by the rule in the module header. Inputs of the wrong rank give [`Path::Portable`] (whose
/// validation rejects them).
pub fn path(k: &Array, beta: &Array) -> Path {
    let (&[b, t, hg, kd], &[_, _, h]) = (k.shape(), beta.shape()) else {
        return Path::Portable;
    };
    let aligned = !k.is_row_contiguous() || k.offset() % 8 == 0;
    let on_cuda = matches!(k.device(), Device::Cuda(_));
    if on_cuda && aligned && hg > 0 && h % hg == 0 && cuda::serves(k.dtype(), [b, t, hg, h, kd]) {
        Path::CudaMma
    } else {
        Path::Portable
    }
}

/// The `MetalKernel` and one launch of it, for compile-only checks.
pub fn kernel_and_spec(k: &Array, beta: &Array, g: &Array) -> Result<(&'static MetalKernel, LaunchSpec)> {
    Ok((kernel()?, prepare(k, beta, g, CHUNK)?))
}

/// Rounds an f32 value to `dtype` with round-to-nearest-even, as the kernel's cast does.
fn round_to(dtype: DType, v: f32) -> f64 {
    match dtype {
        DType::BF16 => f64::from(half::bf16::from_bits(kiln_convert::Format::BF16.round_f32(v))),
        DType::F16 => f64::from(half::f16::from_bits(kiln_convert::Format::F16.round_f32(v))),
        _ => f64::from(v),
    }
}

/// Float64 reference. `k` (B, T, Hg, K) values as stored in `dtype`; `beta`, `g` (B, T, H) f32
/// values; `dims` = `[B, T, Hg, H, K]`. Output (B, T, H, 64).
pub fn reference(k: &[f64], beta: &[f64], g: &[f64], dims: [usize; 5], dtype: DType) -> Vec<f64> {
    reference_in_chunks(k, beta, g, dims, dtype, CHUNK)
}

/// [`reference`] over chunks of `chunk` tokens instead of 64: output (B, T, H, chunk). Kernels
/// of the same maths at another chunk length (the demo's full-file kernel, 32) check against it.
pub fn reference_in_chunks(
    k: &[f64],
    beta: &[f64],
    g: &[f64],
    dims: [usize; 5],
    dtype: DType,
    chunk: usize,
) -> Vec<f64> {
    let [b, t, hg, h, kd] = dims;
    let chunk = chunk.max(1);
    let mut a = vec![0.0; b * t * h * chunk];
    for bi in 0..b {
        for hi in 0..h {
            let kh = hi / (h / hg);
            for row in 0..t {
                let t0 = row / chunk * chunk;
                let key_row = &k[((bi * t + row) * hg + kh) * kd..][..kd];
                let beta_row = beta[(bi * t + row) * h + hi] as f32;
                // One f32 product, then one rounding to the key dtype.
                let kb: Vec<f64> = key_row.iter().map(|&x| round_to(dtype, x as f32 * beta_row)).collect();
                for col in t0..row {
                    let key = &k[((bi * t + col) * hg + kh) * kd..][..kd];
                    let dot: f64 = kb.iter().zip(key).map(|(x, y)| x * y).sum();
                    let gate = (g[(bi * t + row) * h + hi] - g[(bi * t + col) * h + hi]).exp();
                    a[((bi * t + row) * h + hi) * chunk + (col - t0)] = gate * dot;
                }
            }
        }
    }
    a
}

#[cfg(test)]
mod tests {
    #[test]
    fn bf16_rounding_is_to_nearest_even() {
        // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even mantissa (1.0).
        assert_eq!(super::round_to(crate::DType::BF16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(super::round_to(crate::DType::BF16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(super::round_to(crate::DType::BF16, -(1.0 + 1.0 / 128.0 + 1.0 / 1024.0)), -(1.0 + 1.0 / 128.0));
    }

    #[test]
    fn reference_is_strictly_lower_and_gated_within_each_chunk() {
        // One head, K = 1, beta = 1, T = chunk + 2: the last two tokens form a partial second
        // chunk. Keys and gates are exact in f32, so the scaled keys are the keys.
        let (chunk, t) = (8, 10);
        let k: Vec<f64> = (0..t).map(|i| 1.0 + i as f64 / 8.0).collect();
        let g: Vec<f64> = (0..t).map(|i| -0.125 * i as f64).collect();
        let a = super::reference_in_chunks(&k, &[1.0; 10], &g, [1, t, 1, 1, 1], crate::DType::F32, chunk);
        let at = |row: usize, col: usize| a[row * chunk + col];
        assert_eq!(at(3, 3), 0.0);
        assert_eq!(at(2, 5), 0.0);
        assert!((at(5, 2) - (-0.375f64).exp() * k[5] * k[2]).abs() < 1e-12);
        // Row chunk + 1 sees only token chunk, at column 0 of its chunk.
        assert!((at(t - 1, 0) - (-0.125f64).exp() * k[t - 1] * k[t - 2]).abs() < 1e-12);
        assert_eq!(at(t - 1, 1), 0.0);
    }
}
