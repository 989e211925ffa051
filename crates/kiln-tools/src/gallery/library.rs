//! The demo's second half: the kernel library (`kiln::ops`), each op the tools' table demos run
//! once at its demo shape (small, odd sizes) on fresh seeded inputs drawn as its table entry
//! says, planned and run through its registry entry, and checked against the registry entry's
//! f64 reference, so the demo shows the library beside the custom-kernel gallery.

use super::entry::{Demo, Entry, Outcome, Part, Rng};
use crate::op_runs::{host_input, OpInputs};
use crate::op_table::{self, Op};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};

/// Every library op the tools' table demos, in the registry's order.
pub fn entries() -> Vec<Entry> {
    op_table::ops()
        .iter()
        .filter_map(|&op| {
            let shape = op.hooks.demo.as_ref()?;
            let dtypes = std::slice::from_ref(&shape.dtype);
            Some(Entry { name: shape.label, dtypes, demo_dtypes: dtypes, demo: Demo::Op(op) })
        })
        .collect()
}

/// One verified run of `op` at its demo shape: planned, poisoned, run once to compile and warm
/// up, then a second run timed with its outputs copied back.
pub fn demo(op: Op, device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let entry = op.entry;
    let shape = op.hooks.demo.ok_or_else(|| Error::invalid(entry.name, "the tools' table has no demo shape"))?;
    let inputs = OpInputs::on_host(op.hooks, dtype, shape.dims, shape.params, device, &mut Rng::new(seed))?;
    let plan = (entry.plan)(&inputs.arrays, &inputs.params)?.poisoned();
    plan.run()?;
    let start = std::time::Instant::now();
    let outs = plan.run()?.iter().map(|a| a.to_host()).collect::<Result<Vec<_>>>()?;
    let time = start.elapsed();
    let want = (entry.reference)(&inputs.host()?, &inputs.params);
    if want.len() != outs.len() || entry.outputs.len() != outs.len() {
        let msg = format!("{} outputs, the reference gives {}", outs.len(), want.len());
        return Err(Error::invalid(entry.name, msg));
    }
    let parts = entry
        .outputs
        .iter()
        .zip(outs.iter().zip(want))
        .map(|(&name, (out, reference))| Ok(Part { name, output: host_input(out)?.values, reference }))
        .collect::<Result<_>>()?;
    Ok(Outcome { parts, tolerance_dtype: inputs.tolerance_dtype, time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_sets_up_no_more_inputs_than_it_names_and_every_demo_shape_is_a_demo_row() {
        for op in op_table::ops() {
            let (e, h) = (op.entry, op.hooks);
            let Some((dims, params)) =
                h.demo.map(|d| (d.dims, d.params)).or(h.bench.first().map(|b| (b.dims, b.params)))
            else {
                panic!("{} is neither demoed nor benchmarked", e.name);
            };
            let setup = (h.setup)(DType::F32, dims, params);
            assert!(setup.inputs.len() <= e.inputs.len(), "{}: more inputs than it names", e.name);
        }
        let demoed: Vec<&str> = entries().iter().map(|e| e.name).collect();
        let want: Vec<&str> = op_table::ops().iter().filter_map(|op| op.hooks.demo.map(|d| d.label)).collect();
        assert_eq!(demoed, want);
    }

    /// Every demoed entry runs through the generic path on the CPU and matches its reference;
    /// a reference that ignores the op's inputs would not.
    #[test]
    fn every_demoed_entry_runs_planned_and_matches_its_reference_on_the_cpu() {
        for entry in entries() {
            for &dtype in entry.demo_dtypes {
                let outcome = entry.run(Device::Cpu, dtype, 5).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
                assert!(outcome.passed(), "{} ({dtype}): error {:.2e}", entry.name, outcome.error());
                assert!(
                    outcome.parts.iter().all(|p| p.output.iter().any(|v| *v != 0.0)),
                    "{}: zero output",
                    entry.name
                );
            }
        }
    }
}
