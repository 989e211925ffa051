//! The gallery's `grid_sample` forward and VJP written directly in CUDA through `CudaKernel`
//! (MLX's `cuda_kernel` contract): the same algorithm, thread mapping and arithmetic as the
//! Metal kernels in `grid_sample.rs` and `grid_sample_vjp.rs`, so timing the two side by side
//! measures what translating the Metal source costs. f32 only (the benchmark case).
//!
//! CUDA grids round up to whole blocks, so these kernels bound-check the thread index (the
//! Metal versions need not: exactly `grid` threads run there).

use std::sync::OnceLock;

use super::grid_sample::dims;
use kiln::array::Array;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{CudaKernel, LaunchSpec};

/// The same coordinate split as the Metal kernels' `source_index` (see grid_sample.rs).
const HEADER: &str = r#"
__device__ inline int source_index(float u, int size, float& frac) {
    float hs = 0.5f * size;
    float f0 = floorf(fmaf(u, hs, hs - 0.5f));
    float f = fmaf(u, hs, (hs - 0.5f) - f0);
    float below = f < 0.0f ? 1.0f : 0.0f;
    float above = f >= 1.0f ? 1.0f : 0.0f;
    frac = f + below - above;
    return static_cast<int>(f0 - below + above);
}
"#;

const FORWARD: &str = r#"
    size_t elem = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int points_per_batch = grid_shape[1] * grid_shape[2];
    size_t total = size_t(grid_shape[0]) * points_per_batch * C;
    if (elem >= total) return;
    size_t point = elem / C;
    int channel = elem % C;
    int b = point / points_per_batch;

    float fx;
    float fy;
    int x0 = source_index(grid[2 * point], W, fx);
    int y0 = source_index(grid[2 * point + 1], H, fy);

    float acc = 0.0f;
    for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
            int xi = x0 + dx;
            int yi = y0 + dy;
            if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                float w = (dx ? fx : 1.0f - fx) * (dy ? fy : 1.0f - fy);
                acc += w * x[((size_t(b) * H + yi) * W + xi) * C + channel];
            }
        }
    }
    out[elem] = acc;
"#;

const VJP: &str = r#"
    size_t elem = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int C_padded = (C + 31) / 32 * 32;
    int points_per_batch = grid_shape[1] * grid_shape[2];
    size_t total = size_t(grid_shape[0]) * points_per_batch * C_padded;
    // Whole warps stay together (the total is a multiple of 32), so the shuffles below see
    // every lane.
    if (elem >= total) return;
    size_t point = elem / C_padded;
    int channel = elem % C_padded;
    int b = point / points_per_batch;

    float fx;
    float fy;
    int x0 = source_index(grid[2 * point], W, fx);
    int y0 = source_index(grid[2 * point + 1], H, fy);

    float gix = 0.0f;
    float giy = 0.0f;
    if (channel < C) {
        float cot = cotangent[point * C + channel];
        for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
                int xi = x0 + dx;
                int yi = y0 + dy;
                if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                    float wx = dx ? fx : 1.0f - fx;
                    float wy = dy ? fy : 1.0f - fy;
                    size_t offset = ((size_t(b) * H + yi) * W + xi) * C + channel;
                    atomicAdd(&x_grad[offset], wx * wy * cot);
                    float v = x[offset] * cot;
                    gix += (dx ? 1.0f : -1.0f) * wy * v;
                    giy += (dy ? 1.0f : -1.0f) * wx * v;
                }
            }
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        gix += __shfl_xor_sync(0xffffffffu, gix, off);
        giy += __shfl_xor_sync(0xffffffffu, giy, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&grid_grad[2 * point], gix * (0.5f * W));
        atomicAdd(&grid_grad[2 * point + 1], giy * (0.5f * H));
    }
"#;

static FORWARD_KERNEL: OnceLock<std::result::Result<CudaKernel, String>> = OnceLock::new();
static VJP_KERNEL: OnceLock<std::result::Result<CudaKernel, String>> = OnceLock::new();

fn kernel(
    cell: &'static OnceLock<std::result::Result<CudaKernel, String>>,
    op: &str,
    build: impl FnOnce() -> Result<CudaKernel>,
) -> Result<&'static CudaKernel> {
    cell.get_or_init(|| build().map_err(|e| e.to_string())).as_ref().map_err(|msg| Error::invalid(op, msg.clone()))
}

