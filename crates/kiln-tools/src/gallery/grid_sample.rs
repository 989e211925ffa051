//! Bilinear `grid_sample` forward (zeros padding, `align_corners=False`), the MLX custom-kernel
//! documentation's example, channels-last.
//!
//! For output point `(b, gy, gx)` with grid coordinates `(u, v)` in [-1, 1]:
//! `ix = ((u + 1) W - 1) / 2`, `iy = ((v + 1) H - 1) / 2`, and
//! `out[b, gy, gx, c] = sum over the 4 neighbours (xi, yi) of wx * wy * x[b, yi, xi, c]`, with
//! `wx = 1 - |ix - xi|`, `wy = 1 - |iy - yi|`; neighbours outside the image contribute 0 and are
//! never read (the documented kernel loads them before masking, reading out of bounds).
//! One thread per output element; weights in f32.
//! Layout: `x` (B, H, W, C) and `grid` (B, gH, gW, 2) of f32/f16/bf16; output (B, gH, gW, C)
//! in that dtype. Reference: the library op's (`kiln::ops::grid_sample::reference`, the same
//! semantics), f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::entry::{
    check_dtype, dim, host_input, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng,
    FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "grid_sample", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int points_per_batch = grid_shape[1] * grid_shape[2];
    uint point = elem / C;
    int channel = elem % C;
    int b = point / points_per_batch;

    float fx;
    float fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);

    float acc = 0.0f;
    for (int dy = 0; dy < 2; ++dy) {
        for (int dx = 0; dx < 2; ++dx) {
            int xi = x0 + dx;
            int yi = y0 + dy;
            if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                float w = (dx ? fx : 1.0f - fx) * (dy ? fy : 1.0f - fy);
                acc += w * static_cast<float>(x[((b * H + yi) * W + xi) * C + channel]);
            }
        }
    }
    out[elem] = static_cast<T>(acc);
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

/// Checks `x` (B, H, W, C) against `grid` (B, gH, gW, 2) and returns `[B, H, W, C, gH, gW]`.
pub(crate) fn dims(op: &str, x: &Array, grid: &Array) -> Result<[usize; 6]> {
    check_dtype(op, x.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, grid.dtype(), &[x.dtype()])?;
    match (x.shape(), grid.shape()) {
        (&[b, h, w, c], &[gb, gh, gw, 2]) if gb == b => Ok([b, h, w, c, gh, gw]),
        _ => Err(Error::shape(
            op,
            format!("expected x (B, H, W, C) and grid (B, gH, gW, 2), got {:?} and {:?}", x.shape(), grid.shape()),
        )),
    }
}

fn prepare(x: &Array, grid: &Array) -> Result<Prepared> {
    let op = "grid_sample";
    let [b, _, _, c, gh, gw] = dims(op, x, grid)?;
    let kernel = KERNEL.one(op, || {
        Ok(MetalKernel::new("gallery_grid_sample", &["x", "grid"], &["out"], SOURCE)?
            .header(kiln::ops::grid_sample::HEADER))
    })?;
    let spec = LaunchSpec::new([dim(op, b * gh * gw * c)?, 1, 1], [256, 1, 1])
        .output(&[b, gh, gw, c], x.dtype())
        .template("T", x.dtype());
    Ok(Prepared::new(kernel, vec![x.into(), grid.into()], spec))
}

/// Samples `x` (B, H, W, C) bilinearly at `grid` (B, gH, gW, 2); returns (B, gH, gW, C).
pub fn grid_sample(x: &Array, grid: &Array) -> Result<Array> {
    prepare(x, grid)?.run_one()
}

/// A device array and the host values it holds.
pub(crate) type Input = (Array, Vec<f64>);

/// Random inputs for both grid_sample kernels: `x` normal, grid coordinates uniform in
/// [-1.1, 1.1] so some samples fall partly or wholly outside the image.
pub(crate) fn inputs(rng: &mut Rng, device: Device, dtype: DType, dims: [usize; 6]) -> Result<(Input, Input)> {
    let [b, h, w, c, gh, gw] = dims;
    let x = normal_input(rng, device, dtype, &[b, h, w, c], 1.0)?;
    let (g, gv) = host_input(dtype, &[b, gh, gw, 2], &rng.uniforms(b * gh * gw * 2, -1.1, 1.1))?;
    Ok((x, (g.to_device(device)?, gv)))
}

/// One verified run; `dims` = `[B, H, W, C, gH, gW]`.
pub fn check(device: Device, dtype: DType, dims: [usize; 6], seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let ((x, xv), (g, gv)) = inputs(&mut rng, device, dtype, dims)?;
    let (outs, time) = prepare(&x, &g)?.poisoned().timed()?;
    let parts = vec![Part {
        name: "out",
        output: values(&outs[0])?,
        reference: kiln::ops::grid_sample::reference(&xv, &gv, dims),
    }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, [2, 17, 23, 13, 11, 9], seed)
}
