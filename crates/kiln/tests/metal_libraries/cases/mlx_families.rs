//! More of mlx's kernel families (see the module docs of `mlx.rs` for how cases are
//! written): each dispatched as the library's host code does, checked against a reference
//! written from the op's maths.

use kiln::backend::{ConstantKey, ConstantValue};
use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch};

use super::mlx::{block_dims, lib};
use crate::common::Rng;
use crate::harness::{bytes, check, dispatch, fields, input, normals, output, round, Field};

/// A buffer slot the host code leaves unbound (the kernel does not read it): kiln binds
/// arguments by position, so the slot still takes a placeholder.
fn unbound() -> LibraryArg {
    bytes(&[0u32])
}

/// A boolean function constant by index.
fn flag(launch: LibraryLaunch, index: u32, value: bool) -> LibraryLaunch {
    launch.constant(ConstantKey::Index(index), ConstantValue::Bool(value))
}

/// RoPE's forward rotation of the pair (x1, x2) by the angle of position `pos` and frequency
/// pair `i` of `half` (rope.metal `rope_single`/`rope`: inv_freq = 2^(-i/half · log2(base))).
fn rope_pair(x1: f64, x2: f64, pos: f64, scale: f64, i: usize, half: usize, base: f64) -> (f64, f64) {
    let inv_freq = (-(i as f64) / half as f64 * base.log2()).exp2();
    let (s, c) = (scale * pos * inv_freq).sin_cos();
    (x1 * c - x2 * s, x1 * s + x2 * c)
}

/// rope.metal `rope_single_float32` (one time step, one offset, the inference path), forward
/// and not traditional: rope.cpp `RoPE::eval_gpu` (14-164): row-contiguous input with T == 1,
/// buffers 0-4 (in, out, offset, scale, out_strides[0]) and the log2 of the base at 10,
/// function constants 1-3 (forward, traditional, head_seq_transpose), a (dims/2, B·N) grid in
/// get_block_dims groups.
pub fn rope_single_f32(device: Device) {
    let mut rng = Rng::new(401);
    let (b, n, d) = (2usize, 3usize, 64usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[b, n, 1, d], 1.0);
    let (offset, scale, base) = (7i32, 0.75f32, 10000.0f32);
    let mut args = vec![
        input(device, &x),
        output(&[b, n, 1, d], DType::F32),
        bytes(&[offset]),
        bytes(&[scale]),
        bytes(&[d as i64]),
    ];
    args.extend((5..10).map(|_| unbound()));
    args.push(bytes(&[base.log2()]));
    let grid = [d / 2, b * n, 1];
    let launch = LibraryLaunch::threads("rope_single_float32", grid, block_dims(grid));
    let launch = flag(flag(flag(launch, 1, true), 2, false), 3, false);
    let out = dispatch(device, &lib("rope.metal"), &args, &launch);
    let mut want = vec![0.0; xv.len()];
    for (row, r) in xv.chunks(d).enumerate() {
        for i in 0..d / 2 {
            let (y1, y2) = rope_pair(r[i], r[i + d / 2], offset as f64, scale as f64, i, d / 2, base as f64);
            want[row * d + i] = y1;
            want[row * d + i + d / 2] = y2;
        }
    }
    check("mlx rope_single_float32", &out[0], &want, DType::F32);
}

/// rope.metal `rope_float16` (the general path: several time steps, one offset per batch),
/// traditional (adjacent pairs) and forward: rope.cpp `RoPE::eval_gpu` (14-164) with a
/// row-contiguous [B, N, T, D] input: strides and out_strides {T·D, D, 1} at 4 and 5, the
/// offsets' stride at 6, N at 7, a (dims/2, T, B·ceil(N/4)) grid (4 heads per thread).
pub fn rope_traditional_f16(device: Device) {
    let mut rng = Rng::new(402);
    let (b, n, t, d) = (2usize, 5usize, 6usize, 32usize);
    let (x, xv) = normals(&mut rng, DType::F16, &[b, n, t, d], 1.0);
    let offsets = [3i32, 11];
    let off = Array::from_slice(&[b], &offsets).unwrap();
    let (scale, base) = (1.0f32, 500.0f32);
    let strides = [(t * d) as i64, d as i64, 1];
    let mut args = vec![
        input(device, &x),
        output(&[b, n, t, d], DType::F16),
        input(device, &off),
        bytes(&[scale]),
        bytes(&strides),
        bytes(&strides),
        bytes(&[1i64]),
        bytes(&[n as i32]),
    ];
    args.extend((8..10).map(|_| unbound()));
    args.push(bytes(&[base.log2()]));
    let grid = [d / 2, t, b * n.div_ceil(4)];
    let launch = LibraryLaunch::threads("rope_float16", grid, block_dims(grid));
    let launch = flag(flag(flag(launch, 1, true), 2, true), 3, false);
    let out = dispatch(device, &lib("rope.metal"), &args, &launch);
    let mut want = vec![0.0; xv.len()];
    for (m, r) in xv.chunks(d).enumerate() {
        let (batch, pos) = (m / (n * t), m % t);
        let p = (pos as i32 + offsets[batch]) as f64;
        for i in 0..d / 2 {
            let (y1, y2) = rope_pair(r[2 * i], r[2 * i + 1], p, scale as f64, i, d / 2, base as f64);
            want[m * d + 2 * i] = round(DType::F16, y1);
            want[m * d + 2 * i + 1] = round(DType::F16, y2);
        }
    }
    check("mlx rope_float16", &out[0], &want, DType::F16);
}

