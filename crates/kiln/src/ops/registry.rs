//! The list of ops: one entry per op of the library, with its plan and the shapes the demo and
//! the benchmark run it at. The demo, `kiln bench` (and `bench/peers.py` through `kiln bench
//! --list-json`), the criterion benches and the Python bindings read this list instead of typing
//! their own. Each entry names the op's inputs and scalar parameters and holds the function that
//! plans the op's work on them ([`OpEntry::plan`]); the op is also `kiln::ops::<name>` and its
//! reference `kiln::ops::<module>::reference`.

use super::attention::{scaled_dot_product_attention_plan, Mask};
use super::cholesky::cholesky_plan;
use super::elementwise::{unary_call, Unary};
use super::gdn_kkt::gdn_chunk_scaled_dot_kkt_call;
use super::grid_sample::{grid_sample_call, grid_sample_vjp_plan};
use super::overlap_add::overlap_add_call;
use super::plan::OpPlan;
use super::qr::qr_plan;
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
    /// The plan of the op's work on `inputs` and `params`: validated, not run.
    pub plan: fn(&[Array], &[f64]) -> Result<OpPlan>,
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
}

const fn demo(label: &'static str, dtype: DType, dims: &'static [usize]) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims })
}

const fn case(case: &'static str, dtype: DType, dims: &'static [usize]) -> BenchShape {
    BenchShape { case, dtype, dims }
}

use DType::{BF16, F16, F32};

/// Elements of the elementwise benchmark cases (64 M).
const N: usize = 64 << 20;
/// Rows of the row-wise benchmark cases.
const ROWS: usize = 16384;

