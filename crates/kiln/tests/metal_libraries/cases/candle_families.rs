//! More of candle's kernel families (see the module docs of `candle.rs` for how cases are
//! written): each dispatched as the library's host code does, checked against a reference
//! written from the op's maths.
//!
//! Host code: candle-metal-kernels (commit 2a13b0f) `src/kernels/*.rs`, named at each case;
//! `linear_split` is `src/utils.rs:30-46`.

use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch};

use crate::common::Rng;
use crate::harness::{
    bytes, check, dispatch, fields, input, library, linear_split, normals, output, q4_0_blocks, q8_0_blocks, round,
    Field,
};

/// A `&[usize]` (or one `usize`) as candle's `set_params!` binds it: the u64 values' bytes.
fn sizes(values: &[usize]) -> LibraryArg {
    bytes(&values.iter().map(|&v| v as u64).collect::<Vec<_>>())
}

/// Row-major strides of `shape`.
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A random permutation of `0..n` (Fisher-Yates).
fn permutation(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        p.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    p
}

// ---------------------------------------------------------------------------------------------
// rope (reduce.metal)
// ---------------------------------------------------------------------------------------------

/// reduce.metal `rope_i_f32` (interleaved pairs (2i, 2i+1)) with a per-batch cos/sin table:
/// kernels/reduce.rs `call_rope_i` (304-341), arguments as candle-nn's rotary_emb.rs gives
/// them (bh = b·h, td = t·d, stride_b = h·t·d for 3-d cos/sin); linear_split of b·h·t·d/2.
pub fn rope_i_f32(device: Device) {
    let mut rng = Rng::new(301);
    let (b, h, t, d) = (2usize, 3usize, 5usize, 8usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[b, h, t, d], 1.0);
    let angles: Vec<f64> = rng.uniforms(b * t * d / 2, -3.0, 3.0);
    let cos = Array::from_f64(DType::F32, &[b, t, d / 2], &angles.iter().map(|a| a.cos()).collect::<Vec<_>>()).unwrap();
    let sin = Array::from_f64(DType::F32, &[b, t, d / 2], &angles.iter().map(|a| a.sin()).collect::<Vec<_>>()).unwrap();
    let (cv, sv) = (cos.to_f64_vec().unwrap(), sin.to_f64_vec().unwrap());
    let (groups, width) = linear_split(b * h * t * d / 2);
    let args = [
        sizes(&[b * h]),
        sizes(&[t * d]),
        sizes(&[h * t * d]),
        input(device, &x),
        input(device, &cos),
        input(device, &sin),
        output(&[b, h, t, d], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups("rope_i_f32", groups, width);
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let mut want = vec![0.0; xv.len()];
    for (row, chunk) in xv.chunks(d).enumerate() {
        let (bi, ti) = (row / (h * t), row % t);
        for i in 0..d / 2 {
            let cs = (bi * t + ti) * (d / 2) + i;
            let (x0, x1, c, s) = (chunk[2 * i], chunk[2 * i + 1], cv[cs], sv[cs]);
            want[row * d + 2 * i] = x0 * c - x1 * s;
            want[row * d + 2 * i + 1] = x0 * s + x1 * c;
        }
    }
    check("candle rope_i_f32", &out[0], &want, DType::F32);
}

/// reduce.metal `rope_f16` (halves (i, i + d/2) rotated) with a table shared by the batch
/// (stride_b = 0): kernels/reduce.rs `call_rope` (388-427).
pub fn rope_f16(device: Device) {
    let mut rng = Rng::new(302);
    let (b, h, t, d) = (2usize, 2usize, 6usize, 16usize);
    let (x, xv) = normals(&mut rng, DType::F16, &[b, h, t, d], 1.0);
    let angles: Vec<f64> = rng.uniforms(t * d / 2, -3.0, 3.0);
    let cos = Array::from_f64(DType::F16, &[t, d / 2], &angles.iter().map(|a| a.cos()).collect::<Vec<_>>()).unwrap();
    let sin = Array::from_f64(DType::F16, &[t, d / 2], &angles.iter().map(|a| a.sin()).collect::<Vec<_>>()).unwrap();
    let (cv, sv) = (cos.to_f64_vec().unwrap(), sin.to_f64_vec().unwrap());
    let (groups, width) = linear_split(b * h * t * d / 2);
    let args = [
        sizes(&[b * h]),
        sizes(&[t * d]),
        sizes(&[d]),
        sizes(&[0]),
        input(device, &x),
        input(device, &cos),
        input(device, &sin),
        output(&[b, h, t, d], DType::F16),
    ];
    let launch = LibraryLaunch::threadgroups("rope_f16", groups, width);
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let mut want = vec![0.0; xv.len()];
    for (row, chunk) in xv.chunks(d).enumerate() {
        let ti = row % t;
        for i in 0..d / 2 {
            let cs = ti * (d / 2) + i;
            let (x0, x1, c, s) = (chunk[i], chunk[i + d / 2], cv[cs], sv[cs]);
            want[row * d + i] = round(DType::F16, x0 * c - x1 * s);
            want[row * d + i + d / 2] = round(DType::F16, x0 * s + x1 * c);
        }
    }
    check("candle rope_f16", &out[0], &want, DType::F16);
}

/// reduce.metal `rope_thd_f32` (layout b, t, h, d; halves rotated) with a per-batch table
/// (stride_b = h·t·d): kernels/reduce.rs `call_rope_thd` (344-385).
pub fn rope_thd_f32(device: Device) {
    let mut rng = Rng::new(303);
    let (b, t, h, d) = (2usize, 4usize, 3usize, 12usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[b, t, h, d], 1.0);
    let angles: Vec<f64> = rng.uniforms(b * t * d / 2, -3.0, 3.0);
    let cos = Array::from_f64(DType::F32, &[b, t, d / 2], &angles.iter().map(|a| a.cos()).collect::<Vec<_>>()).unwrap();
    let sin = Array::from_f64(DType::F32, &[b, t, d / 2], &angles.iter().map(|a| a.sin()).collect::<Vec<_>>()).unwrap();
    let (cv, sv) = (cos.to_f64_vec().unwrap(), sin.to_f64_vec().unwrap());
    let (groups, width) = linear_split(b * t * h * d / 2);
    let args = [
        sizes(&[b]),
        sizes(&[t]),
        sizes(&[h]),
        sizes(&[d]),
        sizes(&[h * t * d]),
        input(device, &x),
        input(device, &cos),
        input(device, &sin),
        output(&[b, t, h, d], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups("rope_thd_f32", groups, width);
    let out = dispatch(device, &library("candle", "reduce.metal"), &args, &launch);
    let mut want = vec![0.0; xv.len()];
    for (row, chunk) in xv.chunks(d).enumerate() {
        let (bi, ti) = (row / (t * h), (row / h) % t);
        for i in 0..d / 2 {
            let cs = (bi * t + ti) * (d / 2) + i;
            let (x0, x1, c, s) = (chunk[i], chunk[i + d / 2], cv[cs], sv[cs]);
            want[row * d + i] = x0 * c - x1 * s;
            want[row * d + i + d / 2] = x0 * s + x1 * c;
        }
    }
    check("candle rope_thd_f32", &out[0], &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// sort (sort.metal, mlx_sort.metal)
// ---------------------------------------------------------------------------------------------

/// The argsort of each row of `values` (`ncols` wide), ascending or descending; the values of
/// a row are distinct, so the order is unique.
fn argsort_rows(values: &[f64], ncols: usize, ascending: bool) -> Vec<f64> {
    let mut want = Vec::new();
    for row in values.chunks(ncols) {
        let mut idx: Vec<usize> = (0..ncols).collect();
        idx.sort_by(|&a, &b| {
            let o = row[a].partial_cmp(&row[b]).unwrap();
            if ascending {
                o
            } else {
                o.reverse()
            }
        });
        want.extend(idx.iter().map(|&i| i as f64));
    }
    want
}

/// sort.metal `asort_asc_f32` (bitonic, one group per row of ncols_pad threads): kernels/sort.rs
/// `call_arg_sort` (8-44), ncols_pad the next power of two (candle-core sort.rs 230-233),
/// (ncols_pad·4).max(16) bytes of threadgroup memory.
pub fn asort_asc_f32(device: Device) {
    let mut rng = Rng::new(311);
    let (nrows, ncols) = (5usize, 50usize);
    let ncols_pad = ncols.next_power_of_two();
    let (x, xv) = normals(&mut rng, DType::F32, &[nrows, ncols], 1.0);
    let args =
        [input(device, &x), output(&[nrows, ncols], DType::U32), bytes(&[ncols as i64]), bytes(&[ncols_pad as i64])];
    let launch = LibraryLaunch::threadgroups("asort_asc_f32", [1, nrows, 1], ncols_pad)
        .threadgroup_memory(&[(ncols_pad * 4).max(16)]);
    let out = dispatch(device, &library("candle", "sort.metal"), &args, &launch);
    check("candle asort_asc_f32", &out[0], &argsort_rows(&xv, ncols, true), DType::U32);
}

/// sort.metal `asort_desc_f16` over rows of distinct half values (a random permutation of
/// quarter steps, exact in f16), the same dispatch as `asort_asc_f32`.
pub fn asort_desc_f16(device: Device) {
    let mut rng = Rng::new(312);
    let (nrows, ncols) = (3usize, 100usize);
    let ncols_pad = ncols.next_power_of_two();
    let xv: Vec<f64> = (0..nrows).flat_map(|_| permutation(&mut rng, ncols)).map(|p| p as f64 * 0.25 - 12.0).collect();
    let x = Array::from_f64(DType::F16, &[nrows, ncols], &xv).unwrap();
    let args =
        [input(device, &x), output(&[nrows, ncols], DType::U32), bytes(&[ncols as i64]), bytes(&[ncols_pad as i64])];
    let launch = LibraryLaunch::threadgroups("asort_desc_f16", [1, nrows, 1], ncols_pad)
        .threadgroup_memory(&[(ncols_pad * 4).max(16)]);
    let out = dispatch(device, &library("candle", "sort.metal"), &args, &launch);
    check("candle asort_desc_f16", &out[0], &argsort_rows(&xv, ncols, false), DType::U32);
}

/// mlx_sort.metal `carg_block_sort_float32_uint32_bn128_tn8` (one block per row: ncols ≤
/// bn·tn): kernels/sort.rs `call_mlx_arg_sort` (290-316) choosing bn = 128 for
/// ncols.div_ceil(8) < 129, `block_sort` (239-287): groups (1, nrows), bn threads.
pub fn mlx_arg_block_sort_f32(device: Device) {
    let mut rng = Rng::new(313);
    let (nrows, ncols) = (4usize, 300usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[nrows, ncols], 1.0);
    let n = ncols as i32;
    let args = [
        input(device, &x),
        output(&[nrows, ncols], DType::U32),
        bytes(&[n]),
        bytes(&[1i32]),
        bytes(&[1i32]),
        bytes(&[n]),
        bytes(&[n]),
    ];
    let launch = LibraryLaunch::threadgroups("carg_block_sort_float32_uint32_bn128_tn8", [1, nrows, 1], 128);
    let out = dispatch(device, &library("candle", "mlx_sort.metal"), &args, &launch);
    check("candle carg_block_sort_float32", &out[0], &argsort_rows(&xv, ncols, true), DType::U32);
}

/// mlx_sort.metal's multi-block argsort of rows longer than one block (ncols > 512·8):
/// kernels/sort.rs `multi_block_sort` (58-236) with bn = 512, tn = 8 (`call_mlx_arg_sort`
/// 290-316): `sort_mbsort_float32_uint32_bn512_tn8` sorts each 4096-element block (groups
/// (nblocks, nrows) of 512), then while merge_tiles / 2 < nblocks `partition_mbsort_...`
/// (groups (1, nrows) of min(nblocks + 1, 1024)) and `merge_mbsort_...` (groups (nblocks,
/// nrows) of 512) merge pairs of sorted runs, ping-ponging the value and index buffers. The last
/// index buffer is checked directly (candle's final copy2d only copies it). Three blocks, so
/// two merge passes; distinct values (a permutation), so the order is unique.
pub fn mlx_arg_multi_block_sort_f32(device: Device) {
    let mut rng = Rng::new(314);
    let (nrows, ncols) = (2usize, 9000usize);
    let (bn, tn) = (512usize, 8usize);
    let nblocks = ncols.div_ceil(bn * tn);
    let xv: Vec<f64> = (0..nrows).flat_map(|_| permutation(&mut rng, ncols)).map(|p| p as f64 * 1e-3 - 4.5).collect();
    let x = Array::from_f64(DType::F32, &[nrows, ncols], &xv).unwrap();
    let lib = library("candle", "mlx_sort.metal");
    let n = ncols as i32;
    let args = [
        input(device, &x),
        output(&[nrows, ncols], DType::F32),
        output(&[nrows, ncols], DType::U32),
        bytes(&[n]),
        bytes(&[1i32]),
        bytes(&[1i32]),
        bytes(&[nrows as i32]),
        bytes(&[ncols as i64]),
    ];
    let launch = LibraryLaunch::threadgroups("sort_mbsort_float32_uint32_bn512_tn8", [nblocks, nrows, 1], bn);
    let mut out = dispatch(device, &lib, &args, &launch);
    let (mut vals, mut idxs) = (out.remove(0), out.remove(0));
    let mut merge_tiles = 2usize;
    while merge_tiles / 2 < nblocks {
        let threads = (nblocks + 1).min(1024);
        let args = [
            output(&[nrows, threads], DType::U32),
            input(device, &vals),
            input(device, &idxs),
            bytes(&[n]),
            bytes(&[merge_tiles as i32]),
            bytes(&[nblocks as i32]),
        ];
        let launch = LibraryLaunch::threadgroups("partition_mbsort_float32_uint32_bn512_tn8", [1, nrows, 1], threads);
        let partitions = dispatch(device, &lib, &args, &launch).remove(0);
        let args = [
            input(device, &partitions),
            input(device, &vals),
            input(device, &idxs),
            output(&[nrows, ncols], DType::F32),
            output(&[nrows, ncols], DType::U32),
            bytes(&[n]),
            bytes(&[merge_tiles as i32]),
            bytes(&[nblocks as i32]),
        ];
        let launch = LibraryLaunch::threadgroups("merge_mbsort_float32_uint32_bn512_tn8", [nblocks, nrows, 1], bn);
        let mut out = dispatch(device, &lib, &args, &launch);
        (vals, idxs) = (out.remove(0), out.remove(0));
        merge_tiles *= 2;
    }
    check("candle mlx multi-block arg sort", &idxs, &argsort_rows(&xv, ncols, true), DType::U32);
}

// ---------------------------------------------------------------------------------------------
// conv / pooling (conv.metal)
// ---------------------------------------------------------------------------------------------

/// conv.metal `im2col_f32` over a strided view (the input stored as b, c, w, h and read as
/// b, c, h, w): kernels/convolution.rs `call_im2col_strided` (89-133).
pub fn im2col_f32(device: Device) {
    let mut rng = Rng::new(321);
    let (b, c, h, w) = (2usize, 3usize, 7usize, 6usize);
    let (hk, wk, stride, padding, dilation) = (3usize, 2usize, 2usize, 1usize, 1usize);
    // Physically [b, c, w, h]: element (bi, ci, i, j) of the view is at bi·cwh + ci·wh + j·h + i.
    let (x, xv) = normals(&mut rng, DType::F32, &[b, c, w, h], 1.0);
    let view_strides = [c * w * h, w * h, 1, h];
    let h_out = (h + 2 * padding - dilation * (hk - 1) - 1) / stride + 1;
    let w_out = (w + 2 * padding - dilation * (wk - 1) - 1) / stride + 1;
    let dst_el = b * h_out * w_out * c * hk * wk;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[h_out]),
        sizes(&[w_out]),
        sizes(&[hk]),
        sizes(&[wk]),
        sizes(&[stride]),
        sizes(&[padding]),
        sizes(&[dilation]),
        sizes(&[b, c, h, w]),
        sizes(&view_strides),
        input(device, &x),
        output(&[b, h_out, w_out, c, hk, wk], DType::F32),
    ];
    let out = dispatch(
        device,
        &library("candle", "conv.metal"),
        &args,
        &LibraryLaunch::threadgroups("im2col_f32", groups, width),
    );
    let mut want = Vec::with_capacity(dst_el);
    for bi in 0..b {
        for oi in 0..h_out {
            for oj in 0..w_out {
                for ci in 0..c {
                    for ki in 0..hk {
                        for kj in 0..wk {
                            let i = (oi * stride + ki * dilation) as isize - padding as isize;
                            let j = (oj * stride + kj * dilation) as isize - padding as isize;
                            want.push(if i < 0 || j < 0 || i >= h as isize || j >= w as isize {
                                0.0
                            } else {
                                let (i, j) = (i as usize, j as usize);
                                xv[bi * view_strides[0] + ci * view_strides[1] + i + j * h]
                            });
                        }
                    }
                }
            }
        }
    }
    check("candle im2col_f32", &out[0], &want, DType::F32);
}

/// conv.metal `im2col1d_f16` (padding and dilation): kernels/convolution.rs
/// `call_im2col1d_strided` (9-46).
pub fn im2col1d_f16(device: Device) {
    let mut rng = Rng::new(322);
    let (b, c, l) = (2usize, 4usize, 9usize);
    let (k, stride, padding, dilation) = (3usize, 2usize, 2usize, 2usize);
    let (x, xv) = normals(&mut rng, DType::F16, &[b, c, l], 1.0);
    let l_out = (l + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
    let dst_el = b * l_out * c * k;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[l_out]),
        sizes(&[k]),
        sizes(&[stride]),
        sizes(&[padding]),
        sizes(&[dilation]),
        sizes(&[b, c, l]),
        sizes(&strides_of(&[b, c, l])),
        input(device, &x),
        output(&[b, l_out, c, k], DType::F16),
    ];
    let launch = LibraryLaunch::threadgroups("im2col1d_f16", groups, width);
    let out = dispatch(device, &library("candle", "conv.metal"), &args, &launch);
    let mut want = Vec::with_capacity(dst_el);
    for bi in 0..b {
        for o in 0..l_out {
            for ci in 0..c {
                for kk in 0..k {
                    let i = (o * stride + kk * dilation) as isize - padding as isize;
                    want.push(if i < 0 || i >= l as isize { 0.0 } else { xv[(bi * c + ci) * l + i as usize] });
                }
            }
        }
    }
    check("candle im2col1d_f16", &out[0], &want, DType::F16);
}

/// conv.metal `conv_transpose1d_f16` (float accumulation, one rounding at the end):
/// kernels/convolution.rs `call_conv_transpose1d` (262-313), l_out as candle-core's
/// `ParamsConvTranspose1D::l_out` computes it.
pub fn conv_transpose1d_f16(device: Device) {
    let mut rng = Rng::new(323);
    let (b, c_in, l_in, c_out, k) = (2usize, 3usize, 7usize, 4usize, 3usize);
    let (stride, padding, out_padding, dilation) = (2usize, 1usize, 1usize, 1usize);
    let (x, xv) = normals(&mut rng, DType::F16, &[b, c_in, l_in], 1.0);
    let (wt, wv) = normals(&mut rng, DType::F16, &[c_in, c_out, k], 1.0);
    let l_out = (l_in - 1) * stride - 2 * padding + dilation * (k - 1) + out_padding + 1;
    let dst_el = c_out * l_out * b;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[l_out]),
        sizes(&[stride]),
        sizes(&[padding]),
        sizes(&[out_padding]),
        sizes(&[dilation]),
        sizes(&[b, c_in, l_in]),
        sizes(&strides_of(&[b, c_in, l_in])),
        sizes(&[c_in, c_out, k]),
        sizes(&strides_of(&[c_in, c_out, k])),
        input(device, &x),
        input(device, &wt),
        output(&[b, c_out, l_out], DType::F16),
    ];
    let launch = LibraryLaunch::threadgroups("conv_transpose1d_f16", groups, width);
    let out = dispatch(device, &library("candle", "conv.metal"), &args, &launch);
    let mut acc = vec![0.0; dst_el];
    for bi in 0..b {
        for co in 0..c_out {
            for ci in 0..c_in {
                for ix in 0..l_in {
                    for kx in 0..k {
                        // Input position ix with tap kx lands on ix·stride + kx·dilation − padding.
                        let o = (ix * stride + kx * dilation) as isize - padding as isize;
                        if o >= 0 && (o as usize) < l_out {
                            acc[(bi * c_out + co) * l_out + o as usize] +=
                                xv[(bi * c_in + ci) * l_in + ix] * wv[(ci * c_out + co) * k + kx];
                        }
                    }
                }
            }
        }
    }
    let want: Vec<f64> = acc.iter().map(|&v| round(DType::F16, v)).collect();
    check("candle conv_transpose1d_f16", &out[0], &want, DType::F16);
}

/// The windows of candle's pool2d kernels (dims 2 and 3 are the kernel's "w" and "h"): for
/// each (b, c, i, j) of the output the values x[b, c, i·ws + a, j·hs + e], a < wk, e < hk.
fn pool_windows(xv: &[f64], dims: [usize; 4], k: (usize, usize), s: (usize, usize)) -> Vec<Vec<f64>> {
    let [b, c, d2, d3] = dims;
    let (o2, o3) = ((d2 - k.0) / s.0 + 1, (d3 - k.1) / s.1 + 1);
    let mut out = Vec::new();
    for bc in 0..b * c {
        for i in 0..o2 {
            for j in 0..o3 {
                let mut w = Vec::new();
                for a in 0..k.0 {
                    for e in 0..k.1 {
                        w.push(xv[(bc * d2 + i * s.0 + a) * d3 + j * s.1 + e]);
                    }
                }
                out.push(w);
            }
        }
    }
    out
}

/// The arguments of `call_pool2d` (kernels/convolution.rs 221-259) for a contiguous input.
fn pool_args(device: Device, x: &Array, dims: [usize; 4], k: (usize, usize), s: (usize, usize)) -> Vec<LibraryArg> {
    vec![
        sizes(&[k.0]),
        sizes(&[k.1]),
        sizes(&[s.0]),
        sizes(&[s.1]),
        sizes(&dims),
        sizes(&strides_of(&dims)),
        input(device, x),
    ]
}

/// conv.metal `max_pool2d_f32` (non-square window and strides): kernels/convolution.rs
/// `call_pool2d` (221-259) as candle-core's metal_backend `max_pool2d` (1306-1351) calls it.
pub fn max_pool2d_f32(device: Device) {
    let mut rng = Rng::new(324);
    let dims = [2usize, 3, 9, 8];
    let (k, s) = ((3usize, 2usize), (2usize, 2usize));
    let (x, xv) = normals(&mut rng, DType::F32, &dims, 1.0);
    let (o2, o3) = ((dims[2] - k.0) / s.0 + 1, (dims[3] - k.1) / s.1 + 1);
    let dst_el = dims[0] * dims[1] * o2 * o3;
    let (groups, width) = linear_split(dst_el);
    let mut args = pool_args(device, &x, dims, k, s);
    args.push(output(&[dims[0], dims[1], o2, o3], DType::F32));
    let launch = LibraryLaunch::threadgroups("max_pool2d_f32", groups, width);
    let out = dispatch(device, &library("candle", "conv.metal"), &args, &launch);
    let want: Vec<f64> =
        pool_windows(&xv, dims, k, s).iter().map(|w| w.iter().cloned().fold(f64::NEG_INFINITY, f64::max)).collect();
    check("candle max_pool2d_f32", &out[0], &want, DType::F32);
}

/// conv.metal `avg_pool2d_f16` (float accumulation, rounded once): the same dispatch.
pub fn avg_pool2d_f16(device: Device) {
    let mut rng = Rng::new(325);
    let dims = [2usize, 2, 8, 10];
    let (k, s) = ((2usize, 3usize), (2usize, 3usize));
    let (x, xv) = normals(&mut rng, DType::F16, &dims, 1.0);
    let (o2, o3) = ((dims[2] - k.0) / s.0 + 1, (dims[3] - k.1) / s.1 + 1);
    let dst_el = dims[0] * dims[1] * o2 * o3;
    let (groups, width) = linear_split(dst_el);
    let mut args = pool_args(device, &x, dims, k, s);
    args.push(output(&[dims[0], dims[1], o2, o3], DType::F16));
    let launch = LibraryLaunch::threadgroups("avg_pool2d_f16", groups, width);
    let out = dispatch(device, &library("candle", "conv.metal"), &args, &launch);
    let want: Vec<f64> = pool_windows(&xv, dims, k, s)
        .iter()
        .map(|w| round(DType::F16, w.iter().sum::<f64>() / (k.0 * k.1) as f64))
        .collect();
    check("candle avg_pool2d_f16", &out[0], &want, DType::F16);
}

// ---------------------------------------------------------------------------------------------
// quantized matvec (quantized.metal, ggml's kernels)
// ---------------------------------------------------------------------------------------------

/// `kernel_mul_mv_{q4_0,q8_0}_f32`: dst[m, n] = Σ_k W[n, k]·x[m, k] with W quantized, dispatched
/// as kernels/quantized.rs `call_quantized_matmul_mv_t` (28-177) does for (b, m, n, k) =
/// (1, m, n, k): the weights first, then x, dst, the ne/nb scalars (nb all 0), r2 = r3 = 1;
/// groups (n / 8, m, 1) of (8, 8) threads (two simdgroups of four rows each).
fn quantized_matvec(
    device: Device,
    name: &str,
    (blocks, wv): (Vec<u8>, Vec<f64>),
    rng: &mut Rng,
    m: usize,
    n: usize,
    k: usize,
) {
    let w = Array::from_slice(&[blocks.len()], &blocks).unwrap();
    let (x, xv) = normals(rng, DType::F32, &[m, k], 1.0);
    let (ne00, ne01, ne02, ne10, ne11, ne12) = (k as i64, n as i64, 1i64, k as i64, m as i64, 1i64);
    let args = [
        input(device, &w),
        input(device, &x),
        output(&[m, n], DType::F32),
        bytes(&[ne00]),
        bytes(&[ne01]),
        bytes(&[ne02]),
        bytes(&[0u64]),
        bytes(&[0u64]),
        bytes(&[0u64]),
        bytes(&[ne10]),
        bytes(&[ne11]),
        bytes(&[ne12]),
        bytes(&[0u64]),
        bytes(&[0u64]),
        bytes(&[0u64]),
        bytes(&[n as i64]),
        bytes(&[m as i64]),
        bytes(&[1u32]),
        bytes(&[1u32]),
    ];
    let launch = LibraryLaunch::threadgroups(name, [n.div_ceil(8), m, 1], [8, 8, 1]);
    let out = dispatch(device, &library("candle", "quantized.metal"), &args, &launch);
    let want: Vec<f64> = (0..m)
        .flat_map(|r| (0..n).map(move |c| (r, c)))
        .map(|(r, c)| (0..k).map(|i| wv[c * k + i] * xv[r * k + i]).sum())
        .collect();
    check(&format!("candle {name}"), &out[0], &want, DType::F32);
}

/// quantized.metal `kernel_mul_mv_q4_0_f32`, k spanning 20 blocks (more than the 16 a simdgroup
/// covers at once).
pub fn mul_mv_q4_0_f32(device: Device) {
    let mut rng = Rng::new(331);
    let (m, n, k) = (3usize, 24usize, 640usize);
    let blocks = q4_0_blocks(&mut rng, n * k / 32);
    quantized_matvec(device, "kernel_mul_mv_q4_0_f32", blocks, &mut rng, m, n, k);
}

/// Random q4_1 blocks (`block_q4_1`: half scale d, half minimum m, 16 bytes of 4-bit quants in
/// q4_0's order, each q·d + m) and their values.
fn q4_1_blocks(rng: &mut Rng, blocks: usize) -> (Vec<u8>, Vec<f64>) {
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for _ in 0..blocks {
        let d = kiln::f16::from_f64(rng.uniform(0.01, 0.2));
        let m = kiln::f16::from_f64(rng.uniform(-1.0, 0.5));
        bytes.extend(d.to_bits().to_le_bytes());
        bytes.extend(m.to_bits().to_le_bytes());
        let qs: Vec<u8> = (0..16).map(|_| (rng.next_u64() & 0xff) as u8).collect();
        bytes.extend(&qs);
        let (d, m) = (d.to_f64(), m.to_f64());
        values.extend(qs.iter().map(|q| (q & 15) as f64 * d + m));
        values.extend(qs.iter().map(|q| (q >> 4) as f64 * d + m));
    }
    (bytes, values)
}

/// quantized.metal `kernel_mul_mv_q4_1_f32`.
pub fn mul_mv_q4_1_f32(device: Device) {
    let mut rng = Rng::new(333);
    let (m, n, k) = (2usize, 32usize, 384usize);
    let blocks = q4_1_blocks(&mut rng, n * k / 32);
    quantized_matvec(device, "kernel_mul_mv_q4_1_f32", blocks, &mut rng, m, n, k);
}

/// quantized.metal `kernel_mul_mv_q8_0_f32`.
pub fn mul_mv_q8_0_f32(device: Device) {
    let mut rng = Rng::new(332);
    let (m, n, k) = (2usize, 16usize, 640usize);
    let blocks = q8_0_blocks(&mut rng, n * k / 32);
    quantized_matvec(device, "kernel_mul_mv_q8_0_f32", blocks, &mut rng, m, n, k);
}

// ---------------------------------------------------------------------------------------------
// GEMM (mlx_gemm.metal, MLX steel)
// ---------------------------------------------------------------------------------------------

/// The `GEMMParams` of kernels/mlx_gemm.rs `call_mlx_gemm` (467-484, 591-606): eight ints,
/// three size_t batch strides, three ints; swizzle_log 0, so tiles_n = n/bn and tiles_m = m/bm
/// (rounded up).
fn gemm_params(
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    tile: (usize, usize, usize),
    strides: (usize, usize),
) -> LibraryArg {
    use Field::*;
    let (bm, bn, bk) = tile;
    fields(&[
        I32(m as i32),
        I32(n as i32),
        I32(k as i32),
        I32(lda as i32),
        I32(ldb as i32),
        I32(n as i32),
        I32(n.div_ceil(bn) as i32),
        I32(m.div_ceil(bm) as i32),
        I64(strides.0 as i64),
        I64(strides.1 as i64),
        I64((m * n) as i64),
        I32(0),
        I32((k / bk) as i32),
        I32(1),
    ])
}

/// The launch of `call_mlx_gemm` (556-564, 656-666): function constants has_batch (10),
/// use_out_source (100), do_axpby (110), align_M/N/K (200-202), do_gather (300); groups
/// (tiles_n, tiles_m, b) of (32, wn, wm) threads.
fn gemm_launch(
    name: &str,
    (m, n, k, b): (usize, usize, usize, usize),
    (bm, bn, bk, wm, wn): (usize, usize, usize, usize, usize),
) -> LibraryLaunch {
    use kiln::backend::{ConstantKey::Index, ConstantValue::Bool};
    LibraryLaunch::threadgroups(name, [n.div_ceil(bn), m.div_ceil(bm), b], [32, wn, wm])
        .constant(Index(10), Bool(b > 1))
        .constant(Index(100), Bool(false))
        .constant(Index(110), Bool(false))
        .constant(Index(200), Bool(m % bm == 0))
        .constant(Index(201), Bool(n % bn == 0))
        .constant(Index(202), Bool(k % bk == 0))
        .constant(Index(300), Bool(false))
}

/// mlx_gemm.metal `gemm_nn_f32_f32_32_32_16_2_2`, batched (b = 2, both operands 3-d, so no
/// batch collapse: `check_batch_collapse` 194-237) and no side aligned: kernels/mlx_gemm.rs
/// `call_mlx_gemm` (453-668), the 32×32×16 tile being `select_tile_config`'s choice for m < 16
/// on every device (59-80). Slots 2 (C) and 5 (addmm params) are not read (use_out_source is
/// false) and get a placeholder; 6 is the batch shape, 7 the two batch strides.
pub fn gemm_nn_f32_batched(device: Device) {
    let mut rng = Rng::new(341);
    let (b, m, n, k) = (2usize, 12usize, 40usize, 50usize);
    let tile = (32, 32, 16, 2, 2);
    let (a, av) = normals(&mut rng, DType::F32, &[b, m, k], 1.0);
    let (bb, bv) = normals(&mut rng, DType::F32, &[b, k, n], 1.0);
    let args = [
        input(device, &a),
        input(device, &bb),
        bytes(&[0u32]),
        output(&[b, m, n], DType::F32),
        gemm_params(m, n, k, k, n, (tile.0, tile.1, tile.2), (m * k, k * n)),
        bytes(&[0u32]),
        bytes(&[b as i32]),
        bytes(&[(m * k) as i64, (k * n) as i64]),
    ];
    let launch = gemm_launch("gemm_nn_f32_f32_32_32_16_2_2", (m, n, k, b), tile);
    let out = dispatch(device, &library("candle", "mlx_gemm.metal"), &args, &launch);
    let mut want = Vec::with_capacity(b * m * n);
    for bi in 0..b {
        for r in 0..m {
            for c in 0..n {
                want.push((0..k).map(|i| av[(bi * m + r) * k + i] * bv[(bi * k + i) * n + c]).sum());
            }
        }
    }
    check("candle gemm_nn_f32_f32_32_32_16_2_2", &out[0], &want, DType::F32);
}

/// mlx_gemm.metal `gemm_nt_f16_f16_32_32_16_2_2`: rhs the transposed view of an [n, k] array
/// (strides [1, k], so b_trans and ldb = k), k aligned, m and n not; one batch, float
/// accumulation, one rounding to half. Same host function and tile choice as above.
pub fn gemm_nt_f16(device: Device) {
    let mut rng = Rng::new(342);
    let (m, n, k) = (10usize, 33usize, 48usize);
    let tile = (32, 32, 16, 2, 2);
    let (a, av) = normals(&mut rng, DType::F16, &[m, k], 1.0);
    let (bt, btv) = normals(&mut rng, DType::F16, &[n, k], 1.0);
    let args = [
        input(device, &a),
        input(device, &bt),
        bytes(&[0u32]),
        output(&[m, n], DType::F16),
        gemm_params(m, n, k, k, k, (tile.0, tile.1, tile.2), (m * k, n * k)),
        bytes(&[0u32]),
        bytes(&[1i32]),
        bytes(&[(m * k) as i64, (n * k) as i64]),
    ];
    let launch = gemm_launch("gemm_nt_f16_f16_32_32_16_2_2", (m, n, k, 1), tile);
    let out = dispatch(device, &library("candle", "mlx_gemm.metal"), &args, &launch);
    let want: Vec<f64> = (0..m * n)
        .map(|t| round(DType::F16, (0..k).map(|i| av[(t / n) * k + i] * btv[(t % n) * k + i]).sum()))
        .collect();
    check("candle gemm_nt_f16_f16_32_32_16_2_2", &out[0], &want, DType::F16);
}

/// mlx_gemm.metal `gemm_tn_f32_f32_64_32_32_2_2`: lhs the transposed view of a [k, m] array
/// (strides [1, m], so a_trans and lda = m), m ≥ 16 with a small output, float32 on a medium
/// device, so `select_tile_config` (146-160) picks 64×32×32 with 2×2 simdgroups; one batch, no
/// side aligned.
pub fn gemm_tn_f32(device: Device) {
    let mut rng = Rng::new(343);
    let (m, n, k) = (70usize, 50usize, 40usize);
    let tile = (64, 32, 32, 2, 2);
    let (at, atv) = normals(&mut rng, DType::F32, &[k, m], 1.0);
    let (bb, bv) = normals(&mut rng, DType::F32, &[k, n], 1.0);
    let args = [
        input(device, &at),
        input(device, &bb),
        bytes(&[0u32]),
        output(&[m, n], DType::F32),
        gemm_params(m, n, k, m, n, (tile.0, tile.1, tile.2), (m * k, n * k)),
        bytes(&[0u32]),
        bytes(&[1i32]),
        bytes(&[(m * k) as i64, (n * k) as i64]),
    ];
    let launch = gemm_launch("gemm_tn_f32_f32_64_32_32_2_2", (m, n, k, 1), tile);
    let out = dispatch(device, &library("candle", "mlx_gemm.metal"), &args, &launch);
    let want: Vec<f64> = (0..m * n).map(|t| (0..k).map(|i| atv[i * m + t / n] * bv[i * n + t % n]).sum()).collect();
    check("candle gemm_tn_f32_f32_64_32_32_2_2", &out[0], &want, DType::F32);
}

// ---------------------------------------------------------------------------------------------
// gather / scatter (indexing.metal)
// ---------------------------------------------------------------------------------------------

/// The gather of kernels/indexing.rs `call_gather` (61-104) along dim 1 of a [3, 5, 4] input:
/// one index per output element ([3, 7, 4]), `None` standing for the index type's maximum
/// (which gives 0); `ids` makes the index array from them.
fn gather_f32(device: Device, name: &str, seed: u64, ids: impl Fn(&[Option<usize>], &[usize]) -> Array) {
    let mut rng = Rng::new(seed);
    let (left, dim, right, ids_size) = (3usize, 5usize, 4usize, 7usize);
    let (x, xv) = normals(&mut rng, DType::F32, &[left, dim, right], 1.0);
    let mut idx: Vec<Option<usize>> =
        (0..left * ids_size * right).map(|_| Some((rng.next_u64() % dim as u64) as usize)).collect();
    idx[9] = None;
    idx[50] = None;
    let dst_el = idx.len();
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[left]),
        sizes(&[dim]),
        sizes(&[right]),
        sizes(&[ids_size]),
        input(device, &x),
        input(device, &ids(&idx, &[left, ids_size, right])),
        output(&[left, ids_size, right], DType::F32),
    ];
    let launch = LibraryLaunch::threadgroups(name, groups, width);
    let out = dispatch(device, &library("candle", "indexing.metal"), &args, &launch);
    let want: Vec<f64> = (0..dst_el)
        .map(|t| match idx[t] {
            None => 0.0,
            Some(i) => xv[((t / right / ids_size) * dim + i) * right + t % right],
        })
        .collect();
    check(&format!("candle {name}"), &out[0], &want, DType::F32);
}

