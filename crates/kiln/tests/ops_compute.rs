//! The compute-bound library ops (attention, grid_sample and its VJP, Cholesky, QR, gated delta
//! net kkt) against their plain-Rust references on fresh seeded inputs, on every backend, with
//! outputs poisoned (NaN) before each run; plus typed errors for bad input and NVRTC compilation
//! of every kernel variant.

mod common;

use common::{rel_l2, tolerance, Rng};
use kiln::ops::gdn_kkt;
use kiln::{Array, DType, Device, Error};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// A random array of `dtype` on `device` plus the values it holds after rounding.
fn input(rng: &mut Rng, device: Device, dtype: DType, shape: &[usize], scale: f64) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let host = Array::from_f64(dtype, shape, &rng.normals(n, scale)).unwrap();
    let values = host.to_f64_vec().unwrap();
    (host.to_device(device).unwrap(), values)
}

fn uniform_input(rng: &mut Rng, device: Device, dtype: DType, shape: &[usize], lo: f64, hi: f64) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let host = Array::from_f64(dtype, shape, &rng.uniforms(n, lo, hi)).unwrap();
    let values = host.to_f64_vec().unwrap();
    (host.to_device(device).unwrap(), values)
}

fn host_values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

#[track_caller]
fn assert_within(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert!(want.iter().any(|&v| v != 0.0), "{what}: the reference is all zeros");
    let err = rel_l2(got, want);
    eprintln!("{what}: {err:e}");
    assert!(
        err <= tol,
        "{what}: relative L2 error {err:e} exceeds {tol:e} (got {:?}, want {:?})",
        &got[..got.len().min(6)],
        &want[..want.len().min(6)]
    );
}

#[track_caller]
fn assert_op_error<T: std::fmt::Debug>(what: &str, op: &str, result: kiln::Result<T>) {
    match result {
        Err(e @ (Error::InvalidArgument { .. } | Error::ShapeMismatch { .. } | Error::UnsupportedDType { .. })) => {
            assert!(e.to_string().starts_with(&format!("[{op}]")), "{what}: error does not name {op}: {e}");
        }
        other => panic!("{what}: expected a typed argument error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// gated delta net kkt

fn gdn_kkt_matches_float64_reference(device: Device) {
    // [B, T, Hg, H, K]: a partial chunk, grouped heads, several K tiles.
    let cases: [([usize; 5], DType); 5] = [
        ([1, 64, 1, 1, 64], DType::BF16),
        ([2, 101, 2, 4, 64], DType::BF16),
        ([1, 130, 1, 3, 128], DType::BF16),
        ([1, 70, 2, 2, 96], DType::F16),
        ([2, 33, 1, 2, 64], DType::F32),
    ];
    for (seed, (dims, dtype)) in cases.into_iter().enumerate() {
        let [b, t, hg, h, kd] = dims;
        let mut rng = Rng::new(100 + seed as u64);
        let (k, kv) = input(&mut rng, device, dtype, &[b, t, hg, kd], 0.5);
        let (beta, bv) = uniform_input(&mut rng, device, DType::F32, &[b, t, h], 0.1, 1.0);
        // Cumulative log gates over the whole sequence, large enough that the f32 difference
        // g_i - g_j rounds: the kernel must still match the f64 gates.
        let mut gv = vec![0.0; b * t * h];
        for bi in 0..b {
            for hi in 0..h {
                let mut acc = -3.0;
                for ti in 0..t {
                    acc -= rng.uniform(0.01, 1.5);
                    gv[(bi * t + ti) * h + hi] = acc;
                }
            }
        }
        let g_host = Array::from_f64(DType::F32, &[b, t, h], &gv).unwrap();
        let gv = g_host.to_f64_vec().unwrap();
        let g = g_host.to_device(device).unwrap();
        let out = gdn_kkt::gdn_chunk_scaled_dot_kkt_with(&k, &beta, &g, 64, Some(f64::NAN)).unwrap();
        assert_eq!(out.shape(), &[b, t, h, 64]);
        assert_eq!(out.device(), device);
        let want = gdn_kkt::reference(&kv, &bv, &gv, dims, dtype);
        let got = host_values(&out);
        assert_within(&format!("gdn_kkt {dims:?} {dtype}"), &got, &want, 1e-5);
    }
}

fn gdn_kkt_rejects_bad_input(device: Device) {
    let op = "gdn_chunk_scaled_dot_kkt";
    let mut rng = Rng::new(7);
    let (k, _) = input(&mut rng, device, DType::BF16, &[1, 10, 2, 64], 1.0);
    let (beta, _) = input(&mut rng, device, DType::F32, &[1, 10, 4], 1.0);
    let (g, _) = input(&mut rng, device, DType::F32, &[1, 10, 4], 1.0);
    assert_op_error("chunk", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k, &beta, &g, 32));
    let (beta3, _) = input(&mut rng, device, DType::F32, &[1, 10, 3], 1.0);
    assert_op_error("H not a multiple of Hg", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k, &beta3, &beta3, 64));
    let (beta_h, _) = input(&mut rng, device, DType::F16, &[1, 10, 4], 1.0);
    assert_op_error("beta dtype", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k, &beta_h, &g, 64));
    let (k3, _) = input(&mut rng, device, DType::BF16, &[10, 2, 64], 1.0);
    assert_op_error("k rank", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k3, &beta, &g, 64));
    let (g_short, _) = input(&mut rng, device, DType::F32, &[1, 9, 4], 1.0);
    assert_op_error("g shape", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k, &beta, &g_short, 64));
    let k_empty = Array::from_f64(DType::BF16, &[1, 0, 2, 64], &[]).unwrap().to_device(device).unwrap();
    let e = Array::from_f64(DType::F32, &[1, 0, 4], &[]).unwrap().to_device(device).unwrap();
    assert_op_error("empty", op, gdn_kkt::gdn_chunk_scaled_dot_kkt(&k_empty, &e, &e, 64));
    let _ = tolerance(DType::F32);
}