const UNARY_DIMS: &str = "elements";
const ROW_DIMS: &str = "rows, D";

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
        plan: |a, _| Ok(unary_call(Unary::Exp, arg("exp", a, 0)?)?.into()),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("exp", F32, &[N]), case("exp", F16, &[N]), case("exp", BF16, &[N])],
    },
    OpEntry {
        name: "silu",
        python: "silu",
        inputs: &["x"],
        params: &[],
        plan: |a, _| Ok(unary_call(Unary::Silu, arg("silu", a, 0)?)?.into()),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("silu", F32, &[N]), case("silu", F16, &[N]), case("silu", BF16, &[N])],
    },
    OpEntry {
        name: "gelu",
        python: "gelu_approx",
        inputs: &["x"],
        params: &[],
        plan: |a, _| Ok(unary_call(Unary::Gelu, arg("gelu", a, 0)?)?.into()),
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("gelu_tanh", F32, &[N]), case("gelu_tanh", F16, &[N]), case("gelu_tanh", BF16, &[N])],
    },
    OpEntry {
        name: "gelu_erf",
        python: "gelu",
        inputs: &["x"],
        params: &[],
        plan: |a, _| Ok(unary_call(Unary::GeluErf, arg("gelu_erf", a, 0)?)?.into()),
        dims: "rows, columns",
        demo: demo("ops::gelu_erf", F32, &[7, 333]),
        bench: &[],
    },
    OpEntry {
        name: "rms_norm",
        python: "rms_norm",
        inputs: &["x", "weight"],
        params: &["eps"],
        plan: |a, p| {
            let op = "rms_norm";
            Ok(rms_norm_call(arg(op, a, 0)?, arg(op, a, 1)?, param(op, p, 0)? as f32)?.into())
        },
        dims: "batch..., D (the last is the row length)",
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
        plan: |a, p| {
            let op = "residual_rms_norm";
            let (x, r, w) = (arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?);
            Ok(residual_rms_norm_call(x, r, w, param(op, p, 0)? as f32)?.into())
        },
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
        plan: |a, _| Ok(softmax_call(arg("softmax", a, 0)?)?.into()),
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
        plan: |a, p| {
            let op = "rope";
            let x = arg(op, a, 0)?;
            let (dims, traditional) = (count(op, param(op, p, 0)?)?, param(op, p, 1)? != 0.0);
            let (base, scale, offset) = (param(op, p, 2)? as f32, param(op, p, 3)? as f32, param(op, p, 4)? as i32);
            Ok(rope_call(x, dims, traditional, base, scale, offset)?.into())
        },
        dims: "batch, heads, L, D",
        demo: demo("ops::rope", F32, &[2, 3, 37, 64]),
        bench: &[case("rope", BF16, &[32, 32, 1024, 128])],
    },
    OpEntry {
        name: "scaled_dot_product_attention",
        python: "scaled_dot_product_attention",
        inputs: &["q", "k", "v", "mask?"],
        params: &["scale", "causal"],
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
        dims: "B, query heads, key/value heads, Tq, Tk, D",
        demo: demo("ops::attention (causal, GQA)", F32, &[1, 4, 2, 19, 23, 32]),
        bench: &[
            case("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention_decode", BF16, &[32, 32, 32, 1, 8192, 128]),
        ],
    },
    OpEntry {
        name: "scatter_add",
        python: "scatter_add",
        inputs: &["values", "indices"],
        params: &["bins"],
        plan: |a, p| {
            let op = "scatter_add";
            scatter_add_plan(arg(op, a, 0)?, arg(op, a, 1)?, count(op, param(op, p, 0)?)?)
        },
        dims: "values, values per index, bins",
        demo: demo("ops::scatter_add", F32, &[1000, 3, 37]),
        bench: &[case("scatter_add", F32, &[N, 1, 32768])],
    },
    OpEntry {
        name: "overlap_add",
        python: "overlap_add",
        inputs: &["frames"],
        params: &["hop"],
        plan: |a, p| {
            Ok(overlap_add_call(arg("overlap_add", a, 0)?, count("overlap_add", param("overlap_add", p, 0)?)?)?.into())
        },
        dims: "batch, frames, frame length, hop",
        demo: demo("ops::overlap_add", F32, &[2, 13, 100, 37]),
        bench: &[],
    },
    OpEntry {
        name: "grid_sample",
        python: "grid_sample",
        inputs: &["x", "grid"],
        params: &[],
        plan: |a, _| Ok(grid_sample_call(arg("grid_sample", a, 0)?, arg("grid_sample", a, 1)?)?.into()),
        dims: "B, H, W, C, grid H, grid W",
        demo: None,
        bench: &[case("grid_sample", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "grid_sample_vjp",
        python: "grid_sample_vjp",
        inputs: &["x", "grid", "cotangent"],
        params: &[],
        plan: |a, _| {
            let op = "grid_sample_vjp";
            grid_sample_vjp_plan(arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?)
        },
        dims: "B, H, W, C, grid H, grid W",
        demo: demo("ops::grid_sample_vjp", F32, &[2, 9, 13, 40, 6, 5]),
        bench: &[case("grid_sample_vjp", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "cholesky",
        python: "cholesky",
        inputs: &["a"],
        params: &[],
        plan: |a, _| cholesky_plan(arg("cholesky", a, 0)?),
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
        plan: |a, _| qr_plan(arg("qr", a, 0)?),
        dims: "batch, M, N",
        demo: demo("ops::qr", F32, &[2, 37, 21]),
        bench: &[case("qr", F32, &[8192, 64, 64]), case("qr", F32, &[16, 1024, 1024])],
    },
    OpEntry {
        name: "gdn_chunk_scaled_dot_kkt",
        python: "gdn_chunk_scaled_dot_kkt",
        inputs: &["k", "beta", "g"],
        params: &["chunk"],
        plan: |a, p| {
            let op = "gdn_chunk_scaled_dot_kkt";
            let (k, beta, g) = (arg(op, a, 0)?, arg(op, a, 1)?, arg(op, a, 2)?);
            Ok(gdn_chunk_scaled_dot_kkt_call(k, beta, g, count(op, param(op, p, 0)?)?)?.into())
        },
        dims: "B, T, key heads, heads, K",
        demo: demo("ops::gdn_chunk_scaled_dot_kkt", BF16, &[1, 150, 2, 4, 64]),
        bench: &[case("gdn_kkt", BF16, &[8, 4096, 16, 32, 128])],
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
    fn a_plan_given_too_few_inputs_or_parameters_is_an_error_naming_the_op() {
        for e in super::registry() {
            match (e.plan)(&[], &[]) {
                Err(err) => assert!(err.to_string().contains(e.name), "{}: {err}", e.name),
                Ok(plan) => panic!("{}: planned {} without inputs", e.name, plan.variant()),
            }
        }
    }
}
