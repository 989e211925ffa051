//! The list of ops: one entry per op of the library, the one place an op is named. Each entry
//! names the op's inputs, scalar parameters and outputs and holds the function that plans the
//! op's work on them ([`OpEntry::plan`]) and its f64 reference over host values
//! ([`OpEntry::reference`], reading the sizes from the inputs' shapes and calling
//! `kiln::ops::<module>::reference`). The Python bindings plan any op through its entry; the
//! command line's tools (`kiln-tools`) run, check and time any op through it, with their own
//! table of the sizes to run it at, keyed by the entry's name.

use super as ops;
use super::attention::{scaled_dot_product_attention_plan, Mask};
use super::cholesky::cholesky_plan;
use super::elementwise::{unary_call, Unary};
use super::gdn_kkt::gdn_chunk_scaled_dot_kkt_call;
use super::grid_sample::{grid_sample_call, grid_sample_vjp_plan};
use super::host_input::{dtype, last, number, round_to, shape, sizes, values, HostInput};
use super::overlap_add::overlap_add_call;
use super::plan::OpPlan;
use super::qr::qr_plan;
use super::residual_rms_norm::residual_rms_norm_call;
use super::rms_norm::rms_norm_call;
use super::rope::rope_call;
use super::scatter_add::scatter_add_plan;
use super::softmax::softmax_call;
use crate::array::Array;
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
}

