//! Bilinear `grid_sample` (zeros padding, `align_corners=False`, channels-last) and its VJP, with
//! the MLX custom-kernel documentation's semantics.
//!
//! For output point `(b, gy, gx)` with grid coordinates `(u, v)` in [-1, 1]:
//! `ix = ((u + 1) W - 1) / 2`, `iy = ((v + 1) H - 1) / 2`, `x0 = floor(ix)`, `fx = ix - x0`
//! (likewise y; `fx` is computed from `u` with one fused multiply-add, accurate at any image
//! size), and `out[b, gy, gx, c] = sum over in-bounds neighbours (x0+dx, y0+dy) of
//! wx * wy * x[b, y0+dy, x0+dx, c]` with `wx = dx ? fx : 1 - fx`. Out-of-bounds neighbours are
//! never read.
//! Forward: one thread per 4 channels of a point (one 16-byte vector of f32) when C % 4 == 0 and
//! x is aligned ([`uses_vec4`]), else one per channel; the four neighbours' loads are issued
//! together (predicated) before they are summed in the order above.
//! VJP for cotangent `g` (B, gH, gW, C): `x_grad[b, yi, xi, c] += wx wy g[.., c]` (float atomics,
//! one per channel and neighbour; consecutive lanes hit consecutive channels) and
//! `grid_grad = (W/2 sum_c sum_n ±wy x g, H/2 sum_c sum_n ±wx x g)`. `P` lanes serve one grid
//! point (P = the power of two >= C, at most 32), each taking `K = ceil(C / P)` channels with
//! compile-time trip counts, all loads issued before the atomics; the grid gradient is reduced
//! across the P lanes with `simd_shuffle_xor` and stored by one lane (no atomic accumulation).
//! Gradients accumulate in f32 and are cast to the dtypes of `x` and `grid`; the order of the
//! atomic additions makes `x_grad` vary in the last bits from run to run.
//! Layout: `x` (B, H, W, C), `grid` (B, gH, gW, 2), `cotangent` (B, gH, gW, C); f32/f16/bf16,
//! `grid` and `cotangent` of any of them. Output (B, gH, gW, C) in x's dtype.
//! Reference: [`reference`](fn@reference) and [`reference_vjp`], f64 on the dtype-rounded
//! inputs; the VJP reference is itself checked against central differences of the forward
//! reference.
//! Tolerance: the dtype table (of the output's dtype).

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel};
use crate::ops::kernel_cache::KernelCache;
use crate::ops::plan::{OpCall, OpPlan};
use crate::ops::util::{vec4_aligned, VEC4_HEADER};

const OP: &str = "grid_sample";
const OP_VJP: &str = "grid_sample_vjp";
const THREADS: u32 = 256;

/// The pixel coordinate `((u + 1) size - 1) / 2` of a grid value as its floor and fraction. The
/// fraction comes from one fused multiply-add on a number below 1, so it carries the float
/// rounding of itself (~6e-8), not that of the coordinate (~6e-5 at size 1024), and no
/// compiler contraction can change it (every product is already an explicit fma).
pub const HEADER: &str = r#"
inline int source_index(float u, int size, thread float& frac) {
    float hs = 0.5f * size;
    float f0 = metal::floor(metal::fma(u, hs, hs - 0.5f));
    float f = metal::fma(u, hs, (hs - 0.5f) - f0);
    float below = metal::select(0.0f, 1.0f, f < 0.0f);
    float above = metal::select(0.0f, 1.0f, f >= 1.0f);
    frac = f + below - above;
    return static_cast<int>(f0 - below + above);
}
"#;

