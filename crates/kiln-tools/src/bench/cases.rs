//! The benchmark cases: each registry op at the shapes and dtypes of the reference table, with
//! the fewest bytes and FLOPs it needs (the entry's `cost`) and a check against its reference at
//! the benchmark shape (on the part of the problem the entry's `check` names where the full
//! reference would take too long). Every case is built the same way from its registry entry;
//! `bench/peers.py` reads the same list (`kiln bench --list-json`).

use super::inputs::device_input;
use super::{Case, Prepared};
use crate::op_runs::{self, host_input, OpInputs};
use kiln::array::Array;
use kiln::check::Rng;
use kiln::ops::{self, BenchShape, Fill, OpEntry};

/// Every case, in report order: each registry op's benchmark shapes in registry order, then the
/// MLX docs' grid_sample kernels beside the library's.
pub fn all() -> Vec<Case> {
    let mut v: Vec<Case> =
        ops::registry().iter().flat_map(|op| op.bench.iter().map(move |shape| case(op, shape))).collect();
    v.extend(super::docs_cases::docs_grid_sample());
    v
}

/// The case of the registry's op `entry` at `shape`.
pub fn case(entry: &'static OpEntry, shape: &'static BenchShape) -> Case {
    case_at(entry, shape, shape.dims)
}

/// The case of the registry's op `entry` at `shape` with other sizes `dims` (of the same
/// meaning), e.g. smaller ones for the CPU emulator. Uniform inputs are drawn on the device
/// (inputs of hundreds of millions of elements), the others on the host.
pub fn case_at(entry: &'static OpEntry, shape: &'static BenchShape, dims: &[usize]) -> Case {
    let (dtype, dims) = (shape.dtype, dims.to_vec());
    let (bytes, flops) = (entry.cost)(dtype, &dims, shape.params);
    Case {
        op: shape.case,
        shape: (entry.label)(&dims),
        dtype,
        bytes,
        flops,
        prepare: Box::new(move |device, seed| {
            let mut draw = |spec: &ops::InputSpec, rng: &mut Rng| match spec.fill {
                Fill::Uniform(lo, hi) => device_input(device, spec.dtype, &spec.shape, rng, lo, hi),
                _ => Array::from_f64(spec.dtype, &spec.shape, &spec.draw(rng)),
            };
            let inputs = OpInputs::drawn(entry, dtype, &dims, shape.params, device, &mut Rng::new(seed), &mut draw)?;
            let tolerance = inputs.tolerance();
            let (run_inputs, dims) = (inputs.clone(), dims.clone());
            Ok(Prepared {
                run: Box::new(move || run_inputs.run(entry)),
                error: Box::new(move |outs| {
                    let outs = outs.iter().map(host_input).collect::<kiln::Result<Vec<_>>>()?;
                    op_runs::error(entry, &dims, &inputs.host()?, &inputs.params, &outs, entry.check)
                }),
                tolerance,
            })
        }),
    }
}

/// A registry benchmark case as `kiln bench --list-json` prints it, for peers (`bench/peers.py`)
/// to build the same case: the registry's op name, the case name, sizes and dtype, and kiln's
/// count of its bytes and FLOPs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ListedCase {
    /// `case/shape/dtype`, as in reports.
    pub id: String,
    /// The op's name in the registry (`kiln::ops::<op>`).
    pub op: &'static str,
    /// The case's name in reports.
    pub case: &'static str,
    /// The sizes, as the registry entry's `dims` describes them.
    pub dims: &'static [usize],
    /// The dtype's name.
    pub dtype: &'static str,
    /// The fewest bytes the op must move.
    pub bytes: f64,
    /// The fewest floating-point operations the op must do.
    pub flops: f64,
}

/// Every registry benchmark case, in report order.
pub fn listed() -> Vec<ListedCase> {
    let mut v = Vec::new();
    for op in ops::registry() {
        for shape in op.bench {
            let c = case(op, shape);
            let (id, bytes, flops) = (c.id(), c.bytes, c.flops);
            v.push(ListedCase {
                id,
                op: op.name,
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
    use kiln::ops::{self, BenchShape};

    #[test]
    fn every_registry_bench_shape_builds_a_case() {
        for op in ops::registry() {
            for shape in op.bench {
                let case = super::case(op, shape);
                assert!(case.op == shape.case && case.dtype == shape.dtype, "{}", case.id());
                assert!(case.bytes > 0.0 && case.flops > 0.0, "{}", case.id());
            }
        }
        let shapes = ops::registry().iter().map(|e| e.bench.len()).sum::<usize>();
        assert_eq!(super::all().len(), shapes + 4, "the registry's cases and the docs grid_sample kernels");
        assert_eq!(super::listed().len(), shapes);
    }

    /// Each registry bench shape, at small sizes (a demo's sizes and parameters, or 4099
    /// elements), prepared,
    /// run and checked on the CPU through the generic path, including the part of the problem
    /// its entry checks; a wrong output (its first element off by 1e6) fails the check.
    #[test]
    fn every_registry_bench_case_runs_and_checks_at_small_sizes_on_the_cpu() {
        let device = kiln::Device::Cpu;
        for op in ops::registry() {
            for shape in op.bench {
                // The demo of this op or of one whose sizes mean the same.
                let demo = ops::registry().iter().filter(|e| e.dims == op.dims).find_map(|e| e.demo);
                let small = match demo {
                    Some(demo) => BenchShape { dims: demo.dims, params: demo.params, ..*shape },
                    None if op.dims == ops::UNARY_DIMS => BenchShape { dims: &[4099], ..*shape },
                    None => panic!("{}: no small sizes to test at", op.name),
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
