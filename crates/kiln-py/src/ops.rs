//! `kiln.ops`: the kernel library on arrays of the caller's framework. An op's kernel calls
//! (`OpPlan`) run wherever their inputs live: on a CUDA tensor's device every call is queued on
//! the caller's stream and the op's outputs are written into arrays the caller allocated
//! (wherever the plan's calls make them), like `metal_kernel`
//! (intermediate buffers are kiln's, ordered with that stream by the backend). The plan
//! functions take a `LentArray` or a PyTorch tensor, read here; on CUDA
//! tensors `OpPlan::run_torch` allocates the outputs with PyTorch and runs the calls in one step.
//! On host arrays the ops of several launches also run whole here (`scaled_dot_product_attention`,
//! ...).

use kiln::array::row_major_strides;
use kiln::ops;
use kiln::{Array, Device};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrays;
use crate::convert::external_stream;
use crate::errors::to_py;
use crate::kernel::run_interruptible;
use crate::lent;
use crate::torch_call;

fn host(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    let a = lent::read(obj)?;
    if a.device() != Device::Cpu {
        return Err(to_py(kiln::Error::invalid(
            op,
            format!("kiln.ops runs on host arrays; this input lives on {}", a.device()),
        )));
    }
    Ok(a)
}

fn run(py: Python<'_>, f: impl FnOnce() -> kiln::Result<Vec<Array>> + Send) -> PyResult<Vec<Py<PyAny>>> {
    let outputs = run_interruptible(py, "kiln.ops", false, None, f)?;
    arrays::wrap(py, outputs)
}

/// `(shape, dtype name, init_value)` of an op's output.
type OutputDesc = (Vec<usize>, &'static str, Option<f64>);

/// One validated op: its kernel calls, ready to run on its inputs' device.
#[pyclass(module = "kiln._kiln", frozen)]
pub struct OpPlan {
    plan: ops::OpPlan,
}

#[pymethods]
impl OpPlan {
    /// `(shape, dtype, init_value)` of every output of the op, for a caller that allocates them.
    fn outputs(&self) -> PyResult<Vec<OutputDesc>> {
        let specs = self.plan.output_specs().map_err(to_py)?;
        Ok(specs.into_iter().map(|s| (s.shape, s.dtype.name(), s.init_value)).collect())
    }

    /// The kernel variant the op's rule picked (the kernels' names joined by `+`).
    #[getter]
    fn variant(&self) -> String {
        self.plan.variant()
    }

    /// Runs the calls: every one on a caller's `stream` and the op's outputs into
    /// `outputs_into` wherever its calls make them (then returns `None`), or into fresh outputs
    /// kiln allocates. Intermediate outputs are kiln's, ordered with the caller's stream by the
    /// backend.
    #[pyo3(signature = (stream, outputs_into))]
    fn run(
        &self,
        py: Python<'_>,
        stream: Option<(usize, usize)>,
        outputs_into: Option<&Bound<'_, PyList>>,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let plan = match external_stream(stream) {
            Some(stream) => self.plan.clone().on_stream(stream),
            None => self.plan.clone(),
        };
        if let Some(outs) = outputs_into {
            let outs: Vec<Array> = outs.iter().map(|o| lent::read(&o)).collect::<PyResult<_>>()?;
            run_interruptible(py, "kiln.ops", false, None, || plan.run_into(outs))?;
            return Ok(None);
        }
        let outputs = run_interruptible(py, "kiln.ops", false, None, || plan.run())?;
        arrays::wrap(py, outputs).map(Some)
    }

    /// Runs the op on PyTorch CUDA tensors like `lead` (the op's first input): outputs
    /// allocated by PyTorch on `lead`'s device, every call queued on PyTorch's current stream
    /// there. `None` (nothing run) where that device's context is not the thread's current one:
    /// the caller then runs it under a device guard.
    fn run_torch(&self, py: Python<'_>, lead: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let ordinal: i64 = lead.call_method0(pyo3::intern!(py, "get_device"))?.extract()?;
        let Ok(ordinal) = usize::try_from(ordinal) else {
            return Err(to_py(kiln::Error::invalid("kiln.ops", "run_torch takes a CUDA tensor")));
        };
        let Some(torch) = torch_call::torch(py) else { return Ok(None) };
        if !matches!(kiln::backend::cuda::is_current_context(ordinal), Ok(true)) {
            return Ok(None);
        }
        let specs = self.plan.output_specs().map_err(to_py)?;
        let device = lead.getattr(pyo3::intern!(py, "device"))?;
        let mut outputs = Vec::with_capacity(specs.len());
        let mut arrays = Vec::with_capacity(specs.len());
        for spec in &specs {
            let Some(dtype) = torch.dtype_object(py, spec.dtype) else {
                return Err(to_py(kiln::Error::dtype("kiln.ops", spec.dtype, "PyTorch has no such dtype")));
            };
            let kwargs = PyDict::new(py);
            kwargs.set_item(pyo3::intern!(py, "dtype"), dtype)?;
            kwargs.set_item(pyo3::intern!(py, "device"), &device)?;
            let strides = row_major_strides(&spec.shape);
            let out = torch.allocate(&spec.shape, &strides, spec.init_value, &kwargs)?;
            arrays.push(torch_call::output_array(&out, &spec.shape, &strides, spec.dtype, ordinal)?);
            outputs.push(out.unbind());
        }
        let mut plan = self.plan.clone();
        if let Some(stream) = external_stream(Some((torch.current_stream(py, ordinal)?, ordinal))) {
            plan = plan.on_stream(stream);
        }
        run_interruptible(py, "kiln.ops", false, None, || plan.run_into(arrays))?;
        Ok(Some(outputs))
    }
}

