//! `kiln.ops`: the kernel library on arrays of the caller's framework. Ops that are one kernel
//! call (`OpPlan`) run wherever their inputs live: on a CUDA tensor's device they are queued on
//! the caller's stream into outputs the caller allocated, like `metal_kernel`. Ops of several
//! launches run on host arrays (the CPU emulator); on CUDA tensors they are refused, since they
//! launch on kiln's own stream, which a caller's stream would not be ordered with.

use kiln::ops;
use kiln::{Array, Device};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::arrays;
use crate::convert;
use crate::errors::to_py;
use crate::kernel::{external_stream, run_interruptible};

fn host(op: &str, desc: &Bound<'_, PyTuple>) -> PyResult<Array> {
    let a = convert::array(desc)?;
    if a.device() != Device::Cpu {
        return Err(to_py(kiln::Error::invalid(
            op,
            format!("kiln.ops runs on host arrays; this input lives on {}", a.device()),
        )));
    }
    Ok(a)
}

fn run(py: Python<'_>, f: impl FnOnce() -> kiln::Result<Vec<Array>> + Send) -> PyResult<Vec<Py<PyAny>>> {
    let outputs = run_interruptible(py, false, None, f)?;
    arrays::wrap(py, outputs)
}

/// One validated op call, ready to run on its inputs' device.
#[pyclass(module = "kiln._kiln", frozen)]
pub struct OpPlan {
    call: ops::OpCall,
}

#[pymethods]
impl OpPlan {
    /// `(shape, dtype, init_value)` of every output, for a caller that allocates them.
    fn outputs(&self) -> Vec<(Vec<usize>, &'static str, Option<f64>)> {
        let spec = self.call.spec();
        spec.output_shapes
            .iter()
            .zip(&spec.output_dtypes)
            .map(|(s, d)| (s.to_vec(), d.name(), spec.init_value))
            .collect()
    }

    /// The kernel variant the op's rule picked.
    #[getter]
    fn variant(&self) -> &str {
        self.call.variant()
    }

    /// Runs the call: on a caller's `stream` into `outputs_into` (then returns `None`), or into
    /// fresh outputs kiln allocates.
    #[pyo3(signature = (stream, outputs_into))]
    fn run(
        &self,
        py: Python<'_>,
        stream: Option<(usize, usize)>,
        outputs_into: Option<&Bound<'_, PyList>>,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let mut call = self.call.clone();
        call.spec_mut().stream = external_stream(stream);
        let given = outputs_into.is_some();
        if let Some(outs) = outputs_into {
            let outs: Vec<Array> =
                outs.iter().map(|o| convert::array(o.cast::<PyTuple>()?)).collect::<PyResult<_>>()?;
            call.spec_mut().outputs_into = Some(outs);
        }
        let outputs = run_interruptible(py, false, None, || call.run())?;
        if given {
            return Ok(None);
        }
        arrays::wrap(py, outputs).map(Some)
    }
}

fn plan(call: kiln::Result<ops::OpCall>) -> PyResult<OpPlan> {
    call.map(|call| OpPlan { call }).map_err(to_py)
}

/// `kiln.ops.<unary>(x)`: exp, silu, gelu (tanh approximation), gelu_erf.
#[pyfunction]
pub fn plan_unary(name: &str, x: &Bound<'_, PyTuple>) -> PyResult<OpPlan> {
    let op = match name {
        "exp" => ops::Unary::Exp,
        "silu" => ops::Unary::Silu,
        "gelu" => ops::Unary::Gelu,
        "gelu_erf" => ops::Unary::GeluErf,
        other => return Err(to_py(kiln::Error::invalid("kiln.ops", format!("no unary op {other:?}")))),
    };
    plan(ops::unary_call(op, &convert::array(x)?))
}

#[pyfunction]
pub fn plan_rms_norm(x: &Bound<'_, PyTuple>, w: &Bound<'_, PyTuple>, eps: f32) -> PyResult<OpPlan> {
    plan(ops::rms_norm_call(&convert::array(x)?, &convert::array(w)?, eps))
}

#[pyfunction]
pub fn plan_residual_rms_norm(
    x: &Bound<'_, PyTuple>,
    residual: &Bound<'_, PyTuple>,
    w: &Bound<'_, PyTuple>,
    eps: f32,
) -> PyResult<OpPlan> {
    let (x, r, w) = (convert::array(x)?, convert::array(residual)?, convert::array(w)?);
    plan(ops::residual_rms_norm_call(&x, &r, &w, eps))
}

#[pyfunction]
pub fn plan_softmax(x: &Bound<'_, PyTuple>) -> PyResult<OpPlan> {
    plan(ops::softmax_call(&convert::array(x)?))
}

