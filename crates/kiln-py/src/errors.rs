//! kiln's errors as Python exceptions: one class per `kiln::Error` kind, all under
//! `kiln.KilnError` (the classes live in `kiln/errors.py`, so they can be caught, documented
//! and subclassed like any Python exception).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::prelude::*;

/// The Python exception for `e`, of the class in `kiln.errors` that names its kind.
pub fn to_py(e: kiln::Error) -> PyErr {
    use kiln::Error as E;
    let class = match &e {
        E::InvalidArgument { .. } => "InvalidArgumentError",
        E::ShapeMismatch { .. } => "ShapeMismatchError",
        E::UnsupportedDType { .. } => "UnsupportedDTypeError",
        E::Compile { .. } => "CompileError",
        E::BackendUnavailable { .. } => "BackendUnavailableError",
        E::Driver { .. } => "DriverError",
        E::Timeout { .. } => "TimeoutError",
        E::Interrupted { .. } => return PyKeyboardInterrupt::new_err(e.to_string()),
        E::KernelFault { .. } => "KernelFaultError",
        E::Spec { .. } => "SpecError",
        E::Npy { .. } | E::Io { .. } => "KilnIOError",
    };
    let mut message = e.to_string();
    if matches!(e, E::Compile { .. }) {
        message = message.replace(kiln::source::user_lines::GENERATED_SOURCE_HINT, PYTHON_SOURCE_HINT);
    }
    raise(class, message)
}

/// Where a Python user reads the whole generated unit of a kernel that failed to compile.
const PYTHON_SOURCE_HINT: &str = "(the generated source: `kernel.translate(inputs=..., output_shapes=..., \
output_dtypes=..., target=\"cpu\")` or `target=\"cuda\"`; for a library, `library.translate(function, target=\"cpu\")`)";

/// An instance of the `kiln.errors` class `class` with `message`.
fn raise(class: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("kiln.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|cls| cls.call1((message.clone(),)))
            .map(|obj| PyErr::from_value(obj));
        made.unwrap_or_else(|_| PyRuntimeError::new_err(message))
    })
}

/// `kiln::Result` into `PyResult`.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for kiln::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}

/// `kiln.InternalError` for a panic caught in the work of `op`: a bug in kiln, reported as an
/// exception instead of crossing into Python.
pub fn internal(op: &str, payload: &(dyn Any + Send)) -> PyErr {
    raise(
        "InternalError",
        format!(
            "[{op}] internal error in kiln: {}; the interpreter is unaffected, please report it",
            panic_text(payload)
        ),
    )
}

/// Runs `f`, a panic in it coming back as `kiln.InternalError` naming `op`.
pub fn no_panic<T>(op: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| Err(internal(op, payload.as_ref())))
}

/// Runs kiln's `f` with the GIL released, a panic in it coming back as `kiln.InternalError`.
pub fn detached<T: Send>(py: Python<'_>, op: &str, f: impl FnOnce() -> kiln::Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(result) => result.py_err(),
        Err(payload) => Err(internal(op, payload.as_ref())),
    }
}