backend_tests!(gdn_kkt_matches_float64_reference, gdn_kkt_rejects_bad_input);

// ---------------------------------------------------------------------------------------------
// grid_sample and its VJP

use kiln::ops::grid_sample;

/// (B, H, W, C, gH, gW): odd sizes, C below, at and above a simdgroup, batch > 1; C = 8, 32
/// and 64 take the forward's vector path (and two channels per lane in the VJP at 45 and 64).
const GRID_CASES: [[usize; 6]; 6] = [
    [1, 5, 7, 3, 4, 6],
    [2, 9, 6, 32, 3, 5],
    [2, 4, 11, 45, 5, 3],
    [3, 6, 6, 1, 7, 7],
    [2, 5, 4, 8, 3, 3],
    [1, 6, 5, 64, 4, 3],
];

fn grid_inputs(rng: &mut Rng, device: Device, dtype: DType, dims: [usize; 6]) -> [(Array, Vec<f64>); 2] {
    let [b, h, w, c, gh, gw] = dims;
    // Slightly beyond [-1, 1] so some neighbours fall outside the image.
    [input(rng, device, dtype, &[b, h, w, c], 1.0), uniform_input(rng, device, dtype, &[b, gh, gw, 2], -1.1, 1.1)]
}

fn grid_sample_matches_reference(device: Device) {
    for dtype in DTYPES {
        for (seed, dims) in GRID_CASES.into_iter().enumerate() {
            let mut rng = Rng::new(200 + seed as u64);
            let [(x, xv), (grid, gv)] = grid_inputs(&mut rng, device, dtype, dims);
            let out = grid_sample::grid_sample_with(&x, &grid, Some(f64::NAN)).unwrap();
            assert_eq!((out.dtype(), out.device()), (dtype, device));
            let want = grid_sample::reference(&xv, &gv, dims);
            assert_within(&format!("grid_sample {dims:?} {dtype}"), &host_values(&out), &want, tolerance(dtype));
        }
    }
}

fn grid_sample_vjp_matches_reference(device: Device) {
    for dtype in DTYPES {
        for (seed, dims) in GRID_CASES.into_iter().enumerate() {
            let [b, _, _, c, gh, gw] = dims;
            let mut rng = Rng::new(300 + seed as u64);
            let [(x, xv), (grid, gv)] = grid_inputs(&mut rng, device, dtype, dims);
            let (cot, cv) = input(&mut rng, device, dtype, &[b, gh, gw, c], 1.0);
            let (xg, gg) = grid_sample::grid_sample_vjp(&x, &grid, &cot).unwrap();
            assert_eq!((xg.dtype(), gg.dtype(), xg.shape(), gg.shape()), (dtype, dtype, x.shape(), grid.shape()));
            let (want_x, want_g) = grid_sample::reference_vjp(&xv, &gv, &cv, dims);
            let what = format!("grid_sample_vjp {dims:?} {dtype}");
            assert_within(&format!("{what} x_grad"), &host_values(&xg), &want_x, tolerance(dtype));
            assert_within(&format!("{what} grid_grad"), &host_values(&gg), &want_g, tolerance(dtype));
        }
    }
}

/// The VJP reference against central differences of the forward reference, in f64.
#[test]
fn grid_sample_vjp_reference_matches_finite_differences() {
    for (seed, dims) in GRID_CASES.into_iter().enumerate() {
        let [b, h, w, c, gh, gw] = dims;
        let mut rng = Rng::new(400 + seed as u64);
        let x = rng.normals(b * h * w * c, 1.0);
        let grid = rng.uniforms(b * gh * gw * 2, -1.1, 1.1);
        let cot = rng.normals(b * gh * gw * c, 1.0);
        let loss = |x: &[f64], grid: &[f64]| -> f64 {
            grid_sample::reference(x, grid, dims).iter().zip(&cot).map(|(o, g)| o * g).sum()
        };
        let (xg, gg) = grid_sample::reference_vjp(&x, &grid, &cot, dims);
        let eps = 1e-6;
        let fd = |v: &[f64], i: usize, f: &dyn Fn(&[f64]) -> f64| {
            let (mut up, mut down) = (v.to_vec(), v.to_vec());
            up[i] += eps;
            down[i] -= eps;
            (f(&up) - f(&down)) / (2.0 * eps)
        };
        let fd_x: Vec<f64> = (0..x.len()).map(|i| fd(&x, i, &|x| loss(x, &grid))).collect();
        let fd_g: Vec<f64> = (0..grid.len()).map(|i| fd(&grid, i, &|g| loss(&x, g))).collect();
        assert_within(&format!("fd x_grad {dims:?}"), &xg, &fd_x, 1e-6);
        assert_within(&format!("fd grid_grad {dims:?}"), &gg, &fd_g, 1e-6);
    }
}

