//! Batched Householder QR `A = Q R` of m x n matrices, m >= n (reduced: Q m x n, R n x n).
//!
//! Variants ([`uses_shared`], a deterministic rule on the shape):
//! - shared (m n <= 4096): one threadgroup per matrix works on a copy of it in threadgroup
//!   memory, copied to Q at the end:
//! 1. for each column j: `alpha = a[j][j]`, `sigma = sum_{i>j} a[i][j]^2`; if sigma = 0 the
//!    reflector is the identity (tau = 0); else `beta = -sign(alpha) sqrt(alpha^2 + sigma)`,
//!    `tau = (beta - alpha) / beta`, `v = (1, a[j+1:, j] / (alpha - beta))` stored below the
//!    diagonal, `a[j][j] = beta`; then `a[j:, c] -= tau v (v^T a[j:, c])` for c > j, one
//!    simdgroup per column;
//! 2. R is the upper triangle (zeros below);
//! 3. Q is formed in place from the stored reflectors, last to first (LAPACK's org2r):
//!    columns c > j get `H_j`, then column j becomes `e_j - tau v`.
//! - blocked (larger): the same reflectors in panels of [`blocked::NB`] columns, applied to the
//!   trailing columns and to Q through the compact WY form `I - V T V^T` by tiled launches over
//!   the whole batch; see [`blocked`].
//!
//! Reductions use uniform trip counts with selects, never lane-dependent branches, before each
//! `simd_sum`.
//! Layout: `a` (..., m, n) f32, any batch shape, m >= n, 1 <= n <= 1024; outputs Q (..., m, n)
//! and R (..., n, n) f32. The sign convention makes the factorisation unique, so Q and R are
//! compared with [`reference`](fn@reference) (the same Householder steps in f64).
//! Tolerance: the f32 entry of the table for Q and R against the reference (on well-conditioned
//! inputs) and for ‖A − Q R‖ / ‖A‖ and ‖QᵀQ − I‖ / ‖I‖.

pub mod blocked;

use super::kernel_cache::KernelCache;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};
use crate::ops::plan::{OpCall, OpPlan};

const OP: &str = "qr";

/// Largest column count accepted (the reflector scales live in threadgroup memory).
pub const MAX_N: usize = 1024;

/// Threads per matrix of the shared variant.
const SHARED_THREADS: usize = 256;

/// Applies reflector `j` (unit head, tail in column `j` below the diagonal, factor `tau`) to
/// columns `j + 1..n` of the working matrix, a column per simdgroup; used when factoring and
/// again when forming Q.
const APPLY_REFLECTOR: &str = r#"for (int c = j + 1 + sg; c < n; c += nsg) {
            float dot = 0.0f;
            for (int i0 = j + 1; i0 < m; i0 += 32) {
                int i = metal::min(i0 + lane, m - 1);
                dot += metal::select(0.0f, w[i * ld + j] * w[i * ld + c], i0 + lane < m);
            }
            // Read before the sum: lane 0 rewrites it right after.
            float top = w[j * ld + c];
            float f = tau * (simd_sum(dot) + top);
            for (int i = j + 1 + lane; i < m; i += 32) {
                w[i * ld + c] -= f * w[i * ld + j];
            }
            if (lane == 0) {
                w[j * ld + c] -= f;
            }
        }"#;

