//! The MLX drop-in's call on MLX CPU arrays (MLX's CPU build), read and run here in one step:
//! each MLX array input read in place as NumPy reads it (`np.asarray`, which evaluates it
//! through MLX's buffer export; bfloat16, which NumPy cannot read, through the package's DLPack
//! reader), Python scalars by MLX's rules, the kernel run on the CPU emulator, and each output
//! copied once into a new MLX array (`mx.array` of a NumPy view of kiln's buffer; bfloat16 as
//! its bits, viewed back as `mx.bfloat16`). A call this path does not take (`None`) goes to the
//! drop-in's general path, which reports what is wrong in MLX's words.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use kiln::{DType, Device, KernelInput, MetalKernel};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};

use crate::call_args::{self, Call, Inputs, Keywords};
use crate::torch_call::LaunchKeywords;
use crate::{arrays, convert, lent, numpy_api};

/// MLX's objects a call compares with: `mx.array` and `mx.bfloat16` (an `mx.Dtype`).
pub struct Mlx<'a, 'py> {
    pub array: &'a Bound<'py, PyAny>,
    pub bfloat16: &'a Bound<'py, PyAny>,
}

/// Runs `kernel` on the CPU emulator over MLX CPU arrays and returns its outputs as new MLX
/// arrays, or `None` where the call is the general path's: an input that is neither an MLX
/// array nor a Python scalar or that cannot be read in place (a dtype kiln has not, an array
/// under a transformation that forbids evaluation), an output dtype that is not an `mx.Dtype`,
/// a shape of anything but non-negative ints, an `init_value` (written in place there).
pub fn call<'py>(
    py: Python<'py>,
    kernel: &MetalKernel,
    call: &LaunchKeywords<'_, 'py>,
    mlx: &Mlx<'_, 'py>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    if !call.init_value.is_none() || !outputs_are_plain(call, mlx) {
        return Ok(None);
    }
    let Some(items) = list_or_tuple(call.inputs) else { return Ok(None) };
    let mut values = Vec::with_capacity(items.len());
    for x in &items {
        let value = if x.get_type().is(mlx.array) {
            match read(x, mlx) {
                Some(array) => KernelInput::Array(array),
                None => return Ok(None),
            }
        } else if x.is_exact_instance_of::<PyFloat>()
            || x.is_exact_instance_of::<PyInt>()
            || x.is_exact_instance_of::<PyBool>()
        {
            match convert::scalar(x) {
                Some(Ok(scalar)) => scalar,
                _ => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        values.push(value);
    }
    let keywords = Keywords {
        grid: Some(call.grid),
        threadgroup: Some(call.threadgroup),
        template: Some(call.template),
        ..Keywords::new(call.inputs, call.output_shapes, call.output_dtypes)
    };
    let op = kernel.op();
    let Call { inputs, mut spec, .. } = call_args::parse_with_inputs(op, Inputs::read_elsewhere(values), &keywords)?;
    spec.device = Some(Device::Cpu);
    let cancel = Arc::new(AtomicBool::new(false));
    spec.cancel = Some(cancel.clone());
    let values = inputs.values;
    let outputs = crate::kernel::run_interruptible(py, op, true, Some(&cancel), || kernel.call(&values, &spec))?;
    let out = PyList::empty(py);
    for array in outputs {
        out.append(to_mlx(py, array, mlx)?)?;
    }
    Ok(Some(out))
}

/// Whether every output dtype is an `mx.Dtype` and every output shape a list or tuple of
/// non-negative Python ints, in a list or tuple (what MLX's own call takes; anything else is the
/// general path's to check and report, and an iterator is left unconsumed for it).
fn outputs_are_plain(call: &LaunchKeywords<'_, '_>, mlx: &Mlx<'_, '_>) -> bool {
    let dtype_type = mlx.bfloat16.get_type();
    let dtypes_plain =
        list_or_tuple(call.output_dtypes).is_some_and(|dtypes| dtypes.iter().all(|d| d.get_type().is(&dtype_type)));
    let shapes_plain = list_or_tuple(call.output_shapes).is_some_and(|shapes| {
        shapes.iter().all(|s| {
            list_or_tuple(s).is_some_and(|dims| {
                dims.iter().all(|n| n.is_exact_instance_of::<PyInt>() && n.extract::<u64>().is_ok())
            })
        })
    });
    dtypes_plain && shapes_plain
}

/// The items of a list or a tuple; `None` for anything else, which is left as it was.
fn list_or_tuple<'py>(value: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = value.cast::<PyList>() {
        Some(list.iter().collect())
    } else {
        value.cast::<PyTuple>().ok().map(|tuple| tuple.iter().collect())
    }
}

/// An MLX array's memory in place (evaluated first), or `None` where it cannot be read so.
fn read(x: &Bound<'_, PyAny>, mlx: &Mlx<'_, '_>) -> Option<kiln::Array> {
    let py = x.py();
    match numpy_api::as_array(x) {
        Ok(array) => lent::read(&array).ok(),
        // NumPy has no bfloat16 buffer format (MLX's dtype objects are not singletons: compared).
        Err(_) if x.getattr(intern!(py, "dtype")).ok()?.eq(mlx.bfloat16).ok()? => {
            static DESCRIBE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let describe = DESCRIBE
                .get_or_try_init(py, || py.import("kiln.mlx._dlpack")?.getattr("describe_dlpack").map(Bound::unbind))
                .ok()?;
            let lent = describe.bind(py).call1((x, true)).ok()?;
            lent.cast::<lent::LentArray>().ok().map(|l| l.get().array().clone())
        }
        Err(_) => None,
    }
}

/// A kiln host output as a new MLX array (a copy of it; bfloat16 through its bits).
fn to_mlx<'py>(py: Python<'py>, array: kiln::Array, mlx: &Mlx<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
    if array.dtype() == DType::BF16 {
        let bits = mlx.array.call1((arrays::numpy_view_as(py, array, DType::U16)?,))?;
        return bits.call_method1(intern!(py, "view"), (mlx.bfloat16,));
    }
    mlx.array.call1((arrays::numpy_view(py, array)?,))
}