fn grid_sample_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(9);
    let (x, _) = input(&mut rng, device, DType::F32, &[2, 4, 4, 3], 1.0);
    let (grid, _) = input(&mut rng, device, DType::F32, &[2, 3, 3, 2], 0.5);
    let (grid3, _) = input(&mut rng, device, DType::F32, &[2, 3, 3, 3], 0.5);
    assert_op_error("grid last axis", "grid_sample", grid_sample::grid_sample(&x, &grid3));
    let (grid_b, _) = input(&mut rng, device, DType::F32, &[1, 3, 3, 2], 0.5);
    assert_op_error("batch mismatch", "grid_sample", grid_sample::grid_sample(&x, &grid_b));
    let xi = Array::from_vec(&[1, 2, 2, 1], vec![1i32, 2, 3, 4]).unwrap().to_device(device).unwrap();
    assert_op_error("int x", "grid_sample", grid_sample::grid_sample(&xi, &grid_b));
    let (x3, _) = input(&mut rng, device, DType::F32, &[4, 4, 3], 1.0);
    assert_op_error("x rank", "grid_sample", grid_sample::grid_sample(&x3, &grid));
    let empty = Array::from_f64(DType::F32, &[2, 0, 4, 3], &[]).unwrap().to_device(device).unwrap();
    assert_op_error("empty x", "grid_sample", grid_sample::grid_sample(&empty, &grid));
    let (cot_bad, _) = input(&mut rng, device, DType::F32, &[2, 3, 3, 4], 1.0);
    assert_op_error("cotangent shape", "grid_sample_vjp", grid_sample::grid_sample_vjp(&x, &grid, &cot_bad));
}

/// Wide and tall images: the sampling coordinate reaches ~1000, where its float rounding alone
/// (~6e-5) would exceed the f32 tolerance, so this checks the fraction is computed accurately.
fn grid_sample_is_accurate_on_large_images(device: Device) {
    for (seed, dims) in [[1, 3, 1024, 4, 8, 8], [1, 1000, 3, 4, 8, 8], [2, 2, 1537, 3, 6, 5]].into_iter().enumerate() {
        let [b, _, _, c, gh, gw] = dims;
        let mut rng = Rng::new(700 + seed as u64);
        let [(x, xv), (grid, gv)] = grid_inputs(&mut rng, device, DType::F32, dims);
        let out = grid_sample::grid_sample_with(&x, &grid, Some(f64::NAN)).unwrap();
        let want = grid_sample::reference(&xv, &gv, dims);
        assert_within(&format!("grid_sample {dims:?}"), &host_values(&out), &want, tolerance(DType::F32));
        let (cot, cv) = input(&mut rng, device, DType::F32, &[b, gh, gw, c], 1.0);
        let (xg, gg) = grid_sample::grid_sample_vjp(&x, &grid, &cot).unwrap();
        let (want_x, want_g) = grid_sample::reference_vjp(&xv, &gv, &cv, dims);
        assert_within(&format!("grid_sample_vjp {dims:?} x_grad"), &host_values(&xg), &want_x, tolerance(DType::F32));
        assert_within(
            &format!("grid_sample_vjp {dims:?} grid_grad"),
            &host_values(&gg),
            &want_g,
            tolerance(DType::F32),
        );
    }
}

backend_tests!(
    grid_sample_matches_reference,
    grid_sample_vjp_matches_reference,
    grid_sample_rejects_bad_input,
    grid_sample_is_accurate_on_large_images
);

// ---------------------------------------------------------------------------------------------
// scaled dot-product attention

use kiln::ops::attention::{self, Mask, Path};

#[derive(Clone, Copy, Debug)]
enum MaskCase {
    None,
    Causal,
    /// An additive mask of this shape (broadcast to (B, Hq, Tq, Tk)).
    Additive(&'static [usize]),
}

/// Broadcasts `values` of `shape` (right-aligned) to `target`.
fn broadcast(values: &[f64], shape: &[usize], target: [usize; 4]) -> Vec<f64> {
    let full: Vec<usize> = std::iter::repeat_n(1, 4 - shape.len()).chain(shape.iter().copied()).collect();
    let mut out = Vec::with_capacity(target.iter().product());
    for a in 0..target[0] {
        for b in 0..target[1] {
            for c in 0..target[2] {
                for d in 0..target[3] {
                    let idx = [a, b, c, d];
                    let flat = (0..4).fold(0, |acc, i| acc * full[i] + if full[i] == 1 { 0 } else { idx[i] });
                    out.push(values[flat]);
                }
            }
        }
    }
    out
}

fn check_attention(device: Device, dtype: DType, dims: [usize; 6], mask: MaskCase, seed: u64) {
    let [b, hq, hkv, tq, tk, d] = dims;
    let mut rng = Rng::new(seed);
    let (q, qv) = input(&mut rng, device, dtype, &[b, hq, tq, d], 1.0);
    let (k, kv) = input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0);
    let (v, vv) = input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0);
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let (out, want) = match mask {
        MaskCase::None | MaskCase::Causal => {
            let causal = matches!(mask, MaskCase::Causal);
            let m = if causal { Mask::Causal } else { Mask::None };
            let out = attention::scaled_dot_product_attention_with(&q, &k, &v, scale, m, Some(f64::NAN)).unwrap();
            (out, attention::reference(&qv, &kv, &vv, dims, scale as f64, causal, None))
        }
        MaskCase::Additive(shape) => {
            let (m, mv) = input(&mut rng, device, dtype, shape, 2.0);
            let full = broadcast(&mv, shape, [b, hq, tq, tk]);
            let out =
                attention::scaled_dot_product_attention_with(&q, &k, &v, scale, Mask::Additive(&m), Some(f64::NAN))
                    .unwrap();
            (out, attention::reference(&qv, &kv, &vv, dims, scale as f64, false, Some(&full)))
        }
    };
    assert_eq!((out.shape(), out.dtype(), out.device()), (q.shape(), dtype, device));
    let what = format!("attention {dims:?} {mask:?} {dtype} {:?}", attention::path(b * hq, tq, tk, d, dtype));
    assert_within(&what, &host_values(&out), &want, tolerance(dtype));
}

