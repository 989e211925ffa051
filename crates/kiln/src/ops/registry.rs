//! The list of ops: one entry per op of the library, with its plan and the shapes the demo and
//! the benchmark run it at. The demo, `kiln bench` (and `bench/peers.py` through `kiln bench
//! --list-json`), the criterion benches and the Python bindings read this list instead of typing
//! their own. Each entry names the op's inputs, scalar parameters and outputs and holds the
//! function that plans the op's work on them ([`OpEntry::plan`]), its f64 reference over host
//! values (wrapping `kiln::ops::<module>::reference`), the inputs to draw at given sizes, its
//! cost and the part of a large problem a check covers (the hooks are in `registry_setup.rs`),
//! so a tool runs any entry without knowing the op and a new op is one entry here.

use super::attention::{scaled_dot_product_attention_plan, Mask};
use super::cholesky::cholesky_plan;
use super::elementwise::{unary_call, Unary};
use super::gdn_kkt::gdn_chunk_scaled_dot_kkt_call;
use super::grid_sample::{grid_sample_call, grid_sample_vjp_plan};
use super::overlap_add::overlap_add_call;
use super::plan::OpPlan;
use super::qr::qr_plan;
use super::registry_setup::{self as setup, CostFn, HostInput, Sampled, Setup};
use super::residual_rms_norm::residual_rms_norm_call;
use super::rms_norm::rms_norm_call;
use super::rope::rope_call;
use super::scatter_add::scatter_add_plan;
use super::softmax::softmax_call;
use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// One op of the library.
#[derive(Clone, Copy, Debug)]
pub struct OpEntry {
    /// The function's name: `kiln::ops::<name>`.
    pub name: &'static str,
    /// Its name in Python's `kiln.ops`.
    pub python: &'static str,
    /// Its array inputs, in the order [`plan`](Self::plan) takes them (a name ending in `?` may
    /// be left out).
    pub inputs: &'static [&'static str],
    /// Its scalar parameters, in the order `plan` takes them (flags as 0 or 1).
    pub params: &'static [&'static str],
    /// Its outputs, in the order the plan gives them.
    pub outputs: &'static [&'static str],
    /// The plan of the op's work on `inputs` and `params`: validated, not run.
    pub plan: fn(&[Array], &[f64]) -> Result<OpPlan>,
    /// The op's f64 reference: the outputs for the inputs' values and `params`.
    pub reference: fn(&[HostInput], &[f64]) -> Vec<Vec<f64>>,
    /// The inputs of a run in a dtype at sizes (as `dims` describes them) with a shape's
    /// `params`, and the op's parameters for `plan`.
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

const fn demo(label: &'static str, dtype: DType, dims: &'static [usize]) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims, params: &[] })
}

const fn demo_with(
    label: &'static str,
    dtype: DType,
    dims: &'static [usize],
    params: &'static [f64],
) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims, params })
}

const fn case(case: &'static str, dtype: DType, dims: &'static [usize]) -> BenchShape {
    BenchShape { case, dtype, dims, params: &[] }
}

const fn case_with(case: &'static str, dtype: DType, dims: &'static [usize], params: &'static [f64]) -> BenchShape {
    BenchShape { case, dtype, dims, params }
}

use DType::{BF16, F16, F32};

/// Elements of the elementwise benchmark cases (64 M).
const N: usize = 64 << 20;
/// Rows of the row-wise benchmark cases.
const ROWS: usize = 16384;

/// The `dims` of ops over elements.
pub const UNARY_DIMS: &str = "elements";
/// Attention's shape params: causal.
const CAUSAL: &[f64] = &[1.0];
/// Gated delta net's shape params: the chunk length.
const CHUNK_64: &[f64] = &[64.0];
/// The `dims` of ops over rows of the last axis (leading axes all count as rows).
pub const ROW_DIMS: &str = "rows..., D";

/// Every op of the library, in demo order.
pub fn registry() -> &'static [OpEntry] {
    REGISTRY
}