const SOURCE: &str = r#"
    constexpr int MAXN = 1024;
    threadgroup float taus[MAXN];
    threadgroup float red[32];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int nt = static_cast<int>(threads_per_threadgroup.x);
    int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    int nsg = static_cast<int>(simdgroups_per_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int m = A_shape[A_ndim - 2];
    int n = A_shape[A_ndim - 1];
    // Rows of the working matrix are LD apart: an odd stride puts the 32 lanes that walk a
    // column on 32 different banks of threadgroup memory.
    int ld = n | 1;
    uint batch = threadgroup_position_in_grid.x;
    WORKSPACE
    device float* r = R + static_cast<long>(batch) * n * n;
    const device float* a_in = A + static_cast<long>(batch) * m * n;
    for (int e = tid; e < m * n; e += nt) {
        w[(e / n) * ld + e % n] = a_in[e];
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

    for (int j = 0; j < n; ++j) {
        float part = 0.0f;
        for (int i0 = j + 1; i0 < m; i0 += nt) {
            int i = metal::min(i0 + tid, m - 1);
            float x = w[i * ld + j];
            part += metal::select(0.0f, x * x, i0 + tid < m);
        }
        part = simd_sum(part);
        if (lane == 0) {
            red[sg] = part;
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        float sigma = 0.0f;
        for (int s = 0; s < nsg; ++s) {
            sigma += red[s];
        }
        float alpha = w[j * ld + j];
        float tau = 0.0f;
        float beta = alpha;
        float scal = 0.0f;
        if (sigma > 0.0f) {
            float norm = metal::sqrt(alpha * alpha + sigma);
            beta = alpha <= 0.0f ? norm : -norm;
            tau = (beta - alpha) / beta;
            scal = 1.0f / (alpha - beta);
        }
        // Everyone has read red and the pivot before they change.
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        for (int i = j + 1 + tid; i < m; i += nt) {
            w[i * ld + j] *= scal;
        }
        if (tid == 0) {
            w[j * ld + j] = beta;
            taus[j] = tau;
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        APPLY_REFLECTOR
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    }

    for (int e = tid; e < n * n; e += nt) {
        int i = e / n;
        int c = e % n;
        r[e] = c >= i ? w[i * ld + c] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

    for (int j = n - 1; j >= 0; --j) {
        float tau = taus[j];
        APPLY_REFLECTOR
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        for (int i = tid; i < m; i += nt) {
            float v = w[i * ld + j];
            w[i * ld + j] = i < j ? 0.0f : (i == j ? 1.0f - tau : -tau * v);
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    }
    COPY_OUT
"#;

/// The working matrix in threadgroup memory, copied to Q at the end.
const SHARED: (&str, &str) = (
    "threadgroup float w[SHARED_ELEMS];\n    device float* q_out = Q + static_cast<long>(batch) * m * n;",
    "threadgroup_barrier(mem_flags::mem_threadgroup);\n    for (int e = tid; e < m * n; e += nt) {\n        q_out[e] = w[(e / n) * ld + e % n];\n    }",
);

fn shared_kernel() -> Result<&'static MetalKernel> {
    static SHARED_CELL: KernelCache<MetalKernel> = KernelCache::new();
    let (workspace, copy_out) = SHARED;
    SHARED_CELL.one(OP, || {
        let source = SOURCE
            .replace("WORKSPACE", workspace)
            .replace("COPY_OUT", copy_out)
            .replace("APPLY_REFLECTOR", APPLY_REFLECTOR)
            .replace("SHARED_ELEMS", &SHARED_MAX_ELEMS.to_string());
        MetalKernel::new("kiln_qr_shared", &["A"], &["Q", "R"], source)
    })
}

/// Largest matrix factored in threadgroup memory, counted with its rows padded to an odd
/// stride (`m * (n | 1)` elements; 64 x 64 takes 64 x 65, 16.25 KB).
pub const SHARED_MAX_ELEMS: usize = 64 * 65;

/// The deterministic variant rule: threadgroup memory when the padded matrix fits there, else
/// blocked.
pub fn uses_shared(m: usize, n: usize) -> bool {
    m.saturating_mul(n | 1) <= SHARED_MAX_ELEMS
}

/// `(m, n, batch)` of a valid input, else the typed error.
fn check_input(a: &Array) -> Result<(usize, usize, usize)> {
    if a.dtype() != DType::F32 {
        return Err(Error::dtype(OP, a.dtype(), "qr takes float32 matrices"));
    }
    let shape = a.shape();
    if shape.len() < 2 {
        return Err(Error::shape(OP, format!("a must be (..., m, n), got {shape:?}")));
    }
    let (m, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let batch: usize = shape[..shape.len() - 2].iter().product();
    if n == 0 || batch == 0 || m < n || n > MAX_N {
        return Err(Error::shape(OP, format!("need m >= n, 1 <= n <= {MAX_N} and a non-empty batch, got {shape:?}")));
    }
    if m * n >= i32::MAX as usize {
        return Err(Error::invalid(OP, "matrices too large for 32-bit indexing"));
    }
    Ok((m, n, batch))
}

/// The shared variant's kernel and launch for `a` (m n <= [`SHARED_MAX_ELEMS`]); also used for
/// compile-only checks. Larger matrices go through [`blocked`].
pub fn kernel_and_spec(a: &Array) -> Result<(&'static MetalKernel, LaunchSpec)> {
    let (m, n, batch) = check_input(a)?;
    if !uses_shared(m, n) {
        return Err(Error::invalid(OP, format!("{m} x {n} is factored by the blocked launches, not one kernel")));
    }
    let groups = u32::try_from(batch * SHARED_THREADS).map_err(|_| Error::invalid(OP, "batch too large"))?;
    let shape = a.shape();
    let mut r_shape = shape.to_vec();
    let last = r_shape.len() - 2;
    r_shape[last] = n;
    let spec = LaunchSpec::new([groups, 1, 1], [SHARED_THREADS as u32, 1, 1])
        .output(shape, DType::F32)
        .output(&r_shape, DType::F32)
        .device(a.device());
    Ok((shared_kernel()?, spec))
}

/// `(Q, R)` of every matrix of `a` (..., m, n) f32, m >= n: Q (..., m, n) with orthonormal
/// columns, R (..., n, n) upper triangular.
pub fn qr(a: &Array) -> Result<(Array, Array)> {
    qr_with(a, None)
}

/// As [`qr`], the outputs first filled with `init` (tests poison them with NaN).
pub fn qr_with(a: &Array, init: Option<f64>) -> Result<(Array, Array)> {
    let mut outs = qr_plan(a)?.with_init(init).run()?;
    match (outs.pop(), outs.pop()) {
        (Some(r), Some(q)) => Ok((q, r)),
        _ => Err(Error::invalid(OP, "the kernels returned too few outputs")),
    }
}

/// The plan of [`qr`]: one kernel in threadgroup memory, or the blocked launches; its outputs
/// are `(Q, R)`.
pub fn qr_plan(a: &Array) -> Result<OpPlan> {
    let (m, n, batch) = check_input(a)?;
    if !uses_shared(m, n) {
        return blocked::plan(a, m, n, batch);
    }
    let (kernel, spec) = kernel_and_spec(a)?;
    Ok(OpPlan::from(OpCall::new(kernel, vec![a.into()], spec)))
}

/// The same Householder QR in f64 for one row-major m x n matrix: `(Q, R)`.
pub fn reference(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut w = a.to_vec();
    let mut taus = vec![0.0; n];
    for j in 0..n {
        let sigma: f64 = (j + 1..m).map(|i| w[i * n + j] * w[i * n + j]).sum();
        let alpha = w[j * n + j];
        if sigma > 0.0 {
            let norm = (alpha * alpha + sigma).sqrt();
            let beta = if alpha <= 0.0 { norm } else { -norm };
            taus[j] = (beta - alpha) / beta;
            for i in j + 1..m {
                w[i * n + j] /= alpha - beta;
            }
            w[j * n + j] = beta;
        }
        for c in j + 1..n {
            let f = taus[j] * (w[j * n + c] + (j + 1..m).map(|i| w[i * n + j] * w[i * n + c]).sum::<f64>());
            w[j * n + c] -= f;
            for i in j + 1..m {
                w[i * n + c] -= f * w[i * n + j];
            }
        }
    }
    let mut r = vec![0.0; n * n];
    for i in 0..n {
        for c in i..n {
            r[i * n + c] = w[i * n + c];
        }
    }
    // Q = H_0 ... H_{n-1} applied to the first n columns of the identity.
    let mut q = vec![0.0; m * n];
    for c in 0..n {
        q[c * n + c] = 1.0;
    }
    for j in (0..n).rev() {
        let v = |i: usize| if i == j { 1.0 } else { w[i * n + j] };
        for c in 0..n {
            let f = taus[j] * (j..m).map(|i| v(i) * q[i * n + c]).sum::<f64>();
            for i in j..m {
                q[i * n + c] -= f * v(i);
            }
        }
    }
    (q, r)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_reconstructs_and_is_orthonormal() {
        let (m, n) = (7, 4);
        let a: Vec<f64> =
            (0..m * n).map(|e| ((e * 37 % 11) as f64 - 5.0) / 3.0 + if e % (n + 1) == 0 { 2.0 } else { 0.0 }).collect();
        let (q, r) = super::reference(&a, m, n);
        for i in 0..m {
            for c in 0..n {
                let qr: f64 = (0..n).map(|p| q[i * n + p] * r[p * n + c]).sum();
                assert!((qr - a[i * n + c]).abs() < 1e-12, "QR[{i}][{c}] = {qr}, A = {}", a[i * n + c]);
            }
        }
        for c in 0..n {
            for d in 0..n {
                let dot: f64 = (0..m).map(|i| q[i * n + c] * q[i * n + d]).sum();
                assert!((dot - f64::from(u8::from(c == d))).abs() < 1e-12, "Q^T Q [{c}][{d}] = {dot}");
            }
        }
    }
}