const FORWARD: &str = r#"
    // CW channels per thread: 4 (one 16-byte vector of f32, 8 bytes of f16/bf16) when V.
    constexpr int CW = V ? 4 : 1;
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int points = grid_shape[1] * grid_shape[2];
    int chunks = C / CW;
    uint point = elem / chunks;
    int c = (elem % chunks) * CW;
    int b = point / points;
    float fx;
    float fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);
    // The four neighbours' loads are independent (predicated, at clamped addresses) so they are
    // all in flight at once; an out-of-bounds neighbour is never read and adds nothing.
    float4 v[4];
    float wt[4];
    #pragma unroll
    for (int n = 0; n < 4; ++n) {
        int dx = n & 1;
        int dy = n >> 1;
        int xi = x0 + dx;
        int yi = y0 + dy;
        bool ok = xi >= 0 && xi < W && yi >= 0 && yi < H;
        wt[n] = (dx ? fx : 1.0f - fx) * (dy ? fy : 1.0f - fy);
        long off = (static_cast<long>(b * H + metal::clamp(yi, 0, H - 1)) * W + metal::clamp(xi, 0, W - 1)) * C + c;
        if (V) {
            v[n] = ok ? kiln_load4(x + off, 0) : float4(0.0f);
        } else {
            v[n] = float4(ok ? static_cast<float>(x[off]) : 0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    float4 acc = float4(0.0f);
    #pragma unroll
    for (int n = 0; n < 4; ++n) {
        acc += wt[n] * v[n];
    }
    if (V) {
        kiln_store4(out + static_cast<long>(point) * C + c, 0, acc);
    } else {
        out[elem] = static_cast<T>(acc.x);
    }
"#;

const BACKWARD: &str = r#"
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int points = grid_shape[1] * grid_shape[2];
    uint point = elem / P;
    int sub = elem % P;
    int b = point / points;
    float fx;
    float fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);
    // K channels per lane, `sub + P k`; out-of-range channels and neighbours use clamped
    // in-bounds addresses, are never read and add exact zeros. Uniform control flow (selects,
    // no lane-dependent branches) up to the shuffles.
    float cot[K];
    int cs[K];
    bool cok[K];
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        cok[k] = sub + P * k < C;
        cs[k] = metal::min(sub + P * k, C - 1);
        cot[k] = cok[k] ? static_cast<float>(cotangent[static_cast<long>(point) * C + cs[k]]) : 0.0f;
    }
    long off[4];
    bool ok[4];
    float xv[4][K];
    #pragma unroll
    for (int n = 0; n < 4; ++n) {
        int xi = x0 + (n & 1);
        int yi = y0 + (n >> 1);
        ok[n] = xi >= 0 && xi < W && yi >= 0 && yi < H;
        off[n] = (static_cast<long>(b * H + metal::clamp(yi, 0, H - 1)) * W + metal::clamp(xi, 0, W - 1)) * C;
        #pragma unroll
        for (int k = 0; k < K; ++k) {
            xv[n][k] = ok[n] && cok[k] ? static_cast<float>(x[off[n] + cs[k]]) : 0.0f;
        }
    }
    float gix = 0.0f;
    float giy = 0.0f;
    #pragma unroll
    for (int n = 0; n < 4; ++n) {
        int dx = n & 1;
        int dy = n >> 1;
        float wx = dx ? fx : 1.0f - fx;
        float wy = dy ? fy : 1.0f - fy;
        #pragma unroll
        for (int k = 0; k < K; ++k) {
            float xc = xv[n][k] * cot[k];
            gix += (dx ? wy : -wy) * xc;
            giy += (dy ? wx : -wx) * xc;
            atomic_fetch_add_explicit(&x_grad[off[n] + cs[k]], metal::select(0.0f, wx * wy * cot[k], ok[n] && cok[k]),
                                      memory_order_relaxed);
        }
    }
    // The P lanes of a point are aligned within one simdgroup (P divides 32 and the grid).
    for (int o = P / 2; o > 0; o /= 2) {
        gix += simd_shuffle_xor(gix, static_cast<ushort>(o));
        giy += simd_shuffle_xor(giy, static_cast<ushort>(o));
    }
    // One lane owns each point's grid gradient: a plain store, no accumulation.
    if (sub == 0) {
        atomic_store_explicit(&grid_grad[2 * point], gix * (0.5f * W), memory_order_relaxed);
        atomic_store_explicit(&grid_grad[2 * point + 1], giy * (0.5f * H), memory_order_relaxed);
    }
"#;

const CAST: &str = r#"
    uint i = thread_position_in_grid.x;
    out[i] = static_cast<T>(inp[i]);
"#;

fn forward_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || {
        Ok(MetalKernel::new("kiln_grid_sample", &["x", "grid"], &["out"], FORWARD)?
            .header(format!("{VEC4_HEADER}{HEADER}")))
    })
}

