//! candle's kernels, dispatched as candle-metal-kernels' host code does (commit 2a13b0f;
//! `src/kernels/*.rs` named at each case, `src/utils.rs` for `linear_split` and
//! `get_tile_size`), checked against references written from each op's maths.

use kiln::{DType, Device, LibraryLaunch};

use crate::common::Rng;
use crate::harness::{bytes, check, dispatch, erf, input, library, linear_split, normals, output, round};

/// `get_tile_size` (utils.rs:89-91): elements per thread of the contiguous elementwise kernels.
fn tiles(length: usize, dtype: DType) -> usize {
    length.div_ceil(1.max(8 / dtype.size()))
}

/// unary.metal `gelu_erf_f32`, contiguous: kernels/unary.rs `call_unary_contiguous` (15-39).
pub fn unary_gelu_erf_f32(device: Device) {
    let mut rng = Rng::new(101);
    let n = 1000;
    let (x, xv) = normals(&mut rng, DType::F32, &[n], 2.0);
    let (groups, width) = linear_split(tiles(n, DType::F32));
    let launch = LibraryLaunch::threadgroups("gelu_erf_f32", groups, width);
    let lib = library("candle", "unary.metal");
    let out = dispatch(device, &lib, &[bytes(&[n as u64]), input(device, &x), output(&[n], DType::F32)], &launch);
    let want: Vec<f64> = xv.iter().map(|&v| 0.5 * v * (1.0 + erf(v / 2f64.sqrt()))).collect();
    check("candle gelu_erf_f32", &out[0], &want, DType::F32);
}

/// unary.metal `exp_f16_strided` over a transposed view: `call_unary_strided` (42-77).
pub fn unary_exp_f16_strided(device: Device) {
    let mut rng = Rng::new(102);
    let (rows, cols) = (24, 40);
    let (x, xv) = normals(&mut rng, DType::F16, &[rows, cols], 1.0);
    // The view x.T: shape [cols, rows], strides [1, cols].
    let (shape, strides) = ([cols, rows], [1usize, cols]);
    let n = rows * cols;
    let (groups, width) = linear_split(n);
    let args = [
        bytes(&[n as u64]),
        bytes(&[shape.len() as u64]),
        bytes(&shape.map(|s| s as u64)),
        bytes(&strides.map(|s| s as u64)),
        input(device, &x),
        output(&shape, DType::F16),
    ];
    let lib = library("candle", "unary.metal");
    let out = dispatch(device, &lib, &args, &LibraryLaunch::threadgroups("exp_f16_strided", groups, width));
    let want: Vec<f64> =
        (0..n).map(|i| round(DType::F16, (xv[(i % rows) * cols + i / rows] as f32).exp() as f64)).collect();
    check("candle exp_f16_strided", &out[0], &want, DType::F16);
}

/// binary.metal `badd_f32_strided` with both sides broadcast: kernels/binary.rs
/// `call_binary_strided` (36-77).
pub fn binary_add_f32_broadcast(device: Device) {
    let mut rng = Rng::new(103);
    let shape = [4usize, 3, 5];
    let (l, lv) = normals(&mut rng, DType::F32, &[4, 1, 5], 1.0);
    let (r, rv) = normals(&mut rng, DType::F32, &[3, 5], 1.0);
    let (ls, rs) = ([5u64, 0, 1], [0u64, 5, 1]);
    let n: usize = shape.iter().product();
    let (groups, width) = linear_split(tiles(n, DType::F32));
    let args = [
        bytes(&[n as u64]),
        bytes(&[3u64]),
        bytes(&shape.map(|s| s as u64)),
        bytes(&ls),
        bytes(&rs),
        input(device, &l),
        input(device, &r),
        output(&shape, DType::F32),
    ];
    let lib = library("candle", "binary.metal");
    let out = dispatch(device, &lib, &args, &LibraryLaunch::threadgroups("badd_f32_strided", groups, width));
    let want: Vec<f64> = (0..n)
        .map(|i| {
            let (a, b, c) = (i / 15, (i / 5) % 3, i % 5);
            (lv[a * 5 + c] as f32 + rv[b * 5 + c] as f32) as f64
        })
        .collect();
    check("candle badd_f32_strided", &out[0], &want, DType::F32);
}