fn check_f32(op: &str, arrays: &[&Array]) -> Result<()> {
    for a in arrays {
        if a.dtype() != DType::F32 {
            return Err(Error::dtype(op, a.dtype(), "the CUDA grid_sample kernels take float32"));
        }
    }
    Ok(())
}

fn threads(op: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(op, format!("{n} threads exceed the 32-bit grid")))
}

/// The forward kernel in CUDA: `x` (B, H, W, C) and `grid` (B, gH, gW, 2) float32 on a CUDA
/// device; returns (B, gH, gW, C).
pub fn grid_sample_cuda(x: &Array, grid: &Array) -> Result<Array> {
    let op = "grid_sample_cuda";
    check_f32(op, &[x, grid])?;
    let [b, _, _, c, gh, gw] = dims(op, x, grid)?;
    let k = kernel(&FORWARD_KERNEL, op, || {
        Ok(CudaKernel::new("gallery_grid_sample", &["x", "grid"], &["out"], FORWARD)?.header(HEADER))
    })?;
    let spec = LaunchSpec::new([threads(op, b * gh * gw * c)?, 1, 1], [256, 1, 1]).output(&[b, gh, gw, c], DType::F32);
    let mut out = k.call(&[x.into(), grid.into()], &spec)?;
    out.pop().ok_or_else(|| Error::invalid(op, "the kernel returned no output"))
}

/// The VJP kernel in CUDA; returns (x_grad (B, H, W, C), grid_grad (B, gH, gW, 2)), float32.
pub fn grid_sample_vjp_cuda(x: &Array, grid: &Array, cotangent: &Array) -> Result<(Array, Array)> {
    let op = "grid_sample_vjp_cuda";
    check_f32(op, &[x, grid, cotangent])?;
    let [b, h, w, c, gh, gw] = dims(op, x, grid)?;
    if cotangent.shape() != [b, gh, gw, c] {
        return Err(Error::shape(op, format!("cotangent {:?} must be {:?}", cotangent.shape(), [b, gh, gw, c])));
    }
    let k = kernel(&VJP_KERNEL, op, || {
        Ok(CudaKernel::new("gallery_grid_sample_vjp", &["x", "grid", "cotangent"], &["x_grad", "grid_grad"], VJP)?
            .header(HEADER))
    })?;
    let spec = LaunchSpec::new([threads(op, b * gh * gw * c.div_ceil(32) * 32)?, 1, 1], [256, 1, 1])
        .output(&[b, h, w, c], DType::F32)
        .output(&[b, gh, gw, 2], DType::F32)
        .init_value(0.0);
    let mut out = k.call(&[x.into(), grid.into(), cotangent.into()], &spec)?.into_iter();
    match (out.next(), out.next()) {
        (Some(xg), Some(gg)) => Ok((xg, gg)),
        _ => Err(Error::invalid(op, "the kernel returned fewer than two outputs")),
    }
}

/// The CUDA source of both kernels for these inputs (for compile-only checks).
pub fn cuda_sources(x: &Array, grid: &Array, cotangent: &Array) -> Result<Vec<(String, String)>> {
    let [b, h, w, c, gh, gw] = dims("grid_sample_cuda", x, grid)?;
    let fwd = CudaKernel::new("gallery_grid_sample", &["x", "grid"], &["out"], FORWARD)?.header(HEADER);
    let spec = LaunchSpec::new([1, 1, 1], [256, 1, 1]).output(&[b, gh, gw, c], DType::F32);
    let vjp = CudaKernel::new("gallery_grid_sample_vjp", &["x", "grid", "cotangent"], &["x_grad", "grid_grad"], VJP)?
        .header(HEADER);
    let vspec =
        LaunchSpec::new([1, 1, 1], [256, 1, 1]).output(&[b, h, w, c], DType::F32).output(&[b, gh, gw, 2], DType::F32);
    Ok(vec![
        (fwd.kernel_name(&[]), fwd.generate(&[x.clone(), grid.clone()], &spec)?),
        (vjp.kernel_name(&[]), vjp.generate(&[x.clone(), grid.clone(), cotangent.clone()], &vspec)?),
    ])
}
