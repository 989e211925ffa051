//! MLX's kernels, dispatched as MLX's Metal backend does (commit 846d176;
//! `mlx/backend/metal/*.cpp`, named at each case), each compiled from its whole file as MLX
//! builds it, checked against references written from each op's maths.

use kiln::{DType, Device, LibraryLaunch};

use crate::common::Rng;
use crate::harness::{bytes, check, dispatch, input, library, normals, output, round};

pub fn lib(file: &str) -> kiln::MetalLibrary {
    library("mlx", &format!("mlx/backend/metal/kernels/{file}"))
}

/// MLX's `get_block_dims` (mlx/backend/common/utils.cpp:117-146): powers of two, at most 2^10
/// threads, grown round-robin over the three axes.
pub fn block_dims(dims: [usize; 3]) -> [usize; 3] {
    let mut pows = [0u32; 3];
    let mut sum = 0;
    loop {
        let presum = sum;
        for a in 0..3 {
            if dims[a] >= (1 << (pows[a] + 1)) {
                pows[a] += 1;
                sum += 1;
            }
            if sum == 10 {
                return pows.map(|p| 1 << p);
            }
        }
        if sum == presum {
            return pows.map(|p| 1 << p);
        }
    }
}

/// unary.metal `v_Expfloat16float16`, contiguous: unary.cpp `unary_op_gpu_inplace` (12-98)
/// with fewer than 2^16 elements (one per thread, utils.h `get_work_per_thread`).
pub fn unary_exp_f16(device: Device) {
    let mut rng = Rng::new(301);
    let n = 3000;
    let (x, xv) = normals(&mut rng, DType::F16, &[n], 1.5);
    let args = [input(device, &x), output(&[n], DType::F16), bytes(&[n as i32])];
    let launch = LibraryLaunch::threads("v_Expfloat16float16", n, n.min(1024));
    let out = dispatch(device, &lib("unary.metal"), &args, &launch);
    let want: Vec<f64> = xv.iter().map(|&v| round(DType::F16, (v as f32).exp() as f64)).collect();
    check("mlx v_Expfloat16float16", &out[0], &want, DType::F16);
}

/// binary.metal `g3_Addfloat32` with both sides broadcast: binary.cpp `binary_op_gpu_inplace`
/// (65-185): a 3-D grid of the output's shape, strides in elements, get_block_dims groups.
pub fn binary_add_broadcast(device: Device) {
    let mut rng = Rng::new(302);
    let shape = [3usize, 4, 5];
    let (a, av) = normals(&mut rng, DType::F32, &[3, 1, 5], 1.0);
    let (b, bv) = normals(&mut rng, DType::F32, &[4, 1], 1.0);
    let (sa, sb) = ([5i64, 0, 1], [0i64, 1, 0]);
    let args = [input(device, &a), input(device, &b), output(&shape, DType::F32), bytes(&sa), bytes(&sb)];
    let grid = [shape[2], shape[1], shape[0]];
    let launch = LibraryLaunch::threads("g3_Addfloat32", grid, block_dims(grid));
    let out = dispatch(device, &lib("binary.metal"), &args, &launch);
    let want: Vec<f64> = (0..60)
        .map(|i| {
            let (x, y, z) = (i / 20, (i / 5) % 4, i % 5);
            (av[x * 5 + z] as f32 + bv[y] as f32) as f64
        })
        .collect();
    check("mlx g3_Addfloat32", &out[0], &want, DType::F32);
}

/// copy.metal `v_copyfloat32bfloat16` (a cast): copy.cpp `copy_gpu_inplace` (26-180),
/// contiguous, one element per thread below 2^16.
pub fn copy_f32_to_bf16(device: Device) {
    let mut rng = Rng::new(303);
    let n = 1500;
    let (x, xv) = normals(&mut rng, DType::F32, &[n], 2.0);
    let args = [input(device, &x), output(&[n], DType::BF16), bytes(&[n as i32])];
    let launch = LibraryLaunch::threads("v_copyfloat32bfloat16", n, n.min(1024));
    let out = dispatch(device, &lib("copy.metal"), &args, &launch);
    let want: Vec<f64> = xv.iter().map(|&v| round(DType::BF16, v)).collect();
    check("mlx v_copyfloat32bfloat16", &out[0], &want, DType::BF16);
}

/// The threads of MLX's single-row kernels (softmax.cpp 47-60, normalization.cpp
/// `RMSNorm::eval_gpu`): ceil(axis / 4) threads rounded up to whole SIMD-groups per row.
fn row_group(axis: usize) -> usize {
    axis.div_ceil(4).div_ceil(32) * 32
}

/// softmax.metal `block_softmax_float32`: softmax.cpp `Softmax::eval_gpu` (17-70).
pub fn softmax_f32(device: Device) {
    let mut rng = Rng::new(304);
    let (rows, axis) = (6usize, 700usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, axis], 2.0);
    let g = row_group(axis);
    let args = [input(device, &x), output(&[rows, axis], DType::F32), bytes(&[axis as i32])];
    let launch = LibraryLaunch::threads("block_softmax_float32", rows * g, g);
    let out = dispatch(device, &lib("softmax.metal"), &args, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(axis) {
        let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
        want.extend(r.iter().map(|v| (v - m).exp() / s));
    }
    check("mlx block_softmax_float32", &out[0], &want, DType::F32);
}

/// rms_norm.metal `rmsfloat32`: normalization.cpp `RMSNorm::eval_gpu`: y = x·rsqrt(mean(x²) +
/// eps)·w.
pub fn rms_norm_f32(device: Device) {
    let mut rng = Rng::new(305);
    let (rows, axis) = (4usize, 1000usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, axis], 1.0);
    let (w, wv) = normals(&mut rng, DType::F32, &[axis], 1.0);
    let eps = 1e-5f32;
    let g = row_group(axis);
    let args = [
        input(device, &x),
        input(device, &w),
        output(&[rows, axis], DType::F32),
        bytes(&[eps]),
        bytes(&[axis as u32]),
        bytes(&[1u32]),
    ];
    let launch = LibraryLaunch::threads("rmsfloat32", rows * g, g);
    let out = dispatch(device, &lib("rms_norm.metal"), &args, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(axis) {
        let ms: f64 = r.iter().map(|v| v * v).sum::<f64>() / axis as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        want.extend(r.iter().zip(&wv).map(|(v, w)| v * inv * w));
    }
    check("mlx rmsfloat32", &out[0], &want, DType::F32);
}