/// cast.metal `cast_f32_bf16`: kernels/cast.rs `call_cast_contiguous` (9-34).
pub fn cast_f32_bf16(device: Device) {
    let mut rng = Rng::new(104);
    let n = 777;
    let (x, xv) = normals(&mut rng, DType::F32, &[n], 3.0);
    let (groups, width) = linear_split(tiles(n, DType::F32));
    let lib = library("candle", "cast.metal");
    let args = [bytes(&[n as u64]), input(device, &x), output(&[n], DType::BF16)];
    let out = dispatch(device, &lib, &args, &LibraryLaunch::threadgroups("cast_f32_bf16", groups, width));
    let want: Vec<f64> = xv.iter().map(|&v| round(DType::BF16, v)).collect();
    check("candle cast_f32_bf16", &out[0], &want, DType::BF16);
}

/// affine.metal `affine_f16`: kernels/affine.rs `call_affine` (9-35), y = x·mul + add in float.
pub fn affine_f16(device: Device) {
    let mut rng = Rng::new(105);
    let n = 513;
    let (x, xv) = normals(&mut rng, DType::F16, &[n], 1.0);
    let (mul, add) = (1.5f32, -0.25f32);
    let (groups, width) = linear_split(tiles(n, DType::F16));
    let lib = library("candle", "affine.metal");
    let args = [bytes(&[n as u64]), bytes(&[mul]), bytes(&[add]), input(device, &x), output(&[n], DType::F16)];
    let out = dispatch(device, &lib, &args, &LibraryLaunch::threadgroups("affine_f16", groups, width));
    let want: Vec<f64> = xv.iter().map(|&v| round(DType::F16, (v as f32).mul_add(mul, add) as f64)).collect();
    check("candle affine_f16", &out[0], &want, DType::F16);
}

/// ternary.metal `where_u8_f32` with a broadcast condition and function constants saying which
/// sides are contiguous: kernels/ternary.rs `call_where_cond` (9-66).
pub fn where_u8_f32(device: Device) {
    let mut rng = Rng::new(106);
    let shape = [6usize, 7];
    let n = 42;
    let cond: Vec<u8> = (0..7).map(|i| (i % 3 == 0) as u8).collect();
    let c = kiln::Array::from_slice(&[7], &cond).unwrap();
    let (t, tv) = normals(&mut rng, DType::F32, &shape, 1.0);
    let (f, fv) = normals(&mut rng, DType::F32, &shape, 1.0);
    let (groups, width) = linear_split(tiles(n, DType::F32));
    let args = [
        bytes(&[n as u64]),
        bytes(&[2u64]),
        bytes(&shape.map(|s| s as u64)),
        bytes(&[0u64, 1]),
        bytes(&[7u64, 1]),
        bytes(&[7u64, 1]),
        input(device, &c),
        input(device, &t),
        input(device, &f),
        output(&shape, DType::F32),
    ];
    use kiln::backend::{ConstantKey, ConstantValue};
    let launch = LibraryLaunch::threadgroups("where_u8_f32", groups, width)
        .constant(ConstantKey::Index(0), ConstantValue::Bool(false))
        .constant(ConstantKey::Index(1), ConstantValue::Bool(true))
        .constant(ConstantKey::Index(2), ConstantValue::Bool(true));
    let out = dispatch(device, &library("candle", "ternary.metal"), &args, &launch);
    let want: Vec<f64> = (0..n).map(|i| if cond[i % 7] != 0 { tv[i] } else { fv[i] }).collect();
    check("candle where_u8_f32", &out[0], &want, DType::F32);
}

/// The threads of candle's row kernels: kernels/reduce.rs (`call_last_softmax` 127-180,
/// `call_rms_norm` 182-238): one group per row of min(1024, next_power_of_two(n / 2)).
fn row_width(elements: usize) -> usize {
    (elements / 2).next_power_of_two().min(1024)
}