/// The block sizes of sort.cpp `gpu_merge_sort` (274-314): 4 values a thread, the smallest of
/// 32..512 threads that holds the sorted axis.
fn sort_block(size: usize) -> usize {
    let potential = size.div_ceil(4);
    [32, 64, 128, 256].into_iter().find(|&bn| potential <= bn).unwrap_or(512)
}

/// sort.metal `c_block_sort_float32_float32_bn*_tn4` and `carg_block_sort_float32_uint32_*`:
/// sort.cpp `single_block_sort` (15-112): contiguous rows sorted along the last axis, one
/// group of bn threads per row, sizes and strides at 2-6.
fn block_sort(device: Device, arg: bool) {
    let mut rng = Rng::new(403 + arg as u64);
    let (rows, size) = (3usize, 200usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, size], 2.0);
    let bn = sort_block(size);
    let (name, dtype) = if arg {
        (format!("carg_block_sort_float32_uint32_bn{bn}_tn4"), DType::U32)
    } else {
        (format!("c_block_sort_float32_float32_bn{bn}_tn4"), DType::F32)
    };
    let args = [
        input(device, &x),
        output(&[rows, size], dtype),
        bytes(&[size as i32]),
        bytes(&[1i32]),
        bytes(&[1i32]),
        bytes(&[size as i32]),
        bytes(&[size as i32]),
    ];
    let launch = LibraryLaunch::threadgroups(&name, [1, rows, 1], bn);
    let out = dispatch(device, &lib("sort.metal"), &args, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(size) {
        let mut order: Vec<usize> = (0..size).collect();
        order.sort_by(|&a, &b| r[a].total_cmp(&r[b]));
        want.extend(order.iter().map(|&i| if arg { i as f64 } else { r[i] }));
    }
    check(&format!("mlx {name}"), &out[0], &want, dtype);
}

pub fn block_sort_f32(device: Device) {
    block_sort(device, false);
}

pub fn block_argsort_f32(device: Device) {
    block_sort(device, true);
}

/// Random 4-bit affine weights of an [n, k] matrix in groups of 64: the packed words (eight
/// values a word, lowest bits first, as quantized.h `affine_quantize` packs them), the scales
/// and biases ([n, k/64]), and the dequantized values s·q + b.
fn affine_q4(rng: &mut Rng, n: usize, k: usize) -> (Array, Array, Array, Vec<f64>) {
    let q: Vec<u32> = (0..n * k).map(|_| (rng.next_u64() % 16) as u32).collect();
    let words: Vec<u32> =
        q.chunks(8).map(|c| c.iter().enumerate().fold(0u32, |w, (j, &v)| w | (v << (4 * j)))).collect();
    let (s, sv) = normals(rng, DType::F32, &[n, k / 64], 0.05);
    let (b, bv) = normals(rng, DType::F32, &[n, k / 64], 0.2);
    let deq = (0..n * k).map(|i| sv[i / 64] * q[i] as f64 + bv[i / 64]).collect();
    (Array::from_slice(&[n, k / 8], &words).unwrap(), s, b, deq)
}

/// quantized.metal `affine_qmv_fast_float_gs_64_b_4_batch_0` / `affine_qmv_float_gs_64_b_4_batch_0`:
/// quantized.cpp `qmv` (461-535): w, scales, biases at 0-2, x at 3, y at 4, K and N at 5-6
/// (the batch strides at 7-14 are not bound without a batch); groups of (32, 2) threads, an
/// (M, ceil(N/8), 1) grid; the fast kernel when N % 8 == 0 and K % 512 == 0.
fn qmv(device: Device, fast: bool, m: usize, n: usize, k: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let (w, s, b, deq) = affine_q4(&mut rng, n, k);
    let (x, xv) = normals(&mut rng, DType::F32, &[m, k], 1.0);
    let name = format!("affine_qmv{}_float_gs_64_b_4_batch_0", if fast { "_fast" } else { "" });
    let mut args = vec![
        input(device, &w),
        input(device, &s),
        input(device, &b),
        input(device, &x),
        output(&[m, n], DType::F32),
        bytes(&[k as i32]),
        bytes(&[n as i32]),
    ];
    args.extend((7..15).map(|_| unbound()));
    let launch = LibraryLaunch::threadgroups(&name, [m, n.div_ceil(8), 1], [32, 2, 1]);
    let out = dispatch(device, &lib("quantized.metal"), &args, &launch);
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k).map(|j| xv[r * k + j] * deq[c * k + j]).sum()
        })
        .collect();
    check(&format!("mlx {name}"), &out[0], &want, DType::F32);
}

