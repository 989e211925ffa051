//! More of ggml's kernel families (see the module docs of `ggml.rs` for how cases are
//! written): each dispatched as the library's host code does, checked against a reference
//! written from the op's maths.

use kiln::backend::{ConstantKey, ConstantValue};
use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch};

use crate::common::Rng;
use crate::harness::{
    check, dispatch, fields, input, library, normals, output, q4_0_blocks, q8_0_blocks, round, Field,
};

const FILE: &str = "ggml-metal.metal";

/// The indices ggml's host code sets its function constants by (ggml-metal-device.cpp): each
/// declaration is `[[function_constant(FC_X + n)]]` with the bases of ggml-metal-impl.h
/// (FC_MUL_MV 600, FC_MUL_MM 700, FC_ROPE 800, FC_BIN 1300, FC_SUM_ROWS 1400).
const CONSTANT_INDICES: &[(&str, u32)] = &[
    ("FC_mul_mv_nsg", 600),
    ("FC_mul_mv_ne12", 602),
    ("FC_mul_mv_r2", 603),
    ("FC_mul_mv_r3", 604),
    ("FC_mul_mm_bc_inp", 700),
    ("FC_mul_mm_bc_out", 701),
    ("FC_mul_mm_ne12", 702),
    ("FC_mul_mm_ne13", 703),
    ("FC_mul_mm_r2", 704),
    ("FC_mul_mm_r3", 705),
    ("FC_rope_is_imrope", 800),
    ("FC_rope_is_back", 801),
    ("FC_bin_op", 1300),
    ("FC_bin_f", 1301),
    ("FC_bin_rb", 1302),
    ("FC_bin_cb", 1303),
    ("FC_sum_rows_op", 1400),
];

/// The key of constant `name`: its index, as the host code gives it.
fn key(name: &str) -> ConstantKey {
    let index = CONSTANT_INDICES.iter().find(|(n, _)| *n == name).map(|(_, i)| *i);
    ConstantKey::Index(index.unwrap_or_else(|| panic!("no index for {name}")))
}

fn int_constant(launch: LibraryLaunch, name: &str, value: i64) -> LibraryLaunch {
    launch.constant(key(name), ConstantValue::Int(value))
}

fn bool_constant(launch: LibraryLaunch, name: &str, value: bool) -> LibraryLaunch {
    launch.constant(key(name), ConstantValue::Bool(value))
}

/// Byte strides (nb0..nb3) of a contiguous tensor of `ne` (innermost first) elements of `size`.
fn strides(ne: [usize; 4], size: usize) -> [u64; 4] {
    let nb0 = size as u64;
    let nb1 = nb0 * ne[0] as u64;
    let nb2 = nb1 * ne[1] as u64;
    [nb0, nb1, nb2, nb2 * ne[2] as u64]
}

// ---------------------------------------------------------------------------------------------
// rope

/// What a rope case sets: the tensor (ne00 head dim, ne01 heads, ne02 tokens), the rotated dims
/// and the YaRN parameters (ggml.h `ggml_rope_ext`).
struct Rope {
    ne: [usize; 4],
    n_dims: usize,
    n_ctx_orig: i32,
    freq_base: f32,
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    beta_fast: f32,
    beta_slow: f32,
}

impl Rope {
    /// `ggml_metal_kargs_rope` (ggml-metal-impl.h): f32 source and destination of the same
    /// contiguous shape, no frequency factors (src2 false), not in place. The two trailing
    /// `bool`s share one 16-bit field (src2 in the low byte, inplace in the high one).
    fn args(&self) -> LibraryArg {
        use Field::*;
        let ne = self.ne.map(|n| n as i32);
        let nb = strides(self.ne, 4);
        let mut f = vec![I32(ne[0]), I32(ne[1]), I32(ne[2]), I32(ne[3])];
        f.extend(nb.map(U64));
        f.extend(ne.map(I32));
        f.extend(nb.map(U64));
        f.extend([
            I32(0),
            I32(self.n_dims as i32),
            I32(0),
            I32(self.n_ctx_orig),
            F32(self.freq_base),
            F32(self.freq_scale),
            F32(self.ext_factor),
            F32(self.attn_factor),
            F32(self.beta_fast),
            F32(self.beta_slow),
            I32(0),
            I32(0),
            I32(0),
            I32(0),
            U16(0),
        ]);
        fields(&f)
    }

