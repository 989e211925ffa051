//! `kiln._kiln.Library` (behind `kiln.metal_library`): a whole `.metal` file, its dispatches
//! (arguments per `[[buffer(n)]]` slot, function constants, the geometry) and its checked runs.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use kiln::backend::{ConstantKey, ConstantValue, Dispatch};
use kiln::{Device, LibraryArg, LibraryLaunch, MetalLibrary};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyTuple};

use crate::arrays;
use crate::convert;
use crate::convert::external_stream;
use crate::errors::{detached, no_panic, IntoPy};
use crate::kernel::{math_mode, parse_device, run_interruptible, time_limit, translate_target};

/// A whole `.metal` file (`kiln.metal_library`).
#[pyclass(module = "kiln._kiln", frozen)]
pub struct Library {
    library: MetalLibrary,
}

#[pymethods]
impl Library {
    #[new]
    /// `file_dir`: where the source's own quoted `#include`s are looked up first (the file's
    /// directory, for `kiln.metal_library_file`); `defines`: macros for the whole source.
    #[pyo3(signature = (name, source, math_mode_name, include_dirs=Vec::new(), defines=Vec::new(), file_dir=None))]
    fn new(
        name: &str,
        source: &str,
        math_mode_name: &str,
        include_dirs: Vec<String>,
        defines: Vec<(String, String)>,
        file_dir: Option<String>,
    ) -> PyResult<Self> {
        let mut library = MetalLibrary::new(name, source)
            .math_mode(math_mode(math_mode_name)?)
            .include_dirs(include_dirs)
            .defines(defines);
        if let Some(dir) = file_dir {
            library = library.file_dir(dir);
        }
        Ok(Library { library })
    }

    /// Dispatches `function`. `buffers` holds, per slot: an array descriptor (bound in place),
    /// `bytes` (constant data) or `("output", shape, dtype, init_value)` (a fresh output).
    /// Returns the fresh outputs in slot order.
    #[pyo3(signature = (function, buffers, dispatch, size, threadgroup, threadgroup_memory, constants, device, stream, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &self,
        py: Python<'_>,
        function: &str,
        buffers: &Bound<'_, PyList>,
        dispatch: &str,
        size: (u32, u32, u32),
        threadgroup: (u32, u32, u32),
        threadgroup_memory: Vec<usize>,
        constants: &Bound<'_, PyList>,
        device: Option<&str>,
        stream: Option<(usize, usize)>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let op = format!("metal_library {}:{function}", self.library.name());
        let explicit = parse_device(&op, device)?;
        let mut args = library_args(buffers)?;
        let device = explicit
            .or_else(|| {
                args.iter().find_map(|a| match a {
                    LibraryArg::Array(a) => Some(a.device()),
                    _ => None,
                })
            })
            .unwrap_or(Device::Cpu);
        for arg in args.iter_mut() {
            if let LibraryArg::Array(a) = arg {
                if a.device() != device && a.device() == Device::Cpu {
                    let moved = py.detach(|| a.to_device(device)).py_err()?;
                    *a = moved;
                }
            }
        }
        let mut launch = library_launch(function, dispatch, size, threadgroup, threadgroup_memory, constants)?;
        launch.stream = external_stream(stream);
        launch.timeout = time_limit(&op, timeout)?;
        let on_cpu = device == Device::Cpu;
        let cancel = Arc::new(AtomicBool::new(false));
        if on_cpu {
            launch.cancel = Some(cancel.clone());
        }
        let library = &self.library;
        let outputs = run_interruptible(py, &op, on_cpu, Some(&cancel), || library.dispatch(device, &args, &launch))?;
        arrays::wrap(py, outputs)
    }

    /// The source `function` (with these function constants) runs as on `target` ("metal", "cpu"
    /// or "cuda"), without running.
    fn translate(&self, function: &str, constants: &Bound<'_, PyList>, target: &str) -> PyResult<String> {
        let op = format!("metal_library {}:{function}", self.library.name());
        let target = translate_target(&op, target)?;
        let launch = library_launch(function, "threads", (1, 1, 1), (1, 1, 1), Vec::new(), constants)?;
        no_panic(&op, || kiln::backend::translate(&self.library.program(&launch), target).py_err())
    }

    /// The `[[buffer(n)]]` slots `function` may write (non-`const` `device` pointers and
    /// references) with these function constants, as `(slot, parameter name)` pairs.
    fn writable_slots(&self, function: &str, constants: &Bound<'_, PyList>) -> PyResult<Vec<(u32, String)>> {
        let launch = library_launch(function, "threads", (1, 1, 1), (1, 1, 1), Vec::new(), constants)?;
        let op = format!("metal_library {}:{function}", self.library.name());
        no_panic(&op, || self.library.writable_buffers(&launch).py_err())
    }

    /// Runs `function` (arguments as `dispatch` takes them, host arrays only) on the CPU
    /// emulator under the sanitizer and returns its findings as a JSON array (the format of
    /// `kiln check --json`).
    #[pyo3(signature = (function, buffers, dispatch, size, threadgroup, threadgroup_memory, constants))]
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        py: Python<'_>,
        function: &str,
        buffers: &Bound<'_, PyList>,
        dispatch: &str,
        size: (u32, u32, u32),
        threadgroup: (u32, u32, u32),
        threadgroup_memory: Vec<usize>,
        constants: &Bound<'_, PyList>,
    ) -> PyResult<String> {
        let args = library_args(buffers)?;
        let launch = library_launch(function, dispatch, size, threadgroup, threadgroup_memory, constants)?;
        let library = &self.library;
        let op = format!("metal_library {}:{function}", library.name());
        let (result, found) =
            detached(py, &op, || Ok(kiln::sanitize::check(|| library.dispatch(Device::Cpu, &args, &launch))))?;
        result.py_err()?;
        Ok(kiln::sanitize::to_json(&found).to_string())
    }
}

