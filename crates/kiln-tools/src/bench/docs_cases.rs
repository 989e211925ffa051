//! The MLX documentation's grid_sample kernels (the gallery's Metal body and its CUDA twin) as
//! benchmark cases beside the library op, at the op's registry shapes: not registry ops, so
//! built here. Their reference is slow at the benchmark shapes, so each is checked on the first
//! batch.

use super::inputs::{device_input, host_values, input};
use super::{Case, Prepared};
use kiln::array::{Array, SliceArg};
use kiln::check::{rel_l2, tolerance, Rng};
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::ops;

/// The MLX docs' grid_sample kernels (Metal body and CUDA twin) at the op's benchmark shapes,
/// beside the library op.
pub fn docs_grid_sample() -> Vec<Case> {
    let mut v = Vec::new();
    for op in ["grid_sample", "grid_sample_vjp"] {
        let shapes = ops::registry().iter().filter(|e| e.name == op).flat_map(|e| e.bench);
        for shape in shapes {
            if let &[b, h, w, c, gh, gw] = shape.dims {
                for imp in [GridSampleImpl::DocsMetal, GridSampleImpl::DocsCuda] {
                    v.push(grid_sample(op == "grid_sample_vjp", imp, [b, h, w, c, gh, gw]));
                }
            }
        }
    }
    v
}

/// The values of the first `count` entries along axis 0 of a device array.
fn head_values(a: &Array, count: usize) -> Result<Vec<f64>> {
    host_values(&a.slice(&[SliceArg { start: Some(0), stop: Some(count as isize), step: 1 }])?)
}

/// x (B, H, W, C), grid (B, gH, gW, 2): the MLX documentation's case.
/// Which grid_sample runs: the MLX documentation's kernels as the gallery writes them, once in
/// Metal through `MetalKernel` and once in CUDA through `CudaKernel` (same algorithm), whose
/// ratio is what translating the Metal source costs.
#[derive(Clone, Copy)]
enum GridSampleImpl {
    DocsMetal,
    DocsCuda,
}

impl GridSampleImpl {
    fn forward(self, x: &Array, grid: &Array) -> Result<Array> {
        match self {
            GridSampleImpl::DocsMetal => crate::gallery::grid_sample::grid_sample(x, grid),
            GridSampleImpl::DocsCuda => crate::gallery::grid_sample_cuda::grid_sample_cuda(x, grid),
        }
    }

    fn vjp(self, x: &Array, grid: &Array, cot: &Array) -> Result<(Array, Array)> {
        match self {
            GridSampleImpl::DocsMetal => crate::gallery::grid_sample_vjp::grid_sample_vjp(x, grid, cot),
            GridSampleImpl::DocsCuda => crate::gallery::grid_sample_cuda::grid_sample_vjp_cuda(x, grid, cot),
        }
    }

    fn op(self, vjp: bool) -> &'static str {
        match (self, vjp) {
            (GridSampleImpl::DocsMetal, false) => "grid_sample_docs_metal",
            (GridSampleImpl::DocsMetal, true) => "grid_sample_vjp_docs_metal",
            (GridSampleImpl::DocsCuda, false) => "grid_sample_docs_cuda",
            (GridSampleImpl::DocsCuda, true) => "grid_sample_vjp_docs_cuda",
        }
    }
}

fn grid_sample(vjp: bool, imp: GridSampleImpl, dims: [usize; 6]) -> Case {
    let [b, h, w, c, gh, gw] = dims;
    let points = b * gh * gw;
    // Fewest bytes: the grid, the output (or cotangent), and the 4 neighbours of each point.
    let fwd_bytes = 4.0 * (points * 2 + points * c + 4 * points * c) as f64;
    Case {
        op: imp.op(vjp),
        shape: format!("{b}x{h}x{w}x{c}+{b}x{gh}x{gw}x2"),
        dtype: DType::F32,
        bytes: if vjp { 2.0 * fwd_bytes } else { fwd_bytes },
        flops: if vjp { 16.0 } else { 8.0 } * (points * c) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let dt = DType::F32;
            let x = device_input(device, dt, &[b, h, w, c], &mut rng, -1.0, 1.0)?;
            // Slightly beyond [-1, 1] so the zero padding is exercised.
            let (grid, gv) = input(device, dt, &[b, gh, gw, 2], &mut rng, -1.05, 1.05)?;
            let xv = head_values(&x, 1)?;
            let one = [1, h, w, c, gh, gw];
            let (xn, gn) = (h * w * c, gh * gw * 2);
            if !vjp {
                return Ok(Prepared {
                    run: Box::new(move || Ok(vec![imp.forward(&x, &grid)?])),
                    error: Box::new(move |outs| {
                        let out = outs[0].to_f64_vec()?;
                        let want = ops::grid_sample::reference(&xv[..xn], &gv[..gn], one);
                        Ok(rel_l2(&out[..want.len()], &want))
                    }),
                    tolerance: tolerance(dt),
                });
            }
            let (cot, cv) = input(device, dt, &[b, gh, gw, c], &mut rng, -1.0, 1.0)?;
            Ok(Prepared {
                run: Box::new(move || {
                    let (xg, gg) = imp.vjp(&x, &grid, &cot)?;
                    Ok(vec![xg, gg])
                }),
                error: Box::new(move |outs| {
                    let (xg, gg) = (outs[0].to_f64_vec()?, outs[1].to_f64_vec()?);
                    let (wx, wg) = ops::grid_sample::reference_vjp(&xv[..xn], &gv[..gn], &cv[..gh * gw * c], one);
                    Ok(rel_l2(&xg[..wx.len()], &wx).max(rel_l2(&gg[..wg.len()], &wg)))
                }),
                tolerance: tolerance(dt),
            })
        }),
    }
}