/// indexing.metal `gather_i64_f32`.
pub fn gather_i64_f32(device: Device) {
    gather_f32(device, "gather_i64_f32", 351, |idx, shape| {
        let v: Vec<i64> = idx.iter().map(|i| i.map_or(i64::MAX, |i| i as i64)).collect();
        Array::from_slice(shape, &v).unwrap()
    });
}

/// indexing.metal `gather_u32_f32` (its index type spelled `uint`, which reaches the
/// `uint32_t` specialisation of `max_value` only through its name).
pub fn gather_u32_f32(device: Device) {
    gather_f32(device, "gather_u32_f32", 356, |idx, shape| {
        let v: Vec<u32> = idx.iter().map(|i| i.map_or(u32::MAX, |i| i as u32)).collect();
        Array::from_slice(shape, &v).unwrap()
    });
}

/// indexing.metal `sa_i64_f32` (scatter_add along dim 1 into a random destination; i64::MAX
/// indices skipped): kernels/indexing.rs `call_scatter` (107-151), one thread per (left, right)
/// column, the destination updated in place.
pub fn scatter_add_i64_f32(device: Device) {
    let mut rng = Rng::new(352);
    let (left, src_dim, right, dst_dim) = (3usize, 6usize, 4usize, 5usize);
    let (src, sv) = normals(&mut rng, DType::F32, &[left, src_dim, right], 1.0);
    let mut ids: Vec<i64> = (0..left * src_dim * right).map(|_| (rng.next_u64() % dst_dim as u64) as i64).collect();
    ids[5] = i64::MAX;
    ids[17] = i64::MAX;
    let id = Array::from_slice(&[left, src_dim, right], &ids).unwrap();
    let (dst, dv) = normals(&mut rng, DType::F32, &[left, dst_dim, right], 1.0);
    let dst_el = left * right;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[left]),
        sizes(&[src_dim]),
        sizes(&[right]),
        sizes(&[dst_dim]),
        input(device, &src),
        input(device, &id),
        LibraryArg::InOut(dst.to_device(device).unwrap()),
    ];
    let launch = LibraryLaunch::threadgroups("sa_i64_f32", groups, width);
    let out = dispatch(device, &library("candle", "indexing.metal"), &args, &launch);
    let mut want = dv.clone();
    for (s, (&i, &v)) in ids.iter().zip(&sv).enumerate() {
        if i != i64::MAX {
            let (l, r) = (s / (src_dim * right), s % right);
            want[(l * dst_dim + i as usize) * right + r] += v;
        }
    }
    check("candle sa_i64_f32", &out[0], &want, DType::F32);
}