fn backward_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP_VJP, || {
        Ok(MetalKernel::new("kiln_grid_sample_vjp", &["x", "grid", "cotangent"], &["x_grad", "grid_grad"], BACKWARD)?
            .header(HEADER)
            .atomic_outputs(true))
    })
}

fn cast_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP_VJP, || MetalKernel::new("kiln_grid_sample_cast", &["inp"], &["out"], CAST))
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

fn grid_dim(op: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(op, format!("grid extent {n} exceeds u32")))
}

/// Validates `x` (B, H, W, C) and `grid` (B, gH, gW, 2); returns (B, H, W, C, gH, gW).
fn check(op: &str, x: &Array, grid: &Array) -> Result<[usize; 6]> {
    for (name, a) in [("x", x), ("grid", grid)] {
        if !is_float(a.dtype()) {
            return Err(Error::dtype(op, a.dtype(), format!("{name} must be float32, float16 or bfloat16")));
        }
    }
    let &[b, h, w, c] = x.shape() else {
        return Err(Error::shape(op, format!("x must be (B, H, W, C), got {:?}", x.shape())));
    };
    let &[gb, gh, gw, two] = grid.shape() else {
        return Err(Error::shape(op, format!("grid must be (B, gH, gW, 2), got {:?}", grid.shape())));
    };
    if gb != b || two != 2 {
        return Err(Error::shape(op, format!("grid {:?} does not match x {:?}", grid.shape(), x.shape())));
    }
    if x.size() == 0 || grid.size() == 0 {
        return Err(Error::shape(op, format!("empty input: x {:?}, grid {:?}", x.shape(), grid.shape())));
    }
    if x.device() != grid.device() {
        return Err(Error::invalid(op, format!("x lives on {} but grid on {}", x.device(), grid.device())));
    }
    if x.size().max(b * gh * gw * c * 32) >= i32::MAX as usize {
        return Err(Error::invalid(op, "inputs too large for 32-bit indexing"));
    }
    Ok([b, h, w, c, gh, gw])
}

/// Bilinear sampling of `x` (B, H, W, C) at `grid` (B, gH, gW, 2); output (B, gH, gW, C).
pub fn grid_sample(x: &Array, grid: &Array) -> Result<Array> {
    grid_sample_with(x, grid, None)
}

/// As [`grid_sample`], the output first filled with `init` (tests poison it with NaN).
pub fn grid_sample_with(x: &Array, grid: &Array, init: Option<f64>) -> Result<Array> {
    OpPlan::from(grid_sample_call(x, grid)?).with_init(init).run_one()
}

/// The validated call of the forward kernel.
pub fn grid_sample_call(x: &Array, grid: &Array) -> Result<OpCall> {
    let [b, _, _, c, gh, gw] = check(OP, x, grid)?;
    let vec4 = uses_vec4(x);
    let per_thread = if vec4 { 4 } else { 1 };
    let spec = LaunchSpec::new([grid_dim(OP, b * gh * gw * c / per_thread)?, 1, 1], [THREADS, 1, 1])
        .output(&[b, gh, gw, c], x.dtype())
        .template("T", x.dtype())
        .template("V", vec4)
        .device(x.device());
    Ok(OpCall::new(forward_kernel()?, vec![x.into(), grid.into()], spec))
}