pub fn qmv_fast_q4_f32(device: Device) {
    qmv(device, true, 2, 32, 1024, 405);
}

/// The general kernel with N not a multiple of 8 (its last tile moved back) and K not a
/// multiple of its 256-value block.
pub fn qmv_q4_f32(device: Device) {
    qmv(device, false, 3, 20, 448, 406);
}

/// The arguments of gemv.metal's `gemv`/`gemv_t`: matmul.cpp `gemv_axbpy` (1093-1242) without
/// axpby: matrix, vector and output at 0, 1 and 3 (the bias at 2 unbound), the vector lengths
/// and the matrix's leading dimension at 4-6 (alpha and beta at 7-8 unbound), one batch
/// (batch_ndim 1, shape {1}, strides {0}) at 9-12, 13-14 unbound.
fn gemv_args(
    device: Device,
    mat: &Array,
    vec: &Array,
    out_len: usize,
    dtype: DType,
    k: usize,
    ld: usize,
) -> Vec<LibraryArg> {
    vec![
        input(device, mat),
        input(device, vec),
        unbound(),
        output(&[out_len], dtype),
        bytes(&[k as i32]),
        bytes(&[out_len as i32]),
        bytes(&[ld as i32]),
        unbound(),
        unbound(),
        bytes(&[1i32]),
        bytes(&[1i32]),
        bytes(&[0i64]),
        bytes(&[0i64]),
        unbound(),
        unbound(),
    ]
}

/// gemv.metal `gemv_float32_bm4_bn1_sm1_sn32_tm4_tn4_nc0_axpby0`: a [M, K] row-major matrix
/// times a [K, 1] vector, `Matmul::eval_gpu` (matmul.cpp 1451-1591) routing N == 1 to `gemv`:
/// not transposed, M < 4096 and 64 < K < 16·M give bm 4, sn 32, tm 4: groups (32, 1, 4) of
/// 16 outputs.
pub fn gemv_f32(device: Device) {
    let mut rng = Rng::new(407);
    let (m, k) = (70usize, 300usize);
    let (a, av) = normals(&mut rng, DType::F32, &[m, k], 1.0);
    let (x, xv) = normals(&mut rng, DType::F32, &[k, 1], 1.0);
    let args = gemv_args(device, &a, &x, m, DType::F32, k, k);
    let name = "gemv_float32_bm4_bn1_sm1_sn32_tm4_tn4_nc0_axpby0";
    let launch = LibraryLaunch::threadgroups(name, [m.div_ceil(16), 1, 1], [32, 1, 4]);
    let out = dispatch(device, &lib("gemv.metal"), &args, &launch);
    let want: Vec<f64> = av.chunks(k).map(|r| r.iter().zip(&xv).map(|(a, x)| a * x).sum()).collect();
    check("mlx gemv_float32", &out[0], &want, DType::F32);
}

/// gemv.metal `gemv_t_float16_bm1_bn2_sm8_sn4_tm4_tn4_nc0_axpby0`: a [1, K] vector times a
/// [K, N] row-major matrix (the matrix is read transposed): matmul.cpp `gemv_axbpy` with
/// K < 8192 (sm 8, sn 4) and N < 512 (bn 2): groups (32, 2, 1) of 32 outputs, the matrix's
/// leading dimension N; accumulated in float, rounded once.
fn gemv_t(device: Device, k: usize, n: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let (x, xv) = normals(&mut rng, DType::F16, &[1, k], 1.0);
    let (b, bv) = normals(&mut rng, DType::F16, &[k, n], 1.0);
    let args = gemv_args(device, &b, &x, n, DType::F16, k, n);
    let name = "gemv_t_float16_bm1_bn2_sm8_sn4_tm4_tn4_nc0_axpby0";
    let launch = LibraryLaunch::threadgroups(name, [n.div_ceil(32), 1, 1], [32, 2, 1]);
    let out = dispatch(device, &lib("gemv.metal"), &args, &launch);
    let want: Vec<f64> = (0..n).map(|c| round(DType::F16, (0..k).map(|j| xv[j] * bv[j * n + c]).sum())).collect();
    check("mlx gemv_t_float16", &out[0], &want, DType::F16);
}

/// N a whole number of 32-output tiles: every lane of the last group has columns.
pub fn gemv_t_f16(device: Device) {
    gemv_t(device, 150, 96, 408);
}

/// N = 70: lanes of the last group past the matrix skip the loop that holds a
/// `threadgroup_barrier`, then all meet at `simd_shuffle_down` — a barrier in divergent code,
/// undefined in Metal. The CPU emulator stops the kernel with a fault saying so instead of
/// guessing an answer.
#[test]
fn gemv_t_f16_ragged_stops_at_its_divergent_barrier_on_the_cpu() {
    let Some(device) = crate::common::device_or_skip("cpu") else { return };
    let err = std::panic::catch_unwind(|| gemv_t(device, 150, 70, 409))
        .expect_err("the kernel runs a barrier in divergent code here: the CPU run must stop");
    let text = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("ran on part of a SIMD-group"), "{text}");
}

