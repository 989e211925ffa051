//! Scatter-add into bins: `out[indices[n], ...] += values[n, ...]`, duplicates accumulating
//! (a histogram, an embedding-gradient sum, `index_add_` along axis 0).
//!
//! Layout: `values` (N, ...) of f32/f16/bf16/int32/uint32 (a non-contiguous input is copied to
//! row-contiguous first); `indices` (N,) of int32/uint32/int64; output (bins, ...) with the
//! trailing axes of `values`, in the accumulation type: float32 for float values, int32 or
//! uint32 for integer values (integer sums wrap, two's complement). Entries whose index lies
//! outside `0..bins` are skipped, so a bad index can never write out of bounds.
//!
//! Kernel `kiln_scatter_add`: one thread per value element, relaxed `atomic_fetch_add` into the
//! zero-initialised output (`atomic_outputs`, `init_value = 0`); consecutive threads add to
//! consecutive addresses of a row, so contention is only between duplicate indices. Float
//! sums therefore depend on the order atomics land in: results agree with the reference to
//! rounding, not bit for bit; integer sums are exact.
//!
//! Kernel `kiln_scatter_add_hist` (flat values — one element per index — N ≥ 65536 and
//! bins ≤ 4 · 8192): the values are cut into chunks (N / 65536, at most 512) and the bins
//! into ranges of 8192; threadgroup (chunk, range), ranges adjacent so the groups of one chunk
//! read it from L2 together, sums its chunk's values whose index falls in its range into a
//! threadgroup-memory histogram (32 KB, threadgroup atomics), then adds the non-zero bins to
//! the output with one device atomic each: about bins · chunks device atomics instead of N.
//!
//! Kernel `kiln_scatter_add_smem` ([`cuda`], CUDA only): one shared-memory histogram of all the
//! bins per block, so every value and index is read once; [`path`] picks it when the device is
//! CUDA, the values are flat float32 (N,) with N >= 65536 and N <= 2^31 - 1, the indices are
//! int32/uint32/int64, both are 16-byte aligned (row-contiguous at an offset that is a multiple
//! of 4 elements), and bins fit the device's opt-in shared memory ([`cuda::max_bins`]: 57 856
//! on compute capability 9.x). The Metal kernels above stay the reference path of the op (and
//! [`scatter_add_call`] always builds one of them).
//!
//! Reference: the sums in f64 (float values, rounded to the dtype first) or wrapping i32/u32
//! (integers). Tolerance: the f32 table for float values, exact for integers.

use super::kernel_cache::KernelCache;
use super::plan::{OpCall, OpPlan};
use super::util::{check_nonempty, common_device, grid_dim, vec4_aligned};
use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};

pub mod cuda;

const OP: &str = "scatter_add";

const SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    uint M = uint(m);
    int64_t target = static_cast<int64_t>(indices[elem / M]);
    if (target >= 0 && target < int64_t(bins)) {
        atomic_fetch_add_explicit(&out[target * M + elem % M], static_cast<U>(values[elem]), memory_order_relaxed);
    }
"#;

