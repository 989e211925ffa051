//! The benchmark cases: each registry op at the shapes and dtypes of its entry in the tools'
//! table (`op_table`), with the fewest bytes and FLOPs it needs (the entry's `cost`) and a check
//! against its registry reference at the benchmark shape (on the part of the problem the entry's
//! `check` names where the full reference would take too long). Every case is built the same
//! way from its two entries; `bench/peers.py` reads the same list (`kiln bench --list-json`).

use super::inputs::device_input;
use super::{Case, Prepared};
use crate::op_runs::{self, host_input, OpInputs};
use crate::op_table::{self, BenchShape, Fill, InputSpec, Op};
use kiln::array::Array;
use kiln::check::Rng;

/// Every case, in report order: each op's benchmark shapes in registry order, then the MLX
/// docs' grid_sample kernels beside the library's.
pub fn all() -> Vec<Case> {
    let mut v: Vec<Case> =
        op_table::ops().iter().flat_map(|&op| op.hooks.bench.iter().map(move |shape| case(op, shape))).collect();
    v.extend(super::docs_cases::docs_grid_sample());
    v
}

/// The case of the op `op` at `shape`.
pub fn case(op: Op, shape: &'static BenchShape) -> Case {
    case_at(op, shape, shape.dims)
}

/// The case of the op `op` at `shape` with other sizes `dims` (of the same meaning), e.g.
/// smaller ones for the CPU emulator. Uniform inputs are drawn on the device (inputs of
/// hundreds of millions of elements), the others on the host.
pub fn case_at(op: Op, shape: &'static BenchShape, dims: &[usize]) -> Case {
    let (entry, hooks) = (op.entry, op.hooks);
    let (dtype, dims) = (shape.dtype, dims.to_vec());
    let (bytes, flops) = (hooks.cost)(dtype, &dims, shape.params);
    Case {
        op: shape.case,
        shape: (hooks.label)(&dims),
        dtype,
        bytes,
        flops,
        prepare: Box::new(move |device, seed| {
            let mut draw = |spec: &InputSpec, rng: &mut Rng| match spec.fill {
                Fill::Uniform(lo, hi) => device_input(device, spec.dtype, &spec.shape, rng, lo, hi),
                _ => Array::from_f64(spec.dtype, &spec.shape, &spec.draw(rng)),
            };
            let inputs = OpInputs::drawn(hooks, dtype, &dims, shape.params, device, &mut Rng::new(seed), &mut draw)?;
            let tolerance = inputs.tolerance();
            let (run_inputs, dims) = (inputs.clone(), dims.clone());
            Ok(Prepared {
                run: Box::new(move || run_inputs.run(entry)),
                error: Box::new(move |outs| {
                    let outs = outs.iter().map(host_input).collect::<kiln::Result<Vec<_>>>()?;
                    op_runs::error(entry, &dims, &inputs.host()?, &inputs.params, &outs, hooks.check)
                }),
                tolerance,
            })
        }),
    }
}

/// An op's benchmark case as `kiln bench --list-json` prints it, for peers (`bench/peers.py`) to
/// build the same case: the registry's op name, the case name, sizes and dtype, and kiln's count
/// of its bytes and FLOPs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ListedCase {
    /// `case/shape/dtype`, as in reports.
    pub id: String,
    /// The op's name in the registry (`kiln::ops::<op>`).
    pub op: &'static str,
    /// The case's name in reports.
    pub case: &'static str,
    /// The sizes, as the op's table entry's `dims` describes them.
    pub dims: &'static [usize],
    /// The dtype's name.
    pub dtype: &'static str,
    /// The fewest bytes the op must move.
    pub bytes: f64,
    /// The fewest floating-point operations the op must do.
    pub flops: f64,
}

/// Every op's benchmark case, in report order.
pub fn listed() -> Vec<ListedCase> {
    let mut v = Vec::new();
    for &op in op_table::ops() {
        for shape in op.hooks.bench {
            let c = case(op, shape);
            let (id, bytes, flops) = (c.id(), c.bytes, c.flops);
            v.push(ListedCase {
                id,
                op: op.entry.name,
                case: shape.case,
                dims: shape.dims,
                dtype: shape.dtype.name(),
                bytes,
                flops,
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use crate::op_table::{self, BenchShape};

    #[test]
    fn every_bench_shape_builds_a_case() {
        for &op in op_table::ops() {
            for shape in op.hooks.bench {
                let case = super::case(op, shape);
                assert!(case.op == shape.case && case.dtype == shape.dtype, "{}", case.id());
                assert!(case.bytes > 0.0 && case.flops > 0.0, "{}", case.id());
            }
        }
        let shapes = op_table::ops().iter().map(|op| op.hooks.bench.len()).sum::<usize>();
        assert_eq!(super::all().len(), shapes + 4, "the ops' cases and the docs grid_sample kernels");
        assert_eq!(super::listed().len(), shapes);
    }

    /// Each bench shape, at small sizes (a demo's sizes and parameters, or 4099 elements),
    /// prepared, run and checked on the CPU through the generic path, including the part of the
    /// problem its entry checks; a wrong output (its first element off by 1e6) fails the check.
    #[test]
    fn every_bench_case_runs_and_checks_at_small_sizes_on_the_cpu() {
        let device = kiln::Device::Cpu;
        for &op in op_table::ops() {
            for shape in op.hooks.bench {
                // The demo of this op or of one whose sizes mean the same.
                let dims = op.hooks.dims;
                let demo = op_table::ops().iter().filter(|o| o.hooks.dims == dims).find_map(|o| o.hooks.demo);
                let small = match demo {
                    Some(demo) => BenchShape { dims: demo.dims, params: demo.params, ..*shape },
                    None if dims == op_table::UNARY_DIMS => BenchShape { dims: &[4099], ..*shape },
                    None => panic!("{}: no small sizes to test at", op.entry.name),
                };
                let case = super::case_at(op, Box::leak(Box::new(small)), small.dims);
                let mut prepared = (case.prepare)(device, 11).unwrap_or_else(|e| panic!("{}: {e}", case.id()));
                let outs: Vec<kiln::Array> = (prepared.run)().unwrap().iter().map(|a| a.to_host().unwrap()).collect();
                let error = (prepared.error)(&outs).unwrap();
                assert!(error <= prepared.tolerance, "{}: error {error:.2e}", case.id());
                let mut wrong = outs[0].to_f64_vec().unwrap();
                wrong[0] += 1e6;
                let wrong = kiln::Array::from_f64(outs[0].dtype(), outs[0].shape(), &wrong).unwrap();
                let mut outs = outs;
                outs[0] = wrong;
                let error = (prepared.error)(&outs).unwrap();
                assert!(error > prepared.tolerance, "{}: a wrong output passed ({error:.2e})", case.id());
            }
        }
    }
}
