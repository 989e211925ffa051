//! Batched lower Cholesky factorisation `A = L L^T` of symmetric positive definite matrices,
//! with a per-matrix failure flag instead of silent garbage.
//!
//! Variants by size ([`variant`], a deterministic rule on N):
//! - `Simd` (N <= 64): the matrix lives in the registers of one simdgroup. Row i belongs to lane
//!   `i % G` of the matrix's `G` lanes (G = the power of two >= N, at most 32; `32 / G` matrices
//!   share a simdgroup), `R = ceil(N / 32)` rows per lane. Right-looking, column by column:
//!   the pivot `a[j][j]` comes from its owner by `simd_shuffle`, every row scales its entry
//!   `L[i][j] = a[i][j] / sqrt(a[j][j])`, then for each k > j the owner of row k broadcasts
//!   `L[k][j]` and every row updates `a[i][k] -= L[i][j] L[k][j]`. No barriers; rows read and
//!   write their own contiguous N floats (16-byte vectors when N % 4 == 0 and A is aligned).
//!   Entries above the diagonal are carried as garbage and never stored.
//! - `Blocked` (N > 64): right-looking blocked algorithm in place in the output, block width
//!   [`blocked::NB`], two launches per block column over the whole batch (diagonal block and
//!   panel solve; trailing update as a tiled FMA kernel on the lower triangle); see
//!   [`blocked`].
//!
//! A pivot that is not > 0 (or NaN) marks the matrix with the flag `j + 1` of its first bad
//! column (the pivot as computed by the variant's own arithmetic); a one-threadgroup kernel reduces the flags to the first flagged matrix, which the op
//! turns into an error naming its batch index and the column. Only the lower triangle of A is
//! read; L's upper triangle is 0.
//! Layout: `a` (..., N, N) f32, any batch shape, 1 <= N <= 1024; output L of the same shape.
//! Reference: [`reference`](fn@reference), Cholesky–Banachiewicz in f64. Tolerance: the f32
//! entry of the table, for L against the reference and for ‖A − L Lᵀ‖ / ‖A‖.

pub mod blocked;

use super::kernel_cache::KernelCache;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelInput, LaunchSpec, MetalKernel};
use crate::ops::plan::{OpCall, OpPlan};
use crate::ops::util::vec4_aligned;

const OP: &str = "cholesky";

/// Largest matrix factored in the registers of one simdgroup.
pub const SIMD_MAX_N: usize = 64;
/// Largest matrix accepted.
pub const MAX_N: usize = 1024;
/// Threads per threadgroup of the `Simd` variant.
const SIMD_GROUP_THREADS: usize = 128;

/// Where a matrix of size N is factored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// In registers: `lanes` lanes per matrix (`32 / lanes` matrices per simdgroup), `rows`
    /// rows per lane.
    Simd { lanes: usize, rows: usize },
    /// Blocked, in place in the output (device memory), several launches per block column.
    Blocked,
}

/// The deterministic variant rule.
pub fn variant(n: usize) -> Variant {
    match n {
        0..=32 => Variant::Simd { lanes: n.max(1).next_power_of_two(), rows: 1 },
        33..=SIMD_MAX_N => Variant::Simd { lanes: 32, rows: n.div_ceil(32) },
        _ => Variant::Blocked,
    }
}

