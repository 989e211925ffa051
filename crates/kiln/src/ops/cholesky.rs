//! Batched lower Cholesky factorisation `A = L L^T` of symmetric positive definite matrices,
//! with a per-matrix failure flag instead of silent garbage.
//!
//! One threadgroup per matrix, right-looking, one barrier per column. The columns are kept
//! unscaled while the factorisation runs (`a[i][j] = L[i][j] L[j][j]`, `a[j][j] = L[j][j]^2`), so
//! step j only reads column j and updates the trailing triangle:
//! `a[i][k] -= a[i][j] a[k][j] / a[j][j]` for `j < k <= i`; the final pass scales
//! `L[i][k] = a[i][k] / sqrt(a[k][k])`. A pivot `a[j][j]` that is not > 0 (or NaN) stops the
//! matrix and sets its flag to `j + 1`; the op turns the first flag into an error naming the
//! batch index and the column. Only the lower triangle of A is read; L's upper triangle is 0.
//! Variants by size ([`variant`]): N <= 64 works in threadgroup memory (16 KB); larger N work in
//! place in the output with 1024 threads.
//! Layout: `a` (..., N, N) f32, any batch shape, 1 <= N <= 1024; output L of the same shape.
//! Reference: [`reference`], Cholesky–Banachiewicz in f64. Tolerance: the f32 entry of the
//! table, for L against the reference and for ‖A − L Lᵀ‖ / ‖A‖.

use std::sync::OnceLock;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};

const OP: &str = "cholesky";

/// Largest matrix factored in threadgroup memory.
pub const SHARED_MAX_N: usize = 64;
/// Largest matrix accepted.
pub const MAX_N: usize = 1024;

/// Where a matrix of size N is factored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// In threadgroup memory, `threads` per matrix.
    Shared { threads: usize },
    /// In place in the output (device memory), 1024 threads per matrix.
    InPlace,
}

/// The deterministic variant rule.
pub fn variant(n: usize) -> Variant {
    match n {
        0..=16 => Variant::Shared { threads: 64 },
        17..=SHARED_MAX_N => Variant::Shared { threads: 256 },
        _ => Variant::InPlace,
    }
}

const SHARED_PROLOGUE: &str = r#"
    constexpr int NN = N * N;
    threadgroup float a[NN];
    for (int e = tid; e < NN; e += nt) {
        a[e] = A[base + e];
    }
"#;

const INPLACE_PROLOGUE: &str = r#"
    device float* a = L + base;
    for (int e = tid; e < N * N; e += nt) {
        a[e] = A[base + e];
    }
"#;

const HEAD: &str = r#"
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int nt = static_cast<int>(threads_per_threadgroup.x);
    uint batch = threadgroup_position_in_grid.x;
    long base = static_cast<long>(batch) * N * N;
"#;

const BODY: &str = r#"
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    int failed = 0;
    for (int j = 0; j < N; ++j) {
        float d = a[j * N + j];
        // Every thread reads the same pivot after the barrier, so the exit is uniform.
        if (!(d > 0.0f)) {
            failed = j + 1;
            break;
        }
        float inv = 1.0f / d;
        int m = N - j - 1;
        for (int e = tid; e < m * m; e += nt) {
            int i = j + 1 + e / m;
            int k = j + 1 + e % m;
            if (k <= i) {
                a[i * N + k] -= a[i * N + j] * a[k * N + j] * inv;
            }
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    }
    for (int e = tid; e < N * N; e += nt) {
        int i = e / N;
        int k = e % N;
        if (k < i) {
            L[base + e] = a[e] / metal::sqrt(a[k * N + k]);
        }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    for (int e = tid; e < N * N; e += nt) {
        int i = e / N;
        int k = e % N;
        if (k == i) {
            L[base + e] = metal::sqrt(a[e]);
        } else if (k > i) {
            L[base + e] = 0.0f;
        }
    }
    if (tid == 0) {
        info[batch] = failed;
    }
"#;

type Cell = OnceLock<std::result::Result<MetalKernel, String>>;

fn kernel(shared: bool) -> Result<&'static MetalKernel> {
    static SHARED: Cell = OnceLock::new();
    static INPLACE: Cell = OnceLock::new();
    let (cell, name, prologue) = if shared {
        (&SHARED, "kiln_cholesky_shared", SHARED_PROLOGUE)
    } else {
        (&INPLACE, "kiln_cholesky_inplace", INPLACE_PROLOGUE)
    };
    cell.get_or_init(|| {
        MetalKernel::new(name, &["A"], &["L", "info"], format!("{HEAD}{prologue}{BODY}")).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|msg| Error::invalid(OP, msg.clone()))
}

/// The kernel and launch for `a`; also used for compile-only checks.
pub fn kernel_and_spec(a: &Array) -> Result<(&'static MetalKernel, LaunchSpec)> {
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
    let (shared, threads) = match variant(n) {
        Variant::Shared { threads } => (true, threads),
        Variant::InPlace => (false, 1024),
    };
    let groups = u32::try_from(batch * threads).map_err(|_| Error::invalid(OP, "batch too large"))?;
    let spec = LaunchSpec::new([groups, 1, 1], [threads as u32, 1, 1])
        .output(shape, DType::F32)
        .output(&[batch], DType::I32)
        .template("N", n as i32)
        .device(a.device());
    Ok((kernel(shared)?, spec))
}

/// The lower Cholesky factor of every matrix of `a` (..., N, N) f32. A matrix that is not
/// positive definite is an error naming its batch index.
pub fn cholesky(a: &Array) -> Result<Array> {
    cholesky_with(a, None)
}

/// As [`cholesky`], the output first filled with `init` (tests poison it with NaN).
pub fn cholesky_with(a: &Array, init: Option<f64>) -> Result<Array> {
    let (kernel, mut spec) = kernel_and_spec(a)?;
    spec.init_value = init;
    let mut outs = kernel.call(&[a.into()], &spec)?;
    let (Some(info), Some(l)) = (outs.pop(), outs.pop()) else {
        return Err(Error::invalid(OP, "the kernel returned too few outputs"));
    };
    let flags = info.to_host()?.to_vec::<i32>()?;
    if let Some((index, &col)) = flags.iter().enumerate().find(|(_, &f)| f != 0) {
        return Err(Error::invalid(
            OP,
            format!("matrix {index} of the batch is not positive definite (pivot {} is not > 0)", col - 1),
        ));
    }
    Ok(l)
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
