//! What a registry entry needs besides its plan for a tool to run and check it without knowing
//! the op: the inputs for given sizes ([`Setup`], drawn as each [`Fill`] says), the op's f64
//! reference over host values ([`HostInput`]), its fewest bytes and FLOPs, the part of a large
//! problem a check runs the reference on ([`Sampled`]), and its benchmark label. The functions
//! below are the entries' hooks; each wraps the op module's own `reference`.

use super::elementwise::{self, Unary};
use super::softmax;
use super::{
    attention, cholesky, gdn_kkt, grid_sample, overlap_add, qr, residual_rms_norm, rms_norm, rope, scatter_add,
};
use crate::check::Rng;
use crate::dtype::{element_bytes_to_f64, f64_to_element_bytes, DType};

/// One input's values in f64 (as stored in its dtype), with its shape and dtype.
#[derive(Clone, Debug)]
pub struct HostInput {
    /// The array's shape.
    pub shape: Vec<usize>,
    /// The dtype the values are stored in.
    pub dtype: DType,
    /// The values, row-major.
    pub values: Vec<f64>,
}

/// How an input's values are drawn (never all zeros).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Uniform in [lo, hi).
    Uniform(f64, f64),
    /// Symmetric with a dominant diagonal (positive definite) over the last two axes.
    Spd,
    /// Integers in 0..bins.
    Indices(usize),
    /// Log gates of shape (B, T, H): running sums of U(-0.1, 0) along T, restarting every
    /// `chunk` steps, as a gated delta net produces them.
    LogGates {
        /// The steps between restarts.
        chunk: usize,
    },
}

/// One input of a [`Setup`].
#[derive(Clone, Debug)]
pub struct InputSpec {
    /// The input's shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
    /// How its values are drawn.
    pub fill: Fill,
}

impl InputSpec {
    fn new(shape: &[usize], dtype: DType, fill: Fill) -> Self {
        InputSpec { shape: shape.to_vec(), dtype, fill }
    }

    /// Values drawn from `rng` as the fill says (not yet rounded to the dtype).
    pub fn draw(&self, rng: &mut Rng) -> Vec<f64> {
        let n: usize = self.shape.iter().product();
        match self.fill {
            Fill::Uniform(lo, hi) => rng.uniforms(n, lo, hi),
            Fill::Indices(bins) => (0..n).map(|_| (rng.next_u64() % bins.max(1) as u64) as f64).collect(),
            Fill::Spd => {
                let m = self.shape.last().copied().unwrap_or(1).max(1);
                let mut a = vec![0.0; n];
                for mat in a.chunks_mut(m * m) {
                    for i in 0..m {
                        for j in 0..i {
                            let v = rng.uniform(-1.0, 1.0);
                            mat[i * m + j] = v;
                            mat[j * m + i] = v;
                        }
                        mat[i * m + i] = m as f64 + rng.uniform(0.0, 1.0);
                    }
                }
                a
            }
            Fill::LogGates { chunk } => {
                let (t, h) = match self.shape[..] {
                    [_, t, h] => (t, h),
                    _ => (n, 1),
                };
                let mut g = rng.uniforms(n, -0.1, 0.0);
                for (i, step) in (0..n / h.max(1)).map(|i| (i, i % t.max(1))) {
                    if step % chunk.max(1) != 0 {
                        for hi in 0..h {
                            g[i * h + hi] += g[(i - 1) * h + hi];
                        }
                    }
                }
                g
            }
        }
    }
}

/// The inputs of a run at given sizes and the op's parameters (as `plan` takes them).
#[derive(Clone, Debug)]
pub struct Setup {
    /// The inputs, in the order `plan` takes them.
    pub inputs: Vec<InputSpec>,
    /// The op's parameters.
    pub params: Vec<f64>,
    /// The dtype whose tolerance a check of its outputs applies (theirs).
    pub tolerance: DType,
}

/// The part of a large problem a check runs the reference on: some rows, where a row of each
/// input and output is its last `row_axes` axes (`None`: the array is used whole).
#[derive(Clone, Copy, Debug)]
pub struct Sampled {
    /// The rows checked, given the sizes.
    pub rows: fn(&[usize]) -> Vec<usize>,
    /// Per input the entry names (optional ones included), then per output: how many trailing
    /// axes form one row.
    pub row_axes: &'static [Option<usize>],
}