fn attention_matches_reference(device: Device) {
    // [B, Hq, Hkv, Tq, Tk, D]
    let cases: [([usize; 6], MaskCase); 10] = [
        ([2, 4, 2, 13, 13, 64], MaskCase::None),
        ([2, 4, 2, 13, 13, 64], MaskCase::Causal),
        ([1, 2, 1, 9, 37, 80], MaskCase::Causal),
        ([1, 2, 2, 11, 7, 32], MaskCase::Causal),
        ([2, 2, 1, 10, 21, 48], MaskCase::Additive(&[10, 21])),
        ([2, 2, 2, 6, 5, 64], MaskCase::Additive(&[2, 1, 6, 5])),
        ([1, 4, 1, 1, 300, 64], MaskCase::None),
        ([2, 2, 1, 3, 77, 40], MaskCase::Causal),
        ([1, 2, 1, 2, 150, 64], MaskCase::Additive(&[1, 2, 2, 150])),
        // Rows of 20 f16/bf16 values are not whole 16-byte chunks: element-wise decode loads.
        ([1, 2, 2, 1, 130, 20], MaskCase::Causal),
    ];
    for dtype in DTYPES {
        for (seed, (dims, mask)) in cases.iter().enumerate() {
            check_attention(device, dtype, *dims, *mask, 500 + seed as u64);
        }
    }
    // Untiled prefill: f32 at D = 112 takes 16-key tiles; D = 256 takes 8.
    check_attention(device, DType::F32, [1, 1, 1, 10, 40, 112], MaskCase::Causal, 520);
    // Tiled prefill over several query and key tiles, D = 128, every mask kind.
    check_attention(device, DType::BF16, [1, 2, 1, 70, 75, 128], MaskCase::Causal, 522);
    check_attention(device, DType::F32, [1, 2, 2, 40, 33, 96], MaskCase::Additive(&[40, 33]), 523);
    check_attention(device, DType::F32, [1, 1, 1, 9, 20, 256], MaskCase::None, 521);
}

#[test]
fn attention_path_rule_is_deterministic_and_covers_both_paths() {
    let decode = |splits, split_len, lanes_per_key| Path::Decode { splits, split_len, lanes_per_key };
    assert_eq!(attention::path(4, 1, 300, 64, DType::F16), decode(5, 64, 8));
    // The decode bench shape: 1024 rows × 8 ranges fill the GPU; 16 lanes read a 256-byte row.
    assert_eq!(attention::path(32 * 32, 1, 8192, 128, DType::BF16), decode(8, 1024, 16));
    assert_eq!(attention::path(1, 1, 8192, 256, DType::F32), decode(128, 64, 32));
    assert_eq!(attention::path(4, 2, 150, 64, DType::BF16), decode(3, 64, 8));
    assert_eq!(attention::path(1, 13, 13, 64, DType::F32), Path::PrefillTiled);
    assert_eq!(attention::path(1, 9, 37, 80, DType::F16), Path::Prefill { keys_per_tile: 32 });
    assert_eq!(attention::path(1, 10, 40, 112, DType::F32), Path::Prefill { keys_per_tile: 16 });
    assert_eq!(attention::path(1, 9, 20, 256, DType::F32), Path::Prefill { keys_per_tile: 8 });
    assert_eq!(attention::path(1, 4096, 4096, 128, DType::BF16), Path::PrefillTiled);
}

fn attention_rejects_bad_input(device: Device) {
    let op = "scaled_dot_product_attention";
    let mut rng = Rng::new(11);
    let (q, _) = input(&mut rng, device, DType::F32, &[1, 3, 5, 16], 1.0);
    let (k, _) = input(&mut rng, device, DType::F32, &[1, 2, 5, 16], 1.0);
    let sdpa = |q: &Array, k: &Array, v: &Array, m: Mask| attention::scaled_dot_product_attention(q, k, v, 0.25, m);
    assert_op_error("heads not a multiple", op, sdpa(&q, &k, &k, Mask::None));
    let (q2, _) = input(&mut rng, device, DType::F32, &[1, 2, 5, 16], 1.0);
    let (kh, _) = input(&mut rng, device, DType::F16, &[1, 2, 5, 16], 1.0);
    assert_op_error("dtype mismatch", op, sdpa(&q2, &kh, &kh, Mask::None));
    let (kd, _) = input(&mut rng, device, DType::F32, &[1, 2, 5, 8], 1.0);
    assert_op_error("head dim mismatch", op, sdpa(&q2, &kd, &kd, Mask::None));
    let (m_bad, _) = input(&mut rng, device, DType::F32, &[3, 5], 1.0);
    assert_op_error("mask shape", op, sdpa(&q2, &k, &k, Mask::Additive(&m_bad)));
    let (q3, _) = input(&mut rng, device, DType::F32, &[2, 5, 16], 1.0);
    assert_op_error("rank", op, sdpa(&q3, &k, &k, Mask::None));
    let (big, _) = input(&mut rng, device, DType::F32, &[1, 1, 2, 300], 1.0);
    assert_op_error("head dim too large", op, sdpa(&big, &big, &big, Mask::None));
    let empty = Array::from_f64(DType::F32, &[1, 2, 0, 16], &[]).unwrap().to_device(device).unwrap();
    assert_op_error("empty keys", op, sdpa(&q2, &empty, &empty, Mask::None));
}

