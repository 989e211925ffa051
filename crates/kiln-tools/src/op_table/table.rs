//! The table: for each registry op, keyed by its name, the inputs to draw at given sizes, the
//! fewest bytes and FLOPs of a run, the sizes as benchmark reports write them, the part of a
//! large problem a check runs the reference on, and its demo and benchmark shapes. The hooks the
//! entries share or that take more than a line follow the table.

use super::inputs::{Fill, InputSpec, Setup};
use super::{BenchShape, DemoShape, OpHooks, Sampled};
use kiln::dtype::DType;
use kiln::ops::overlap_add;

const fn demo(label: &'static str, dtype: DType, dims: &'static [usize]) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims, params: &[] })
}

const fn demo_with(
    label: &'static str,
    dtype: DType,
    dims: &'static [usize],
    params: &'static [f64],
) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims, params })
}

const fn case(case: &'static str, dtype: DType, dims: &'static [usize]) -> BenchShape {
    BenchShape { case, dtype, dims, params: &[] }
}

const fn case_with(case: &'static str, dtype: DType, dims: &'static [usize], params: &'static [f64]) -> BenchShape {
    BenchShape { case, dtype, dims, params }
}

use DType::{BF16, F16, F32};

/// The `dims` of ops over elements.
pub const UNARY_DIMS: &str = "elements";
/// The `dims` of ops over rows of the last axis (leading axes all count as rows).
pub const ROW_DIMS: &str = "rows..., D";

/// Elements of the elementwise benchmark cases (64 M).
const N: usize = 64 << 20;
/// Rows of the row-wise benchmark cases.
const ROWS: usize = 16384;
/// Attention's shape params: causal.
const CAUSAL: &[f64] = &[1.0];
/// Gated delta net's shape params: the chunk length.
const CHUNK_64: &[f64] = &[64.0];

