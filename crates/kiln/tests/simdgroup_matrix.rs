//! Metal's 8x8 `simdgroup_matrix`: loads and stores (stride, origin, transpose), multiplies
//! against an f64 reference, tiled matmuls over several simdgroups, and the per-lane layout of
//! `thread_elements()` that MLX's steel GEMM relies on.

mod common;

use common::{assert_close, on, random_array, Rng};
use kiln::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

/// Apple's layout, as MLX's `BlockMMA` computes it: lane `l` holds (row, col) and (row, col + 1).
fn lane_coords(l: usize) -> (usize, usize) {
    let qid = l / 4;
    ((qid & 4) + (l / 2) % 4, (qid & 2) * 2 + (l % 2) * 2)
}

/// Row-major `m x n` product of `a` (`m x k`) and `b` (`k x n`) in f64, plus `c` when given.
fn matmul(a: &[f64], b: &[f64], c: Option<&[f64]>, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            out[i * n + j] = dot + c.map_or(0.0, |c| c[i * n + j]);
        }
    }
    out
}

// One simdgroup: D = A * B and E = A * B + C with every matrix of the input dtype.
fn matmul_8x8_matches_reference(device: Device) {
    let src = r#"
        simdgroup_matrix<T, 8, 8> ma, mb, mc, md;
        simdgroup_load(ma, a, 8);
        simdgroup_load(mb, b, 8);
        simdgroup_load(mc, c, 8);
        simdgroup_multiply(md, ma, mb);
        simdgroup_store(md, d, 8);
        simdgroup_multiply_accumulate(md, ma, mb, mc);
        simdgroup_store(md, e, 8);
    "#;
    let k = MetalKernel::new("sgm_8x8", &["a", "b", "c"], &["d", "e"], src).unwrap();
    for (seed, dtype) in [(1, DType::F32), (2, DType::F16), (3, DType::BF16)] {
        let mut rng = Rng::new(seed);
        let [a, b, c] = [0, 1, 2].map(|_| random_array(&mut rng, dtype, &[8, 8]));
        let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1])
            .output(&[8, 8], dtype)
            .output(&[8, 8], dtype)
            .template("T", dtype)
            .device(device);
        let out = k.call(&[on(device, &a), on(device, &b), on(device, &c)], &spec).unwrap();
        let (av, bv, cv) = (values(&a), values(&b), values(&c));
        assert_close(&format!("A*B ({dtype})"), &out[0], &matmul(&av, &bv, None, 8, 8, 8), dtype);
        assert_close(&format!("A*B+C ({dtype})"), &out[1], &matmul(&av, &bv, Some(&cv), 8, 8, 8), dtype);
    }
}

// Four simdgroups each compute a 16x16 block of a 32x32 product over K = 40 in 8x8 tiles, the
// way MLX's steel GEMM does: tiles loaded in the input dtype, widened to float through
// `thread_elements()`, accumulated in float on top of a filled matrix holding `bias`.
fn tiled_matmul_32x32_matches_reference(device: Device) {
    let src = r#"
        uint sg = simdgroup_index_in_threadgroup;
        uint r0 = (sg / 2) * 16, c0 = (sg % 2) * 16;
        simdgroup_float8x8 acc[2][2];
        for (uint i = 0; i < 2; ++i)
            for (uint j = 0; j < 2; ++j)
                acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(float(bias[0]));
        for (uint k = 0; k < K; k += 8) {
            simdgroup_matrix<T, 8, 8> at[2], bt[2];
            simdgroup_float8x8 af[2], bf[2];
            for (uint i = 0; i < 2; ++i) {
                simdgroup_load(at[i], a, K, ulong2(k, r0 + 8 * i));
                af[i].thread_elements() = float2(at[i].thread_elements());
                simdgroup_load(bt[i], b, N, ulong2(c0 + 8 * i, k));
                bf[i].thread_elements() = float2(bt[i].thread_elements());
            }
            for (uint i = 0; i < 2; ++i)
                for (uint j = 0; j < 2; ++j)
                    simdgroup_multiply_accumulate(acc[i][j], af[i], bf[j], acc[i][j]);
        }
        for (uint i = 0; i < 2; ++i)
            for (uint j = 0; j < 2; ++j)
                simdgroup_store(acc[i][j], out, N, ulong2(c0 + 8 * j, r0 + 8 * i));
    "#;
    let k = MetalKernel::new("sgm_tiled", &["a", "b", "bias"], &["out"], src).unwrap();
    let (m, kk, n) = (32, 40, 32);
    for (seed, dtype) in [(4, DType::F32), (5, DType::F16), (6, DType::BF16)] {
        let mut rng = Rng::new(seed);
        let a = random_array(&mut rng, dtype, &[m, kk]);
        let b = random_array(&mut rng, dtype, &[kk, n]);
        let bias = random_array(&mut rng, DType::F32, &[1]);
        let spec = LaunchSpec::new([128, 1, 1], [128, 1, 1])
            .output(&[m, n], DType::F32)
            .template("T", dtype)
            .template("K", kk as i32)
            .template("N", n as i32)
            .device(device);
        let out = k.call(&[on(device, &a), on(device, &b), on(device, &bias)], &spec).unwrap();
        let c = vec![values(&bias)[0]; m * n];
        let want = matmul(&values(&a), &values(&b), Some(&c), m, kk, n);
        // Inputs are exact in float, so the float accumulation is held to the f32 tolerance.
        assert_close(&format!("tiled {dtype}"), &out[0], &want, DType::F32);
    }
}