/// steel/gemm/params.h `GEMMParams` as matmul.cpp `steel_matmul_regular_axpby` (343-501)
/// fills it: sizes, leading dimensions, tile counts, per-batch strides (64-bit), swizzle 0,
/// whole K blocks, batch_ndim.
#[allow(clippy::too_many_arguments)]
fn gemm_params(
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    bm: usize,
    bn: usize,
    bk: usize,
    strides: [usize; 2],
) -> LibraryArg {
    let i = |v: usize| Field::I32(v as i32);
    fields(&[
        i(m),
        i(n),
        i(k),
        i(lda),
        i(ldb),
        i(n),
        i(n.div_ceil(bn)),
        i(m.div_ceil(bm)),
        Field::I64(strides[0] as i64),
        Field::I64(strides[1] as i64),
        Field::I64((m * n) as i64),
        i(0),
        i(k / bk),
        i(1),
    ])
}

/// The function constants of steel_gemm_fused.h `gemm` (matmul.cpp 399-406): has_batch (10),
/// use_out_source (100), do_axpby (110), align_M/N/K (200-202).
fn gemm_constants(launch: LibraryLaunch, out_source: bool, align: [bool; 3]) -> LibraryLaunch {
    let launch = flag(flag(flag(launch, 10, false), 100, out_source), 110, out_source);
    flag(flag(flag(launch, 200, align[0]), 201, align[1]), 202, align[2])
}

/// steel_gemm_fused.metal `steel_gemm_fused_nn_float32_float32_bm64_bn64_bk16_wm2_wn2`: a
/// batch of two [M, K]·[K, N] products, `Matmul::eval_gpu` → `steel_matmul_axpby` (844-1042)
/// on an M1/M2-class device ('g': float nn keeps the 64×64×16, 2×2 default; K too small for
/// split-K; no NAX): one batch axis (has_batch false, the strides in GEMMParams), M, N and K
/// not multiples of the tile (align_* false), groups (32, wn, wm), a (tiles_n, tiles_m, batch)
/// grid.
pub fn gemm_nn_f32(device: Device) {
    let mut rng = Rng::new(410);
    let (batch, m, n, k) = (2usize, 70usize, 50usize, 40usize);
    let (a, av) = normals(&mut rng, DType::F32, &[batch, m, k], 1.0);
    let (b, bv) = normals(&mut rng, DType::F32, &[batch, k, n], 1.0);
    let args = [
        input(device, &a),
        input(device, &b),
        unbound(),
        output(&[batch, m, n], DType::F32),
        gemm_params(m, n, k, k, n, 64, 64, 16, [m * k, k * n]),
    ];
    let name = "steel_gemm_fused_nn_float32_float32_bm64_bn64_bk16_wm2_wn2";
    let launch = LibraryLaunch::threadgroups(name, [n.div_ceil(64), m.div_ceil(64), batch], [32, 2, 2]);
    let launch = gemm_constants(launch, false, [false; 3]);
    let out = dispatch(device, &lib("steel/gemm/kernels/steel_gemm_fused.metal"), &args, &launch);
    let want: Vec<f64> = (0..batch * m * n)
        .map(|o| {
            let (z, r, c) = (o / (m * n), (o / n) % m, o % n);
            (0..k).map(|j| av[(z * m + r) * k + j] * bv[(z * k + j) * n + c]).sum()
        })
        .collect();
    check("mlx steel_gemm_fused_nn_float32", &out[0], &want, DType::F32);
}

/// steel_gemm_fused.metal `steel_gemm_fused_nt_float16_float16_bm64_bn32_bk32_wm2_wn2` as
/// addmm: D = alpha·A·Bᵀ + beta·C, `AddMM::eval_gpu` (1593-1757) → `steel_matmul_axpby` on
/// a 'g' device (half nt: 64×32×32, 2×2): B given as [N, K] (ldb K), C at 2 with
/// `GEMMAddMMParams` {ldc, fdc, batch_stride_c, alpha, beta} at 5, use_out_source and
/// do_axpby set, every size a multiple of the tile. Accumulated in float, rounded once.
pub fn addmm_nt_f16(device: Device) {
    let mut rng = Rng::new(411);
    let (m, n, k) = (64usize, 64usize, 96usize);
    let (a, av) = normals(&mut rng, DType::F16, &[m, k], 1.0);
    let (bt, btv) = normals(&mut rng, DType::F16, &[n, k], 1.0);
    let (c, cv) = normals(&mut rng, DType::F16, &[m, n], 1.0);
    let (alpha, beta) = (0.5f32, 2.0f32);
    let args = [
        input(device, &a),
        input(device, &bt),
        input(device, &c),
        output(&[m, n], DType::F16),
        gemm_params(m, n, k, k, k, 64, 32, 32, [0, 0]),
        fields(&[Field::I32(n as i32), Field::I32(1), Field::I64(0), Field::F32(alpha), Field::F32(beta)]),
    ];
    let name = "steel_gemm_fused_nt_float16_float16_bm64_bn32_bk32_wm2_wn2";
    let launch = LibraryLaunch::threadgroups(name, [n.div_ceil(32), m.div_ceil(64), 1], [32, 2, 2]);
    let launch = gemm_constants(launch, true, [true; 3]);
    let out = dispatch(device, &lib("steel/gemm/kernels/steel_gemm_fused.metal"), &args, &launch);
    let want: Vec<f64> = (0..m * n)
        .map(|o| {
            let (r, col) = (o / n, o % n);
            let dot: f64 = (0..k).map(|j| av[r * k + j] * btv[col * k + j]).sum();
            round(DType::F16, alpha as f64 * dot + beta as f64 * cv[o])
        })
        .collect();
    check("mlx steel_gemm_fused_nt_float16 (addmm)", &out[0], &want, DType::F16);
}