/// Every op's entry, in any order (the tools list them in the registry's).
pub(super) static TABLE: &[OpHooks] = &[
    OpHooks {
        name: "exp",
        setup: unary_setup,
        cost: |dt, d, _| unary_cost(1.0, dt, d),
        label,
        check: Some(UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("exp", F32, &[N]), case("exp", F16, &[N]), case("exp", BF16, &[N])],
    },
    OpHooks {
        name: "silu",
        setup: unary_setup,
        cost: |dt, d, _| unary_cost(4.0, dt, d),
        label,
        check: Some(UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("silu", F32, &[N]), case("silu", F16, &[N]), case("silu", BF16, &[N])],
    },
    OpHooks {
        name: "gelu",
        setup: unary_setup,
        cost: |dt, d, _| unary_cost(9.0, dt, d),
        label,
        check: Some(UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("gelu_tanh", F32, &[N]), case("gelu_tanh", F16, &[N]), case("gelu_tanh", BF16, &[N])],
    },
    OpHooks {
        name: "gelu_erf",
        setup: unary_setup,
        cost: |dt, d, _| unary_cost(9.0, dt, d),
        label,
        check: Some(UNARY_CHECK),
        dims: "rows, columns",
        demo: demo("ops::gelu_erf", F32, &[7, 333]),
        bench: &[],
    },
    OpHooks {
        name: "rms_norm",
        setup: rms_norm_setup,
        cost: rms_norm_cost,
        label,
        check: Some(RMS_NORM_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::rms_norm", BF16, &[3, 5, 1537]),
        bench: &[
            case("rms_norm", BF16, &[ROWS, 1024]),
            case("rms_norm", BF16, &[ROWS, 4096]),
            case("rms_norm", BF16, &[ROWS, 8192]),
            case("rms_norm", F32, &[ROWS, 1024]),
            case("rms_norm", F32, &[ROWS, 4096]),
            case("rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpHooks {
        name: "residual_rms_norm",
        setup: residual_rms_norm_setup,
        cost: residual_rms_norm_cost,
        label,
        check: Some(RESIDUAL_RMS_NORM_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::residual_rms_norm", F16, &[9, 515]),
        bench: &[
            case("residual_rms_norm", BF16, &[ROWS, 1024]),
            case("residual_rms_norm", BF16, &[ROWS, 4096]),
            case("residual_rms_norm", BF16, &[ROWS, 8192]),
            case("residual_rms_norm", F32, &[ROWS, 1024]),
            case("residual_rms_norm", F32, &[ROWS, 4096]),
            case("residual_rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpHooks {
        name: "softmax",
        setup: softmax_setup,
        cost: softmax_cost,
        label,
        check: Some(SOFTMAX_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::softmax", F32, &[3, 5000]),
        bench: &[
            case("softmax", F32, &[ROWS, 1024]),
            case("softmax", F32, &[ROWS, 4096]),
            case("softmax", F32, &[ROWS, 32768]),
            case("softmax", BF16, &[ROWS, 1024]),
            case("softmax", BF16, &[ROWS, 4096]),
            case("softmax", BF16, &[ROWS, 32768]),
        ],
    },
    OpHooks {
        name: "rope",
        setup: rope_setup,
        cost: rope_cost,
        label,
        check: Some(FIRST_OF_TWO_AXES),
        dims: "batch, heads, L, D",
        demo: demo_with("ops::rope", F32, &[2, 3, 37, 64], &[48.0, 0.0, 1e4, 1.0, 5.0]),
        bench: &[case_with("rope", BF16, &[32, 32, 1024, 128], &[128.0, 0.0, 1e4, 1.0, 0.0])],
    },
    OpHooks {
        name: "scaled_dot_product_attention",
        setup: attention_setup,
        cost: attention_cost,
        label: attention_label,
        check: Some(ATTENTION_CHECK),
        dims: "B, query heads, key/value heads, Tq, Tk, D",
        demo: demo_with("ops::attention (causal, GQA)", F32, &[1, 4, 2, 19, 23, 32], CAUSAL),
        bench: &[
            case_with("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 128], CAUSAL),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case_with("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 64], CAUSAL),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention_decode", BF16, &[32, 32, 32, 1, 8192, 128]),
        ],
    },
    OpHooks {
        name: "scatter_add",
        setup: scatter_add_setup,
        cost: scatter_add_cost,
        label: scatter_add_label,
        check: None,
        dims: "values, values per index, bins",
        demo: demo("ops::scatter_add", F32, &[1000, 3, 37]),
        bench: &[case("scatter_add", F32, &[N, 1, 32768])],
    },
    OpHooks {
        name: "overlap_add",
        setup: overlap_add_setup,
        cost: overlap_add_cost,
        label,
        check: None,
        dims: "batch, frames, frame length, hop",
        demo: demo("ops::overlap_add", F32, &[2, 13, 100, 37]),
        bench: &[],
    },
    OpHooks {
        name: "grid_sample",
        setup: |dt, d, _| grid_sample_setup(false, dt, d),
        cost: |_, d, _| grid_sample_cost(false, d),
        label: grid_sample_label,
        check: Some(GRID_SAMPLE_CHECK),
        dims: "B, H, W, C, grid H, grid W",
        demo: None,
        bench: &[case("grid_sample", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpHooks {
        name: "grid_sample_vjp",
        setup: |dt, d, _| grid_sample_setup(true, dt, d),
        cost: |_, d, _| grid_sample_cost(true, d),
        label: grid_sample_label,
        check: Some(GRID_SAMPLE_VJP_CHECK),
        dims: "B, H, W, C, grid H, grid W",
        demo: demo("ops::grid_sample_vjp", F32, &[2, 9, 13, 40, 6, 5]),
        bench: &[case("grid_sample_vjp", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpHooks {
        name: "cholesky",
        setup: cholesky_setup,
        cost: cholesky_cost,
        label: cholesky_label,
        check: Some(FIRST_MATRIX),
        dims: "batch, N",
        demo: demo("ops::cholesky", F32, &[3, 45]),
        bench: &[
            case("cholesky", F32, &[65536, 16]),
            case("cholesky", F32, &[8192, 64]),
            case("cholesky", F32, &[64, 1024]),
        ],
    },
    OpHooks {
        name: "qr",
        setup: qr_setup,
        cost: qr_cost,
        label,
        check: Some(FIRST_MATRIX_QR),
        dims: "batch, M, N",
        demo: demo("ops::qr", F32, &[2, 37, 21]),
        bench: &[case("qr", F32, &[8192, 64, 64]), case("qr", F32, &[16, 1024, 1024])],
    },
    OpHooks {
        name: "gdn_chunk_scaled_dot_kkt",
        setup: gdn_kkt_setup,
        cost: gdn_kkt_cost,
        label: gdn_kkt_label,
        check: Some(GDN_KKT_CHECK),
        dims: "B, T, key heads, heads, K",
        demo: demo_with("ops::gdn_chunk_scaled_dot_kkt", BF16, &[1, 150, 2, 4, 64], CHUNK_64),
        bench: &[case_with("gdn_kkt", BF16, &[8, 4096, 16, 32, 128], CHUNK_64)],
    },
];

/// Every `step`-th index below `n`, at most about `max` of them.
fn spread(n: usize, max: usize) -> Vec<usize> {
    (0..n).step_by(n.div_ceil(max.max(1)).max(1)).collect()
}

fn param(params: &[f64], i: usize) -> f64 {
    params.get(i).copied().unwrap_or(0.0)
}

/// The first `K` sizes, missing ones 0.
fn sizes<const K: usize>(dims: &[usize]) -> [usize; K] {
    let mut out = [0; K];
    for (o, d) in out.iter_mut().zip(dims) {
        *o = *d;
    }
    out
}

fn last(dims: &[usize]) -> usize {
    dims.last().copied().unwrap_or(1).max(1)
}

/// The sizes joined by `x`.
fn label(dims: &[usize]) -> String {
    dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

// Elementwise ops.

fn unary_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-4.0, 4.0))], params: vec![], tolerance: dtype }
}

fn unary_cost(flops_per_element: f64, dtype: DType, dims: &[usize]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    (2.0 * (n * dtype.size()) as f64, flops_per_element * n as f64)
}

const UNARY_CHECK: Sampled = Sampled { rows: |d| spread(d.iter().product(), 1 << 20), row_axes: &[Some(0); 2] };

// Row-wise ops.

fn sampled_rows(dims: &[usize]) -> Vec<usize> {
    spread(dims.iter().product::<usize>() / last(dims), 256)
}

fn rms_norm_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let x = InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0));
    let w = InputSpec::new(&[last(dims)], dtype, Fill::Uniform(0.5, 1.5));
    Setup { inputs: vec![x, w], params: vec![1e-5], tolerance: dtype }
}

fn rms_norm_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let (n, d) = (dims.iter().product::<usize>(), last(dims));
    (((2 * n + d) * dtype.size()) as f64, 4.0 * n as f64)
}

const RMS_NORM_CHECK: Sampled = Sampled { rows: sampled_rows, row_axes: &[Some(1), None, Some(1)] };

fn residual_rms_norm_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let x = InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0));
    let w = InputSpec::new(&[last(dims)], dtype, Fill::Uniform(0.5, 1.5));
    Setup { inputs: vec![x.clone(), x, w], params: vec![1e-5], tolerance: dtype }
}

fn residual_rms_norm_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let (n, d) = (dims.iter().product::<usize>(), last(dims));
    (((4 * n + d) * dtype.size()) as f64, 5.0 * n as f64)
}