backend_tests!(attention_matches_reference, attention_rejects_bad_input);

// ---------------------------------------------------------------------------------------------
// Cholesky and QR

use kiln::ops::{cholesky, qr};

/// `a (r x k) * b^T (c x k)^T` for row-major matrices.
fn mul_bt(a: &[f64], b: &[f64], r: usize, c: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[i * c + j] = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
        }
    }
    out
}

fn transpose(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|e| a[(e % r) * c + e / r]).collect()
}

/// A well-conditioned SPD matrix: `M M^T / n + I`.
fn spd(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = rng.normals(n * n, 1.0);
    let mut a = mul_bt(&m, &m, n, n, n);
    for (e, v) in a.iter_mut().enumerate() {
        *v /= n as f64;
        if e % (n + 1) == 0 {
            *v += 1.0;
        }
    }
    a
}

fn batched_input(device: Device, shape: &[usize], values: &[f64]) -> (Array, Vec<f64>) {
    let host = Array::from_f64(DType::F32, shape, values).unwrap();
    let rounded = host.to_f64_vec().unwrap();
    (host.to_device(device).unwrap(), rounded)
}

fn cholesky_matches_reference_and_reconstructs(device: Device) {
    // (batch shape, N): the register variant at 1, 5 (several matrices per simdgroup, a
    // partial last simdgroup), 16 (vector rows), 17 and 32 (one matrix per simdgroup), 33 and 64
    // (two rows per lane); the blocked variant just above (one partial block), at 100 and 130
    // (a partial last block, a partial update tile), 128 (whole blocks) and 200 (four blocks);
    // 300, 513 and 1024 only on a GPU.
    let mut cases: Vec<(Vec<usize>, usize)> = vec![
        (vec![7], 1),
        (vec![3, 3], 5),
        (vec![5], 16),
        (vec![2, 1], 17),
        (vec![3], 32),
        (vec![2], 33),
        (vec![2], 64),
        (vec![3], 65),
        (vec![2], 100),
        (vec![2], 128),
        (vec![2, 1], 130),
        (vec![1], 200),
    ];
    if device != Device::Cpu {
        cases.extend([(vec![3], 300), (vec![2], 513), (vec![2], 1024)]);
    }
    let tol = tolerance(DType::F32);
    for (seed, (batch, n)) in cases.into_iter().enumerate() {
        let mut rng = Rng::new(600 + seed as u64);
        let count: usize = batch.iter().product();
        let values: Vec<f64> = (0..count).flat_map(|_| spd(&mut rng, n)).collect();
        let shape: Vec<usize> = batch.iter().copied().chain([n, n]).collect();
        let (a, av) = batched_input(device, &shape, &values);
        let l = cholesky::cholesky_with(&a, Some(f64::NAN)).unwrap();
        assert_eq!((l.shape(), l.device()), (a.shape(), device));
        let lv = host_values(&l);
        for b in 0..count {
            let (am, lm) = (&av[b * n * n..][..n * n], &lv[b * n * n..][..n * n]);
            let what = format!("cholesky {shape:?} matrix {b} ({:?})", cholesky::variant(n));
            let want = cholesky::reference(am, n).unwrap();
            assert_within(&what, lm, &want, tol);
            assert!((0..n * n).all(|e| e % n <= e / n || lm[e] == 0.0), "{what}: upper triangle not zero");
            assert_within(&format!("{what} L L^T"), &mul_bt(lm, lm, n, n, n), am, tol);
        }
    }
}

fn cholesky_reports_the_non_spd_matrix(device: Device) {
    // The register variant (several matrices per simdgroup; two rows per lane) and blocked
    // (the bad pivot in the first block, in a later one, in a partial last block).
    for (n, bad) in [(1, 2), (12, 2), (64, 1), (80, 1), (130, 1), (200, 2)] {
        let mut rng = Rng::new(700 + n as u64);
        let mut values: Vec<f64> = (0..3).flat_map(|_| spd(&mut rng, n)).collect();
        // Matrix `bad` gets a negative pivot in the middle.
        values[bad * n * n + (n / 2) * (n + 1)] = -5.0;
        let (a, _) = batched_input(device, &[3, n, n], &values);
        match cholesky::cholesky(&a) {
            Err(e @ Error::InvalidArgument { .. }) => {
                let msg = e.to_string();
                let (matrix, pivot) = (format!("matrix {bad} "), format!("pivot {} ", n / 2));
                assert!(msg.starts_with("[cholesky]") && msg.contains(&matrix) && msg.contains(&pivot), "{msg}");
            }
            other => panic!("n={n}: expected a non-SPD error, got {other:?}"),
        }
        // A NaN is reported too.
        values[bad * n * n + (n / 2) * (n + 1)] = f64::NAN;
        let (a, _) = batched_input(device, &[3, n, n], &values);
        assert!(cholesky::cholesky(&a).is_err(), "n={n}: NaN pivot accepted");
    }
}