/// Templates N, G (lanes per matrix), R (rows per lane), V (16-byte row access); scalar input
/// `count` (matrices in the batch).
const SIMD_SOURCE: &str = r#"
    constexpr int MPS = 32 / G;
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int sub = lane % G;
    int lane0 = lane - sub;
    long m = static_cast<long>(thread_position_in_grid.x / 32) * MPS + lane / G;
    bool live = m < count;
    long base = (live ? m : 0) * N * N;
    float r[R][N];
    #pragma unroll
    for (int q = 0; q < R; ++q) {
        int i = metal::min(sub + G * q, N - 1);
        const device float* row = A + base + i * N;
        if (V) {
            #pragma unroll
            for (int c = 0; c < N / 4; ++c) {
                float4 v = 4 * c <= i ? ((const device float4*)row)[c] : float4(0.0f);
                r[q][4 * c] = v.x;
                r[q][4 * c + 1] = v.y;
                r[q][4 * c + 2] = v.z;
                r[q][4 * c + 3] = v.w;
            }
        } else {
            #pragma unroll
            for (int k = 0; k < N; ++k) {
                r[q][k] = k <= i ? row[k] : 0.0f;
            }
        }
    }
    int failed = 0;
    #pragma unroll
    for (int j = 0; j < N; ++j) {
        float piv = simd_shuffle(r[j / G][j], static_cast<ushort>(lane0 + j % G));
        failed = (failed == 0 && !(piv > 0.0f)) ? j + 1 : failed;
        float d = metal::sqrt(piv);
        #pragma unroll
        for (int q = 0; q < R; ++q) {
            r[q][j] = sub + G * q == j ? d : r[q][j] / d;
        }
        #pragma unroll
        for (int k = j + 1; k < N; ++k) {
            float lkj = simd_shuffle(r[k / G][j], static_cast<ushort>(lane0 + k % G));
            #pragma unroll
            for (int q = 0; q < R; ++q) {
                r[q][k] = metal::fma(-r[q][j], lkj, r[q][k]);
            }
        }
    }
    #pragma unroll
    for (int q = 0; q < R; ++q) {
        int i = sub + G * q;
        if (live && i < N) {
            device float* row = L + base + i * N;
            if (V) {
                #pragma unroll
                for (int c = 0; c < N / 4; ++c) {
                    float4 v;
                    v.x = 4 * c <= i ? r[q][4 * c] : 0.0f;
                    v.y = 4 * c + 1 <= i ? r[q][4 * c + 1] : 0.0f;
                    v.z = 4 * c + 2 <= i ? r[q][4 * c + 2] : 0.0f;
                    v.w = 4 * c + 3 <= i ? r[q][4 * c + 3] : 0.0f;
                    ((device float4*)row)[c] = v;
                }
            } else {
                #pragma unroll
                for (int k = 0; k < N; ++k) {
                    row[k] = k <= i ? r[q][k] : 0.0f;
                }
            }
        }
    }
    if (live && sub == 0) {
        info[m] = failed;
    }
"#;

fn simd_kernel() -> Result<&'static MetalKernel> {
    static SIMD: KernelCache<MetalKernel> = KernelCache::new();
    SIMD.one(OP, || MetalKernel::new("kiln_cholesky_simd", &["A", "count"], &["L", "info"], SIMD_SOURCE))
}

/// `(N, batch)` of a valid input, else the typed error.
fn check_input(a: &Array) -> Result<(usize, usize)> {
    if a.dtype() != DType::F32 {
        return Err(Error::dtype(OP, a.dtype(), "cholesky takes float32 matrices"));
    }
    let shape = a.shape();
    if shape.len() < 2 || shape[shape.len() - 1] != shape[shape.len() - 2] {
        return Err(Error::shape(OP, format!("a must be (..., N, N), got {shape:?}")));
    }
    let n = shape[shape.len() - 1];
    let batch: usize = shape[..shape.len() - 2].iter().product();
    if n == 0 || batch == 0 || n > MAX_N {
        return Err(Error::shape(OP, format!("need 1 <= N <= {MAX_N} and a non-empty batch, got {shape:?}")));
    }
    Ok((n, batch))
}

/// The register variant's kernel, inputs and launch for `a` (N <= [`SIMD_MAX_N`]); also used
/// for compile-only checks. Larger matrices go through [`blocked`].
pub fn kernel_and_spec(a: &Array) -> Result<(&'static MetalKernel, Vec<KernelInput>, LaunchSpec)> {
    let (n, batch) = check_input(a)?;
    let Variant::Simd { lanes, rows } = variant(n) else {
        return Err(Error::invalid(OP, format!("N = {n} is factored by the blocked launches, not one kernel")));
    };
    let too_large = || Error::invalid(OP, "batch too large");
    let count = i32::try_from(batch).map_err(|_| too_large())?;
    let grid = u32::try_from(batch.div_ceil(32 / lanes) * 32).map_err(|_| too_large())?;
    let spec = LaunchSpec::new([grid, 1, 1], [SIMD_GROUP_THREADS as u32, 1, 1])
        .output(a.shape(), DType::F32)
        .output(&[batch], DType::I32)
        .template("N", n as i32)
        .template("G", lanes as i32)
        .template("R", rows as i32)
        .template("V", n % 4 == 0 && vec4_aligned(a))
        .device(a.device());
    Ok((simd_kernel()?, vec![a.into(), KernelInput::from(count)], spec))
}