/// indexing.metal `s_u32_f32` (scatter: along dim 1, a later j overwrites an earlier one, the
/// rest of the destination kept): the same host function.
pub fn scatter_u32_f32(device: Device) {
    let mut rng = Rng::new(353);
    let (left, src_dim, right, dst_dim) = (2usize, 5usize, 3usize, 6usize);
    let (src, sv) = normals(&mut rng, DType::F32, &[left, src_dim, right], 1.0);
    let mut ids: Vec<u32> = (0..left * src_dim * right).map(|_| (rng.next_u64() % dst_dim as u64) as u32).collect();
    ids[4] = u32::MAX;
    let id = Array::from_slice(&[left, src_dim, right], &ids).unwrap();
    let (dst, dv) = normals(&mut rng, DType::F32, &[left, dst_dim, right], 1.0);
    let dst_el = left * right;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[left]),
        sizes(&[src_dim]),
        sizes(&[right]),
        sizes(&[dst_dim]),
        input(device, &src),
        input(device, &id),
        LibraryArg::InOut(dst.to_device(device).unwrap()),
    ];
    let launch = LibraryLaunch::threadgroups("s_u32_f32", groups, width);
    let out = dispatch(device, &library("candle", "indexing.metal"), &args, &launch);
    let mut want = dv.clone();
    for (s, (&i, &v)) in ids.iter().zip(&sv).enumerate() {
        if i != u32::MAX {
            let (l, r) = (s / (src_dim * right), s % right);
            want[(l * dst_dim + i as usize) * right + r] = v;
        }
    }
    check("candle s_u32_f32", &out[0], &want, DType::F32);
}