/// With several failing matrices across simdgroups of the flag reduction, the first is named.
fn cholesky_names_the_first_of_several_failures(device: Device) {
    let (n, count) = (5, 70);
    let mut rng = Rng::new(710);
    let mut values: Vec<f64> = (0..count).flat_map(|_| spd(&mut rng, n)).collect();
    for bad in [66, 37, 41] {
        values[bad * n * n + 2 * (n + 1)] = -1.0;
    }
    let (a, _) = batched_input(device, &[count, n, n], &values);
    let msg = cholesky::cholesky(&a).unwrap_err().to_string();
    assert!(msg.contains("matrix 37 ") && msg.contains("pivot 2 "), "{msg}");
    // Blocked: matrix 1 fails in its second block, matrix 3 in its first; within matrix 1 the
    // first of two bad pivots (70, then 90) is named.
    let (n, count) = (100, 4);
    let mut values: Vec<f64> = (0..count).flat_map(|_| spd(&mut rng, n)).collect();
    for (bad, col) in [(3, 10), (1, 90), (1, 70)] {
        values[bad * n * n + col * (n + 1)] = -1.0;
    }
    let (a, _) = batched_input(device, &[count, n, n], &values);
    let msg = cholesky::cholesky(&a).unwrap_err().to_string();
    assert!(msg.contains("matrix 1 ") && msg.contains("pivot 70 "), "{msg}");
}

fn cholesky_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(13);
    let (a, _) = input(&mut rng, device, DType::F32, &[2, 4, 5], 1.0);
    assert_op_error("not square", "cholesky", cholesky::cholesky(&a));
    let (h, _) = input(&mut rng, device, DType::F16, &[4, 4], 1.0);
    assert_op_error("f16", "cholesky", cholesky::cholesky(&h));
    let (v, _) = input(&mut rng, device, DType::F32, &[4], 1.0);
    assert_op_error("1-D", "cholesky", cholesky::cholesky(&v));
    let big = Array::full(DType::F32, &[1025, 1025], 1.0).unwrap().to_device(device).unwrap();
    assert_op_error("too large", "cholesky", cholesky::cholesky(&big));
    let empty = Array::from_f64(DType::F32, &[0, 4, 4], &[]).unwrap().to_device(device).unwrap();
    assert_op_error("empty", "cholesky", cholesky::cholesky(&empty));
}

/// A random m x n matrix with a strong diagonal, so Q and R are well conditioned.
fn well_conditioned(rng: &mut Rng, m: usize, n: usize) -> Vec<f64> {
    let mut a = rng.normals(m * n, 1.0);
    for j in 0..n {
        a[j * n + j] += 2.0 * (m as f64).sqrt() * if j % 2 == 0 { 1.0 } else { -1.0 };
    }
    a
}

fn qr_matches_reference_and_reconstructs(device: Device) {
    // (batch shape, m, n): in threadgroup memory square and tall, odd sizes, 16 and 64 square;
    // blocked just above (65 x 64, one panel pair), tall with a partial last panel (150 x 70),
    // whole panels (96, 128), partial tiles (100, 200 x 130), panels too tall for registers
    // (1100 x 40); larger ones only on a GPU.
    let mut cases: Vec<(Vec<usize>, usize, usize)> = vec![
        (vec![3], 16, 16),
        (vec![2, 2], 9, 5),
        (vec![2], 64, 64),
        (vec![1], 37, 37),
        (vec![2], 65, 64),
        (vec![2], 150, 70),
        (vec![1], 96, 96),
        (vec![2, 1], 100, 100),
        (vec![1], 128, 128),
        (vec![1], 200, 130),
        (vec![1], 1100, 40),
    ];
    if device != Device::Cpu {
        cases.extend([(vec![3], 300, 300), (vec![1], 700, 333), (vec![2], 1024, 1024)]);
    }
    let tol = tolerance(DType::F32);
    for (seed, (batch, m, n)) in cases.into_iter().enumerate() {
        let mut rng = Rng::new(800 + seed as u64);
        let count: usize = batch.iter().product();
        let values: Vec<f64> = (0..count).flat_map(|_| well_conditioned(&mut rng, m, n)).collect();
        let shape: Vec<usize> = batch.iter().copied().chain([m, n]).collect();
        let (a, av) = batched_input(device, &shape, &values);
        let (q, r) = qr::qr_with(&a, Some(f64::NAN)).unwrap();
        let r_shape: Vec<usize> = batch.iter().copied().chain([n, n]).collect();
        assert_eq!((q.shape(), r.shape(), q.device()), (a.shape(), &r_shape[..], device));
        let (qv, rv) = (host_values(&q), host_values(&r));
        for b in 0..count {
            let am = &av[b * m * n..][..m * n];
            let (qm, rm) = (&qv[b * m * n..][..m * n], &rv[b * n * n..][..n * n]);
            let what = format!("qr {shape:?} matrix {b}");
            let (want_q, want_r) = qr::reference(am, m, n);
            assert_within(&format!("{what} Q"), qm, &want_q, tol);
            assert_within(&format!("{what} R"), rm, &want_r, tol);
            assert!((0..n * n).all(|e| e % n >= e / n || rm[e] == 0.0), "{what}: R not upper triangular");
            assert_within(&format!("{what} QR"), &mul_bt(qm, &transpose(rm, n, n), m, n, n), am, tol);
            let qt = transpose(qm, m, n);
            let eye: Vec<f64> = (0..n * n).map(|e| if e % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
            assert_within(&format!("{what} Q^T Q"), &mul_bt(&qt, &qt, n, n, m), &eye, tol);
        }
    }
}

fn qr_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(17);
    let (wide, _) = input(&mut rng, device, DType::F32, &[3, 4], 1.0);
    assert_op_error("m < n", "qr", qr::qr(&wide));
    let (h, _) = input(&mut rng, device, DType::BF16, &[4, 4], 1.0);
    assert_op_error("bf16", "qr", qr::qr(&h));
    let (v, _) = input(&mut rng, device, DType::F32, &[4], 1.0);
    assert_op_error("1-D", "qr", qr::qr(&v));
    let empty = Array::from_f64(DType::F32, &[2, 0, 0], &[]).unwrap().to_device(device).unwrap();
    assert_op_error("empty", "qr", qr::qr(&empty));
}