// A threadgroup (chunk, range) accumulates its chunk into a threadgroup histogram of the range's
// HIST bins, four values in flight per thread, then flushes the non-zero bins.
const HIST_SOURCE: &str = r#"
    uint R = uint(ranges);
    uint range = threadgroup_position_in_grid.x % R;
    uint chunk = threadgroup_position_in_grid.x / R;
    uint tid = thread_index_in_threadgroup;
    uint nt = threads_per_threadgroup.x;
    int64_t lo = int64_t(range) * HIST;
    int64_t span = metal::min(int64_t(HIST), int64_t(bins) - lo);
    threadgroup atomic<U> hist[HIST];
    for (uint i = tid; i < uint(HIST); i += nt) {
        atomic_store_explicit(&hist[i], U(0), memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint N = uint(n);
    uint begin = chunk * uint(chunk_len);
    uint end = metal::min(begin + uint(chunk_len), N);
    for (uint i = begin + tid; i < end; i += 4 * nt) {
        int64_t t[4];
        U v[4];
        for (uint k = 0; k < 4; ++k) {
            uint e = i + k * nt;
            t[k] = e < end ? static_cast<int64_t>(indices[e]) - lo : int64_t(-1);
            v[k] = e < end ? static_cast<U>(values[e]) : U(0);
        }
        for (uint k = 0; k < 4; ++k) {
            if (t[k] >= 0 && t[k] < span) {
                atomic_fetch_add_explicit(&hist[t[k]], v[k], memory_order_relaxed);
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; int64_t(i) < span; i += nt) {
        U sum = atomic_load_explicit(&hist[i], memory_order_relaxed);
        if (sum != U(0)) {
            atomic_fetch_add_explicit(&out[lo + i], sum, memory_order_relaxed);
        }
    }
"#;

/// Bins per threadgroup histogram (32 KB of 4-byte sums).
const HIST_BINS: usize = 8192;
/// Most bin ranges (threadgroups reading the same chunk) the histogram form takes.
const MAX_RANGES: usize = 4;
/// Values per chunk at least, and most chunks.
const MIN_CHUNK: usize = 65536;
const MAX_CHUNKS: usize = 512;
/// Threads per histogram threadgroup.
const HIST_GROUP: usize = 256;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();
static HIST_KERNEL: KernelCache<MetalKernel> = KernelCache::new();

/// The dtype the sums of `values` accumulate in.
pub fn accumulation_dtype(values: DType) -> Option<DType> {
    match values {
        DType::F32 | DType::F16 | DType::BF16 => Some(DType::F32),
        DType::I32 => Some(DType::I32),
        DType::U32 => Some(DType::U32),
        _ => None,
    }
}

/// The kernel that computes a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// A portable Metal kernel ([`scatter_add_call`]).
    Portable,
    /// The shared-memory histogram in CUDA ([`cuda`]).
    CudaSmem,
}

/// The kernel [`scatter_add`] uses for these inputs, by the rule in the module header (inputs
/// that fail validation give [`Path::Portable`], whose checks reject them).
pub fn path(values: &Array, indices: &Array, bins: usize) -> Path {
    let Device::Cuda(_) = values.device() else {
        return Path::Portable;
    };
    let n = values.shape().first().copied().unwrap_or(0);
    let served = values.dtype() == DType::F32
        && values.ndim() == 1
        && indices.shape() == [n]
        && indices.device() == values.device()
        && matches!(indices.dtype(), DType::I32 | DType::U32 | DType::I64)
        && (MIN_CHUNK..=i32::MAX as usize).contains(&n)
        && bins >= 1
        && vec4_aligned(values)
        && vec4_aligned(indices);
    match crate::backend::capabilities(values.device()).map(|c| c.compute_capability) {
        Ok(Some(arch)) if served && bins <= cuda::max_bins(arch) => Path::CudaSmem,
        _ => Path::Portable,
    }
}

/// The validated call of a portable kernel (see the module header).
pub fn scatter_add_call(values: &Array, indices: &Array, bins: usize) -> Result<OpCall> {
    let acc = accumulation_dtype(values.dtype()).ok_or_else(|| {
        Error::dtype(OP, values.dtype(), "values must be float32, float16, bfloat16, int32 or uint32")
    })?;
    if !matches!(indices.dtype(), DType::I32 | DType::U32 | DType::I64) {
        return Err(Error::dtype(OP, indices.dtype(), "indices must be int32, uint32 or int64"));
    }
    check_nonempty(OP, "values", values, 1)?;
    let n = values.shape()[0];
    if indices.shape() != [n] {
        return Err(Error::shape(
            OP,
            format!("indices has shape {:?}, expected [{n}] for values of shape {:?}", indices.shape(), values.shape()),
        ));
    }
    if bins == 0 || bins > i32::MAX as usize {
        return Err(Error::invalid(OP, format!("bins must be in 1..=2^31-1, got {bins}")));
    }
    common_device(OP, &[("values", values), ("indices", indices)])?;
    let m = values.size() / n;
    let mut out_shape = values.shape().to_vec();
    out_shape[0] = bins;
    let m32 = i32::try_from(m).map_err(|_| Error::invalid(OP, format!("row of {m} elements exceeds 2^31 - 1")))?;
    let ranges = bins.div_ceil(HIST_BINS);
    if m == 1 && n >= MIN_CHUNK && ranges <= MAX_RANGES && n <= i32::MAX as usize {
        let chunks = (n / MIN_CHUNK).clamp(1, MAX_CHUNKS);
        let chunk_len = n.div_ceil(chunks);
        let kernel = HIST_KERNEL.one(OP, || {
            let inputs = ["values", "indices", "n", "chunk_len", "ranges", "bins"];
            Ok(MetalKernel::new("kiln_scatter_add_hist", &inputs, &["out"], HIST_SOURCE)?.atomic_outputs(true))
        })?;
        let spec = LaunchSpec::new([grid_dim(OP, chunks * ranges * HIST_GROUP)?, 1, 1], [HIST_GROUP as u32, 1, 1])
            .output(&out_shape, acc)
            .template("U", acc)
            .template("HIST", HIST_BINS as i32)
            .init_value(0.0);
        let inputs = vec![
            values.into(),
            indices.into(),
            (n as i32).into(),
            (chunk_len as i32).into(),
            (ranges as i32).into(),
            (bins as i32).into(),
        ];
        return Ok(OpCall::new(kernel, inputs, spec));
    }
    let kernel = KERNEL.one(OP, || {
        Ok(MetalKernel::new("kiln_scatter_add", &["values", "indices", "m", "bins"], &["out"], SOURCE)?
            .atomic_outputs(true))
    })?;
    let spec = LaunchSpec::new([grid_dim(OP, values.size())?, 1, 1], [256, 1, 1])
        .output(&out_shape, acc)
        .template("U", acc)
        .init_value(0.0);
    Ok(OpCall::new(kernel, vec![values.into(), indices.into(), m32.into(), (bins as i32).into()], spec))
}

/// Sums the rows of `values` (N, ...) into `bins` rows chosen by `indices` (N,); returns
/// (bins, ...) in the accumulation dtype, on the device of `values`.
pub fn scatter_add(values: &Array, indices: &Array, bins: usize) -> Result<Array> {
    scatter_add_plan(values, indices, bins)?.run_one()
}

/// The plan of [`scatter_add`]: the call of the kernel [`path`] picks (the portable one of
/// [`scatter_add_call`], or the CUDA shared-memory histogram, whose output the plan trims to
/// the bins).
pub fn scatter_add_plan(values: &Array, indices: &Array, bins: usize) -> Result<OpPlan> {
    let call = scatter_add_call(values, indices, bins)?;
    match path(values, indices, bins) {
        Path::CudaSmem => {
            if !matches!(values.device(), Device::Cuda(_)) {
                return Err(Error::invalid(OP, "the CUDA path needs values on a CUDA device"));
            }
            let sms = crate::backend::capabilities(values.device())?.multiprocessors;
            let launch = cuda::Launch::for_multiprocessors(sms);
            let spec = cuda::spec(indices.dtype(), bins, launch)?.device(values.device());
            let call = OpCall::cuda_built(cuda::kernel(bins)?, vec![values.into(), indices.into()], spec);
            Ok(OpPlan::from(call).finish(&[], move |outs, _| Ok(vec![cuda::bins_of(&outs, bins)?])))
        }
        Path::Portable => Ok(call.into()),
    }
}

/// Float sums in f64; rows of `m` values, out-of-range indices skipped.
pub fn reference(values: &[f64], indices: &[i64], m: usize, bins: usize) -> Vec<f64> {
    let mut out = vec![0.0; bins * m];
    for (row, &target) in values.chunks(m).zip(indices) {
        if (0..bins as i64).contains(&target) {
            let t = target as usize;
            for (o, v) in out[t * m..(t + 1) * m].iter_mut().zip(row) {
                *o += v;
            }
        }
    }
    out
}

/// Integer sums with i32 wrap-around; rows of `m` values, out-of-range indices skipped.
pub fn reference_i32(values: &[i32], indices: &[i64], m: usize, bins: usize) -> Vec<i32> {
    let mut out = vec![0i32; bins * m];
    for (row, &target) in values.chunks(m).zip(indices) {
        if (0..bins as i64).contains(&target) {
            let t = target as usize;
            for (o, v) in out[t * m..(t + 1) * m].iter_mut().zip(row) {
                *o = o.wrapping_add(*v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_accumulates_duplicates_and_skips_out_of_range() {
        let out = super::reference(&[1.0, 2.0, 10.0, 20.0, 100.0, 200.0, 5.0, 5.0], &[1, 0, 1, 3], 2, 3);
        assert_eq!(out, vec![10.0, 20.0, 101.0, 202.0, 0.0, 0.0]);
        let ints = super::reference_i32(&[i32::MAX, 1, 7], &[0, 0, -1], 1, 1);
        assert_eq!(ints, vec![i32::MIN]);
    }
}