/// The launch of `function` that `Library.dispatch` and `Library.check` describe.
fn library_launch(
    function: &str,
    dispatch: &str,
    size: (u32, u32, u32),
    threadgroup: (u32, u32, u32),
    threadgroup_memory: Vec<usize>,
    constants: &Bound<'_, PyList>,
) -> PyResult<LibraryLaunch> {
    let size = [size.0, size.1, size.2];
    let dispatch = match dispatch {
        "threads" => Dispatch::Threads(size),
        "threadgroups" => Dispatch::Threadgroups(size),
        other => return Err(PyValueError::new_err(format!("unknown dispatch {other:?}"))),
    };
    let mut launch = LibraryLaunch::new(function, dispatch, [threadgroup.0, threadgroup.1, threadgroup.2]);
    launch.threadgroup_memory = threadgroup_memory;
    for item in constants.iter() {
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let key = match key.extract::<u32>() {
            Ok(i) => ConstantKey::Index(i),
            Err(_) => ConstantKey::Name(key.extract()?),
        };
        let value = if let Ok(b) = value.cast::<PyBool>() {
            ConstantValue::Bool(b.is_true())
        } else if value.is_instance_of::<PyInt>() {
            ConstantValue::Int(value.extract()?)
        } else {
            ConstantValue::Float(value.extract()?)
        };
        launch.constants.push((key, value));
    }
    Ok(launch)
}

/// The arguments of a dispatch, slot by slot (`library_arg`).
fn library_args(buffers: &Bound<'_, PyList>) -> PyResult<Vec<LibraryArg>> {
    buffers.iter().map(|item| library_arg(&item)).collect()
}

fn library_arg(item: &Bound<'_, PyAny>) -> PyResult<LibraryArg> {
    if let Ok(b) = item.cast::<PyBytes>() {
        return Ok(LibraryArg::Bytes(b.as_bytes().to_vec()));
    }
    let Ok(t) = item.cast::<PyTuple>() else { return Ok(LibraryArg::Array(crate::lent::read(item)?)) };
    if t.len() == 2 && t.get_item(0)?.extract::<String>().is_ok_and(|s| s == "inplace") {
        return Ok(LibraryArg::InPlace(crate::lent::read(&t.get_item(1)?)?));
    }
    if t.len() == 4 && t.get_item(0)?.extract::<String>().is_ok_and(|s| s == "output") {
        let shape: Vec<usize> = t.get_item(1)?.extract()?;
        let dtype = convert::dtype(&t.get_item(2)?.extract::<String>()?)?;
        let init_value: Option<f64> = t.get_item(3)?.extract()?;
        return Ok(LibraryArg::Output { shape, dtype, init_value });
    }
    Err(PyTypeError::new_err("a buffer is an array, bytes or kiln.Output"))
}