backend_tests!(
    cholesky_matches_reference_and_reconstructs,
    cholesky_reports_the_non_spd_matrix,
    cholesky_names_the_first_of_several_failures,
    cholesky_rejects_bad_input,
    qr_matches_reference_and_reconstructs,
    qr_rejects_bad_input
);

// ---------------------------------------------------------------------------------------------
// every kernel variant compiles with NVRTC (no GPU needed)

/// Compiles one call's kernel to sm_90 cubin.
fn assert_nvrtc_compiles(kernel: &kiln::MetalKernel, inputs: &[Array], spec: &kiln::LaunchSpec) {
    let generated = kernel.generate(inputs, spec).unwrap();
    let program = kernel.program(&generated);
    let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
}

#[test]
fn every_compute_kernel_compiles_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let mut rng = Rng::new(21);
    let host = Device::Cpu;
    for dtype in DTYPES {
        // gdn kkt
        let (k, _) = input(&mut rng, host, dtype, &[1, 70, 1, 64], 1.0);
        let (beta, _) = input(&mut rng, host, DType::F32, &[1, 70, 2], 1.0);
        let (kernel, spec) = gdn_kkt::kernel_and_spec(&k, &beta, &beta).unwrap();
        assert_nvrtc_compiles(kernel, &[k.clone(), beta.clone(), beta.clone()], &spec);
        // grid_sample forward and VJP, small and large channel counts
        for c in [3, 64] {
            let (x, _) = input(&mut rng, host, dtype, &[1, 4, 4, c], 1.0);
            let (grid, _) = input(&mut rng, host, dtype, &[1, 2, 2, 2], 0.5);
            let (cot, _) = input(&mut rng, host, dtype, &[1, 2, 2, c], 1.0);
            for (i, (kernel, spec)) in grid_sample::kernels_and_specs(&x, &grid).unwrap().into_iter().enumerate() {
                let inputs =
                    if i == 0 { vec![x.clone(), grid.clone()] } else { vec![x.clone(), grid.clone(), cot.clone()] };
                assert_nvrtc_compiles(kernel, &inputs, &spec);
            }
        }
        // attention: prefill (each key tile width) and decode + combine, every mask kind
        for (tq, tk, d) in
            [(9, 20, 64), (10, 40, 128), (10, 40, 112), (9, 20, 256), (1, 300, 64), (3, 77, 128), (1, 70, 20)]
        {
            let (q, _) = input(&mut rng, host, dtype, &[1, 2, tq, d], 1.0);
            let (kv, _) = input(&mut rng, host, dtype, &[1, 1, tk, d], 1.0);
            let (m, _) = input(&mut rng, host, dtype, &[tq, tk], 1.0);
            for mask in [Mask::None, Mask::Causal, Mask::Additive(&m)] {
                let calls = attention::launches(&q, &kv, &kv, 0.125, mask).unwrap();
                let mut carried: Vec<Array> = Vec::new();
                for (kernel, inputs, spec) in calls {
                    let mut arrays: Vec<Array> = inputs.iter().map(|i| i.to_array()).collect();
                    arrays.append(&mut carried);
                    assert_nvrtc_compiles(kernel, &arrays, &spec);
                    carried = spec
                        .output_shapes
                        .iter()
                        .zip(&spec.output_dtypes)
                        .map(|(s, &t)| Array::full(t, s, 0.0).unwrap())
                        .collect();
                }
            }
        }
    }
    for program in cholesky::blocked::programs() {
        let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
    for n in [1, 5, 8, 16, 40, 64] {
        let a = Array::full(DType::F32, &[2, n, n], 1.0).unwrap();
        let (kernel, inputs, spec) = cholesky::kernel_and_spec(&a).unwrap();
        let inputs: Vec<Array> = inputs.iter().map(|i| i.to_array()).collect();
        assert_nvrtc_compiles(kernel, &inputs, &spec);
        let info = Array::full(DType::I32, &[2], 0.0).unwrap();
        let (kernel, spec) = cholesky::first_failure_kernel_and_spec(&info).unwrap();
        assert_nvrtc_compiles(kernel, &[info], &spec);
    }
    for (m, n) in [(16, 16), (64, 64)] {
        let a = Array::full(DType::F32, &[2, m, n], 1.0).unwrap();
        let (kernel, spec) = qr::kernel_and_spec(&a).unwrap();
        assert_nvrtc_compiles(kernel, &[a], &spec);
    }
    for program in qr::blocked::programs() {
        let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}

// ---------------------------------------------------------------------------------------------
// the one op shape: plans and calls

/// An op's plan names the variant its rule picked (its kernels, in order) and, poisoned and
/// run, gives the op's result.
fn op_plans_name_their_variant_and_match_the_reference(device: Device) {
    let dtype = DType::F32;
    for (dims, want) in [
        ([1, 4, 2, 3, 300, 32], "kiln_sdpa_decode+kiln_sdpa_combine"),
        ([1, 2, 1, 37, 41, 32], "kiln_sdpa_prefill_tiled"),
    ] {
        let [b, hq, hkv, tq, tk, d] = dims;
        let mut rng = Rng::new(tq as u64);
        let (q, qv) = input(&mut rng, device, dtype, &[b, hq, tq, d], 1.0);
        let (k, kv) = input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0);
        let (v, vv) = input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0);
        let scale = (1.0 / (d as f64).sqrt()) as f32;
        let plan = kiln::ops::scaled_dot_product_attention_plan(&q, &k, &v, scale, Mask::Causal).unwrap();
        assert_eq!(plan.variant(), want, "{dims:?}");
        assert_eq!(plan.calls().len(), want.split('+').count());
        let out = plan.poisoned().run_one().unwrap();
        let reference = attention::reference(&qv, &kv, &vv, dims, scale as f64, true, None);
        assert_within(&format!("attention plan {dims:?}"), &host_values(&out), &reference, tolerance(dtype));
    }
    let dims = [2, 5, 7, 8, 3, 4];
    let mut rng = Rng::new(11);
    let [(x, xv), (grid, gv)] = grid_inputs(&mut rng, device, dtype, dims);
    let call = kiln::ops::grid_sample_call(&x, &grid).unwrap();
    assert_eq!(call.variant(), "kiln_grid_sample");
    let out = kiln::ops::OpPlan::from(call).poisoned().run_one().unwrap();
    let reference = kiln::ops::grid_sample::reference(&xv, &gv, dims);
    assert_within("grid_sample call", &host_values(&out), &reference, tolerance(dtype));
}

