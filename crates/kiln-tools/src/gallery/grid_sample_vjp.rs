//! The VJP of bilinear `grid_sample` (see `grid_sample.rs` for the forward maths), as in the MLX
//! custom-kernel documentation: given the cotangent `g` of the output,
//! `x_grad[b, yi, xi, c] += w * g[b, gy, gx, c]` over each point's in-bounds neighbours, and
//! `grid_grad[b, gy, gx] = (W/2 * sum_c sum_n dw/dix * x * g, H/2 * sum_c sum_n dw/diy * x * g)`.
//!
//! Channels are padded to a multiple of the simdgroup width so each simdgroup serves one grid
//! point: the grid gradient is reduced with `simd_sum` and added once per simdgroup, `x_grad`
//! with one atomic per neighbour. Both outputs are `device atomic<float>*` (`atomic_outputs`),
//! zeroed by `init_value = 0`. The half-extent factors are W/2 and H/2 in float (the documented
//! kernel divides the integers, wrong for odd sizes).
//! Layout: `x` (B, H, W, C), `grid` (B, gH, gW, 2), `cotangent` (B, gH, gW, C) of f32/f16/bf16;
//! outputs `x_grad` (B, H, W, C) and `grid_grad` (B, gH, gW, 2) float32 (the atomic type).
//! Reference: the library op's (`kiln::ops::grid_sample::reference_vjp`, the same semantics),
//! f64 on the dtype-rounded inputs. Tolerance: the f32 entry (outputs are f32 sums of rounded inputs).

use super::entry::{
    check_shape, dim, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng, FLOAT_DTYPES,
};
use super::grid_sample::{dims, inputs};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "grid_sample_vjp", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

/// The simdgroup width channels are padded to.
const SIMD_WIDTH: usize = 32;

const SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int simd_width = static_cast<int>(threads_per_simdgroup);
    int C_padded = (C + simd_width - 1) / simd_width * simd_width;
    int points_per_batch = grid_shape[1] * grid_shape[2];
    uint point = elem / C_padded;
    int channel = elem % C_padded;
    int b = point / points_per_batch;

    float fx;
    float fy;
    int x0 = source_index(static_cast<float>(grid[2 * point]), W, fx);
    int y0 = source_index(static_cast<float>(grid[2 * point + 1]), H, fy);

    float gix = 0.0f;
    float giy = 0.0f;
    if (channel < C) {
        float cot = static_cast<float>(cotangent[point * C + channel]);
        for (int dy = 0; dy < 2; ++dy) {
            for (int dx = 0; dx < 2; ++dx) {
                int xi = x0 + dx;
                int yi = y0 + dy;
                if (xi >= 0 && xi < W && yi >= 0 && yi < H) {
                    float wx = dx ? fx : 1.0f - fx;
                    float wy = dy ? fy : 1.0f - fy;
                    int offset = ((b * H + yi) * W + xi) * C + channel;
                    atomic_fetch_add_explicit(&x_grad[offset], wx * wy * cot, memory_order_relaxed);
                    float v = static_cast<float>(x[offset]) * cot;
                    gix += (dx ? 1.0f : -1.0f) * wy * v;
                    giy += (dy ? 1.0f : -1.0f) * wx * v;
                }
            }
        }
    }
    gix = simd_sum(gix);
    giy = simd_sum(giy);
    if (thread_index_in_simdgroup == 0) {
        atomic_fetch_add_explicit(&grid_grad[2 * point], gix * (0.5f * W), memory_order_relaxed);
        atomic_fetch_add_explicit(&grid_grad[2 * point + 1], giy * (0.5f * H), memory_order_relaxed);
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(x: &Array, grid: &Array, cotangent: &Array) -> Result<Prepared> {
    let op = "grid_sample_vjp";
    let [b, h, w, c, gh, gw] = dims(op, x, grid)?;
    check_shape(op, "cotangent", cotangent, &[b, gh, gw, c])?;
    if cotangent.dtype() != x.dtype() {
        return Err(Error::dtype(op, cotangent.dtype(), format!("cotangent must match x ({})", x.dtype())));
    }
    let c_padded = c.div_ceil(SIMD_WIDTH) * SIMD_WIDTH;
    let kernel = KERNEL.one(op, || {
        Ok(MetalKernel::new("gallery_grid_sample_vjp", &["x", "grid", "cotangent"], &["x_grad", "grid_grad"], SOURCE)?
            .header(kiln::ops::grid_sample::HEADER)
            .atomic_outputs(true))
    })?;
    let spec = LaunchSpec::new([dim(op, b * gh * gw * c_padded)?, 1, 1], [256, 1, 1])
        .output(&[b, h, w, c], DType::F32)
        .output(&[b, gh, gw, 2], DType::F32)
        .template("T", x.dtype())
        .init_value(0.0);
    Ok(Prepared::new(kernel, vec![x.into(), grid.into(), cotangent.into()], spec))
}

/// Returns `(x_grad, grid_grad)`, both float32, for the forward `grid_sample(x, grid)` and the
/// output cotangent.
pub fn grid_sample_vjp(x: &Array, grid: &Array, cotangent: &Array) -> Result<(Array, Array)> {
    let mut outs = prepare(x, grid, cotangent)?.run()?;
    let grid_grad = outs.pop();
    let x_grad = outs.pop();
    match (x_grad, grid_grad) {
        (Some(xg), Some(gg)) => Ok((xg, gg)),
        _ => Err(Error::invalid("grid_sample_vjp", "the kernel returned fewer than two outputs")),
    }
}

/// One verified run; `dims` = `[B, H, W, C, gH, gW]`.
pub fn check(device: Device, dtype: DType, dims: [usize; 6], seed: u64) -> Result<Outcome> {
    let [b, _, _, c, gh, gw] = dims;
    let mut rng = Rng::new(seed);
    let ((x, xv), (g, gv)) = inputs(&mut rng, device, dtype, dims)?;
    let (cot, cv) = normal_input(&mut rng, device, dtype, &[b, gh, gw, c], 1.0)?;
    let (outs, time) = prepare(&x, &g, &cot)?.timed()?;
    let (xg_ref, gg_ref) = kiln::ops::grid_sample::reference_vjp(&xv, &gv, &cv, dims);
    let parts = vec![
        Part { name: "x_grad", output: values(&outs[0])?, reference: xg_ref },
        Part { name: "grid_grad", output: values(&outs[1])?, reference: gg_ref },
    ];
    Ok(Outcome { parts, tolerance_dtype: DType::F32, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, [2, 13, 15, 40, 7, 5], seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_source_declares_atomic_outputs() {
        let x = kiln::Array::from_f64(kiln::DType::BF16, &[1, 2, 2, 3], &[0.5; 12]).unwrap();
        let g = kiln::Array::from_f64(kiln::DType::BF16, &[1, 1, 1, 2], &[0.1, 0.2]).unwrap();
        let cot = kiln::Array::from_f64(kiln::DType::BF16, &[1, 1, 1, 3], &[1.0; 3]).unwrap();
        let p = super::prepare(&x, &g, &cot).unwrap();
        let src = p.metal_kernel().unwrap().generate(&[x, g, cot], p.spec()).unwrap().source;
        assert!(src.contains("device atomic<float>* x_grad [[buffer("), "{src}");
        assert!(src.contains("device atomic<float>* grid_grad [[buffer("), "{src}");
        assert!(src.contains("uint threads_per_simdgroup [[threads_per_simdgroup]]"), "{src}");
        assert!(src.contains("<bfloat16_t>;"), "{src}");
    }
}