/// indexing.metal `ia_u32_f16` (index_add along dim 1, repeated indices; each += in half, so
/// rounded at every step, in the kernel's order j = 0, 1, ...): kernels/indexing.rs
/// `call_index_add` (154-200).
pub fn index_add_u32_f16(device: Device) {
    let mut rng = Rng::new(354);
    let (left, src_dim, right, dst_dim) = (2usize, 6usize, 5usize, 4usize);
    let (src, sv) = normals(&mut rng, DType::F16, &[left, src_dim, right], 1.0);
    let ids: Vec<u32> = vec![2, 0, 2, 3, 2, 1];
    let id = Array::from_slice(&[src_dim], &ids).unwrap();
    let (dst, dv) = normals(&mut rng, DType::F16, &[left, dst_dim, right], 1.0);
    let dst_el = left * right;
    let (groups, width) = linear_split(dst_el);
    let args = [
        sizes(&[dst_el]),
        sizes(&[left]),
        sizes(&[src_dim]),
        sizes(&[right]),
        sizes(&[dst_dim]),
        sizes(&[ids.len()]),
        input(device, &src),
        input(device, &id),
        LibraryArg::InOut(dst.to_device(device).unwrap()),
    ];
    let launch = LibraryLaunch::threadgroups("ia_u32_f16", groups, width);
    let out = dispatch(device, &library("candle", "indexing.metal"), &args, &launch);
    let mut want = dv.clone();
    for l in 0..left {
        for (j, &i) in ids.iter().enumerate() {
            for r in 0..right {
                let d = (l * dst_dim + i as usize) * right + r;
                want[d] = round(DType::F16, want[d] + sv[(l * src_dim + j) * right + r]);
            }
        }
    }
    check("candle ia_u32_f16", &out[0], &want, DType::F16);
}

mod run {
    use super::*;
    backend_tests!(
        rope_i_f32,
        rope_f16,
        rope_thd_f32,
        asort_asc_f32,
        asort_desc_f16,
        mlx_arg_block_sort_f32,
        mlx_arg_multi_block_sort_f32,
        im2col_f32,
        im2col1d_f16,
        conv_transpose1d_f16,
        max_pool2d_f32,
        avg_pool2d_f16,
        mul_mv_q4_0_f32,
        mul_mv_q4_1_f32,
        mul_mv_q8_0_f32,
        gemm_nn_f32_batched,
        gemm_nt_f16,
        gemm_tn_f32,
        gather_i64_f32,
        gather_u32_f32,
        scatter_add_i64_f32,
        scatter_u32_f32,
        index_add_u32_f16,
    );
}