// An 8x8 block read transposed from a 16x24 source at origin (column 8, row 4) and stored
// plainly into `y` (stride 12, origin column 3) and transposed into `z` (stride 10, origin
// (1, 2)), which brings back the source block; every other element keeps its init value.
fn load_store_stride_origin_transpose_round_trip(device: Device) {
    let src = r#"
        simdgroup_matrix<T, 8, 8> m;
        simdgroup_load(m, x, 24, ulong2(8, 4), true);
        simdgroup_store(m, y, 12, ulong2(3, 0));
        simdgroup_store(m, z, 10, ulong2(1, 2), true);
    "#;
    let k = MetalKernel::new("sgm_round_trip", &["x"], &["y", "z"], src).unwrap();
    for (seed, dtype) in [(7, DType::F32), (8, DType::F16)] {
        let mut rng = Rng::new(seed);
        let x = random_array(&mut rng, dtype, &[16, 24]);
        let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1])
            .output(&[8, 12], dtype)
            .output(&[10, 10], dtype)
            .init_value(-3.0)
            .template("T", dtype)
            .device(device);
        let out = k.call(&[on(device, &x)], &spec).unwrap();
        let xv = values(&x);
        let mut y = vec![-3.0; 8 * 12];
        let mut z = vec![-3.0; 10 * 10];
        for r in 0..8 {
            for c in 0..8 {
                y[r * 12 + 3 + c] = xv[(4 + c) * 24 + 8 + r];
                z[(2 + r) * 10 + 1 + c] = xv[(4 + r) * 24 + 8 + c];
            }
        }
        assert_eq!(values(&out[0]), y, "transposed load, plain store ({dtype})");
        assert_eq!(values(&out[1]), z, "transposed load, transposed store ({dtype})");
    }
}

// Each lane reports the elements `thread_elements()` gives it after loading a matrix whose
// entries encode their (row, column); then each lane writes its own id into its elements and
// the stored matrix shows where they land. Also the diagonal and filled constructors.
fn thread_elements_follow_apples_lane_layout(device: Device) {
    let src = r#"
        uint l = thread_index_in_simdgroup;
        simdgroup_float8x8 m;
        simdgroup_load(m, coords, 8);
        seen[2 * l] = m.thread_elements()[0];
        seen[2 * l + 1] = m.thread_elements()[1];
        m.thread_elements() = float2(float(2 * l), float(2 * l + 1));
        simdgroup_store(m, placed, 8);
        simdgroup_float8x8 diag(scale[0]);
        simdgroup_store(diag, diagonal, 8);
        simdgroup_store(make_filled_simdgroup_matrix<float, 8, 8>(scale[0]), filled, 8);
    "#;
    let k =
        MetalKernel::new("sgm_layout", &["coords", "scale"], &["seen", "placed", "diagonal", "filled"], src).unwrap();
    let mut rng = Rng::new(9);
    // Entry (r, c) is 100 r + c plus a random offset (a multiple of 1/64, exact in float).
    let offset = (rng.uniform(0.0, 0.5) * 64.0).round() / 64.0;
    let coords: Vec<f64> = (0..64).map(|i| (100 * (i / 8) + i % 8) as f64 + offset).collect();
    let coords = Array::from_f64(DType::F32, &[8, 8], &coords).unwrap();
    let scale = random_array(&mut rng, DType::F32, &[1]);
    let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1])
        .output(&[64], DType::F32)
        .output(&[8, 8], DType::F32)
        .output(&[8, 8], DType::F32)
        .output(&[8, 8], DType::F32)
        .device(device);
    let out = k.call(&[on(device, &coords), on(device, &scale)], &spec).unwrap();
    let s = values(&scale)[0];
    let mut seen = vec![0.0; 64];
    let mut placed = vec![f64::NAN; 64];
    for l in 0..32 {
        let (r, c) = lane_coords(l);
        for i in 0..2 {
            seen[2 * l + i] = (100 * r + c + i) as f64 + offset;
            placed[r * 8 + c + i] = (2 * l + i) as f64;
        }
    }
    let diagonal: Vec<f64> = (0..64).map(|i| if i / 8 == i % 8 { s } else { 0.0 }).collect();
    assert_eq!(values(&out[0]), seen, "elements each lane holds");
    assert_eq!(values(&out[1]), placed, "where each lane's elements are stored");
    assert_eq!(values(&out[2]), diagonal, "simdgroup_matrix(T) is diagonal");
    assert_eq!(values(&out[3]), vec![s; 64], "make_filled_simdgroup_matrix");
}

backend_tests!(
    matmul_8x8_matches_reference,
    tiled_matmul_32x32_matches_reference,
    load_store_stride_origin_transpose_round_trip,
    thread_elements_follow_apples_lane_layout,
);

// A multiply in a simdgroup with only 16 lanes cannot be computed; the emulator reports it.
#[test]
fn multiply_in_partial_simdgroup_is_a_fault_on_cpu() {
    let mut rng = Rng::new(10);
    let a = random_array(&mut rng, DType::F32, &[8, 8]);
    let src =
        "simdgroup_float8x8 m, p;\nsimdgroup_load(m, a, 8);\nsimdgroup_multiply(p, m, m);\nsimdgroup_store(p, out, 8);";
    let k = MetalKernel::new("sgm_partial", &["a"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([16, 1, 1], [16, 1, 1]).output(&[8, 8], DType::F32).device(Device::Cpu);
    match k.call(&[(&a).into()], &spec) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "sgm_partial");
            assert!(msg.contains("all 32 lanes"), "{msg}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
sanitizer_clean_tests!(tiled_matmul_32x32_matches_reference);