/// A 2-D NHWC convolution: batch, input size, channels in/out, kernel size, stride, padding,
/// groups (no dilation, no flip).
#[derive(Clone, Copy)]
struct Conv2d {
    n: usize,
    hw: [usize; 2],
    c: usize,
    o: usize,
    k: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    groups: usize,
}

impl Conv2d {
    fn out_hw(&self) -> [usize; 2] {
        [0, 1].map(|a| (self.hw[a] + 2 * self.pad[a] - self.k[a]) / self.stride[a] + 1)
    }

    /// steel/conv/params.h `MLXConvParams<2>` as conv.cpp `conv_2D_gpu` (1502-1545) fills it
    /// from row-contiguous NHWC input, [O, kh, kw, C/groups] weights and NHWC output.
    fn params(&self) -> LibraryArg {
        let [oh, ow] = self.out_hw();
        let cg = self.c / self.groups;
        let i = |v: usize| Field::I32(v as i32);
        let l = |v: usize| Field::I64(v as i64);
        let mut f = vec![i(self.n), i(self.c), i(self.o)];
        for pair in [self.hw, self.k, [oh, ow], self.stride, self.pad, [1, 1], [1, 1]] {
            f.extend(pair.map(i));
        }
        let [h, w] = self.hw;
        let (c, o, [kh, kw]) = (self.c, self.o, self.k);
        f.extend([h * w * c, w * c, c, 1].map(l));
        f.extend([kh * kw * cg, kw * cg, cg, 1].map(l));
        f.extend([oh * ow * o, ow * o, o, 1].map(l));
        f.push(i(self.groups));
        // `bool flip` (false) and the byte after it.
        f.push(Field::U16(0));
        fields(&f)
    }