/// An op's array argument: a `LentArray`, or a PyTorch tensor read here.
fn arg(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    lent::read(obj)
}

fn plan(call: kiln::Result<ops::OpCall>) -> PyResult<OpPlan> {
    call.map(|call| OpPlan { plan: call.into() }).map_err(to_py)
}

/// `kiln.ops.<unary>(x)`: exp, silu, gelu (tanh approximation), gelu_erf.
#[pyfunction]
pub fn plan_unary(name: &str, x: &Bound<'_, PyAny>) -> PyResult<OpPlan> {
    let op = match name {
        "exp" => ops::Unary::Exp,
        "silu" => ops::Unary::Silu,
        "gelu" => ops::Unary::Gelu,
        "gelu_erf" => ops::Unary::GeluErf,
        other => return Err(to_py(kiln::Error::invalid("kiln.ops", format!("no unary op {other:?}")))),
    };
    plan(ops::unary_call(op, &arg(x)?))
}

#[pyfunction]
pub fn plan_rms_norm(x: &Bound<'_, PyAny>, w: &Bound<'_, PyAny>, eps: f32) -> PyResult<OpPlan> {
    plan(ops::rms_norm_call(&arg(x)?, &arg(w)?, eps))
}

#[pyfunction]
pub fn plan_residual_rms_norm(
    x: &Bound<'_, PyAny>,
    residual: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    eps: f32,
) -> PyResult<OpPlan> {
    let (x, r, w) = (arg(x)?, arg(residual)?, arg(w)?);
    plan(ops::residual_rms_norm_call(&x, &r, &w, eps))
}

#[pyfunction]
pub fn plan_softmax(x: &Bound<'_, PyAny>) -> PyResult<OpPlan> {
    plan(ops::softmax_call(&arg(x)?))
}

#[pyfunction]
pub fn plan_rope(
    x: &Bound<'_, PyAny>,
    dims: usize,
    traditional: bool,
    base: f32,
    scale: f32,
    offset: i32,
) -> PyResult<OpPlan> {
    plan(ops::rope_call(&arg(x)?, dims, traditional, base, scale, offset))
}

#[pyfunction]
pub fn plan_overlap_add(frames: &Bound<'_, PyAny>, hop: usize) -> PyResult<OpPlan> {
    plan(ops::overlap_add_call(&arg(frames)?, hop))
}

#[pyfunction]
pub fn plan_scatter_add(values: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, bins: usize) -> PyResult<OpPlan> {
    plan(ops::scatter_add_call(&arg(values)?, &arg(indices)?, bins))
}

fn mask_of<'a>(kind: &str, mask: Option<&'a Array>) -> ops::Mask<'a> {
    match (kind, mask) {
        ("causal", _) => ops::Mask::Causal,
        ("array", Some(m)) => ops::Mask::Additive(m),
        _ => ops::Mask::None,
    }
}

/// The attention's kernel calls, on any device (several launches on some paths).
#[pyfunction]
#[pyo3(signature = (q, k, v, scale, mask_kind, mask))]
pub fn plan_scaled_dot_product_attention(
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    scale: f32,
    mask_kind: &str,
    mask: Option<&Bound<'_, PyAny>>,
) -> PyResult<OpPlan> {
    let (q, k, v) = (arg(q)?, arg(k)?, arg(v)?);
    let mask = mask.map(arg).transpose()?;
    let plan = ops::scaled_dot_product_attention_plan(&q, &k, &v, scale, mask_of(mask_kind, mask.as_ref()));
    plan.map(|plan| OpPlan { plan }).map_err(to_py)
}