const RESIDUAL_RMS_NORM_CHECK: Sampled =
    Sampled { rows: sampled_rows, row_axes: &[Some(1), Some(1), None, Some(1), Some(1)] };

fn softmax_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-4.0, 4.0))], params: vec![], tolerance: dtype }
}

fn softmax_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    ((2 * n * dtype.size()) as f64, 4.0 * n as f64)
}

const SOFTMAX_CHECK: Sampled = Sampled { rows: sampled_rows, row_axes: &[Some(1); 2] };

// Gather/scatter and compute ops.

/// The shape's params are the op's: dims, traditional, base, scale, offset.
fn rope_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    Setup {
        inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0))],
        params: params.to_vec(),
        tolerance: dtype,
    }
}

fn rope_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    ((2 * n * dtype.size()) as f64, (6 * n / 2) as f64)
}

/// The first head of the first batch.
const FIRST_OF_TWO_AXES: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 2] };
/// The first query head of the first batch (and the key/value head it reads: the first).
const ATTENTION_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 5] };

/// The shape's params: causal (0 or 1); the scale is 1/sqrt(D).
fn attention_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    let [b, hq, hkv, tq, tk, d] = sizes(dims);
    let fill = Fill::Uniform(-1.0, 1.0);
    let q = InputSpec::new(&[b, hq, tq, d], dtype, fill);
    let kv = InputSpec::new(&[b, hkv, tk, d], dtype, fill);
    let scale = 1.0 / (d.max(1) as f32).sqrt();
    Setup { inputs: vec![q, kv.clone(), kv], params: vec![scale as f64, param(params, 0)], tolerance: dtype }
}

