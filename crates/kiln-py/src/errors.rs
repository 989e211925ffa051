//! kiln's errors as Python exceptions: one class per `kiln::Error` kind, all under
//! `kiln.KilnError` (the classes live in `kiln/errors.py`, so they can be caught, documented
//! and subclassed like any Python exception).

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
    let message = e.to_string();
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