/// An op's fewest bytes moved and floating-point operations, for a dtype, sizes and a shape's
/// params.
pub type CostFn = fn(DType, &[usize], &[f64]) -> (f64, f64);

/// `value` rounded to `dtype`, as an array of it would store it.
pub(super) fn round_to(dtype: DType, value: f64) -> f64 {
    element_bytes_to_f64(&f64_to_element_bytes(value, dtype), dtype)
}

/// Every `step`-th index below `n`, at most about `max` of them.
pub fn spread(n: usize, max: usize) -> Vec<usize> {
    (0..n).step_by(n.div_ceil(max.max(1)).max(1)).collect()
}

fn values(inputs: &[HostInput], i: usize) -> &[f64] {
    inputs.get(i).map_or(&[], |x| &x.values)
}

fn shape(inputs: &[HostInput], i: usize) -> &[usize] {
    inputs.get(i).map_or(&[], |x| &x.shape)
}

fn param(params: &[f64], i: usize) -> f64 {
    params.get(i).copied().unwrap_or(0.0)
}

/// Sizes `N` of a shape, missing ones 0.
fn sizes<const N: usize>(dims: &[usize]) -> [usize; N] {
    let mut out = [0; N];
    for (o, d) in out.iter_mut().zip(dims) {
        *o = *d;
    }
    out
}

fn last(dims: &[usize]) -> usize {
    dims.last().copied().unwrap_or(1).max(1)
}

/// The sizes joined by `x`.
pub(super) fn label(dims: &[usize]) -> String {
    dims.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

// Elementwise ops.

pub(super) fn unary_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-4.0, 4.0))], params: vec![], tolerance: dtype }
}

pub(super) fn unary_reference(op: Unary, inputs: &[HostInput]) -> Vec<Vec<f64>> {
    vec![elementwise::reference(op, values(inputs, 0))]
}

pub(super) fn unary_cost(flops_per_element: f64, dtype: DType, dims: &[usize]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    (2.0 * (n * dtype.size()) as f64, flops_per_element * n as f64)
}

pub(super) const UNARY_CHECK: Sampled =
    Sampled { rows: |d| spread(d.iter().product(), 1 << 20), row_axes: &[Some(0); 2] };

// Row-wise ops.

fn sampled_rows(dims: &[usize]) -> Vec<usize> {
    spread(dims.iter().product::<usize>() / last(dims), 256)
}

pub(super) fn rms_norm_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let x = InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0));
    let w = InputSpec::new(&[last(dims)], dtype, Fill::Uniform(0.5, 1.5));
    Setup { inputs: vec![x, w], params: vec![1e-5], tolerance: dtype }
}

pub(super) fn rms_norm_reference(inputs: &[HostInput], params: &[f64]) -> Vec<Vec<f64>> {
    let eps = param(params, 0) as f32 as f64;
    vec![rms_norm::reference(values(inputs, 0), values(inputs, 1), last(shape(inputs, 0)), eps)]
}

pub(super) fn rms_norm_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let (n, d) = (dims.iter().product::<usize>(), last(dims));
    (((2 * n + d) * dtype.size()) as f64, 4.0 * n as f64)
}

pub(super) const RMS_NORM_CHECK: Sampled = Sampled { rows: sampled_rows, row_axes: &[Some(1), None, Some(1)] };

pub(super) fn residual_rms_norm_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let x = InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0));
    let w = InputSpec::new(&[last(dims)], dtype, Fill::Uniform(0.5, 1.5));
    Setup { inputs: vec![x.clone(), x, w], params: vec![1e-5], tolerance: dtype }
}

/// The norm is of the sum rounded to the dtype, as the op documents.
pub(super) fn residual_rms_norm_reference(inputs: &[HostInput], params: &[f64]) -> Vec<Vec<f64>> {
    let (eps, d) = (param(params, 0) as f32 as f64, last(shape(inputs, 0)));
    let (_, h) = residual_rms_norm::reference(values(inputs, 0), values(inputs, 1), values(inputs, 2), d, eps);
    let dtype = inputs.first().map_or(DType::F32, |x| x.dtype);
    let h: Vec<f64> = h.into_iter().map(|v| round_to(dtype, v)).collect();
    vec![rms_norm::reference(&h, values(inputs, 2), d, eps), h]
}

pub(super) fn residual_rms_norm_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let (n, d) = (dims.iter().product::<usize>(), last(dims));
    (((4 * n + d) * dtype.size()) as f64, 5.0 * n as f64)
}