/// Reduces the per-matrix flags on the device to `[first flagged index or -1, its flag]`, so the
/// host reads 8 bytes, not one flag per matrix. Uniform trip counts before the reductions.
const FIRST_FAILURE_SOURCE: &str = r#"
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int nt = static_cast<int>(threads_per_threadgroup.x);
    int n = info_shape[0];
    int best = 0x7fffffff;
    for (int e0 = 0; e0 < n; e0 += nt) {
        int e = e0 + tid;
        int f = info[metal::min(e, n - 1)];
        best = e < n && f != 0 ? metal::min(best, e) : best;
    }
    best = simd_min(best);
    threadgroup int parts[32];
    if (thread_index_in_simdgroup == 0) {
        parts[simdgroup_index_in_threadgroup] = best;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        for (uint s = 1; s < simdgroups_per_threadgroup; ++s) {
            best = metal::min(best, parts[s]);
        }
        bool none = best == 0x7fffffff;
        first[0] = none ? -1 : best;
        first[1] = none ? 0 : info[best];
    }
"#;

/// The flag reduction's kernel and launch for the flags `info` (one i32 per matrix).
pub fn first_failure_kernel_and_spec(info: &Array) -> Result<(&'static MetalKernel, LaunchSpec)> {
    Ok((first_failure_kernel()?, first_failure_spec(info.size(), info.device())))
}

fn first_failure_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || MetalKernel::new("kiln_cholesky_first_failure", &["info"], &["first"], FIRST_FAILURE_SOURCE))
}

/// The flag reduction's launch over `batch` flags on `device`.
fn first_failure_spec(batch: usize, device: crate::device::Device) -> LaunchSpec {
    let threads = batch.div_ceil(32).clamp(1, 32) as u32 * 32;
    LaunchSpec::new([threads, 1, 1], [threads, 1, 1]).output(&[2], DType::I32).device(device)
}

/// The lower Cholesky factor of every matrix of `a` (..., N, N) f32. A matrix that is not
/// positive definite is an error naming its batch index.
pub fn cholesky(a: &Array) -> Result<Array> {
    cholesky_with(a, None)
}

/// As [`cholesky`], the output first filled with `init` (tests poison it with NaN).
pub fn cholesky_with(a: &Array, init: Option<f64>) -> Result<Array> {
    cholesky_plan(a)?.with_init(init).run_one()
}

/// The plan of [`cholesky`]: the factorisation (one register kernel, or the blocked launches),
/// then the flag reduction, whose result the plan turns into an error naming the first matrix
/// that is not positive definite.
pub fn cholesky_plan(a: &Array) -> Result<OpPlan> {
    let (n, batch) = check_input(a)?;
    let (mut calls, flags) = if let Variant::Simd { .. } = variant(n) {
        let (kernel, inputs, spec) = kernel_and_spec(a)?;
        (vec![OpCall::new(kernel, inputs, spec)], (0, 1))
    } else {
        (blocked::calls(a, n, batch)?, (0, 1))
    };
    calls.push(OpCall::new(first_failure_kernel()?, Vec::new(), first_failure_spec(batch, a.device())).reads(&[flags]));
    let first = (calls.len() - 1, 0);
    Ok(OpPlan::new(calls).outputs(&[(0, 0)]).finish(&[first], |l, first| {
        let first = first.first().ok_or_else(|| Error::invalid(OP, "the flag reduction returned no output"))?;
        if let [index, col] = first.to_host()?.to_vec::<i32>()?[..] {
            if index >= 0 {
                return Err(Error::invalid(
                    OP,
                    format!("matrix {index} of the batch is not positive definite (pivot {} is not > 0)", col - 1),
                ));
            }
        }
        Ok(l)
    }))
}

/// Cholesky–Banachiewicz in f64 of one row-major N x N matrix; `None` when a pivot is not > 0.
pub fn reference(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|p| l[i * n + p] * l[j * n + p]).sum();
            if i == j {
                let d = a[i * n + i] - s;
                if d.is_nan() || d <= 0.0 {
                    return None;
                }
                l[i * n + i] = d.sqrt();
            } else {
                l[i * n + j] = (a[i * n + j] - s) / l[j * n + j];
            }
        }
    }
    Some(l)
}