    /// The reference: out[n, y, x, o] = Σ in[n, y·s − p + i, x·s − p + j, c] · w[o, i, j, c'] over
    /// the channels c of o's group.
    fn reference(&self, input: &[f64], wt: &[f64]) -> Vec<f64> {
        let [oh, ow] = self.out_hw();
        let [h, w] = self.hw;
        let (cg, og) = (self.c / self.groups, self.o / self.groups);
        let mut out = Vec::with_capacity(self.n * oh * ow * self.o);
        for n in 0..self.n {
            for y in 0..oh {
                for x in 0..ow {
                    for o in 0..self.o {
                        let mut acc = 0.0;
                        for i in 0..self.k[0] {
                            for j in 0..self.k[1] {
                                let iy = (y * self.stride[0] + i) as isize - self.pad[0] as isize;
                                let ix = (x * self.stride[1] + j) as isize - self.pad[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                for cc in 0..cg {
                                    let c = (o / og) * cg + cc;
                                    let v = input[((n * h + iy as usize) * w + ix as usize) * self.c + c];
                                    acc += v * wt[((o * self.k[0] + i) * self.k[1] + j) * cg + cc];
                                }
                            }
                        }
                        out.push(acc);
                    }
                }
            }
        }
        out
    }
}

/// conv.metal `depthwise_conv_2d_float32`: conv.cpp `depthwise_conv_2D_gpu` (1192-1254), which
/// `dispatch_conv_2D_gpu` (1286-1367) picks for one channel per group with C == O, C % 16 == 0,
/// a kernel up to 7×7 and stride up to 2: kernel size, stride, the 8×4 output tile and flip
/// as function constants (0, 1, 10, 11, 100, 101, 200), groups (8, 8, 4) over
/// (C/8, ceil(oW/8), ceil(oH/4)·N).
pub fn depthwise_conv2d_f32(device: Device) {
    let mut rng = Rng::new(412);
    let conv = Conv2d { n: 2, hw: [11, 9], c: 16, o: 16, k: [3, 3], stride: [2, 2], pad: [1, 1], groups: 16 };
    let [oh, ow] = conv.out_hw();
    let (x, xv) = normals(&mut rng, DType::F32, &[conv.n, 11, 9, 16], 1.0);
    let (w, wv) = normals(&mut rng, DType::F32, &[16, 3, 3, 1], 1.0);
    let args = [input(device, &x), input(device, &w), output(&[conv.n, oh, ow, 16], DType::F32), conv.params()];
    let int = |launch: LibraryLaunch, index: u32, v: usize| {
        launch.constant(ConstantKey::Index(index), ConstantValue::Int(v as i64))
    };
    let launch = LibraryLaunch::threadgroups(
        "depthwise_conv_2d_float32",
        [16 / 8, ow.div_ceil(8), oh.div_ceil(4) * conv.n],
        [8, 8, 4],
    );
    let launch = int(int(int(int(int(int(launch, 0, 3), 1, 3), 10, 2), 11, 2), 100, 4), 101, 8);
    let launch = flag(launch, 200, false);
    let out = dispatch(device, &lib("conv.metal"), &args, &launch);
    check("mlx depthwise_conv_2d_float32", &out[0], &conv.reference(&xv, &wv), DType::F32);
}

/// steel_conv.metal `implicit_gemm_conv_2d_float32_bm32_bn32_bk16_wm2_wn2_channel_l_filter_s`:
/// conv.cpp `implicit_gemm_conv_2D_gpu` (321-455), which `dispatch_conv_2D_gpu` picks for one
/// group with C and O multiples of 16 (no Winograd: C % 32 != 0): an implicit GEMM of
/// M = N·oH·oW, N = O, K = kh·kw·C, its `ImplicitGemmConv2DParams` (input jumps as the host
/// computes them) at 4, groups (32, wn, wm), a (tiles_n, tiles_m, groups) grid.
pub fn implicit_gemm_conv2d_f32(device: Device) {
    let mut rng = Rng::new(413);
    let conv = Conv2d { n: 2, hw: [8, 8], c: 16, o: 32, k: [3, 3], stride: [1, 1], pad: [1, 1], groups: 1 };
    let [oh, ow] = conv.out_hw();
    let (x, xv) = normals(&mut rng, DType::F32, &[2, 8, 8, 16], 1.0);
    let (w, wv) = normals(&mut rng, DType::F32, &[32, 3, 3, 16], 0.5);
    let (gm, gn, gk) = (conv.n * oh * ow, conv.o, 9 * conv.c);
    let (bm, bn, bk) = (32usize, 32usize, 16i32);
    let (ijw, ijh) = (conv.c as i32, (conv.hw[1] * conv.c) as i32);
    let gemm = fields(&[
        Field::I32(gm as i32),
        Field::I32(gn as i32),
        Field::I32(gk as i32),
        Field::I32(9),
        Field::I32(ijw),
        Field::I32(ijh - 2 * ijw),
        Field::I32(bk - 2 * ijh - 2 * ijw),
        Field::I32(gn.div_ceil(bn) as i32),
        Field::I32(gm.div_ceil(bm) as i32),
        Field::I32(0),
    ]);
    let args = [input(device, &x), input(device, &w), output(&[2, oh, ow, 32], DType::F32), conv.params(), gemm];
    let name = "implicit_gemm_conv_2d_float32_bm32_bn32_bk16_wm2_wn2_channel_l_filter_s";
    let launch = LibraryLaunch::threadgroups(name, [gn.div_ceil(bn), gm.div_ceil(bm), 1], [32, 2, 2]);
    let out = dispatch(device, &lib("steel/conv/kernels/steel_conv.metal"), &args, &launch);
    check("mlx implicit_gemm_conv_2d_float32", &out[0], &conv.reference(&xv, &wv), DType::F32);
}

/// conv.metal `naive_unfold_nd_float32_2` then steel_gemm_fused.metal
/// `steel_gemm_fused_nt_float32_float32_bm64_bn32_bk32_wm2_wn2`: conv.cpp
/// `explicit_gemm_conv_ND_gpu` (114-208), which `dispatch_conv_2D_gpu` takes for channels the
/// implicit kernels do not (C = 6) and a small output: the input unfolded into
/// [N·oH·oW, kh·kw·C] rows (a (C, kh·kw, rows) grid of threads in groups of (min(32⌈C/32⌉, C),
/// min(256/32⌈C/32⌉, kh·kw), 1), the row offset 0 at 3), then multiplied by the weights read as
/// a transposed [K, O] matrix (ldb K) through `steel_matmul` on a 'g' device (float nt:
/// 64×32×32, 2×2; no size aligned).
pub fn explicit_gemm_conv2d_f32(device: Device) {
    let mut rng = Rng::new(420);
    let conv = Conv2d { n: 1, hw: [7, 7], c: 6, o: 5, k: [3, 3], stride: [2, 2], pad: [1, 1], groups: 1 };
    let [oh, ow] = conv.out_hw();
    let (x, xv) = normals(&mut rng, DType::F32, &[1, 7, 7, 6], 1.0);
    let (w, wv) = normals(&mut rng, DType::F32, &[5, 3, 3, 6], 0.5);
    let (m, k, n) = (oh * ow, 9 * conv.c, conv.o);
    let tgp_x = conv.c.min(64).div_ceil(32) * 32;
    let unfold = LibraryLaunch::threads(
        "naive_unfold_nd_float32_2",
        [conv.c, 9, m],
        [tgp_x.min(conv.c), (256 / tgp_x).min(9), 1],
    );
    let args = [input(device, &x), output(&[m, k], DType::F32), conv.params(), bytes(&[0i32])];
    let unfolded = dispatch(device, &lib("conv.metal"), &args, &unfold);
    let args = [
        input(device, &unfolded[0]),
        input(device, &w),
        unbound(),
        output(&[1, oh, ow, n], DType::F32),
        gemm_params(m, n, k, k, k, 64, 32, 32, [0, 0]),
    ];
    let name = "steel_gemm_fused_nt_float32_float32_bm64_bn32_bk32_wm2_wn2";
    let launch = LibraryLaunch::threadgroups(name, [n.div_ceil(32), m.div_ceil(64), 1], [32, 2, 2]);
    let launch = gemm_constants(launch, false, [false; 3]);
    let out = dispatch(device, &lib("steel/gemm/kernels/steel_gemm_fused.metal"), &args, &launch);
    check("mlx naive_unfold_nd_float32_2 + steel_gemm_fused_nt", &out[0], &conv.reference(&xv, &wv), DType::F32);
}

/// The threads per group of scan.cpp `scan_gpu_inplace`'s contiguous path (69-90) for 4-byte
/// types (4 reads a thread): whole SIMD-groups covering the axis up to 4·1024, half of it up
/// to 4·2048, else the kernel's maximum (1024).
fn scan_group(size: usize) -> usize {
    let group = if size <= 4 * 1024 {
        size.div_ceil(128) * 32
    } else if size <= 4 * 2048 {
        (size / 2).div_ceil(128) * 32
    } else {
        1024
    };
    group.min(1024)
}

/// scan.metal `contig_scan_inclusive_sum_float32_float32` along the last axis: scan.cpp
/// `scan_gpu_inplace` (15-114): the axis size as a size_t at 2, a (group, rows, 1) grid of
/// threads (get_2d_grid_dims of the rows), one group per row.
pub fn contig_scan_inclusive_sum_f32(device: Device) {
    let mut rng = Rng::new(414);
    let (rows, size) = (3usize, 1000usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, size], 1.0);
    let g = scan_group(size);
    let args = [input(device, &x), output(&[rows, size], DType::F32), bytes(&[size as u64])];
    let name = "contig_scan_inclusive_sum_float32_float32";
    let out = dispatch(device, &lib("scan.metal"), &args, &LibraryLaunch::threads(name, [g, rows, 1], g));
    let mut want = Vec::new();
    for r in xv.chunks(size) {
        want.extend(r.iter().scan(0.0, |acc, v| {
            *acc += v;
            Some(*acc)
        }));
    }
    check("mlx contig_scan_inclusive_sum_float32", &out[0], &want, DType::F32);
}

