//! Blocked Cholesky factorisation `A = L L^T` of a batch of small SPD matrices, right-looking.
//!
//! One threadgroup per matrix; the matrix is staged in f32 threadgroup memory (`N` <= 90 keeps
//! it under 32 KB). For each block of `BLK` columns `[k0, k1)`:
//! 1. thread 0 factors the diagonal block (small, and its columns depend on each other);
//! 2. the rows below are solved against it in parallel, one row per thread;
//! 3. the trailing lower triangle is updated in parallel, `a[i][j] -= sum_p L[i][p] L[j][p]`;
//!
//! with a threadgroup barrier after each step. `N` need not be a multiple of `BLK`.
//! The documented pattern this follows leaves the upper triangle unwritten; here it is stored
//! as exact zeros.
//! Layout: `A` (B, N, N) of f32/f16/bf16, symmetric positive definite; output `L` (B, N, N) in
//! its dtype, lower triangular. Templates `T`, `N`, `BLK`. f32 throughout, one rounding on store.
//! Reference: unblocked Cholesky–Banachiewicz in f64 on the dtype-rounded `A` (itself checked by
//! reconstruction). Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, host_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "cholesky", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

/// The largest matrix whose f32 copy fits in 32 KB of threadgroup memory.
pub const MAX_N: usize = 90;

const SOURCE: &str = r#"
    uint batch = threadgroup_position_in_grid.x;
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int n_threads = static_cast<int>(threads_per_threadgroup.x);
    constexpr int NN = N * N;
    threadgroup float a[NN];
    const device T* A_b = A + batch * N * N;
    for (int e = tid; e < NN; e += n_threads) {
        a[e] = static_cast<float>(A_b[e]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (int k0 = 0; k0 < N; k0 += BLK) {
        int k1 = metal::min(k0 + BLK, N);
        if (tid == 0) {
            for (int j = k0; j < k1; ++j) {
                float d = a[j * N + j];
                for (int p = k0; p < j; ++p) {
                    d -= a[j * N + p] * a[j * N + p];
                }
                float ljj = metal::sqrt(d);
                a[j * N + j] = ljj;
                for (int i = j + 1; i < k1; ++i) {
                    float s = a[i * N + j];
                    for (int p = k0; p < j; ++p) {
                        s -= a[i * N + p] * a[j * N + p];
                    }
                    a[i * N + j] = s / ljj;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        for (int i = k1 + tid; i < N; i += n_threads) {
            for (int j = k0; j < k1; ++j) {
                float s = a[i * N + j];
                for (int p = k0; p < j; ++p) {
                    s -= a[i * N + p] * a[j * N + p];
                }
                a[i * N + j] = s / a[j * N + j];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        int m = N - k1;
        for (int e = tid; e < m * m; e += n_threads) {
            int i = k1 + e / m;
            int j = k1 + e % m;
            if (j <= i) {
                float s = 0.0f;
                for (int p = k0; p < k1; ++p) {
                    s += a[i * N + p] * a[j * N + p];
                }
                a[i * N + j] -= s;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }

    for (int e = tid; e < NN; e += n_threads) {
        L[batch * N * N + e] = static_cast<T>(e % N <= e / N ? a[e] : 0.0f);
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(a: &Array, block: usize, threads: usize) -> Result<Prepared> {
    let op = "cholesky";
    check_dtype(op, a.dtype(), &FLOAT_DTYPES)?;
    let &[b, n, n2] = a.shape() else {
        return Err(Error::shape(op, format!("A must be 3-D (B, N, N), got {:?}", a.shape())));
    };
    if n != n2 || n == 0 || n > MAX_N {
        return Err(Error::shape(op, format!("A must hold square matrices of 1..={MAX_N} rows, got {:?}", a.shape())));
    }
    if block == 0 || threads == 0 || threads > 1024 {
        return Err(Error::invalid(op, format!("block ({block}) and threads ({threads}) must be in 1..=1024")));
    }
    let kernel = KERNEL.one(op, || MetalKernel::new("gallery_cholesky", &["A"], &["L"], SOURCE))?;
    let spec = LaunchSpec::new([dim(op, b * threads)?, 1, 1], [threads as u32, 1, 1])
        .output(a.shape(), a.dtype())
        .template("T", a.dtype())
        .template("N", n as i32)
        .template("BLK", block.min(n) as i32);
    Ok(Prepared::new(kernel, vec![a.into()], spec))
}

/// The lower Cholesky factor of each SPD matrix in `a` (B, N, N), in blocks of `block`
/// columns, with `threads` per matrix. A matrix that is not positive definite yields NaN.
pub fn cholesky(a: &Array, block: usize, threads: usize) -> Result<Array> {
    prepare(a, block, threads)?.run_one()
}

/// Cholesky–Banachiewicz in f64 for each n×n matrix of `a`.
pub fn reference(a: &[f64], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; a.len()];
    for (am, l) in a.chunks(n * n).zip(out.chunks_mut(n * n)) {
        for i in 0..n {
            for j in 0..=i {
                let s: f64 = (0..j).map(|p| l[i * n + p] * l[j * n + p]).sum();
                l[i * n + j] = if i == j { (am[i * n + i] - s).sqrt() } else { (am[i * n + j] - s) / l[j * n + j] };
            }
        }
    }
    out
}

/// `b` random SPD matrices `M M^T / n + I` (M standard normal), as f64 values.
pub fn random_spd(rng: &mut Rng, b: usize, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(b * n * n);
    for _ in 0..b {
        let m = rng.normals(n * n, 1.0);
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..n).map(|p| m[i * n + p] * m[j * n + p]).sum();
                out.push(dot / n as f64 + if i == j { 1.0 } else { 0.0 });
            }
        }
    }
    out
}

/// One verified run on `b` matrices of size `n`.
pub fn check(
    device: Device,
    dtype: DType,
    b: usize,
    n: usize,
    block: usize,
    threads: usize,
    seed: u64,
) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (a, av) = host_input(dtype, &[b, n, n], &random_spd(&mut rng, b, n))?;
    let (outs, time) = prepare(&a.to_device(device)?, block, threads)?.poisoned().timed()?;
    let parts = vec![Part { name: "L", output: values(&outs[0])?, reference: reference(&av, n) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 3, 37, 8, 64, seed)
}

#[cfg(test)]
mod tests {
    use super::super::entry::Rng;

    #[test]
    fn reference_reconstructs_a_and_is_lower_triangular() {
        let n = 9;
        let a = super::random_spd(&mut Rng::new(3), 2, n);
        let l = super::reference(&a, n);
        for (am, lm) in a.chunks(n * n).zip(l.chunks(n * n)) {
            for i in 0..n {
                for j in 0..n {
                    let llt: f64 = (0..n).map(|p| lm[i * n + p] * lm[j * n + p]).sum();
                    assert!((llt - am[i * n + j]).abs() < 1e-12, "({i}, {j})");
                    if j > i {
                        assert_eq!(lm[i * n + j], 0.0);
                    }
                }
            }
        }
    }
}