    /// cos and sin of the angle of pair `iw` at position `p`, scaled (ggml-cpu ops.cpp
    /// `rope_yarn`): the interpolated angle freq_scale·θ, blended with the extrapolated θ by
    /// the ramp between the correction dims when ext_factor is set, which also scales the
    /// magnitude by 1 + 0.1·ln(1/freq_scale).
    fn cos_sin(&self, p: f64, iw: usize) -> (f64, f64) {
        let n_dims = self.n_dims as f64;
        let base = self.freq_base as f64;
        let theta_extrap = p * base.powf(-(iw as f64) / n_dims);
        let theta_interp = self.freq_scale as f64 * theta_extrap;
        let mut mscale = self.attn_factor as f64;
        let mut theta = theta_interp;
        if self.ext_factor != 0.0 {
            let corr = |n_rot: f64| {
                n_dims * (self.n_ctx_orig as f64 / (n_rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
            };
            let low = corr(self.beta_fast as f64).floor().max(0.0);
            let high = corr(self.beta_slow as f64).ceil().min(n_dims - 1.0);
            let y = ((iw / 2) as f64 - low) / (high - low).max(0.001);
            let ramp = (1.0 - y.clamp(0.0, 1.0)) * self.ext_factor as f64;
            theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale as f64).ln();
        }
        (theta.cos() * mscale, theta.sin() * mscale)
    }
}

/// Runs `kernel` on random x and positions and returns (output, x, positions).
fn run_rope(device: Device, rope: &Rope, kernel: &str, seed: u64) -> (Array, Vec<f64>, Vec<i32>) {
    let mut rng = Rng::new(seed);
    let [ne00, ne01, ne02, ne03] = rope.ne;
    let (x, xv) = normals(&mut rng, DType::F32, &[ne03, ne02, ne01, ne00], 1.0);
    let pos: Vec<i32> = (0..ne02).map(|_| (rng.next_u64() % 24) as i32 + 1).collect();
    let p = Array::from_slice(&[ne02], &pos).unwrap();
    let nth = ne00.min(1024);
    let args = [
        rope.args(),
        input(device, &x),
        input(device, &p),
        input(device, &x),
        output(&[ne03, ne02, ne01, ne00], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups(kernel, [ne01, ne02, ne03], nth);
    let launch = bool_constant(bool_constant(launch, "FC_rope_is_imrope", false), "FC_rope_is_back", false);
    let out = dispatch(device, &library("ggml", FILE), &args, &launch);
    (out.into_iter().next().unwrap(), xv, pos)
}

/// `kernel_rope_norm_f32` (adjacent pairs rotated, the dims past n_dims copied):
/// ggml-metal-ops.cpp `ggml_metal_op_rope` (4033-4134), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_rope` (1800-1842): groups (ne01, ne02, ne03) of
/// min(1024, ne00) threads; constants FC_ROPE+0 (imrope) and +1 (backward) false.
pub fn rope_norm_f32(device: Device) {
    let rope = Rope {
        ne: [48, 3, 4, 1],
        n_dims: 32,
        n_ctx_orig: 4096,
        freq_base: 10000.0,
        freq_scale: 0.5,
        ext_factor: 0.0,
        attn_factor: 1.25,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    let (out, xv, pos) = run_rope(device, &rope, "kernel_rope_norm_f32", 301);
    let ne00 = rope.ne[0];
    let mut want = xv.clone();
    for (r, row) in want.chunks_mut(ne00).enumerate() {
        let p = pos[r / rope.ne[1]] as f64;
        for i0 in (0..rope.n_dims).step_by(2) {
            let (c, s) = rope.cos_sin(p, i0);
            let (x0, x1) = (row[i0], row[i0 + 1]);
            row[i0] = x0 * c - x1 * s;
            row[i0 + 1] = x0 * s + x1 * c;
        }
    }
    check("ggml kernel_rope_norm_f32", &out, &want, DType::F32);
}

/// `kernel_rope_neox_f32` (element i paired with i + n_dims/2) with YaRN extrapolation mixing
/// on: the same dispatch as `rope_norm_f32`.
pub fn rope_neox_f32(device: Device) {
    let rope = Rope {
        ne: [40, 2, 5, 1],
        n_dims: 32,
        n_ctx_orig: 4096,
        freq_base: 10000.0,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
    };
    let (out, xv, pos) = run_rope(device, &rope, "kernel_rope_neox_f32", 302);
    let ne00 = rope.ne[0];
    let half = rope.n_dims / 2;
    let mut want = xv.clone();
    for (r, row) in want.chunks_mut(ne00).enumerate() {
        let p = pos[r / rope.ne[1]] as f64;
        for ic in 0..half {
            let (c, s) = rope.cos_sin(p, 2 * ic);
            let (x0, x1) = (row[ic], row[ic + half]);
            row[ic] = x0 * c - x1 * s;
            row[ic + half] = x0 * s + x1 * c;
        }
    }
    check("ggml kernel_rope_neox_f32", &out, &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// soft_max

/// `kernel_soft_max_f32` (rows whose length is not a multiple of 4): ggml-metal-ops.cpp
/// `ggml_metal_op_soft_max` (1511-1599), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_soft_max` (453-478): groups (ne01, ne02, ne03) of nth
/// threads (32 doubled while below ne00 and nth·rows < 256), 32 floats of threadgroup memory;
/// an absent mask or sinks tensor is bound as src0 itself. With `masked`, an f32 mask of ne01
/// rows broadcast over the heads, ALiBi slopes (max_bias 8) and some -inf entries.
fn soft_max_f32(device: Device, masked: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let (ne00, ne01, ne02, ne03) = (75usize, 3usize, 2usize, 1usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[ne03, ne02, ne01, ne00], 2.0);
    let mut mv = rng.normals(ne01 * ne00, 1.0);
    for (i, m) in mv.iter_mut().enumerate() {
        if i % 7 == 3 {
            *m = f64::NEG_INFINITY;
        }
    }
    let mask = Array::from_f64(DType::F32, &[ne01, ne00], &mv).unwrap();
    let mv = mask.to_f64_vec().unwrap();
    let scale = 0.7f32;
    let max_bias = if masked { 8.0f32 } else { 0.0 };
    let n_head_log2 = 1i32 << (ne02 as f32).log2().floor() as u32;
    let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    let nb = strides([ne00, ne01, ne02, ne03], 4);
    let mnb = strides([ne00, ne01, 1, 1], 4);
    use Field::*;
    let args = fields(&[
        I32(ne00 as i32),
        I32(ne01 as i32),
        I32(ne02 as i32),
        U64(nb[1]),
        U64(nb[2]),
        U64(nb[3]),
        I32(ne01 as i32),
        I32(1),
        I32(1),
        U64(mnb[1]),
        U64(mnb[2]),
        U64(mnb[3]),
        U64(nb[1]),
        U64(nb[2]),
        U64(nb[3]),
        F32(scale),
        F32(max_bias),
        F32(m0),
        F32(m1),
        I32(n_head_log2),
    ]);
    let mut nth = 32;
    while nth < ne00 && nth * ne01 * ne02 * ne03 < 256 {
        nth *= 2;
    }
    let src0 = input(device, &x);
    let src1 = if masked { input(device, &mask) } else { src0.clone() };
    let bound = [args, src0.clone(), src1, src0, output(&[ne03, ne02, ne01, ne00], DType::F32)];
    let launch =
        LibraryLaunch::threadgroups("kernel_soft_max_f32", [ne01, ne02, ne03], nth).threadgroup_memory(&[32 * 4]);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for (r, row) in xv.chunks(ne00).enumerate() {
        let (h, i1) = ((r / ne01) % ne02, r % ne01);
        let slope = if max_bias > 0.0 {
            let (base, e) = if (h as i32) < n_head_log2 {
                (m0 as f64, h as i32 + 1)
            } else {
                (m1 as f64, 2 * (h as i32 - n_head_log2) + 1)
            };
            base.powi(e)
        } else {
            1.0
        };
        let v: Vec<f64> =
            (0..ne00).map(|i| row[i] * scale as f64 + if masked { slope * mv[i1 * ne00 + i] } else { 0.0 }).collect();
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = v.iter().map(|a| (a - max).exp()).sum();
        want.extend(v.iter().map(|a| (a - max).exp() / sum));
    }
    let what = if masked { "ggml kernel_soft_max_f32 (mask, ALiBi)" } else { "ggml kernel_soft_max_f32" };
    check(what, &out[0], &want, DType::F32);
}

/// `kernel_soft_max_f32` without a mask (src1 and src2 bound to src0): see `soft_max_f32`.
pub fn soft_max_f32_plain(device: Device) {
    soft_max_f32(device, false, 311);
}

/// `kernel_soft_max_f32` with an f32 mask and ALiBi: see `soft_max_f32`.
pub fn soft_max_f32_mask(device: Device) {
    soft_max_f32(device, true, 312);
}

// ---------------------------------------------------------------------------------------------
// quantized matrix-vector products

/// `ggml_metal_kargs_mul_mv` (ggml-metal-impl.h) for src0 of `ne0x` (ne00, ne01, ne02) with
/// `row_bytes` a row, src1 f32 of `ne1x` (ne10, ne11, ne12), nr0 rows per simdgroup.
fn mul_mv_args(ne0x: [usize; 3], row_bytes: usize, ne1x: [usize; 3], nr0: i32) -> LibraryArg {
    use Field::*;
    let [ne00, ne01, ne02] = ne0x;
    let [ne10, ne11, ne12] = ne1x;
    let nb01 = row_bytes as u64;
    let nb1 = strides([ne10, ne11, ne12, 1], 4);
    fields(&[
        I32(ne00 as i32),
        I32(ne01 as i32),
        I32(ne02 as i32),
        U64(row_bytes as u64 / (ne00 as u64 / 32)),
        U64(nb01),
        U64(nb01 * ne01 as u64),
        U64(nb01 * (ne01 * ne02) as u64),
        I32(ne10 as i32),
        I32(ne11 as i32),
        I32(ne12 as i32),
        U64(nb1[0]),
        U64(nb1[1]),
        U64(nb1[2]),
        U64(nb1[3]),
        I32(ne01 as i32),
        I32(ne11 as i32),
        I32(nr0),
        U16((ne12 / ne02) as u16),
        U16(1),
    ])
}

/// dst[i12][i11][i01] = Σ_k w[i12 / r2][i01][k] · y[i12][i11][k], the product a mul_mv computes.
fn mat_vec_reference(w: &[f64], y: &[f64], ne0x: [usize; 3], ne1x: [usize; 3]) -> Vec<f64> {
    let [k, ne01, ne02] = ne0x;
    let [_, ne11, ne12] = ne1x;
    let r2 = ne12 / ne02;
    let mut want = Vec::new();
    for i12 in 0..ne12 {
        for i11 in 0..ne11 {
            let yr = &y[(i12 * ne11 + i11) * k..][..k];
            for i01 in 0..ne01 {
                let wr = &w[((i12 / r2) * ne01 + i01) * k..][..k];
                want.push(wr.iter().zip(yr).map(|(a, b)| a * b).sum());
            }
        }
    }
    want
}

/// Runs the mul_mv `kernel` (ne00 % 128 != 0 and ne11 ≤ 8 keep ggml on this kernel rather than
/// mul_mv_ext or mul_mm) with the constants `ggml_metal_library_get_pipeline_mul_mv` sets:
/// FC_MUL_MV+0 nsg, +2 ne12, +3 r2, +4 r3.
#[allow(clippy::too_many_arguments)]
fn run_mul_mv(
    device: Device,
    kernel: &str,
    src0: &Array,
    row_bytes: usize,
    y: &Array,
    ne0x: [usize; 3],
    ne1x: [usize; 3],
    (nsg, nr0, groups_x, smem): (usize, usize, usize, usize),
) -> Array {
    let [_, ne11, ne12] = ne1x;
    let args = [
        mul_mv_args(ne0x, row_bytes, ne1x, nr0 as i32),
        input(device, src0),
        input(device, y),
        output(&[ne12, ne11, ne0x[1]], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups(kernel, [groups_x, ne11, ne12], [32, nsg, 1]).threadgroup_memory(&[smem]);
    let launch = int_constant(launch, "FC_mul_mv_nsg", nsg as i64);
    let launch = int_constant(launch, "FC_mul_mv_ne12", ne12 as i64);
    let launch = int_constant(launch, "FC_mul_mv_r2", (ne12 / ne0x[2]) as i64);
    let launch = int_constant(launch, "FC_mul_mv_r3", 1);
    dispatch(device, &library("ggml", FILE), &args, &launch).into_iter().next().unwrap()
}

/// `kernel_mul_mv_q4_0_f32`: ggml-metal-ops.cpp `ggml_metal_op_mul_mat` (2299-2541, the
/// mul_mv branch 2491-2539), ggml-metal-device.cpp `ggml_metal_library_get_pipeline_mul_mv`
/// (801-995): nsg = N_SG_Q4_0 (2) simdgroups of 32, nr0 = N_R0_Q4_0 (4) rows each, groups
/// (ceil(ne01 / (nr0·nsg)), ne11, ne12·ne13), threadgroup memory of 0 bytes (the host sets
/// smem = 0). ne01 is a multiple of nr0·nsg: the kernel reads all nr0 rows of a simdgroup
/// unguarded (only its writes are bounded). Three src1 rows, src0's one matrix broadcast over
/// two src1 matrices (r2 = 2).
pub fn mul_mv_q4_0_f32(device: Device) {
    let mut rng = Rng::new(321);
    let (ne0x, ne1x) = ([576usize, 16, 1], [576usize, 3, 2]);
    let row_blocks = ne0x[0] / 32;
    let (bytes, wv) = q4_0_blocks(&mut rng, ne0x[1] * row_blocks);
    let w = Array::from_slice(&[bytes.len()], &bytes).unwrap();
    let (y, yv) = normals(&mut rng, DType::F32, &[ne1x[2], ne1x[1], ne1x[0]], 1.0);
    let (nsg, nr0) = (2, 4);
    let groups = ne0x[1].div_ceil(nr0 * nsg);
    let out = run_mul_mv(device, "kernel_mul_mv_q4_0_f32", &w, row_blocks * 18, &y, ne0x, ne1x, (nsg, nr0, groups, 0));
    check("ggml kernel_mul_mv_q4_0_f32", &out, &mat_vec_reference(&wv, &yv, ne0x, ne1x), DType::F32);
}

/// `kernel_mul_mv_q8_0_f32`: the same host code with nsg = N_SG_Q8_0 (4), nr0 = N_R0_Q8_0 (2),
/// groups (ceil(ne01 / nr0), ne11, ne12·ne13) and 32·nr0 floats of threadgroup memory.
pub fn mul_mv_q8_0_f32(device: Device) {
    let mut rng = Rng::new(322);
    let (ne0x, ne1x) = ([320usize, 10, 2], [320usize, 2, 2]);
    let row_blocks = ne0x[0] / 32;
    let (bytes, wv) = q8_0_blocks(&mut rng, ne0x[2] * ne0x[1] * row_blocks);
    let w = Array::from_slice(&[bytes.len()], &bytes).unwrap();
    let (y, yv) = normals(&mut rng, DType::F32, &[ne1x[2], ne1x[1], ne1x[0]], 1.0);
    let (nsg, nr0) = (4, 2);
    let groups = ne0x[1].div_ceil(nr0);
    let out = run_mul_mv(
        device,
        "kernel_mul_mv_q8_0_f32",
        &w,
        row_blocks * 34,
        &y,
        ne0x,
        ne1x,
        (nsg, nr0, groups, 32 * 4 * nr0),
    );
    check("ggml kernel_mul_mv_q8_0_f32", &out, &mat_vec_reference(&wv, &yv, ne0x, ne1x), DType::F32);
}

// ---------------------------------------------------------------------------------------------
// matrix-matrix product

/// Runs the mul_mm `kernel` (simdgroup matrices, the non-tensor build) on src0 `w` of ne00 ×
/// ne01 (× ne02) with `row_bytes` a row and f32 src1 `y` of ne00 × ne11 × ne12:
/// ggml-metal-ops.cpp `ggml_metal_op_mul_mat` (the mul_mm branch 2440-2490), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_mul_mm` (739-799): groups (ceil(ne11/32), ceil(ne01/64),
/// ne12·ne13) of 32×4 threads; shapes that are not whole 64×32 tiles set bc_out and 8192 bytes
/// of threadgroup memory (else 6144); constants FC_MUL_MM+0 bc_inp (ne00 % 32 != 0), +1 bc_out,
/// +2 ne12, +3 ne13, +4 r2, +5 r3.
fn run_mul_mm(device: Device, kernel: &str, w: &Array, row_bytes: usize, y: &Array, ne: [usize; 5]) -> Array {
    let [ne00, ne01, ne02, ne11, ne12] = ne;
    let nb01 = row_bytes as u64;
    let nb1 = strides([ne00, ne11, ne12, 1], 4);
    let r2 = ne12 / ne02;
    use Field::*;
    let args = fields(&[
        I32(ne00 as i32),
        I32(ne02 as i32),
        U64(nb01),
        U64(nb01 * ne01 as u64),
        U64(nb01 * (ne01 * ne02) as u64),
        I32(ne12 as i32),
        U64(nb1[0]),
        U64(nb1[1]),
        U64(nb1[2]),
        U64(nb1[3]),
        I32(ne01 as i32),
        I32(ne11 as i32),
        U16(r2 as u16),
        U16(1),
    ]);
    let bc_inp = ne00 % 32 != 0;
    let bc_out = ne01 % 64 != 0 || ne11 % 32 != 0;
    let bound = [args, input(device, w), input(device, y), output(&[ne12, ne11, ne01], DType::F32)];
    let launch = LibraryLaunch::threadgroups(kernel, [ne11.div_ceil(32), ne01.div_ceil(64), ne12], [32, 4, 1])
        .threadgroup_memory(&[if bc_out { 8192 } else { 4096 + 2048 }]);
    let launch = bool_constant(bool_constant(launch, "FC_mul_mm_bc_inp", bc_inp), "FC_mul_mm_bc_out", bc_out);
    let launch = int_constant(int_constant(launch, "FC_mul_mm_ne12", ne12 as i64), "FC_mul_mm_ne13", 1);
    let launch = int_constant(int_constant(launch, "FC_mul_mm_r2", r2 as i64), "FC_mul_mm_r3", 1);
    // `K` (kernel_gated_delta_net_impl's `#define K FC_gated_delta_net_K`).
    dispatch(device, &library("ggml", FILE), &bound, &launch).into_iter().next().unwrap()
}

/// `kernel_mul_mm_f16_f32` with partial tiles (bc_out) and src0 broadcast over two src1
/// matrices (r2 = 2): see `run_mul_mm`. src1 goes through half in threadgroup memory
/// (S1 = half), so the reference rounds it to f16.
pub fn mul_mm_f16_f32(device: Device) {
    let mut rng = Rng::new(331);
    let ne = [96usize, 80, 1, 40, 2];
    let (w, wv) = normals(&mut rng, DType::F16, &[ne[2], ne[1], ne[0]], 1.0);
    let (y, yv) = normals(&mut rng, DType::F32, &[ne[4], ne[3], ne[0]], 1.0);
    let yh: Vec<f64> = yv.iter().map(|&v| round(DType::F16, v)).collect();
    let out = run_mul_mm(device, "kernel_mul_mm_f16_f32", &w, ne[0] * 2, &y, ne);
    let want = mat_vec_reference(&wv, &yh, [ne[0], ne[1], ne[2]], [ne[0], ne[3], ne[4]]);
    check("ggml kernel_mul_mm_f16_f32", &out, &want, DType::F32);
}

/// `kernel_mul_mm_q4_0_f32` (q4_0 blocks dequantized to half in threadgroup memory, 16 values
/// per load, nl = 2) on whole 64×32 tiles (bc_out false): see `run_mul_mm`. The reference rounds
/// each weight (q - 8)·d and each src1 value to f16, as the kernel's half tiles do.
pub fn mul_mm_q4_0_f32(device: Device) {
    let mut rng = Rng::new(332);
    let ne = [128usize, 64, 2, 32, 2];
    let (bytes, wv) = q4_0_blocks(&mut rng, ne[2] * ne[1] * ne[0] / 32);
    let wh: Vec<f64> = wv.iter().map(|&v| round(DType::F16, v)).collect();
    let w = Array::from_slice(&[bytes.len()], &bytes).unwrap();
    let (y, yv) = normals(&mut rng, DType::F32, &[ne[4], ne[3], ne[0]], 1.0);
    let yh: Vec<f64> = yv.iter().map(|&v| round(DType::F16, v)).collect();
    let out = run_mul_mm(device, "kernel_mul_mm_q4_0_f32", &w, ne[0] / 32 * 18, &y, ne);
    let want = mat_vec_reference(&wh, &yh, [ne[0], ne[1], ne[2]], [ne[0], ne[3], ne[4]]);
    check("ggml kernel_mul_mm_q4_0_f32", &out, &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// argsort

/// `kernel_argsort_f32_i32_asc` (one bitonic pass, rows no longer than a threadgroup):
/// ggml-metal-ops.cpp `ggml_metal_op_argsort` (4957-5062), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_argsort` (1248-1272, no constants): nth the power of two
/// at or above ne00 (the pipeline's limit taken as 1024), groups (npr·ne01, ne02, ne03), nth
/// int32 of threadgroup memory (padded to 16 bytes), top_k = nth; with npr = 1 no merge pass
/// follows and dst is not swapped with the scratch half.
pub fn argsort_f32_i32_asc(device: Device) {
    let mut rng = Rng::new(341);
    let (ne00, ne01, ne02) = (100usize, 3usize, 2usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[ne02, ne01, ne00], 1.0);
    let mut nth = 1;
    while nth < ne00 && 2 * nth <= 1024 {
        nth *= 2;
    }
    let npr = ne00.div_ceil(nth);
    let nb = strides([ne00, ne01, ne02, 1], 4);
    use Field::*;
    let mut f = vec![I32(ne00 as i32), I32(ne01 as i32), I32(ne02 as i32), I32(1)];
    f.extend(nb.map(U64));
    f.extend([I32(ne00 as i32), I32(ne01 as i32), I32(ne02 as i32), I32(1), I32(nth as i32)]);
    let bound = [fields(&f), input(device, &x), output(&[ne02, ne01, ne00], DType::I32)];
    let launch = LibraryLaunch::threadgroups("kernel_argsort_f32_i32_asc", [npr * ne01, ne02, 1], nth)
        .threadgroup_memory(&[(nth * 4).div_ceil(16) * 16]);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for row in xv.chunks(ne00) {
        let mut idx: Vec<usize> = (0..ne00).collect();
        idx.sort_by(|&a, &b| row[a].total_cmp(&row[b]));
        want.extend(idx.iter().map(|&i| i as f64));
    }
    check("ggml kernel_argsort_f32_i32_asc", &out[0], &want, DType::I32);
}

// ---------------------------------------------------------------------------------------------
// im2col

/// `kernel_im2col_f32` (2-D, strided, padded, dilated): ggml-metal-ops.cpp
/// `ggml_metal_op_im2col` (4136-4214), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_im2col` (1844-1873): groups (IC, OH, OW) of
/// (min(1024 / (KH·KW), N), KH, KW) threads; dst [N][OH][OW][IC·KH·KW], zero outside the input.
pub fn im2col_f32(device: Device) {
    let mut rng = Rng::new(351);
    let (n, ic, ih, iw) = (2usize, 3usize, 7usize, 8usize);
    let (kh, kw) = (3usize, 3usize);
    let (s0, s1, p0, p1, d0, d1) = (2i64, 1i64, 1i64, 1i64, 1i64, 2i64);
    let ow = ((iw as i64 + 2 * p0 - d0 * (kw as i64 - 1) - 1) / s0 + 1) as usize;
    let oh = ((ih as i64 + 2 * p1 - d1 * (kh as i64 - 1) - 1) / s1 + 1) as usize;
    let (x, xv) = normals(&mut rng, DType::F32, &[n, ic, ih, iw], 1.0);
    let chw = ic * kh * kw;
    use Field::*;
    let args = fields(&[
        U64((ic * ih * iw) as u64),
        U64((ih * iw) as u64),
        I32(iw as i32),
        I32(ih as i32),
        I32(chw as i32),
        I32(s0 as i32),
        I32(s1 as i32),
        I32(p0 as i32),
        I32(p1 as i32),
        I32(d0 as i32),
        I32(d1 as i32),
        I32(n as i32),
        I32(kh as i32),
        I32(kw as i32),
        I32((kh * kw) as i32),
    ]);
    let ntptg0 = (1024 / (kh * kw)).min(n);
    let bound = [args, input(device, &x), output(&[n, oh, ow, chw], DType::F32)];
    let launch = LibraryLaunch::threadgroups("kernel_im2col_f32", [ic, oh, ow], [ntptg0, kh, kw]);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for b in 0..n {
        for y in 0..oh as i64 {
            for xo in 0..ow as i64 {
                for c in 0..ic {
                    for ky in 0..kh as i64 {
                        for kx in 0..kw as i64 {
                            let (yy, xx) = (y * s1 + ky * d1 - p1, xo * s0 + kx * d0 - p0);
                            let inside = (0..ih as i64).contains(&yy) && (0..iw as i64).contains(&xx);
                            want.push(if inside {
                                xv[((b * ic + c) * ih + yy as usize) * iw + xx as usize]
                            } else {
                                0.0
                            });
                        }
                    }
                }
            }
        }
    }
    check("ggml kernel_im2col_f32", &out[0], &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// pool_2d

/// Runs `kernel_pool_2d_{max,avg}_f32`: ggml-metal-ops.cpp `ggml_metal_op_pool_2d`
/// (2239-2297), ggml-metal-device.cpp `ggml_metal_library_get_pipeline_pool_2d` (123-146, no
/// constants): `ggml_metal_kargs_pool_2d`, one thread per output element in groups of
/// min(1024, np); output sizes (IW + 2·p0 - k0)/s0 + 1 as ggml.c `ggml_pool_2d` computes them.
/// `reduce` gives an output from the window's in-bounds values and the window size.
fn pool_2d(device: Device, kernel: &str, seed: u64, reduce: fn(&[f64], usize) -> f64) {
    let mut rng = Rng::new(seed);
    let (nc, ih, iw) = (6usize, 7usize, 9usize);
    let (k0, k1, s0, s1, p0, p1) = (3i64, 2i64, 2i64, 2i64, 1i64, 1i64);
    let ow = ((iw as i64 + 2 * p0 - k0) / s0 + 1) as usize;
    let oh = ((ih as i64 + 2 * p1 - k1) / s1 + 1) as usize;
    let np = nc * oh * ow;
    let (x, xv) = normals(&mut rng, DType::F32, &[nc, ih, iw], 1.0);
    use Field::*;
    let args = fields(&[
        I32(k0 as i32),
        I32(k1 as i32),
        I32(s0 as i32),
        I32(s1 as i32),
        I32(p0 as i32),
        I32(p1 as i32),
        I64(ih as i64),
        I64(iw as i64),
        I64(oh as i64),
        I64(ow as i64),
        I64(np as i64),
    ]);
    let nth = np.min(1024);
    let bound = [args, input(device, &x), output(&[nc, oh, ow], DType::F32)];
    let launch = LibraryLaunch::threadgroups(kernel, np.div_ceil(nth), nth);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for c in 0..nc {
        for y in 0..oh as i64 {
            for xo in 0..ow as i64 {
                let mut window = Vec::new();
                for yy in (y * s1 - p1)..(y * s1 - p1 + k1) {
                    for xx in (xo * s0 - p0)..(xo * s0 - p0 + k0) {
                        if (0..ih as i64).contains(&yy) && (0..iw as i64).contains(&xx) {
                            window.push(xv[(c * ih + yy as usize) * iw + xx as usize]);
                        }
                    }
                }
                want.push(reduce(&window, (k0 * k1) as usize));
            }
        }
    }
    check(&format!("ggml {kernel}"), &out[0], &want, DType::F32);
}

/// `kernel_pool_2d_max_f32`: the maximum over the part of each window inside the input.
pub fn pool_2d_max_f32(device: Device) {
    pool_2d(device, "kernel_pool_2d_max_f32", 361, |w, _| w.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
}

/// `kernel_pool_2d_avg_f32`: the sum over the part of each window inside the input divided by
/// the whole window's size k0·k1 (padding counts as zeros, as ggml-cpu ops.cpp
/// `ggml_compute_forward_pool_2d` defines it).
pub fn pool_2d_avg_f32(device: Device) {
    pool_2d(device, "kernel_pool_2d_avg_f32", 362, |w, k| w.iter().sum::<f64>() / k as f64);
}

// ---------------------------------------------------------------------------------------------
// binary ops

/// `ggml_metal_kargs_bin` (ggml-metal-impl.h) for contiguous f32 src0 `ne0` (ne00 already
/// divided by 4 for the `_4` kernels, as the host does), src1 `ne1`, dst of src0's shape, and
/// the fused src1 offsets `o1`.
fn bin_args(ne0: [usize; 4], nb0: [u64; 4], ne1: [usize; 4], nb1: [u64; 4], o1: &[u64]) -> LibraryArg {
    use Field::*;
    let mut f: Vec<Field> = ne0.iter().map(|&n| I32(n as i32)).collect();
    f.extend(nb0.map(U64));
    f.extend(ne1.iter().map(|&n| I32(n as i32)));
    f.extend(nb1.map(U64));
    f.extend(ne0.iter().map(|&n| I32(n as i32)));
    f.extend(nb0.map(U64));
    f.push(U64(0));
    f.extend((0..8).map(|j| U64(o1.get(j).copied().unwrap_or(0))));
    fields(&f)
}

/// `kernel_bin_fuse_f32_f32_f32` with three ADDs fused (c = a + b0 + b1 + b2, the b's at
/// offsets o1 of one buffer) and src1 broadcast along columns (ne10 = ne00/2, FC_BIN+3 cb),
/// rows matched and heads broadcast: ggml-metal-ops.cpp `ggml_metal_op_bin` (3586-3744),
/// ggml-metal-device.cpp `ggml_metal_library_get_pipeline_bin` (1632-1676): groups
/// (ne01, ne02, ne03) of nth threads (doubled while 2·nth < ne0, at most 256); constants
/// FC_BIN+0 op (0 add), +1 n_fuse, +2 rb, +3 cb.
pub fn bin_fuse_add3_f32_broadcast(device: Device) {
    let mut rng = Rng::new(371);
    let ne0 = [10usize, 3, 2, 1];
    let ne1 = [5usize, 3, 1, 1];
    let per = ne1.iter().product::<usize>();
    let n_fuse = 3;
    let (a, av) = normals(&mut rng, DType::F32, &[ne0[2], ne0[1], ne0[0]], 1.0);
    let (b, bv) = normals(&mut rng, DType::F32, &[n_fuse * per], 1.0);
    let o1: Vec<u64> = (0..n_fuse).map(|j| (j * per * 4) as u64).collect();
    let args = bin_args(ne0, strides(ne0, 4), ne1, strides(ne1, 4), &o1);
    let mut nth = 1;
    while 2 * nth < ne0[0] && nth < 256 {
        nth *= 2;
    }
    let bound = [args, input(device, &a), input(device, &b), output(&[ne0[2], ne0[1], ne0[0]], DType::F32)];
    let launch = LibraryLaunch::threadgroups("kernel_bin_fuse_f32_f32_f32", [ne0[1], ne0[2], ne0[3]], nth);
    let launch = int_constant(int_constant(launch, "FC_bin_op", 0), "FC_bin_f", n_fuse as i64);
    let launch = bool_constant(bool_constant(launch, "FC_bin_rb", false), "FC_bin_cb", true);
    // `FC_OP` (sum_rows' `#define FC_OP FC_sum_rows_op`).
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for (r, row) in av.chunks(ne0[0]).enumerate() {
        let i11 = r % ne0[1] % ne1[1];
        for (i0, v) in row.iter().enumerate() {
            let i10 = i0 % ne1[0];
            want.push(v + (0..n_fuse).map(|j| bv[j * per + i11 * ne1[0] + i10]).sum::<f64>());
        }
    }
    check("ggml kernel_bin_fuse_f32_f32_f32 (add x3)", &out[0], &want, DType::F32);
}

/// `kernel_bin_fuse_f32_f32_f32_4` MUL by one row broadcast over all rows (the row-broadcast
/// path, FC_BIN+2 rb, taken for contiguous operands with a one-row src1): the same host code
/// with ne00, ne10 and ne0 in float4s and groups (ne0/4, nrows) of one thread.
pub fn bin_fuse_mul_f32_4_row(device: Device) {
    let mut rng = Rng::new(372);
    let ne0 = [32usize, 4, 1, 1];
    let ne1 = [32usize, 1, 1, 1];
    let (a, av) = normals(&mut rng, DType::F32, &[ne0[1], ne0[0]], 1.0);
    let (b, bv) = normals(&mut rng, DType::F32, &[ne1[0]], 1.0);
    let c4 = |ne: [usize; 4]| [ne[0] / 4, ne[1], ne[2], ne[3]];
    let args = bin_args(c4(ne0), strides(ne0, 4), c4(ne1), strides(ne1, 4), &[0]);
    let bound = [args, input(device, &a), input(device, &b), output(&[ne0[1], ne0[0]], DType::F32)];
    let launch = LibraryLaunch::threadgroups("kernel_bin_fuse_f32_f32_f32_4", [ne0[0] / 4, ne0[1], 1], 1);
    let launch = int_constant(int_constant(launch, "FC_bin_op", 2), "FC_bin_f", 1);
    let launch = bool_constant(bool_constant(launch, "FC_bin_rb", true), "FC_bin_cb", false);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let want: Vec<f64> = av.iter().enumerate().map(|(i, v)| v * bv[i % ne0[0]]).collect();
    check("ggml kernel_bin_fuse_f32_f32_f32_4 (mul, row broadcast)", &out[0], &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// cpy

/// `kernel_cpy_f32_f16` from a transposed view (the copy behind `ggml_cont(ggml_transpose(x))`)
/// with short rows batched into one threadgroup: ggml-metal-ops.cpp `ggml_metal_op_cpy`
/// (2078-2149), ggml-metal-device.cpp `ggml_metal_library_get_pipeline_cpy` (83-96, no
/// constants): nth = min(nk0·ne01, 256), then nrptg rows of nth = nk0 threads per group while
/// nrptg·nth ≤ 256, groups (ceil(ne01 / nrptg), ne02, ne03) of (nth, nrptg); the last group
/// runs past ne01 and its extra rows return early.
pub fn cpy_f32_f16_transposed(device: Device) {
    let mut rng = Rng::new(381);
    let (ne00, ne01, ne02) = (6usize, 50usize, 2usize);
    // The source buffer holds [ne02][ne00][ne01]; the view swaps the two inner dims.
    let (x, xv) = normals(&mut rng, DType::F32, &[ne02, ne00, ne01], 1.0);
    let nb0 = [(ne01 * 4) as u64, 4, (ne00 * ne01 * 4) as u64, (ne02 * ne00 * ne01 * 4) as u64];
    let nbd = strides([ne00, ne01, ne02, 1], 2);
    let nk0 = ne00;
    let mut nth = (nk0 * ne01).min(256);
    let mut nrptg = 1;
    if nth > nk0 {
        nrptg = nth.div_ceil(nk0);
        nth = nk0;
        if nrptg * nth > 256 {
            nrptg -= 1;
        }
    }
    let nth = nth.min(nk0);
    let nw0 = if nrptg == 1 { nk0.div_ceil(nth) } else { 1 };
    use Field::*;
    let ne = [ne00, ne01, ne02, 1].map(|n| I64(n as i64));
    let mut f = vec![I64(nk0 as i64)];
    f.extend(ne);
    f.extend(nb0.map(U64));
    f.extend(ne);
    f.extend(nbd.map(U64));
    let bound = [fields(&f), input(device, &x), output(&[ne02, ne01, ne00], DType::F16)];
    let launch = LibraryLaunch::threadgroups(
        "kernel_cpy_f32_f16",
        [(nw0 * (ne01 + nrptg - 1)) / nrptg, ne02, 1],
        [nth, nrptg, 1],
    );
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for i2 in 0..ne02 {
        for i1 in 0..ne01 {
            for i0 in 0..ne00 {
                want.push(round(DType::F16, xv[(i2 * ne00 + i0) * ne01 + i1]));
            }
        }
    }
    check("ggml kernel_cpy_f32_f16 (transposed source)", &out[0], &want, DType::F16);
}

// ---------------------------------------------------------------------------------------------
// sum_rows

/// Runs `kernel` of the sum_rows family on rows of `ne00`: ggml-metal-ops.cpp
/// `ggml_metal_op_sum_rows` (957-1020), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_sum_rows` (353-395): ne00 (and ne0) in float4s for the
/// `_4` kernel, nth = min(32 doubled while below ne00, ne00), groups (ne01, ne02, ne03), 32
/// floats (float4s for `_4`) of threadgroup memory; FC_SUM_ROWS+0 the op (10 sum, 11 mean).
fn sum_rows(device: Device, kernel: &str, ne00: usize, op: i64, seed: u64) {
    let mut rng = Rng::new(seed);
    let (ne01, ne02) = (3usize, 2usize);
    let c4 = kernel.ends_with("_4");
    let (x, xv) = normals(&mut rng, DType::F32, &[ne02, ne01, ne00], 1.0);
    let div = if c4 { 4 } else { 1 };
    let (a00, a0) = (ne00 / div, 1 / div);
    let nb = strides([ne00, ne01, ne02, 1], 4);
    let nbd = strides([1, ne01, ne02, 1], 4);
    use Field::*;
    let mut f = vec![I64(a00 as i64), I64(ne01 as i64), I64(ne02 as i64), I64(1)];
    f.extend(nb.map(U64));
    f.extend([I64(a0 as i64), I64(ne01 as i64), I64(ne02 as i64), I64(1)]);
    f.extend(nbd.map(U64));
    let mut nth = 32;
    while nth < a00 && nth < 1024 {
        nth *= 2;
    }
    let nth = nth.min(1024).min(a00);
    let bound = [fields(&f), input(device, &x), output(&[ne02, ne01, 1], DType::F32)];
    let launch = LibraryLaunch::threadgroups(kernel, [ne01, ne02, 1], nth).threadgroup_memory(&[32 * 4 * div]);
    let launch = int_constant(launch, "FC_sum_rows_op", op);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let want: Vec<f64> = xv
        .chunks(ne00)
        .map(|r| {
            let s: f64 = r.iter().sum();
            if op == 11 {
                s / ne00 as f64
            } else {
                s
            }
        })
        .collect();
    check(&format!("ggml {kernel} (op {op})"), &out[0], &want, DType::F32);
}

/// `kernel_sum_rows_f32_f32`: sums of rows of 75 (not a multiple of 4).
pub fn sum_rows_f32(device: Device) {
    sum_rows(device, "kernel_sum_rows_f32_f32", 75, 10, 391);
}

/// `kernel_sum_rows_f32_f32_4` as GGML_OP_MEAN: means of rows of 200, read as float4s.
pub fn mean_rows_f32_4(device: Device) {
    sum_rows(device, "kernel_sum_rows_f32_f32_4", 200, 11, 392);
}

mod run {
    use super::*;
    backend_tests!(
        rope_norm_f32,
        rope_neox_f32,
        soft_max_f32_plain,
        soft_max_f32_mask,
        mul_mv_q4_0_f32,
        mul_mv_q8_0_f32,
        mul_mm_f16_f32,
        mul_mm_q4_0_f32,
        argsort_f32_i32_asc,
        im2col_f32,
        pool_2d_max_f32,
        pool_2d_avg_f32,
        bin_fuse_add3_f32_broadcast,
        bin_fuse_mul_f32_4_row,
        cpy_f32_f16_transposed,
        sum_rows_f32,
        mean_rows_f32_4,
    );
}