/// reduce.metal `softmax_f32` over the last axis.
pub fn softmax_f32(device: Device) {
    let mut rng = Rng::new(107);
    let (rows, cols) = (5, 300);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, cols], 3.0);
    let args =
        [bytes(&[(rows * cols) as u64]), bytes(&[cols as u64]), input(device, &x), output(&[rows, cols], DType::F32)];
    let launch = LibraryLaunch::threadgroups("softmax_f32", rows, row_width(cols));
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(cols) {
        let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
        want.extend(r.iter().map(|v| (v - m).exp() / s));
    }
    check("candle softmax_f32", &out[0], &want, DType::F32);
}

/// reduce.metal `rmsnorm_f16`: y = x / sqrt(mean(x²) + eps) · alpha, accumulated in float.
pub fn rmsnorm_f16(device: Device) {
    let mut rng = Rng::new(108);
    let (rows, cols) = (4, 256);
    let (x, xv) = normals(&mut rng, DType::F16, &[rows, cols], 1.0);
    let (alpha, av) = normals(&mut rng, DType::F16, &[cols], 1.0);
    let eps = 1e-5f32;
    let args = [
        bytes(&[(rows * cols) as u64]),
        bytes(&[cols as u64]),
        input(device, &x),
        output(&[rows, cols], DType::F16),
        input(device, &alpha),
        bytes(&[eps]),
    ];
    let launch = LibraryLaunch::threadgroups("rmsnorm_f16", rows, row_width(cols));
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(cols) {
        let ms: f64 = r.iter().map(|v| v * v).sum::<f64>() / cols as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        want.extend(r.iter().zip(&av).map(|(v, a)| round(DType::F16, v * inv * a)));
    }
    check("candle rmsnorm_f16", &out[0], &want, DType::F16);
}

/// reduce.metal `fast_sum_f32` of contiguous rows: kernels/reduce.rs `call_reduce_contiguous`
/// (10-64).
pub fn fast_sum_f32(device: Device) {
    let mut rng = Rng::new(109);
    let shape = [6usize, 500];
    let (x, xv) = normals(&mut rng, DType::F32, &shape, 1.0);
    let (out_length, per) = (6usize, 500usize);
    let args = [
        bytes(&[3000u32]),
        bytes(&[2u32]),
        bytes(&[6u32, 500]),
        bytes(&[per as u32]),
        input(device, &x),
        output(&[out_length], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups("fast_sum_f32", out_length, row_width(per));
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let want: Vec<f64> = xv.chunks(per).map(|r| r.iter().sum()).collect();
    check("candle fast_sum_f32", &out[0], &want, DType::F32);
}

/// indexing.metal `is_u32_f32` (index_select along dim 1): kernels/indexing.rs
/// `call_index_select` (9-58).
pub fn index_select_u32_f32(device: Device) {
    let mut rng = Rng::new(110);
    let shape = [3usize, 10, 4];
    let (x, xv) = normals(&mut rng, DType::F32, &shape, 1.0);
    let ids: Vec<u32> = vec![7, 0, 9, 9, 2];
    let id = kiln::Array::from_slice(&[5], &ids).unwrap();
    let (left, right, dim_size) = (3usize, 4usize, 10usize);
    let dst_el = ids.len() * left * right;
    let (groups, width) = linear_split(dst_el);
    let args = [
        bytes(&[dst_el as u64]),
        bytes(&[left as u64]),
        bytes(&[dim_size as u64]),
        bytes(&[right as u64]),
        bytes(&[ids.len() as u64]),
        bytes(&[1u8]),
        bytes(&shape.map(|s| s as u64)),
        bytes(&[40u64, 4, 1]),
        input(device, &x),
        input(device, &id),
        output(&[3, 5, 4], DType::F32),
    ];
    let out = dispatch(
        device,
        &library("candle", "indexing.metal"),
        &args,
        &LibraryLaunch::threadgroups("is_u32_f32", groups, width),
    );
    let want: Vec<f64> = (0..dst_el)
        .map(|t| {
            let (l, i, r) = (t / (5 * right), (t / right) % 5, t % right);
            xv[l * dim_size * right + ids[i] as usize * right + r]
        })
        .collect();
    check("candle is_u32_f32", &out[0], &want, DType::F32);
}