pub(super) const RESIDUAL_RMS_NORM_CHECK: Sampled =
    Sampled { rows: sampled_rows, row_axes: &[Some(1), Some(1), None, Some(1), Some(1)] };

pub(super) fn softmax_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-4.0, 4.0))], params: vec![], tolerance: dtype }
}

pub(super) fn softmax_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    vec![softmax::reference(values(inputs, 0), last(shape(inputs, 0)))]
}

pub(super) fn softmax_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    ((2 * n * dtype.size()) as f64, 4.0 * n as f64)
}

pub(super) const SOFTMAX_CHECK: Sampled = Sampled { rows: sampled_rows, row_axes: &[Some(1); 2] };

// Gather/scatter and compute ops.

/// The shape's params are the op's: dims, traditional, base, scale, offset.
pub(super) fn rope_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    Setup {
        inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-2.0, 2.0))],
        params: params.to_vec(),
        tolerance: dtype,
    }
}

pub(super) fn rope_reference(inputs: &[HostInput], p: &[f64]) -> Vec<Vec<f64>> {
    let [_, _, l, d] = sizes(shape(inputs, 0));
    let (dims, traditional) = (param(p, 0) as usize, param(p, 1) != 0.0);
    let (base, scale) = (param(p, 2) as f32 as f64, param(p, 3) as f32 as f64);
    vec![rope::reference(values(inputs, 0), l, d, dims, traditional, base, scale, param(p, 4) as i32)]
}

pub(super) fn rope_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let n: usize = dims.iter().product();
    ((2 * n * dtype.size()) as f64, (6 * n / 2) as f64)
}

/// The first head of the first batch.
pub(super) const FIRST_OF_TWO_AXES: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 2] };
/// The first query head of the first batch (and the key/value head it reads: the first).
pub(super) const ATTENTION_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 5] };

/// The shape's params: causal (0 or 1); the scale is 1/sqrt(D).
pub(super) fn attention_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    let [b, hq, hkv, tq, tk, d] = sizes(dims);
    let fill = Fill::Uniform(-1.0, 1.0);
    let q = InputSpec::new(&[b, hq, tq, d], dtype, fill);
    let kv = InputSpec::new(&[b, hkv, tk, d], dtype, fill);
    let scale = 1.0 / (d.max(1) as f32).sqrt();
    Setup { inputs: vec![q, kv.clone(), kv], params: vec![scale as f64, param(params, 0)], tolerance: dtype }
}

pub(super) fn attention_reference(inputs: &[HostInput], params: &[f64]) -> Vec<Vec<f64>> {
    let [b, hq, tq, d] = sizes(shape(inputs, 0));
    let [_, hkv, tk, _] = sizes(shape(inputs, 1));
    let (scale, causal) = (param(params, 0) as f32 as f64, param(params, 1) != 0.0);
    let mask = inputs.get(3).map(|m| m.values.as_slice());
    let (q, k, v) = (values(inputs, 0), values(inputs, 1), values(inputs, 2));
    vec![attention::reference(q, k, v, [b, hq, hkv, tq, tk, d], scale, causal, mask)]
}

pub(super) fn attention_cost(dtype: DType, dims: &[usize], params: &[f64]) -> (f64, f64) {
    let [b, hq, hkv, tq, tk, d] = sizes(dims);
    let pairs = if param(params, 0) != 0.0 { (tq * tk) as f64 / 2.0 } else { (tq * tk) as f64 };
    let bytes = dtype.size() * (2 * b * hq * tq * d + 2 * b * hkv * tk * d);
    (bytes as f64, 4.0 * (b * hq * d) as f64 * pairs)
}

/// B x query heads x Tq x Tk x D.
pub(super) fn attention_label(dims: &[usize]) -> String {
    let [b, hq, _, tq, tk, d] = sizes(dims);
    label(&[b, hq, tq, tk, d])
}

/// One value per index gives 1-D values, as embedding gradients are.
pub(super) fn scatter_add_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [n, m, bins] = sizes(dims);
    let shape = if m == 1 { vec![n] } else { vec![n, m] };
    let values = InputSpec::new(&shape, dtype, Fill::Uniform(-1.0, 1.0));
    let indices = InputSpec::new(&[n], DType::I32, Fill::Indices(bins));
    Setup { inputs: vec![values, indices], params: vec![bins as f64], tolerance: DType::F32 }
}

