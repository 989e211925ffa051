//! The MLX documentation's grid_sample kernels (the gallery's Metal body and its CUDA twin) as
//! benchmark cases beside the library op, at the op's benchmark shapes with its cost and label
//! (`op_table`): not registry ops, so built here. Their reference, the library op's, is slow at
//! the benchmark shapes, so each is checked on the first batch.

use super::inputs::{device_input, host_values, input};
use super::{Case, Prepared};
use crate::op_table::{self, OpHooks};
use kiln::array::{Array, SliceArg};
use kiln::check::{rel_l2, tolerance, Rng};
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::ops;

/// The MLX docs' grid_sample kernels (Metal body and CUDA twin) at the op's benchmark shapes,
/// beside the library op.
pub fn docs_grid_sample() -> Vec<Case> {
    let mut v = Vec::new();
    for op in ["grid_sample", "grid_sample_vjp"].into_iter().filter_map(op_table::op) {
        for shape in op.hooks.bench {
            if let &[b, h, w, c, gh, gw] = shape.dims {
                for imp in [GridSampleImpl::DocsMetal, GridSampleImpl::DocsCuda] {
                    v.push(grid_sample(op.hooks, imp, [b, h, w, c, gh, gw]));
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

/// The case of `imp` for the op `hooks` describes (grid_sample or its VJP) at `dims`: x
/// (B, H, W, C), grid (B, gH, gW, 2), float32, the MLX documentation's case.
fn grid_sample(hooks: &OpHooks, imp: GridSampleImpl, dims: [usize; 6]) -> Case {
    let [b, h, w, c, gh, gw] = dims;
    let vjp = hooks.name == "grid_sample_vjp";
    let (bytes, flops) = (hooks.cost)(DType::F32, &dims, &[]);
    Case {
        op: imp.op(vjp),
        shape: (hooks.label)(&dims),
        dtype: DType::F32,
        bytes,
        flops,
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
