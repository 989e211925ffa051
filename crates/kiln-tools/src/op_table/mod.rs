//! The tools' table of the library's ops: for each op of `kiln::ops::registry()`, keyed by its
//! name, what the demo, `kiln bench` (and `bench/peers.py` through `kiln bench --list-json`)
//! and the criterion benches need to run it without knowing it: the inputs to draw at given
//! sizes ([`Setup`]), its cost, its benchmark label, the part of a large problem a check covers
//! ([`Sampled`]), and the shapes the demo and the benchmark run it at (a new op's entry goes in
//! `table.rs`). The library's entry holds the op's plan and reference; [`ops`] pairs each with
//! its entry here, in the registry's order.

mod inputs;
mod table;

pub use inputs::{Fill, InputSpec, Setup};
pub use table::{ROW_DIMS, UNARY_DIMS};

use std::sync::OnceLock;

use kiln::dtype::DType;
use kiln::ops::{registry, OpEntry};
use table::TABLE;

/// What the tools need to run one registry op, beside its registry entry.
#[derive(Clone, Copy, Debug)]
pub struct OpHooks {
    /// The registry op's name ([`OpEntry::name`]).
    pub name: &'static str,
    /// The inputs of a run in a dtype at sizes (as `dims` describes them) with a shape's
    /// `params`, and the op's parameters for its plan.
    pub setup: fn(DType, &[usize], &[f64]) -> Setup,
    /// The fewest bytes it must move and floating-point operations it must do, for a dtype,
    /// sizes and a shape's `params`.
    pub cost: CostFn,
    /// The sizes as benchmark reports write them.
    pub label: fn(&[usize]) -> String,
    /// The part of a benchmark-sized problem checked against the reference (`None`: all of it).
    pub check: Option<Sampled>,
    /// What the `dims` of its demo and benchmark shapes are, in order.
    pub dims: &'static str,
    /// The demo's run, if the demo shows it.
    pub demo: Option<DemoShape>,
    /// The benchmark cases, in report order.
    pub bench: &'static [BenchShape],
}

/// An op's fewest bytes moved and floating-point operations, for a dtype, sizes and a shape's
/// params.
pub type CostFn = fn(DType, &[usize], &[f64]) -> (f64, f64);

/// The part of a large problem a check runs the reference on: some rows, where a row of each
/// input and output is its last `row_axes` axes (`None`: the array is used whole).
#[derive(Clone, Copy, Debug)]
pub struct Sampled {
    /// The rows checked, given the sizes.
    pub rows: fn(&[usize]) -> Vec<usize>,
    /// Per input the registry entry names (optional ones included), then per output: how many
    /// trailing axes form one row.
    pub row_axes: &'static [Option<usize>],
}

/// The demo's run of an op: small odd sizes, checked against the op's f64 reference.
#[derive(Clone, Copy, Debug)]
pub struct DemoShape {
    /// The demo table's label.
    pub label: &'static str,
    /// The dtype it runs in.
    pub dtype: DType,
    /// The sizes, as the entry's `dims` describes them.
    pub dims: &'static [usize],
    /// The op's parameters the sizes do not give (see the entry's `setup`).
    pub params: &'static [f64],
}

/// One benchmark case of an op.
#[derive(Clone, Copy, Debug)]
pub struct BenchShape {
    /// The case's name in reports (with its shape and dtype, the case id `case/shape/dtype`).
    pub case: &'static str,
    /// The dtype it runs in.
    pub dtype: DType,
    /// The sizes, as the entry's `dims` describes them.
    pub dims: &'static [usize],
    /// The op's parameters the sizes do not give (see the entry's `setup`).
    pub params: &'static [f64],
}

/// A registry op with its entry in this table.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// The library's entry: the op's names, plan and reference.
    pub entry: &'static OpEntry,
    /// The tools' entry: its inputs, cost and shapes.
    pub hooks: &'static OpHooks,
}

/// Every registry op that has an entry here (all of them: a test checks it), in the registry's
/// order.
pub fn ops() -> &'static [Op] {
    static OPS: OnceLock<Vec<Op>> = OnceLock::new();
    OPS.get_or_init(|| {
        registry()
            .iter()
            .filter_map(|entry| Some(Op { entry, hooks: TABLE.iter().find(|h| h.name == entry.name)? }))
            .collect()
    })
}

/// The registry op named `name` with its entry here.
pub fn op(name: &str) -> Option<Op> {
    ops().iter().find(|op| op.entry.name == name).copied()
}

#[cfg(test)]
mod tests {
    use super::{ops, registry, TABLE};

    #[test]
    fn every_registry_op_has_exactly_one_entry_and_every_entry_names_a_registry_op() {
        for e in registry() {
            assert_eq!(TABLE.iter().filter(|h| h.name == e.name).count(), 1, "{}", e.name);
        }
        for h in TABLE {
            assert!(registry().iter().any(|e| e.name == h.name), "{} is not a registry op", h.name);
        }
        assert_eq!(ops().len(), registry().len());
    }

    #[test]
    fn every_op_is_demoed_or_benchmarked() {
        for h in TABLE {
            assert!(h.demo.is_some() || !h.bench.is_empty(), "{} is neither demoed nor benchmarked", h.name);
        }
    }

    #[test]
    fn every_checked_part_names_the_rows_of_each_input_and_output() {
        for op in ops() {
            if let Some(check) = op.hooks.check {
                assert_eq!(check.row_axes.len(), op.entry.inputs.len() + op.entry.outputs.len(), "{}", op.entry.name);
            }
        }
    }
}