pub(super) fn scatter_add_reference(inputs: &[HostInput], params: &[f64]) -> Vec<Vec<f64>> {
    let vals = shape(inputs, 0);
    let m = vals.iter().skip(1).product::<usize>();
    let indices: Vec<i64> = values(inputs, 1).iter().map(|&i| i as i64).collect();
    vec![scatter_add::reference(values(inputs, 0), &indices, m, param(params, 0) as usize)]
}

pub(super) fn scatter_add_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [n, m, bins] = sizes(dims);
    ((n * m * dtype.size() + n * 4 + bins * m * 4) as f64, (n * m) as f64)
}

/// values x bins.
pub(super) fn scatter_add_label(dims: &[usize]) -> String {
    let [n, m, bins] = sizes(dims);
    if m == 1 {
        label(&[n, bins])
    } else {
        label(dims)
    }
}

pub(super) fn overlap_add_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [batch, frames, len, hop] = sizes(dims);
    Setup {
        inputs: vec![InputSpec::new(&[batch, frames, len], dtype, Fill::Uniform(-1.0, 1.0))],
        params: vec![hop as f64],
        tolerance: dtype,
    }
}

pub(super) fn overlap_add_reference(inputs: &[HostInput], params: &[f64]) -> Vec<Vec<f64>> {
    let [_, frames, len] = sizes(shape(inputs, 0));
    vec![overlap_add::reference(values(inputs, 0), frames, len, param(params, 0) as usize)]
}

pub(super) fn overlap_add_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [batch, frames, len, hop] = sizes(dims);
    let out = batch * overlap_add::output_len(frames.max(1), len, hop);
    (((batch * frames * len + out) * dtype.size()) as f64, (batch * frames * len) as f64)
}

/// The grid reaches slightly beyond [-1, 1] so the zero padding is exercised.
pub(super) fn grid_sample_setup(vjp: bool, dtype: DType, dims: &[usize]) -> Setup {
    let [b, h, w, c, gh, gw] = sizes(dims);
    let x = InputSpec::new(&[b, h, w, c], dtype, Fill::Uniform(-1.0, 1.0));
    let grid = InputSpec::new(&[b, gh, gw, 2], dtype, Fill::Uniform(-1.05, 1.05));
    let mut inputs = vec![x, grid];
    if vjp {
        inputs.push(InputSpec::new(&[b, gh, gw, c], dtype, Fill::Uniform(-1.0, 1.0)));
    }
    Setup { inputs, params: vec![], tolerance: dtype }
}

fn grid_dims(inputs: &[HostInput]) -> [usize; 6] {
    let [b, h, w, c] = sizes(shape(inputs, 0));
    let [_, gh, gw, _] = sizes(shape(inputs, 1));
    [b, h, w, c, gh, gw]
}

pub(super) fn grid_sample_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    vec![grid_sample::reference(values(inputs, 0), values(inputs, 1), grid_dims(inputs))]
}

pub(super) fn grid_sample_vjp_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    let (x, g, cot) = (values(inputs, 0), values(inputs, 1), values(inputs, 2));
    let (xg, gg) = grid_sample::reference_vjp(x, g, cot, grid_dims(inputs));
    vec![xg, gg]
}

/// Fewest bytes: the grid, the output (or cotangent), and the 4 neighbours of each point; the
/// VJP twice that.
pub(super) fn grid_sample_cost(vjp: bool, dims: &[usize]) -> (f64, f64) {
    let [b, _, _, c, gh, gw] = sizes(dims);
    let points = b * gh * gw;
    let fwd_bytes = 4.0 * (points * 2 + points * c + 4 * points * c) as f64;
    let flops = if vjp { 16.0 } else { 8.0 } * (points * c) as f64;
    (if vjp { 2.0 * fwd_bytes } else { fwd_bytes }, flops)
}

/// x + grid shapes.
pub(super) fn grid_sample_label(dims: &[usize]) -> String {
    let [b, h, w, c, gh, gw] = sizes(dims);
    format!("{}+{}", label(&[b, h, w, c]), label(&[b, gh, gw, 2]))
}

/// The first batch.
pub(super) const GRID_SAMPLE_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(3); 3] };
pub(super) const GRID_SAMPLE_VJP_CHECK: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(3); 5] };

/// The first matrix (of the input and each output).
pub(super) const FIRST_MATRIX: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 2] };
pub(super) const FIRST_MATRIX_QR: Sampled = Sampled { rows: |_| vec![0], row_axes: &[Some(2); 3] };