#[pyfunction]
pub fn plan_rope(
    x: &Bound<'_, PyTuple>,
    dims: usize,
    traditional: bool,
    base: f32,
    scale: f32,
    offset: i32,
) -> PyResult<OpPlan> {
    plan(ops::rope_call(&convert::array(x)?, dims, traditional, base, scale, offset))
}

#[pyfunction]
pub fn plan_overlap_add(frames: &Bound<'_, PyTuple>, hop: usize) -> PyResult<OpPlan> {
    plan(ops::overlap_add_call(&convert::array(frames)?, hop))
}

#[pyfunction]
pub fn plan_scatter_add(values: &Bound<'_, PyTuple>, indices: &Bound<'_, PyTuple>, bins: usize) -> PyResult<OpPlan> {
    plan(ops::scatter_add_call(&convert::array(values)?, &convert::array(indices)?, bins))
}

#[pyfunction]
#[pyo3(signature = (q, k, v, scale, mask_kind, mask))]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    q: &Bound<'_, PyTuple>,
    k: &Bound<'_, PyTuple>,
    v: &Bound<'_, PyTuple>,
    scale: f32,
    mask_kind: &str,
    mask: Option<&Bound<'_, PyTuple>>,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "scaled_dot_product_attention";
    let (q, k, v) = (host(op, q)?, host(op, k)?, host(op, v)?);
    let mask_array = mask.map(|m| host(op, m)).transpose()?;
    run(py, || {
        let mask = match (mask_kind, &mask_array) {
            ("causal", _) => ops::Mask::Causal,
            ("array", Some(m)) => ops::Mask::Additive(m),
            _ => ops::Mask::None,
        };
        Ok(vec![ops::scaled_dot_product_attention(&q, &k, &v, scale, mask)?])
    })
}

#[pyfunction]
pub fn grid_sample(py: Python<'_>, x: &Bound<'_, PyTuple>, grid: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let (x, g) = (host("grid_sample", x)?, host("grid_sample", grid)?);
    run(py, || Ok(vec![ops::grid_sample(&x, &g)?]))
}

#[pyfunction]
pub fn grid_sample_vjp(
    py: Python<'_>,
    x: &Bound<'_, PyTuple>,
    grid: &Bound<'_, PyTuple>,
    cotangent: &Bound<'_, PyTuple>,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "grid_sample_vjp";
    let (x, g, c) = (host(op, x)?, host(op, grid)?, host(op, cotangent)?);
    run(py, || {
        let (dx, dg) = ops::grid_sample_vjp(&x, &g, &c)?;
        Ok(vec![dx, dg])
    })
}

#[pyfunction]
pub fn cholesky(py: Python<'_>, a: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("cholesky", a)?;
    run(py, || Ok(vec![ops::cholesky(&a)?]))
}

#[pyfunction]
pub fn qr(py: Python<'_>, a: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("qr", a)?;
    run(py, || {
        let (q, r) = ops::qr(&a)?;
        Ok(vec![q, r])
    })
}

#[pyfunction]
pub fn gdn_chunk_scaled_dot_kkt(
    py: Python<'_>,
    k: &Bound<'_, PyTuple>,
    beta: &Bound<'_, PyTuple>,
    g: &Bound<'_, PyTuple>,
    chunk: usize,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "gdn_chunk_scaled_dot_kkt";
    let (k, b, g) = (host(op, k)?, host(op, beta)?, host(op, g)?);
    run(py, || Ok(vec![ops::gdn_chunk_scaled_dot_kkt(&k, &b, &g, chunk)?]))
}

/// Adds every op to the module.
/// `(name in kiln::ops, name in kiln.ops)` of every op of the library's registry, in its order;
/// the Python tests check `kiln.ops` offers each.
#[pyfunction]
pub fn op_registry() -> Vec<(&'static str, &'static str)> {
    ops::registry().iter().map(|op| (op.name, op.python)).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OpPlan>()?;
    m.add_function(wrap_pyfunction!(op_registry, m)?)?;
    m.add_function(wrap_pyfunction!(plan_unary, m)?)?;
    m.add_function(wrap_pyfunction!(plan_rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(plan_residual_rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(plan_softmax, m)?)?;
    m.add_function(wrap_pyfunction!(plan_rope, m)?)?;
    m.add_function(wrap_pyfunction!(plan_overlap_add, m)?)?;
    m.add_function(wrap_pyfunction!(plan_scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(cholesky, m)?)?;
    m.add_function(wrap_pyfunction!(qr, m)?)?;
    m.add_function(wrap_pyfunction!(gdn_chunk_scaled_dot_kkt, m)?)?;
    Ok(())
}