static REGISTRY: &[OpEntry] = &[
    OpEntry {
        name: "exp",
        python: "exp",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::Exp, arg("exp", a, 0)?)?.into()),
        reference: |x, _| setup::unary_reference(Unary::Exp, x),
        setup: setup::unary_setup,
        cost: |dt, d, _| setup::unary_cost(1.0, dt, d),
        label: setup::label,
        check: Some(setup::UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("exp", F32, &[N]), case("exp", F16, &[N]), case("exp", BF16, &[N])],
    },
    OpEntry {
        name: "silu",
        python: "silu",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::Silu, arg("silu", a, 0)?)?.into()),
        reference: |x, _| setup::unary_reference(Unary::Silu, x),
        setup: setup::unary_setup,
        cost: |dt, d, _| setup::unary_cost(4.0, dt, d),
        label: setup::label,
        check: Some(setup::UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("silu", F32, &[N]), case("silu", F16, &[N]), case("silu", BF16, &[N])],
    },
    OpEntry {
        name: "gelu",
        python: "gelu_approx",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::Gelu, arg("gelu", a, 0)?)?.into()),
        reference: |x, _| setup::unary_reference(Unary::Gelu, x),
        setup: setup::unary_setup,
        cost: |dt, d, _| setup::unary_cost(9.0, dt, d),
        label: setup::label,
        check: Some(setup::UNARY_CHECK),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("gelu_tanh", F32, &[N]), case("gelu_tanh", F16, &[N]), case("gelu_tanh", BF16, &[N])],
    },
    OpEntry {
        name: "gelu_erf",
        python: "gelu",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::GeluErf, arg("gelu_erf", a, 0)?)?.into()),
        reference: |x, _| setup::unary_reference(Unary::GeluErf, x),
        setup: setup::unary_setup,
        cost: |dt, d, _| setup::unary_cost(9.0, dt, d),
        label: setup::label,
        check: Some(setup::UNARY_CHECK),
        dims: "rows, columns",
        demo: demo("ops::gelu_erf", F32, &[7, 333]),
        bench: &[],
    },
    OpEntry {
        name: "rms_norm",
        python: "rms_norm",
        inputs: &["x", "weight"],
        params: &["eps"],
        outputs: &["out"],
        plan: |a, p| {
            let op = "rms_norm";
            Ok(rms_norm_call(arg(op, a, 0)?, arg(op, a, 1)?, param(op, p, 0)? as f32)?.into())
        },
        reference: setup::rms_norm_reference,
        setup: setup::rms_norm_setup,
        cost: setup::rms_norm_cost,
        label: setup::label,
        check: Some(setup::RMS_NORM_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::rms_norm", BF16, &[3, 5, 1537]),
        bench: &[
            case("rms_norm", BF16, &[ROWS, 1024]),
            case("rms_norm", BF16, &[ROWS, 4096]),
            case("rms_norm", BF16, &[ROWS, 8192]),
            case("rms_norm", F32, &[ROWS, 1024]),
            case("rms_norm", F32, &[ROWS, 4096]),
            case("rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpEntry {
        name: "residual_rms_norm",
        python: "residual_rms_norm",
        inputs: &["x", "residual", "weight"],
        params: &["eps"],
        outputs: &["y", "h"],
        plan: |a, p| {
            let op = "residual_rms_norm";
            let (x, r, w) = (arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?);
            Ok(residual_rms_norm_call(x, r, w, param(op, p, 0)? as f32)?.into())
        },
        reference: setup::residual_rms_norm_reference,
        setup: setup::residual_rms_norm_setup,
        cost: setup::residual_rms_norm_cost,
        label: setup::label,
        check: Some(setup::RESIDUAL_RMS_NORM_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::residual_rms_norm", F16, &[9, 515]),
        bench: &[
            case("residual_rms_norm", BF16, &[ROWS, 1024]),
            case("residual_rms_norm", BF16, &[ROWS, 4096]),
            case("residual_rms_norm", BF16, &[ROWS, 8192]),
            case("residual_rms_norm", F32, &[ROWS, 1024]),
            case("residual_rms_norm", F32, &[ROWS, 4096]),
            case("residual_rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpEntry {
        name: "softmax",
        python: "softmax",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(softmax_call(arg("softmax", a, 0)?)?.into()),
        reference: setup::softmax_reference,
        setup: setup::softmax_setup,
        cost: setup::softmax_cost,
        label: setup::label,
        check: Some(setup::SOFTMAX_CHECK),
        dims: ROW_DIMS,
        demo: demo("ops::softmax", F32, &[3, 5000]),
        bench: &[
            case("softmax", F32, &[ROWS, 1024]),
            case("softmax", F32, &[ROWS, 4096]),
            case("softmax", F32, &[ROWS, 32768]),
            case("softmax", BF16, &[ROWS, 1024]),
            case("softmax", BF16, &[ROWS, 4096]),
            case("softmax", BF16, &[ROWS, 32768]),
        ],
    },
    OpEntry {
        name: "rope",
        python: "rope",
        inputs: &["x"],
        params: &["dims", "traditional", "base", "scale", "offset"],
        outputs: &["out"],
        plan: |a, p| {
            let op = "rope";
            let x = arg(op, a, 0)?;
            let (dims, traditional) = (count(op, param(op, p, 0)?)?, param(op, p, 1)? != 0.0);
            let (base, scale, offset) = (param(op, p, 2)? as f32, param(op, p, 3)? as f32, param(op, p, 4)? as i32);
            Ok(rope_call(x, dims, traditional, base, scale, offset)?.into())
        },
        reference: setup::rope_reference,
        setup: setup::rope_setup,
        cost: setup::rope_cost,
        label: setup::label,
        check: Some(setup::FIRST_OF_TWO_AXES),
        dims: "batch, heads, L, D",
        demo: demo_with("ops::rope", F32, &[2, 3, 37, 64], &[48.0, 0.0, 1e4, 1.0, 5.0]),
        bench: &[case_with("rope", BF16, &[32, 32, 1024, 128], &[128.0, 0.0, 1e4, 1.0, 0.0])],
    },
    OpEntry {
        name: "scaled_dot_product_attention",
        python: "scaled_dot_product_attention",
        inputs: &["q", "k", "v", "mask?"],
        params: &["scale", "causal"],
        outputs: &["out"],
        plan: |a, p| {
            let op = "scaled_dot_product_attention";
            let (q, k, v) = (arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?);
            let mask = match (a.get(3), param(op, p, 1)? != 0.0) {
                (Some(m), _) => Mask::Additive(m),
                (None, true) => Mask::Causal,
                (None, false) => Mask::None,
            };
            scaled_dot_product_attention_plan(q, k, v, param(op, p, 0)? as f32, mask)
        },
        reference: setup::attention_reference,
        setup: setup::attention_setup,
        cost: setup::attention_cost,
        label: setup::attention_label,
        check: Some(setup::ATTENTION_CHECK),
        dims: "B, query heads, key/value heads, Tq, Tk, D",
        demo: demo_with("ops::attention (causal, GQA)", F32, &[1, 4, 2, 19, 23, 32], CAUSAL),
        bench: &[
            case_with("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 128], CAUSAL),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case_with("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 64], CAUSAL),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention_decode", BF16, &[32, 32, 32, 1, 8192, 128]),
        ],
    },
    OpEntry {
        name: "scatter_add",
        python: "scatter_add",
        inputs: &["values", "indices"],
        params: &["bins"],
        outputs: &["out"],
        plan: |a, p| {
            let op = "scatter_add";
            scatter_add_plan(arg(op, a, 0)?, arg(op, a, 1)?, count(op, param(op, p, 0)?)?)
        },
        reference: setup::scatter_add_reference,
        setup: setup::scatter_add_setup,
        cost: setup::scatter_add_cost,
        label: setup::scatter_add_label,
        check: None,
        dims: "values, values per index, bins",
        demo: demo("ops::scatter_add", F32, &[1000, 3, 37]),
        bench: &[case("scatter_add", F32, &[N, 1, 32768])],
    },
    OpEntry {
        name: "overlap_add",
        python: "overlap_add",
        inputs: &["frames"],
        params: &["hop"],
        outputs: &["out"],
        plan: |a, p| {
            Ok(overlap_add_call(arg("overlap_add", a, 0)?, count("overlap_add", param("overlap_add", p, 0)?)?)?.into())
        },
        reference: setup::overlap_add_reference,
        setup: setup::overlap_add_setup,
        cost: setup::overlap_add_cost,
        label: setup::label,
        check: None,
        dims: "batch, frames, frame length, hop",
        demo: demo("ops::overlap_add", F32, &[2, 13, 100, 37]),
        bench: &[],
    },
    OpEntry {
        name: "grid_sample",
        python: "grid_sample",
        inputs: &["x", "grid"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(grid_sample_call(arg("grid_sample", a, 0)?, arg("grid_sample", a, 1)?)?.into()),
        reference: setup::grid_sample_reference,
        setup: |dt, d, _| setup::grid_sample_setup(false, dt, d),
        cost: |_, d, _| setup::grid_sample_cost(false, d),
        label: setup::grid_sample_label,
        check: Some(setup::GRID_SAMPLE_CHECK),
        dims: "B, H, W, C, grid H, grid W",
        demo: None,
        bench: &[case("grid_sample", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "grid_sample_vjp",
        python: "grid_sample_vjp",
        inputs: &["x", "grid", "cotangent"],
        params: &[],
        outputs: &["x_grad", "grid_grad"],
        plan: |a, _| {
            let op = "grid_sample_vjp";
            grid_sample_vjp_plan(arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?)
        },
        reference: setup::grid_sample_vjp_reference,
        setup: |dt, d, _| setup::grid_sample_setup(true, dt, d),
        cost: |_, d, _| setup::grid_sample_cost(true, d),
        label: setup::grid_sample_label,
        check: Some(setup::GRID_SAMPLE_VJP_CHECK),
        dims: "B, H, W, C, grid H, grid W",
        demo: demo("ops::grid_sample_vjp", F32, &[2, 9, 13, 40, 6, 5]),
        bench: &[case("grid_sample_vjp", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "cholesky",
        python: "cholesky",
        inputs: &["a"],
        params: &[],
        outputs: &["L"],
        plan: |a, _| cholesky_plan(arg("cholesky", a, 0)?),
        reference: setup::cholesky_reference,
        setup: setup::cholesky_setup,
        cost: setup::cholesky_cost,
        label: setup::cholesky_label,
        check: Some(setup::FIRST_MATRIX),
        dims: "batch, N",
        demo: demo("ops::cholesky", F32, &[3, 45]),
        bench: &[
            case("cholesky", F32, &[65536, 16]),
            case("cholesky", F32, &[8192, 64]),
            case("cholesky", F32, &[64, 1024]),
        ],
    },
    OpEntry {
        name: "qr",
        python: "qr",
        inputs: &["a"],
        params: &[],
        outputs: &["Q", "R"],
        plan: |a, _| qr_plan(arg("qr", a, 0)?),
        reference: setup::qr_reference,
        setup: setup::qr_setup,
        cost: setup::qr_cost,
        label: setup::label,
        check: Some(setup::FIRST_MATRIX_QR),
        dims: "batch, M, N",
        demo: demo("ops::qr", F32, &[2, 37, 21]),
        bench: &[case("qr", F32, &[8192, 64, 64]), case("qr", F32, &[16, 1024, 1024])],
    },
    OpEntry {
        name: "gdn_chunk_scaled_dot_kkt",
        python: "gdn_chunk_scaled_dot_kkt",
        inputs: &["k", "beta", "g"],
        params: &["chunk"],
        outputs: &["A"],
        plan: |a, p| {
            let op = "gdn_chunk_scaled_dot_kkt";
            let (k, beta, g) = (arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?);
            Ok(gdn_chunk_scaled_dot_kkt_call(k, beta, g, count(op, param(op, p, 0)?)?)?.into())
        },
        reference: setup::gdn_kkt_reference,
        setup: setup::gdn_kkt_setup,
        cost: setup::gdn_kkt_cost,
        label: setup::gdn_kkt_label,
        check: Some(setup::GDN_KKT_CHECK),
        dims: "B, T, key heads, heads, K",
        demo: demo_with("ops::gdn_chunk_scaled_dot_kkt", BF16, &[1, 150, 2, 4, 64], CHUNK_64),
        bench: &[case_with("gdn_kkt", BF16, &[8, 4096, 16, 32, 128], CHUNK_64)],
    },
];

/// Input `i` of an op's `inputs`, or the error naming the op.
fn arg<'a>(op: &str, inputs: &'a [Array], i: usize) -> Result<&'a Array> {
    inputs
        .get(i)
        .ok_or_else(|| Error::invalid(op, format!("the plan takes at least {} inputs, got {}", i + 1, inputs.len())))
}

/// Parameter `i` of an op's `params`, or the error naming the op.
fn param(op: &str, params: &[f64], i: usize) -> Result<f64> {
    params
        .get(i)
        .copied()
        .ok_or_else(|| Error::invalid(op, format!("the plan takes {} parameters, got {}", i + 1, params.len())))
}

/// A parameter that counts something (a size, a hop, bins).
fn count(op: &str, value: f64) -> Result<usize> {
    if value >= 0.0 && value.fract() == 0.0 && value < usize::MAX as f64 {
        Ok(value as usize)
    } else {
        Err(Error::invalid(op, format!("expected a count, got {value}")))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_every_entry_runs_somewhere() {
        let entries = super::registry();
        for (i, e) in entries.iter().enumerate() {
            assert!(entries[..i].iter().all(|o| o.name != e.name), "{} listed twice", e.name);
            assert!(e.demo.is_some() || !e.bench.is_empty(), "{} is neither demoed nor benchmarked", e.name);
        }
    }

    #[test]
    fn every_checked_part_names_the_rows_of_each_input_and_output() {
        for e in super::registry() {
            if let Some(check) = e.check {
                assert_eq!(check.row_axes.len(), e.inputs.len() + e.outputs.len(), "{}", e.name);
            }
        }
    }

    #[test]
    fn a_plan_given_too_few_inputs_or_parameters_is_an_error_naming_the_op() {
        for e in super::registry() {
            match (e.plan)(&[], &[]) {
                Err(err) => assert!(err.to_string().contains(e.name), "{}: {err}", e.name),
                Ok(plan) => panic!("{}: planned {} without inputs", e.name, plan.variant()),
            }
        }
    }
}