pub(super) fn cholesky_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    let [b, n] = sizes(dims);
    Setup { inputs: vec![InputSpec::new(&[b, n, n], dtype, Fill::Spd)], params: vec![], tolerance: dtype }
}

/// A matrix the reference finds not positive definite gives NaN, which never passes.
pub(super) fn cholesky_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    let n = last(shape(inputs, 0));
    let mut out = Vec::with_capacity(values(inputs, 0).len());
    for m in values(inputs, 0).chunks(n * n) {
        out.extend(cholesky::reference(m, n).unwrap_or_else(|| vec![f64::NAN; n * n]));
    }
    vec![out]
}

pub(super) fn cholesky_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [b, n] = sizes(dims);
    ((2 * b * n * n * dtype.size()) as f64, (b * n * n * n) as f64 / 3.0)
}

pub(super) fn cholesky_label(dims: &[usize]) -> String {
    let [b, n] = sizes(dims);
    label(&[b, n, n])
}

pub(super) fn qr_setup(dtype: DType, dims: &[usize], _: &[f64]) -> Setup {
    Setup { inputs: vec![InputSpec::new(dims, dtype, Fill::Uniform(-1.0, 1.0))], params: vec![], tolerance: dtype }
}

pub(super) fn qr_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    let [_, m, n] = sizes(shape(inputs, 0));
    let (mut want_q, mut want_r) = (Vec::new(), Vec::new());
    for mat in values(inputs, 0).chunks((m * n).max(1)) {
        let (q, r) = qr::reference(mat, m, n);
        want_q.extend(q);
        want_r.extend(r);
    }
    vec![want_q, want_r]
}

pub(super) fn qr_cost(dtype: DType, dims: &[usize], _: &[f64]) -> (f64, f64) {
    let [b, m, n] = sizes(dims);
    ((3 * b * m * n * dtype.size()) as f64, (4 * b * m * n * n) as f64 / 3.0)
}

/// k in the dtype, beta and g float32; the shape's params: chunk.
pub(super) fn gdn_kkt_setup(dtype: DType, dims: &[usize], params: &[f64]) -> Setup {
    let [b, t, hg, h, k] = sizes(dims);
    let chunk = param(params, 0) as usize;
    let keys = InputSpec::new(&[b, t, hg, k], dtype, Fill::Uniform(-1.0, 1.0));
    let beta = InputSpec::new(&[b, t, h], DType::F32, Fill::Uniform(0.0, 1.0));
    let g = InputSpec::new(&[b, t, h], DType::F32, Fill::LogGates { chunk });
    Setup { inputs: vec![keys, beta, g], params: vec![chunk as f64], tolerance: DType::F32 }
}

pub(super) fn gdn_kkt_reference(inputs: &[HostInput], _: &[f64]) -> Vec<Vec<f64>> {
    let [b, t, hg, k] = sizes(shape(inputs, 0));
    let h = last(shape(inputs, 1));
    let dtype = inputs.first().map_or(DType::F32, |x| x.dtype);
    vec![gdn_kkt::reference(values(inputs, 0), values(inputs, 1), values(inputs, 2), [b, t, hg, h, k], dtype)]
}

/// The lower triangle of each chunk's Gram matrix: chunk*(chunk-1)/2 dot products of length K.
pub(super) fn gdn_kkt_cost(dtype: DType, dims: &[usize], params: &[f64]) -> (f64, f64) {
    let [b, t, hg, h, k] = sizes(dims);
    let chunk = (param(params, 0) as usize).max(1);
    let bytes = b * t * hg * k * dtype.size() + 2 * b * t * h * 4 + b * t * h * chunk * 4;
    (bytes as f64, (b * h * (t / chunk) * (chunk * (chunk - 1) / 2) * 2 * k) as f64)
}

/// B x T x key heads x K.
pub(super) fn gdn_kkt_label(dims: &[usize]) -> String {
    let [b, t, hg, _, k] = sizes(dims);
    label(&[b, t, hg, k])
}

/// The first 512 steps (whole chunks) of the first batch.
pub(super) const GDN_KKT_CHECK: Sampled = Sampled {
    rows: |d| (0..d.get(1).copied().unwrap_or(0).min(512)).collect(),
    row_axes: &[Some(2), Some(1), Some(1), Some(2)],
};