/// scan.metal `contig_scan_reverse_exclusive_sum_int32_int32`: an axis of 5000 (over 4·1024,
/// so the group covers half of it and loops), summed from the end, each element left out of
/// its own sum; exact.
pub fn contig_scan_reverse_exclusive_sum_i32(device: Device) {
    let mut rng = Rng::new(415);
    let (rows, size) = (2usize, 5000usize);
    let xv: Vec<i32> = (0..rows * size).map(|_| (rng.next_u64() % 2001) as i32 - 1000).collect();
    let x = Array::from_slice(&[rows, size], &xv).unwrap();
    let g = scan_group(size);
    let args = [input(device, &x), output(&[rows, size], DType::I32), bytes(&[size as u64])];
    let name = "contig_scan_reverse_exclusive_sum_int32_int32";
    let out = dispatch(device, &lib("scan.metal"), &args, &LibraryLaunch::threads(name, [g, rows, 1], g));
    let mut want = vec![0.0; rows * size];
    for (r, row) in xv.chunks(size).enumerate() {
        let mut acc = 0i64;
        for j in (0..size).rev() {
            want[r * size + j] = acc as f64;
            acc += row[j] as i64;
        }
    }
    check("mlx contig_scan_reverse_exclusive_sum_int32", &out[0], &want, DType::I32);
}