/// Whether the forward reads and writes 4 channels per thread (a vector): when C is a multiple
/// of 4 and x is 4-element aligned.
pub fn uses_vec4(x: &Array) -> bool {
    x.shape().last().is_some_and(|&c| c % 4 == 0) && vec4_aligned(x)
}

/// Lanes per grid point in the VJP: the power of two covering C, at most a simdgroup.
pub fn lanes_per_point(c: usize) -> usize {
    c.next_power_of_two().min(32)
}

/// Channels per lane in the VJP (a compile-time trip count).
pub fn channels_per_lane(c: usize) -> usize {
    c.div_ceil(lanes_per_point(c))
}

/// The VJP of [`grid_sample`]: `(x_grad, grid_grad)` for `cotangent` (B, gH, gW, C), in the
/// dtypes of `x` and `grid`.
pub fn grid_sample_vjp(x: &Array, grid: &Array, cotangent: &Array) -> Result<(Array, Array)> {
    let mut outs = grid_sample_vjp_plan(x, grid, cotangent)?.run()?;
    match (outs.pop(), outs.pop()) {
        (Some(grid_grad), Some(x_grad)) => Ok((x_grad, grid_grad)),
        _ => Err(Error::invalid(OP_VJP, "the kernels returned too few outputs")),
    }
}

/// The plan of [`grid_sample_vjp`]: the VJP kernel (gradients accumulated in float32), then a
/// cast of each gradient whose input is not float32; its outputs are `(x_grad, grid_grad)`.
pub fn grid_sample_vjp_plan(x: &Array, grid: &Array, cotangent: &Array) -> Result<OpPlan> {
    let [b, _, _, c, gh, gw] = check(OP_VJP, x, grid)?;
    if !is_float(cotangent.dtype()) {
        return Err(Error::dtype(OP_VJP, cotangent.dtype(), "cotangent must be float32, float16 or bfloat16"));
    }
    if cotangent.shape() != [b, gh, gw, c] {
        return Err(Error::shape(
            OP_VJP,
            format!("cotangent has shape {:?}, expected {:?}", cotangent.shape(), [b, gh, gw, c]),
        ));
    }
    if cotangent.device() != x.device() {
        return Err(Error::invalid(OP_VJP, "cotangent lives on another device than x"));
    }
    let p = lanes_per_point(c);
    let spec = LaunchSpec::new([grid_dim(OP_VJP, b * gh * gw * p)?, 1, 1], [THREADS, 1, 1])
        .output(x.shape(), DType::F32)
        .output(grid.shape(), DType::F32)
        .template("P", p as i32)
        .template("K", channels_per_lane(c) as i32)
        .init_value(0.0)
        .device(x.device());
    let mut calls = vec![OpCall::new(backward_kernel()?, vec![x.into(), grid.into(), cotangent.into()], spec)];
    let mut outputs = Vec::new();
    for (i, like) in [x, grid].into_iter().enumerate() {
        if like.dtype() == DType::F32 {
            outputs.push((0, i));
            continue;
        }
        let spec = LaunchSpec::new([grid_dim(OP_VJP, like.size())?, 1, 1], [THREADS, 1, 1])
            .output(like.shape(), like.dtype())
            .template("T", like.dtype())
            .device(x.device());
        calls.push(OpCall::new(cast_kernel()?, Vec::new(), spec).reads(&[(0, i)]));
        outputs.push((calls.len() - 1, 0));
    }
    Ok(OpPlan::new(calls).outputs(&outputs))
}

/// The kernels with one launch each for `x`, `grid` (compile-only checks): forward, VJP.
pub fn kernels_and_specs(x: &Array, grid: &Array) -> Result<Vec<(&'static MetalKernel, LaunchSpec)>> {
    let [_, _, _, c, _, _] = check(OP, x, grid)?;
    let fwd = LaunchSpec::new([64, 1, 1], [64, 1, 1])
        .output(&[64], x.dtype())
        .template("T", x.dtype())
        .template("V", uses_vec4(x));
    let bwd = LaunchSpec::new([64, 1, 1], [64, 1, 1])
        .output(&[64], DType::F32)
        .output(&[64], DType::F32)
        .template("P", lanes_per_point(c) as i32)
        .template("K", channels_per_lane(c) as i32);
    Ok(vec![(forward_kernel()?, fwd), (backward_kernel()?, bwd)])
}