/// Every op of the library, in the order the tools list them (the demo's and the benchmark's).
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
        reference: |x, _| vec![ops::elementwise::reference(Unary::Exp, values(x, 0))],
    },
    OpEntry {
        name: "silu",
        python: "silu",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::Silu, arg("silu", a, 0)?)?.into()),
        reference: |x, _| vec![ops::elementwise::reference(Unary::Silu, values(x, 0))],
    },
    OpEntry {
        name: "gelu",
        python: "gelu_approx",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::Gelu, arg("gelu", a, 0)?)?.into()),
        reference: |x, _| vec![ops::elementwise::reference(Unary::Gelu, values(x, 0))],
    },
    OpEntry {
        name: "gelu_erf",
        python: "gelu",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(unary_call(Unary::GeluErf, arg("gelu_erf", a, 0)?)?.into()),
        reference: |x, _| vec![ops::elementwise::reference(Unary::GeluErf, values(x, 0))],
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
        reference: |x, p| {
            let eps = number(p, 0) as f32 as f64;
            vec![ops::rms_norm::reference(values(x, 0), values(x, 1), last(shape(x, 0)), eps)]
        },
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
        reference: |x, p| {
            // The norm is of the sum rounded to the dtype, as the op documents.
            let (eps, d) = (number(p, 0) as f32 as f64, last(shape(x, 0)));
            let (_, h) = ops::residual_rms_norm::reference(values(x, 0), values(x, 1), values(x, 2), d, eps);
            let h: Vec<f64> = h.into_iter().map(|v| round_to(dtype(x, 0), v)).collect();
            vec![ops::rms_norm::reference(&h, values(x, 2), d, eps), h]
        },
    },
    OpEntry {
        name: "softmax",
        python: "softmax",
        inputs: &["x"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(softmax_call(arg("softmax", a, 0)?)?.into()),
        reference: |x, _| vec![ops::softmax::reference(values(x, 0), last(shape(x, 0)))],
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
        reference: |x, p| {
            let [_, _, l, d] = sizes(shape(x, 0));
            let (dims, traditional) = (number(p, 0) as usize, number(p, 1) != 0.0);
            let (base, scale) = (number(p, 2) as f32 as f64, number(p, 3) as f32 as f64);
            vec![ops::rope::reference(values(x, 0), l, d, dims, traditional, base, scale, number(p, 4) as i32)]
        },
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
        reference: |x, p| {
            let [b, hq, tq, d] = sizes(shape(x, 0));
            let [_, hkv, tk, _] = sizes(shape(x, 1));
            let (scale, causal) = (number(p, 0) as f32 as f64, number(p, 1) != 0.0);
            let mask = x.get(3).map(|m| m.values.as_slice());
            let (q, k, v) = (values(x, 0), values(x, 1), values(x, 2));
            vec![ops::attention::reference(q, k, v, [b, hq, hkv, tq, tk, d], scale, causal, mask)]
        },
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
        reference: |x, p| {
            let m = shape(x, 0).iter().skip(1).product::<usize>();
            let indices: Vec<i64> = values(x, 1).iter().map(|&i| i as i64).collect();
            vec![ops::scatter_add::reference(values(x, 0), &indices, m, number(p, 0) as usize)]
        },
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
        reference: |x, p| {
            let [_, frames, len] = sizes(shape(x, 0));
            vec![ops::overlap_add::reference(values(x, 0), frames, len, number(p, 0) as usize)]
        },
    },
    OpEntry {
        name: "grid_sample",
        python: "grid_sample",
        inputs: &["x", "grid"],
        params: &[],
        outputs: &["out"],
        plan: |a, _| Ok(grid_sample_call(arg("grid_sample", a, 0)?, arg("grid_sample", a, 1)?)?.into()),
        reference: |x, _| vec![ops::grid_sample::reference(values(x, 0), values(x, 1), grid_dims(x))],
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
        reference: |x, _| {
            let (xg, gg) = ops::grid_sample::reference_vjp(values(x, 0), values(x, 1), values(x, 2), grid_dims(x));
            vec![xg, gg]
        },
    },
    OpEntry {
        name: "cholesky",
        python: "cholesky",
        inputs: &["a"],
        params: &[],
        outputs: &["L"],
        plan: |a, _| cholesky_plan(arg("cholesky", a, 0)?),
        reference: |x, _| {
            // A matrix the reference finds not positive definite gives NaN, which never passes.
            let n = last(shape(x, 0));
            let one = |m: &[f64]| ops::cholesky::reference(m, n).unwrap_or_else(|| vec![f64::NAN; n * n]);
            vec![values(x, 0).chunks(n * n).flat_map(one).collect()]
        },
    },
    OpEntry {
        name: "qr",
        python: "qr",
        inputs: &["a"],
        params: &[],
        outputs: &["Q", "R"],
        plan: |a, _| qr_plan(arg("qr", a, 0)?),
        reference: |x, _| {
            let [_, m, n] = sizes(shape(x, 0));
            let (mut want_q, mut want_r) = (Vec::new(), Vec::new());
            for mat in values(x, 0).chunks((m * n).max(1)) {
                let (q, r) = ops::qr::reference(mat, m, n);
                want_q.extend(q);
                want_r.extend(r);
            }
            vec![want_q, want_r]
        },
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
        reference: |x, _| {
            let [b, t, hg, k] = sizes(shape(x, 0));
            let dims = [b, t, hg, last(shape(x, 1)), k];
            vec![ops::gdn_kkt::reference(values(x, 0), values(x, 1), values(x, 2), dims, dtype(x, 0))]
        },
    },
];

/// `[B, H, W, C, gH, gW]` of grid_sample's `x` (B, H, W, C) and `grid` (B, gH, gW, 2).
fn grid_dims(inputs: &[HostInput]) -> [usize; 6] {
    let [b, h, w, c] = sizes(shape(inputs, 0));
    let [_, gh, gw, _] = sizes(shape(inputs, 1));
    [b, h, w, c, gh, gw]
}

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
    fn rust_and_python_names_are_unique() {
        let entries = super::registry();
        for (i, e) in entries.iter().enumerate() {
            assert!(entries[..i].iter().all(|o| o.name != e.name), "{} listed twice", e.name);
            assert!(entries[..i].iter().all(|o| o.python != e.python), "{} listed twice", e.python);
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