/// arg_reduce.metal `argmax_float32` over the middle axis of a [4, 300, 5] array:
/// primitives.cpp `ArgReduce::eval_gpu` (62-128): the other axes' shape and strides at 2-4,
/// ndim, the axis stride and size at 5-7 (size_t and int64), ceil(axis/4) threads rounded up
/// to whole SIMD-groups per output, a (group, outputs, 1) grid of threads.
pub fn argmax_f32(device: Device) {
    let mut rng = Rng::new(416);
    let (a, axis, c) = (4usize, 300usize, 5usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[a, axis, c], 1.0);
    let g = axis.div_ceil(4).div_ceil(32) * 32;
    let args = [
        input(device, &x),
        output(&[a, c], DType::U32),
        bytes(&[a as i32, c as i32]),
        bytes(&[(axis * c) as i64, 1]),
        bytes(&[c as i64, 1]),
        bytes(&[2u64]),
        bytes(&[c as i64]),
        bytes(&[axis as u64]),
    ];
    let out =
        dispatch(device, &lib("arg_reduce.metal"), &args, &LibraryLaunch::threads("argmax_float32", [g, a * c, 1], g));
    let want: Vec<f64> = (0..a * c)
        .map(|o| {
            let (i, k) = (o / c, o % c);
            let v = |j: usize| xv[(i * axis + j) * c + k];
            (0..axis).fold(0, |best, j| if v(j) > v(best) { j } else { best }) as f64
        })
        .collect();
    check("mlx argmax_float32", &out[0], &want, DType::U32);
}

/// layer_norm.metal `layer_norm{float16,float32}` / `layer_norm_looped*`: normalization.cpp
/// `LayerNorm::eval_gpu` (219-306): x, w, b, out at 0-3, eps, the axis size and the weight and
/// bias strides (uint) at 4-7; up to 6656 a row, ceil(axis/8) threads in whole SIMD-groups per
/// row, beyond it the looped kernel with groups of the kernel's maximum (1024).
/// y = (x − mean)·rsqrt(var + eps)·w + b, the scaling in float and the affine part in T.
fn layer_norm(device: Device, dtype: DType, rows: usize, axis: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let (x, xv) = normals(&mut rng, dtype, &[rows, axis], 2.0);
    let (w, wv) = normals(&mut rng, dtype, &[axis], 1.0);
    let (b, bv) = normals(&mut rng, dtype, &[axis], 1.0);
    let eps = 1e-5f32;
    let looped = axis > 6656;
    let g = if looped { 1024 } else { axis.div_ceil(8).div_ceil(32) * 32 };
    let tname = if dtype == DType::F16 { "float16" } else { "float32" };
    let name = format!("layer_norm{}{tname}", if looped { "_looped" } else { "" });
    let args = [
        input(device, &x),
        input(device, &w),
        input(device, &b),
        output(&[rows, axis], dtype),
        bytes(&[eps]),
        bytes(&[axis as u32]),
        bytes(&[1u32]),
        bytes(&[1u32]),
    ];
    let out = dispatch(device, &lib("layer_norm.metal"), &args, &LibraryLaunch::threads(&name, rows * g, g));
    let mut want = Vec::new();
    for r in xv.chunks(axis) {
        let mean = r.iter().sum::<f64>() / axis as f64;
        let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / axis as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        want.extend(r.iter().zip(wv.iter().zip(&bv)).map(|(v, (w, b))| {
            let xn = round(dtype, (v - mean) * inv);
            round(dtype, round(dtype, w * xn) + b)
        }));
    }
    check(&format!("mlx {name}"), &out[0], &want, dtype);
}

/// A row of 1020: 128 threads, the last reads 4 of its 8. `layer_norm_single_row` declares
/// `threadgroup float local_buffer[SIMD_SIZE] = {0};` (layer_norm.metal:65) and reads the
/// entries of SIMD-groups the group does not have as those zeros.
pub fn layer_norm_f16(device: Device) {
    layer_norm(device, DType::F16, 5, 1020, 417);
}

/// A row of 1003: 128 threads, of which 126 and 127 start past the row, so their
/// `n = axis_size - lid * N_READS` is negative and `for (int i = n; i < N_READS; i++)
/// thread_x[i] = mean;` (layer_norm.metal:99-103) writes `thread_x` below its start: out of
/// bounds in MLX itself; kiln's CPU run stops on it (see the report).
#[allow(dead_code)]
pub fn layer_norm_f16_spare_threads(device: Device) {
    layer_norm(device, DType::F16, 5, 1003, 419);
}

/// A row of 7000: the looped kernel.
pub fn layer_norm_looped_f32(device: Device) {
    layer_norm(device, DType::F32, 2, 7000, 418);
}

mod run {
    use super::*;
    backend_tests!(
        rope_single_f32,
        rope_traditional_f16,
        block_sort_f32,
        block_argsort_f32,
        qmv_fast_q4_f32,
        qmv_q4_f32,
        gemv_f32,
        gemv_t_f16,
        gemm_nn_f32,
        addmm_nt_f16,
        depthwise_conv2d_f32,
        implicit_gemm_conv2d_f32,
        layer_norm_f16,
        explicit_gemm_conv2d_f32,
        contig_scan_inclusive_sum_f32,
        contig_scan_reverse_exclusive_sum_i32,
        argmax_f32,
        layer_norm_looped_f32,
    );
}