fn attention_cost(dtype: DType, dims: &[usize], params: &[f64]) -> (f64, f64) {
    let [b, hq, hkv, tq, tk, d] = sizes(dims);
    let pairs = if param(params, 0) != 0.0 { (tq * tk) as f64 / 2.0 } else { (tq * tk) as f64 };
    let bytes = dtype.size() * (2 * b * hq * tq * d + 2 * b * hkv * tk * d);
    (bytes as f64, 4.0 * (b * hq * d) as f64 * pairs)
}

/// B x query heads x Tq x Tk x D.
fn attention_label(dims: &[usize]) -> String {
    let [b, hq, _, tq, tk, d] = sizes(dims);
    label(&[b, hq, tq, tk, d])
}

/// One value per index gives 1-D values, as embedding gradients are.
fn scatter_add_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [n, m, bins] = sizes(dims);
    let shape = if m == 1 { vec![n] } else { vec![n, m] };
    let values = InputSpec::new(&shape, dtype, Fill::Uniform(-1.0, 1.0));
    let indices = InputSpec::new(&[n], DType::I32, Fill::Indices(bins));
    Setup { inputs: vec![values, indices], params: vec![bins as f64], tolerance: DType::F32 }
}

fn scatter_add_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [n, m, bins] = sizes(dims);
    ((n * m * dtype.size() + n * 4 + bins * m * 4) as f64, (n * m) as f64)
}

/// values x bins.
fn scatter_add_label(dims: &[usize]) -> String {
    let [n, m, bins] = sizes(dims);
    if m == 1 {
        label(&[n, bins])
    } else {
        label(dims)
    }
}

fn overlap_add_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [batch, frames, len, hop] = sizes(dims);
    Setup {
        inputs: vec![InputSpec::new(&[batch, frames, len], dtype, Fill::Uniform(-1.0, 1.0))],
        params: vec![hop as f64],
        tolerance: dtype,
    }
}

fn overlap_add_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [batch, frames, len, hop] = sizes(dims);
    let out = batch * overlap_add::output_len(frames.max(1), len, hop);
    (((batch * frames * len + out) * dtype.size()) as f64, (batch * frames * len) as f64)
}

/// The grid reaches slightly beyond [-1, 1] so the zero padding is exercised.
fn grid_sample_setup(vjp: bool, dtype: DType, dims: &[usize]) -> Setup {
    let [b, h, w, c, gh, gw] = sizes(dims);
    let x = InputSpec::new(&[b, h, w, c], dtype, Fill::Uniform(-1.0, 1.0));
    let grid = InputSpec::new(&[b, gh, gw, 2], dtype, Fill::Uniform(-1.05, 1.05));
    let mut inputs = vec![x, grid];
    if vjp {
        inputs.push(InputSpec::new(&[b, gh, gw, c], dtype, Fill::Uniform(-1.0, 1.0)));
    }
    Setup { inputs, params: vec![], tolerance: dtype }
}