/// The registry's plans of the ops of several launches name their kernels and, poisoned and run,
/// give the op's result: Cholesky (registers, blocked), QR (threadgroup memory, blocked) and the
/// grid_sample VJP with its casts to float16.
fn registry_plans_of_multi_launch_ops_match_the_reference(device: Device) {
    let entry = |name: &str| *kiln::ops::registry().iter().find(|e| e.name == name).unwrap();
    let tol = tolerance(DType::F32);
    for (n, want) in [(5, "kiln_cholesky_simd"), (70, "cholesky_blocked")] {
        let mut rng = Rng::new(900 + n as u64);
        let values: Vec<f64> = (0..2).flat_map(|_| spd(&mut rng, n)).collect();
        let (a, av) = batched_input(device, &[2, n, n], &values);
        let plan = (entry("cholesky").plan)(&[a], &[]).unwrap();
        assert_eq!(plan.variant(), format!("{want}+kiln_cholesky_first_failure"));
        let l = host_values(&plan.poisoned().run_one().unwrap());
        for b in 0..2 {
            let want = cholesky::reference(&av[b * n * n..][..n * n], n).unwrap();
            assert_within(&format!("cholesky plan N={n} matrix {b}"), &l[b * n * n..][..n * n], &want, tol);
        }
    }
    for (m, n, want) in [(9, 5, "kiln_qr_shared"), (65, 64, "qr_blocked")] {
        let mut rng = Rng::new(950 + m as u64);
        let (a, av) = batched_input(device, &[1, m, n], &well_conditioned(&mut rng, m, n));
        let plan = (entry("qr").plan)(&[a], &[]).unwrap();
        assert_eq!(plan.variant(), want);
        let outs = plan.poisoned().run().unwrap();
        let (want_q, want_r) = qr::reference(&av, m, n);
        assert_within(&format!("qr plan {m}x{n} Q"), &host_values(&outs[0]), &want_q, tol);
        assert_within(&format!("qr plan {m}x{n} R"), &host_values(&outs[1]), &want_r, tol);
    }
    let dims = [2, 5, 7, 8, 3, 4];
    let [b, _, _, c, gh, gw] = dims;
    let mut rng = Rng::new(990);
    let [(x, xv), (grid, gv)] = grid_inputs(&mut rng, device, DType::F16, dims);
    let (cot, cv) = input(&mut rng, device, DType::F16, &[b, gh, gw, c], 1.0);
    let plan = (entry("grid_sample_vjp").plan)(&[x, grid, cot], &[]).unwrap();
    assert_eq!(plan.variant(), "kiln_grid_sample_vjp+kiln_grid_sample_cast");
    let outs = plan.poisoned().run().unwrap();
    assert_eq!((outs[0].dtype(), outs[1].dtype()), (DType::F16, DType::F16));
    let (want_x, want_g) = grid_sample::reference_vjp(&xv, &gv, &cv, dims);
    assert_within("grid_sample_vjp plan x_grad", &host_values(&outs[0]), &want_x, tolerance(DType::F16));
    assert_within("grid_sample_vjp plan grid_grad", &host_values(&outs[1]), &want_g, tolerance(DType::F16));
}

backend_tests!(
    op_plans_name_their_variant_and_match_the_reference,
    registry_plans_of_multi_launch_ops_match_the_reference
);