/// The neighbours of a grid point: `(xi, yi, weight, d weight/d ix, d weight/d iy)`, in bounds only.
fn neighbours(u: f64, v: f64, h: usize, w: usize) -> Vec<(usize, usize, f64, f64, f64)> {
    let ix = ((u + 1.0) * w as f64 - 1.0) / 2.0;
    let iy = ((v + 1.0) * h as f64 - 1.0) / 2.0;
    let (x0, y0) = (ix.floor(), iy.floor());
    let (fx, fy) = (ix - x0, iy - y0);
    let mut out = Vec::new();
    for dy in 0..2 {
        for dx in 0..2 {
            let (xi, yi) = (x0 as i64 + dx, y0 as i64 + dy);
            if xi < 0 || yi < 0 || xi >= w as i64 || yi >= h as i64 {
                continue;
            }
            let wx = if dx == 1 { fx } else { 1.0 - fx };
            let wy = if dy == 1 { fy } else { 1.0 - fy };
            let sx = if dx == 1 { 1.0 } else { -1.0 };
            let sy = if dy == 1 { 1.0 } else { -1.0 };
            out.push((xi as usize, yi as usize, wx * wy, sx * wy, sy * wx));
        }
    }
    out
}

/// Forward reference in f64; `dims` = `[B, H, W, C, gH, gW]`.
pub fn reference(x: &[f64], grid: &[f64], dims: [usize; 6]) -> Vec<f64> {
    let [b, h, w, c, gh, gw] = dims;
    let mut out = vec![0.0; b * gh * gw * c];
    for p in 0..b * gh * gw {
        let bi = p / (gh * gw);
        for (xi, yi, wt, _, _) in neighbours(grid[2 * p], grid[2 * p + 1], h, w) {
            for ch in 0..c {
                out[p * c + ch] += wt * x[((bi * h + yi) * w + xi) * c + ch];
            }
        }
    }
    out
}

/// VJP reference in f64: `(x_grad, grid_grad)`.
pub fn reference_vjp(x: &[f64], grid: &[f64], cot: &[f64], dims: [usize; 6]) -> (Vec<f64>, Vec<f64>) {
    let [b, h, w, c, gh, gw] = dims;
    let mut xg = vec![0.0; x.len()];
    let mut gg = vec![0.0; grid.len()];
    for p in 0..b * gh * gw {
        let bi = p / (gh * gw);
        for (xi, yi, wt, dwx, dwy) in neighbours(grid[2 * p], grid[2 * p + 1], h, w) {
            for ch in 0..c {
                let off = ((bi * h + yi) * w + xi) * c + ch;
                let g = cot[p * c + ch];
                xg[off] += wt * g;
                gg[2 * p] += dwx * x[off] * g * w as f64 / 2.0;
                gg[2 * p + 1] += dwy * x[off] * g * h as f64 / 2.0;
            }
        }
    }
    (xg, gg)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_hits_pixel_centres_and_interpolates_linearly() {
        // A 1x2x3x1 image: sampling at pixel centres returns the pixels.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (h, w) = (2.0, 3.0);
        let centre = |i: f64, n: f64| (2.0 * i + 1.0) / n - 1.0;
        let grid = [centre(2.0, w), centre(1.0, h), centre(0.5, w), centre(0.0, h), 1.5, 0.0];
        let out = super::reference(&x, &grid, [1, 2, 3, 1, 1, 3]);
        assert!((out[0] - 6.0).abs() < 1e-12);
        assert!((out[1] - 1.5).abs() < 1e-12);
        // Far outside the image everything is zero padding.
        assert_eq!(out[2], 0.0);
    }
}