/// Fewest bytes: the grid, the output (or cotangent), and the 4 neighbours of each point; the
/// VJP twice that.
fn grid_sample_cost(vjp: bool, dims: &[usize]) -> (f64, f64) {
    let [b, _, _, c, gh, gw] = sizes(dims);
    let points = b * gh * gw;
    let fwd_bytes = 4.0 * (points * 2 + points * c + 4 * points * c) as f64;
    let flops = if vjp { 16.0 } else { 8.0 } * (points * c) as f64;
    (if vjp { 2.0 * fwd_bytes } else { fwd_bytes }, flops)
}

/// x + grid shapes.
fn grid_sample_label(dims: &[usize]) -> String {
    let [b, h, w, c, gh, gw] = sizes(dims);
    format!("{}+{}", label(&[b, h, w, c]), label(&[b, gh, gw, 2]))
}

/// The first batch.
const GRID_SAMPLE_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(3); 3] };
const GRID_SAMPLE_VJP_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(3); 5] };

/// The first matrix (of the input and each output).
const FIRST_MATRIX: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 2] };
const FIRST_MATRIX_QR: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 3] };

fn cholesky_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [b, n] = sizes(dims);
    Setup { inputs: vec![InputSpec::new(&[b, n, n], dtype, Fill::Spd)], params: vec![], tolerance: dtype }
}

fn cholesky_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [b, n] = sizes(dims);
    ((2 * b * n * n * dtype.size()) as f64, (b * n * n * n) as f64 / 3.0)
}

fn cholesky_label(dims: &[usize]) -> String {
    let [b, n] = sizes(dims);
    label(&[b, n, n])
}

fn qr_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-1.0, 1.0))], params: vec![], tolerance: dtype }
}

fn qr_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [b, m, n] = sizes(dims);
    ((3 * b * m * n * dtype.size()) as f64, (4 * b * m * n * n) as f64 / 3.0)
}

/// k in the dtype, beta and g float32; the shape's params: chunk.
fn gdn_kkt_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    let [b, t, hg, h, k] = sizes(dims);
    let chunk = param(params, 0) as usize;
    let keys = InputSpec::new(&[b, t, hg, k], dtype, Fill::Uniform(-1.0, 1.0));
    let beta = InputSpec::new(&[b, t, h], DType::F32, Fill::Uniform(0.0, 1.0));
    let g = InputSpec::new(&[b, t, h], DType::F32, Fill::LogGates { chunk });
    Setup { inputs: vec![keys, beta, g], params: vec![chunk as f64], tolerance: DType::F32 }
}

/// The lower triangle of each chunk's Gram matrix: chunk*(chunk-1)/2 dot products of length K.
fn gdn_kkt_cost(dtype: DType, dims: &[usize], params: &[f64]) -> (f64, f64) {
    let [b, t, hg, h, k] = sizes(dims);
    let chunk = (param(params, 0) as usize).max(1);
    let bytes = b * t * hg * k * dtype.size() + 2 * b * t * h * 4 + b * t * h * chunk * 4;
    (bytes as f64, (b * h * (t / chunk) * (chunk * (chunk - 1) / 2) * 2 * k) as f64)
}

/// B x T x key heads x K.
fn gdn_kkt_label(dims: &[usize]) -> String {
    let [b, t, hg, _, k] = sizes(dims);
    label(&[b, t, hg, k])
}

/// The first 512 steps (whole chunks) of the first batch.
const GDN_KKT_CHECK: Sampled = Sampled {
    rows: |d| (0..d.get(1).copied().unwrap_or(0).min(512)).collect(),
    row_axes: &[Some(2), Some(1), Some(1), Some(2)],
};
