//! GEMMs built on MLX's own `steel/gemm/gemm.h` (MLX 0.32.4), pasted into a kernel's `header`
//! as real kernels do: the header text with its `#include "mlx/..."` lines resolved (the Metal
//! standard headers stay), and a body that instantiates `GEMMKernel` the way MLX's
//! `steel_gemm_fused.h` does (its loaders, its `BlockMMA`, `gemm_loop` for the edge tiles).
//! Checked against a plain-Rust f64 product with the tolerance table.
//!
//! The headers come from the mlx-metal wheel: `scripts/install-mlx-headers.sh` installs them and
//! `scripts/test.sh` names their directory in `KILN_MLX_HEADERS`. Without it the tests skip with
//! a message, unless `KILN_REQUIRE_BACKEND` is set (CI), which makes that a failure.

mod common;

use std::collections::HashSet;
use std::path::Path;

use common::{assert_close, on, random_array, Rng};
use kiln::backend::cuda;
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

const GEMM_H: &str = "mlx/backend/metal/kernels/steel/gemm/gemm.h";

/// `rel` (a path under `include`) with every `#include "mlx/..."` replaced by that file's text,
/// each file once (they all use `#pragma once`, which is dropped).
fn inline_header(include: &Path, rel: &str, seen: &mut HashSet<String>) -> Result<String, String> {
    if !seen.insert(rel.to_string()) {
        return Ok(String::new());
    }
    let path = include.join(rel);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = String::new();
    for line in text.lines() {
        let directive: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(name) = directive.strip_prefix("#include \"mlx/").and_then(|r| r.strip_suffix('"')) {
            out.push_str(&inline_header(include, &format!("mlx/{name}"), seen)?);
        } else if directive != "#pragma once" {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// The inlined `gemm.h`, or `None` (skip) when the headers are not installed and no backend is
/// required.
fn steel_header() -> Option<String> {
    let Some(include) = kiln::config::mlx_headers() else {
        if let Some(backend) = kiln::config::required_backend() {
            panic!(
                "KILN_REQUIRE_BACKEND={backend} but KILN_MLX_HEADERS is unset: run \
                 `export KILN_MLX_HEADERS=$(scripts/install-mlx-headers.sh)` (scripts/test.sh does)"
            );
        }
        eprintln!("skipping: KILN_MLX_HEADERS is unset (scripts/install-mlx-headers.sh installs MLX's headers)");
        return None;
    };
    let text = inline_header(&include, GEMM_H, &mut HashSet::new()).unwrap_or_else(|e| panic!("KILN_MLX_HEADERS: {e}"));
    assert!(text.contains("struct GEMMKernel"), "{}: not MLX's steel GEMM header", include.display());
    Some(text + "\nusing namespace mlx::steel;\n")
}

/// D = A·B for row-major A (M×K) and B (K×N, or N×K read transposed with TRANSPOSE_B): one
/// threadgroup per BM×BN tile of D, as MLX's
/// `gemm` kernel with `align_M/N/K` false: full tiles run the aligned loop, edge tiles
/// `gemm_loop` with bounds checks, a K remainder the last partial step.
const BODY: &str = r#"
  using gemm_kernel = GEMMKernel<T, T, BM, BN, BK, WM, WN, false, TRANSPOSE_B, MN_ALIGNED, K_ALIGNED, float>;
  using loader_a_t = typename gemm_kernel::loader_a_t;
  using loader_b_t = typename gemm_kernel::loader_b_t;
  using mma_t = typename gemm_kernel::mma_t;

  const uint simd_lane_id = thread_index_in_simdgroup;
  const uint simd_group_id = simdgroup_index_in_threadgroup;
  const int tid_x = int(threadgroup_position_in_grid.x);
  const int tid_y = int(threadgroup_position_in_grid.y);
  if ((N + BN - 1) / BN <= tid_x || (M + BM - 1) / BM <= tid_y) {
    return;
  }

  threadgroup T As[gemm_kernel::tgp_mem_size_a];
  threadgroup T Bs[gemm_kernel::tgp_mem_size_b];

  const int c_row = tid_y * BM;
  const int c_col = tid_x * BN;
  const device T* a_tile = A + size_t(c_row) * K;
  const int ldb = TRANSPOSE_B ? K : N;
  const device T* b_tile = B + (TRANSPOSE_B ? size_t(c_col) * K : size_t(c_col));
  device T* d_tile = D + size_t(c_row) * N + size_t(c_col);

  thread loader_a_t loader_a(a_tile, K, As, simd_group_id, simd_lane_id);
  thread loader_b_t loader_b(b_tile, ldb, Bs, simd_group_id, simd_lane_id);
  thread mma_t mma_op(simd_group_id, simd_lane_id);

  const short tgp_bm = short(min(BM, M - c_row));
  const short tgp_bn = short(min(BN, N - c_col));
  const int gemm_k_iterations = K / BK;
  const short leftover_bk = short(K - gemm_k_iterations * BK);

  if (MN_ALIGNED || (tgp_bm == BM && tgp_bn == BN)) {
    gemm_kernel::gemm_loop(As, Bs, gemm_k_iterations, loader_a, loader_b, mma_op,
                           tgp_bm, tgp_bn, leftover_bk, LoopAlignment<true, true, K_ALIGNED>{});
    mma_op.store_result(d_tile, N);
  } else {
    gemm_kernel::gemm_loop(As, Bs, gemm_k_iterations, loader_a, loader_b, mma_op,
                           tgp_bm, tgp_bn, leftover_bk, LoopAlignment<false, false, K_ALIGNED>{});
    mma_op.store_result_safe(d_tile, N, short2(tgp_bn, tgp_bm));
  }
"#;

/// Tile shape: BM×BN tiles of D, BK deep, WM×WN SIMD-groups.
const TILE: (usize, usize, usize, usize, usize) = (32, 32, 16, 2, 2);

fn kernel(header: &str) -> MetalKernel {
    MetalKernel::new("steel_gemm", &["A", "B"], &["D"], BODY).expect("kernel").header(header)
}

fn spec(dtype: DType, m: usize, n: usize, k: usize, transpose_b: bool) -> LaunchSpec {
    let (bm, bn, bk, wm, wn) = TILE;
    let threads = (wm * wn * 32) as u32;
    let groups = [n.div_ceil(bn) as u32, m.div_ceil(bm) as u32];
    LaunchSpec::new([groups[0] * threads, groups[1], 1], [threads, 1, 1])
        .output(&[m, n], dtype)
        .init_value(f64::NAN)
        .template("T", dtype)
        .template("BM", bm as i32)
        .template("BN", bn as i32)
        .template("BK", bk as i32)
        .template("WM", wm as i32)
        .template("WN", wn as i32)
        .template("M", m as i32)
        .template("N", n as i32)
        .template("K", k as i32)
        .template("MN_ALIGNED", m % bm == 0 && n % bn == 0)
        .template("K_ALIGNED", k % bk == 0)
        .template("TRANSPOSE_B", transpose_b)
}

fn matmul(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut d = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            d[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    d
}

fn check_gemm(device: Device, dtype: DType, (m, n, k): (usize, usize, usize), transpose_b: bool, seed: u64) {
    let Some(header) = steel_header() else { return };
    let mut rng = Rng::new(seed);
    let a = random_array(&mut rng, dtype, &[m, k]);
    let b_shape = if transpose_b { [n, k] } else { [k, n] };
    let b = random_array(&mut rng, dtype, &b_shape);
    let mut b_values = b.to_f64_vec().expect("b");
    if transpose_b {
        b_values = (0..k * n).map(|i| b_values[(i % n) * k + i / n]).collect();
    }
    let reference = matmul(&a.to_f64_vec().expect("a"), &b_values, m, n, k);
    let what = format!("steel GEMM {dtype} {m}x{n}x{k}{}", if transpose_b { " (B transposed)" } else { "" });
    let out = kernel(&header)
        .call(&[on(device, &a), on(device, &b)], &spec(dtype, m, n, k, transpose_b))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_close(&what, &out[0], &reference, dtype);
}

fn steel_gemm_f32_aligned(device: Device) {
    check_gemm(device, DType::F32, (64, 64, 64), false, 1);
}

fn steel_gemm_f32_edges(device: Device) {
    check_gemm(device, DType::F32, (100, 37, 50), false, 2);
}

fn steel_gemm_f32_transposed_b(device: Device) {
    check_gemm(device, DType::F32, (72, 96, 40), true, 5);
}

fn steel_gemm_f16_edges(device: Device) {
    check_gemm(device, DType::F16, (96, 80, 72), false, 3);
}

fn steel_gemm_bf16_aligned(device: Device) {
    check_gemm(device, DType::BF16, (128, 64, 96), false, 4);
}

backend_tests!(
    steel_gemm_f32_aligned,
    steel_gemm_f32_edges,
    steel_gemm_f32_transposed_b,
    steel_gemm_f16_edges,
    steel_gemm_bf16_aligned
);

#[test]
fn steel_gemm_compiles_with_nvrtc() {
    let Some(header) = steel_header() else { return };
    if !common::nvrtc_or_skip() {
        return;
    }
    let kernel = kernel(&header);
    for (dtype, m, n, k, transpose_b) in
        [(DType::F32, 64, 64, 64, false), (DType::F16, 96, 80, 72, true), (DType::BF16, 100, 37, 50, false)]
    {
        let inputs = [
            Array::from_f64(dtype, &[m, k], &vec![1.0; m * k]).expect("a"),
            Array::from_f64(dtype, &[k, n], &vec![1.0; k * n]).expect("b"),
        ];
        let generated = kernel.generate(&inputs, &spec(dtype, m, n, k, transpose_b)).expect("generate");
        let cubin = cuda::compile_cubin(&kernel.program(&generated), (9, 0))
            .unwrap_or_else(|e| panic!("steel GEMM {dtype} {m}x{n}x{k}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "steel GEMM {dtype}: not a cubin");
    }
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
sanitizer_clean_tests!(steel_gemm_f32_edges);
