//! ggml's kernels, dispatched as ggml's Metal backend does (commit d99724f;
//! `src/ggml-metal/ggml-metal-ops.cpp` and `ggml-metal-device.cpp`, named at each case), with
//! the parameter structs of `ggml-metal-impl.h` packed as C lays them out, checked against
//! references written from each op's maths.

use kiln::{Array, DType, Device, LibraryLaunch};

use crate::common::Rng;
use crate::harness::{check, dispatch, fields, input, library, normals, output, q4_0_blocks, Field};

const FILE: &str = "ggml-metal.metal";

/// `ggml_metal_kargs_get_rows` (ggml-metal-impl.h): src0 rows of `row_bytes`, `n` indices,
/// rows of `ne00` floats out.
fn get_rows_args(ne00t: i32, ne00: i32, row_bytes: u64, rows: u64, n: i32) -> kiln::LibraryArg {
    use Field::*;
    fields(&[
        I32(ne00t),
        I32(ne00),
        U64(row_bytes),
        U64(row_bytes * rows),
        U64(row_bytes * rows),
        I32(n),
        U64(4),
        U64(4 * n as u64),
        U64(4 * n as u64),
        U64(4 * ne00 as u64),
        U64(4 * (ne00 * n) as u64),
        U64(4 * (ne00 * n) as u64),
    ])
}

/// `kernel_get_rows_f16`: ggml-metal-ops.cpp `ggml_metal_op_get_rows` (1165-1208): groups
/// (nw0·ne10, ne11, ne12) of nth = min(ne00t, 1024) threads. No function constant is read by
/// this kernel, so none is given (the file declares dozens for other kernels).
pub fn get_rows_f16(device: Device) {
    let mut rng = Rng::new(201);
    let (rows, ne00) = (9usize, 72usize);
    let (src, sv) = normals(&mut rng, DType::F16, &[rows, ne00], 1.0);
    let ids: Vec<i32> = vec![3, 8, 0, 3, 5];
    let n = ids.len();
    let idx = Array::from_slice(&[n], &ids).unwrap();
    let nth = ne00.min(1024);
    let nw0 = ne00.div_ceil(nth);
    let args = [
        get_rows_args(ne00 as i32, ne00 as i32, (ne00 * 2) as u64, rows as u64, n as i32),
        input(device, &src),
        input(device, &idx),
        output(&[n, ne00], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups("kernel_get_rows_f16", [nw0 * n, 1, 1], nth);
    let out = dispatch(device, &library("ggml", FILE), &args, &launch);
    let want: Vec<f64> = ids.iter().flat_map(|&r| sv[r as usize * ne00..][..ne00].to_vec()).collect();
    check("ggml kernel_get_rows_f16", &out[0], &want, DType::F32);
}

/// `kernel_get_rows_q4_0`: the same dispatch with ne00t = ne00/16 (16 values per thread).
pub fn get_rows_q4_0(device: Device) {
    let mut rng = Rng::new(202);
    let (rows, ne00) = (6usize, 128usize);
    let per_row = ne00 / 32;
    let (bytes, values) = q4_0_blocks(&mut rng, rows * per_row);
    let src = Array::from_slice(&[bytes.len()], &bytes).unwrap();
    let ids: Vec<i32> = vec![5, 1, 1, 4];
    let n = ids.len();
    let idx = Array::from_slice(&[n], &ids).unwrap();
    let ne00t = ne00 / 16;
    let nth = ne00t.min(1024);
    let args = [
        get_rows_args(ne00t as i32, ne00 as i32, (per_row * 18) as u64, rows as u64, n as i32),
        input(device, &src),
        input(device, &idx),
        output(&[n, ne00], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups("kernel_get_rows_q4_0", [ne00t.div_ceil(nth) * n, 1, 1], nth);
    let out = dispatch(device, &library("ggml", FILE), &args, &launch);
    let want: Vec<f64> = ids.iter().flat_map(|&r| values[r as usize * ne00..][..ne00].to_vec()).collect();
    check("ggml kernel_get_rows_q4_0", &out[0], &want, DType::F32);
}

/// `kernel_rms_norm_mul_f32_4` (rms_norm fused with the multiply that follows it):
/// ggml-metal-ops.cpp `ggml_metal_op_norm` (3895-4030), ggml-metal-device.cpp
/// `ggml_metal_library_get_pipeline_norm` (1757-1797): groups (ne01, ne02, ne03) of nth
/// threads, 32 floats of threadgroup memory.
pub fn rms_norm_mul_f32(device: Device) {
    let mut rng = Rng::new(203);
    let (rows, ne00) = (5usize, 256usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[rows, ne00], 1.0);
    let (w, wv) = normals(&mut rng, DType::F32, &[ne00], 1.0);
    let eps = 1e-6f32;
    let ne00_t = (ne00 / 4) as i32;
    let row = (ne00 * 4) as u64;
    use Field::*;
    let args = fields(&[
        I32(ne00 as i32),
        I32(ne00_t),
        U64(row),
        U64(row * rows as u64),
        U64(row * rows as u64),
        F32(eps),
        I32(rows as i32),
        I32(1),
        I32(1),
        I32(1),
        I32(1),
        I32(1),
        I32(1),
        I32(1),
        I32(1),
        U64(row),
        U64(0),
        U64(0),
        U64(row * rows as u64),
        U64(0),
        U64(0),
        U64(row * rows as u64),
        U64(0),
        U64(0),
    ]);
    let mut nth = 32;
    while nth < ne00_t && nth < 1024 {
        nth *= 2;
    }
    let nth = nth.min(1024).min((ne00_t + 31) / 32 * 32) as usize;
    let bound = [args, input(device, &x), input(device, &w), input(device, &w), output(&[rows, ne00], DType::F32)];
    let launch =
        LibraryLaunch::threadgroups("kernel_rms_norm_mul_f32_4", [rows, 1, 1], nth).threadgroup_memory(&[32 * 4]);
    let out = dispatch(device, &library("ggml", FILE), &bound, &launch);
    let mut want = Vec::new();
    for r in xv.chunks(ne00) {
        let mean: f64 = r.iter().map(|v| v * v).sum::<f64>() / ne00 as f64;
        let scale = 1.0 / (mean + eps as f64).sqrt();
        want.extend(r.iter().zip(&wv).map(|(v, w)| v * scale * w));
    }
    check("ggml kernel_rms_norm_mul_f32_4", &out[0], &want, DType::F32);
}
