//! `kiln.ops`: the kernel library on arrays of the caller's framework. An op's kernel calls
//! (`OpPlan`) run wherever their inputs live: on a CUDA tensor's device every call is queued on
//! the caller's stream and the op's outputs are written into arrays the caller allocated
//! (wherever the plan's calls make them), like `metal_kernel`
//! (intermediate buffers are kiln's, ordered with that stream by the backend). One binding,
//! `plan_op`, plans any op of the registry (`kiln::ops::registry`) on `LentArray`s or PyTorch
//! tensors, read here; on CUDA tensors `OpPlan::run_torch` allocates the outputs with PyTorch
//! and runs the calls in one step.

use kiln::ops;
use kiln::Array;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrays;
use crate::convert::external_stream;
use crate::errors::to_py;
use crate::kernel::run_interruptible;
use crate::lent;
use crate::torch_call;

/// One validated op: its kernel calls, ready to run on its inputs' device.
#[pyclass(module = "kiln._kiln", frozen)]
pub struct OpPlan {
    plan: ops::OpPlan,
}

#[pymethods]
impl OpPlan {
    /// The kernel variant the op's rule picked (the kernels' names joined by `+`).
    #[getter]
    fn variant(&self) -> String {
        self.plan.variant()
    }

    /// Runs the calls on the inputs' device into fresh outputs kiln allocates (host arrays,
    /// or kiln's device arrays).
    fn run(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let plan = &self.plan;
        let outputs = run_interruptible(py, "kiln.ops", false, None, || plan.run())?;
        arrays::wrap(py, outputs)
    }

    /// Runs the op on PyTorch CUDA tensors like `lead` (the op's first input): outputs
    /// allocated by PyTorch on `lead`'s device, every call queued on PyTorch's current stream
    /// there, under a device guard where another device is current.
    fn run_torch<'py>(&self, py: Python<'py>, lead: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let ordinal: i64 = lead.call_method0(pyo3::intern!(py, "get_device"))?.extract()?;
        let Ok(ordinal) = usize::try_from(ordinal) else {
            return Err(to_py(kiln::Error::invalid("kiln.ops", "run_torch takes a CUDA tensor")));
        };
        let Some(torch) = torch_call::torch(py) else {
            return Err(to_py(kiln::Error::invalid("kiln.ops", "CUDA tensors need PyTorch")));
        };
        let specs = self.plan.output_specs().map_err(to_py)?;
        let device = lead.getattr(pyo3::intern!(py, "device"))?;
        let wanted = specs.iter().map(|s| (s.shape.as_slice(), s.dtype, s.init_value));
        let (outputs, arrays) = torch.outputs("kiln.ops", &device, ordinal, wanted)?;
        let mut plan = self.plan.clone();
        if let Some(stream) = external_stream(Some((torch.current_stream(py, ordinal)?, ordinal))) {
            plan = plan.on_stream(stream);
        }
        torch.on_device(py, ordinal, || run_interruptible(py, "kiln.ops", false, None, || plan.run_into(arrays)))?;
        Ok(outputs)
    }
}

/// The plan of the op the registry names `name` in `kiln.ops` (`kiln::ops::registry`: the one
/// place an op is named) on `arrays` (`LentArray`s or PyTorch tensors, in the entry's input
/// order) and `params` (its scalar parameters, flags as 0 or 1): validated, not run; it runs
/// wherever its inputs live.
#[pyfunction]
pub fn plan_op(name: &str, arrays: &Bound<'_, PyList>, params: Vec<f64>) -> PyResult<OpPlan> {
    let Some(entry) = ops::registry().iter().find(|e| e.python == name) else {
        return Err(to_py(kiln::Error::invalid("kiln.ops", format!("no op named {name:?}"))));
    };
    let arrays: Vec<Array> = arrays.iter().map(|a| lent::read(&a)).collect::<PyResult<_>>()?;
    (entry.plan)(&arrays, &params).map(|plan| OpPlan { plan }).map_err(to_py)
}

/// The VJP kernel alone of `grid_sample_vjp` on CUDA tensors: float32 `(x_grad, grid_grad)`,
/// zeroed first; the casts to the inputs' dtypes that the whole plan ends with are left to the
/// caller's framework, on its stream.
#[pyfunction]
pub fn plan_grid_sample_vjp_kernel(
    x: &Bound<'_, PyAny>,
    grid: &Bound<'_, PyAny>,
    cotangent: &Bound<'_, PyAny>,
) -> PyResult<OpPlan> {
    let (x, g, c) = (lent::read(x)?, lent::read(grid)?, lent::read(cotangent)?);
    let vjp = ops::grid_sample_vjp_plan(&x, &g, &c).map_err(to_py)?.calls().first().cloned();
    let vjp = vjp.ok_or_else(|| to_py(kiln::Error::invalid("grid_sample_vjp", "the plan has no calls")))?;
    Ok(OpPlan { plan: vjp.into() })
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
    m.add_function(wrap_pyfunction!(plan_op, m)?)?;
    m.add_function(wrap_pyfunction!(plan_grid_sample_vjp_kernel, m)?)?;
    Ok(())
}