#[pyfunction]
pub fn plan_grid_sample(x: &Bound<'_, PyAny>, grid: &Bound<'_, PyAny>) -> PyResult<OpPlan> {
    plan(ops::grid_sample_call(&arg(x)?, &arg(grid)?))
}

/// The VJP's kernel call: float32 `(x_grad, grid_grad)`, zeroed first.
#[pyfunction]
pub fn plan_grid_sample_vjp(
    x: &Bound<'_, PyAny>,
    grid: &Bound<'_, PyAny>,
    cotangent: &Bound<'_, PyAny>,
) -> PyResult<OpPlan> {
    let (x, g, c) = (arg(x)?, arg(grid)?, arg(cotangent)?);
    // The plan's first call is the VJP kernel (float32 gradients); the casts after it are left
    // to the caller's framework.
    let vjp = ops::grid_sample_vjp_plan(&x, &g, &c).map_err(to_py)?.calls().first().cloned();
    let vjp = vjp.ok_or_else(|| to_py(kiln::Error::invalid("grid_sample_vjp", "the plan has no calls")))?;
    Ok(OpPlan { plan: vjp.into() })
}

#[pyfunction]
pub fn plan_gdn_chunk_scaled_dot_kkt(
    k: &Bound<'_, PyAny>,
    beta: &Bound<'_, PyAny>,
    g: &Bound<'_, PyAny>,
    chunk: usize,
) -> PyResult<OpPlan> {
    let (k, b, g) = (arg(k)?, arg(beta)?, arg(g)?);
    plan(ops::gdn_chunk_scaled_dot_kkt_call(&k, &b, &g, chunk))
}

/// The Cholesky's plan (one register kernel up to 64 x 64, else the blocked library
/// dispatches, then the flag reduction): output `L`; a matrix that is not positive definite is
/// the plan's error naming it (its check reads 8 bytes back, a wait).
#[pyfunction]
pub fn plan_cholesky(a: &Bound<'_, PyAny>) -> PyResult<OpPlan> {
    let plan = ops::cholesky_plan(&arg(a)?).map_err(to_py)?;
    Ok(OpPlan { plan })
}

/// The QR's plan (one kernel in threadgroup memory, or the blocked library dispatches):
/// outputs `(q, r)`.
#[pyfunction]
pub fn plan_qr(a: &Bound<'_, PyAny>) -> PyResult<OpPlan> {
    let plan = ops::qr_plan(&arg(a)?).map_err(to_py)?;
    Ok(OpPlan { plan })
}

#[pyfunction]
#[pyo3(signature = (q, k, v, scale, mask_kind, mask))]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    scale: f32,
    mask_kind: &str,
    mask: Option<&Bound<'_, PyAny>>,
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
pub fn grid_sample(py: Python<'_>, x: &Bound<'_, PyAny>, grid: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
    let (x, g) = (host("grid_sample", x)?, host("grid_sample", grid)?);
    run(py, || Ok(vec![ops::grid_sample(&x, &g)?]))
}

#[pyfunction]
pub fn grid_sample_vjp(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    grid: &Bound<'_, PyAny>,
    cotangent: &Bound<'_, PyAny>,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "grid_sample_vjp";
    let (x, g, c) = (host(op, x)?, host(op, grid)?, host(op, cotangent)?);
    run(py, || {
        let (dx, dg) = ops::grid_sample_vjp(&x, &g, &c)?;
        Ok(vec![dx, dg])
    })
}

#[pyfunction]
pub fn cholesky(py: Python<'_>, a: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("cholesky", a)?;
    run(py, || Ok(vec![ops::cholesky(&a)?]))
}

#[pyfunction]
pub fn qr(py: Python<'_>, a: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("qr", a)?;
    run(py, || {
        let (q, r) = ops::qr(&a)?;
        Ok(vec![q, r])
    })
}

#[pyfunction]
pub fn gdn_chunk_scaled_dot_kkt(
    py: Python<'_>,
    k: &Bound<'_, PyAny>,
    beta: &Bound<'_, PyAny>,
    g: &Bound<'_, PyAny>,
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
    m.add_function(wrap_pyfunction!(plan_scaled_dot_product_attention, m)?)?;
    m.add_function(wrap_pyfunction!(plan_grid_sample, m)?)?;
    m.add_function(wrap_pyfunction!(plan_grid_sample_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(plan_gdn_chunk_scaled_dot_kkt, m)?)?;
    m.add_function(wrap_pyfunction!(plan_cholesky, m)?)?;
    m.add_function(wrap_pyfunction!(plan_qr, m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(cholesky, m)?)?;
    m.add_function(wrap_pyfunction!(qr, m)?)?;
    m.add_function(wrap_pyfunction!(gdn_chunk_scaled_dot_kkt, m)?)?;
    Ok(())
}
