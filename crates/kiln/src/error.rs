//! The one error type of the library. Every variant names the kernel, op or file it concerns
//! first, so a message read out of context still says where it came from.

use std::path::PathBuf;

/// Result alias used throughout kiln.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in kiln.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kernel or op was called with arguments it cannot accept.
    #[error("[{op}] {msg}")]
    InvalidArgument { op: String, msg: String },

    /// An input has the wrong shape.
    #[error("[{op}] shape mismatch: {msg}")]
    ShapeMismatch { op: String, msg: String },

    /// A dtype the kernel or op does not support.
    #[error("[{op}] unsupported dtype {dtype}: {msg}")]
    UnsupportedDType { op: String, dtype: String, msg: String },

    /// Translating or compiling a kernel failed; `log` is the compiler's log mapped onto the
    /// user's own source where possible.
    #[error("[{kernel}] {backend} compilation failed:\n{log}")]
    Compile { backend: &'static str, kernel: String, log: String },

    /// A backend cannot run here (not compiled in, no driver, no device, no compiler).
    #[error("{backend} backend unavailable: {reason}")]
    BackendUnavailable { backend: &'static str, reason: String },

    /// A device driver call failed.
    #[error("[{kernel}] {backend} driver error: {msg}")]
    Driver { backend: &'static str, kernel: String, msg: String },

    /// A kernel ran past its time limit and was stopped.
    #[error("[{kernel}] stopped after exceeding its time limit of {seconds:.3} s")]
    Timeout { kernel: String, seconds: f64 },

    /// A kernel was stopped by its caller's cancel flag (Ctrl-C in Python) before it finished.
    #[error("[{kernel}] interrupted")]
    Interrupted { kernel: String },

    /// A kernel faulted while running (emulator checks, device exceptions).
    #[error("[{kernel}] fault while running: {msg}")]
    KernelFault { kernel: String, msg: String },

    /// A kernel spec file is malformed; `key` is the dotted path of the offending entry.
    #[error("{}: {key}: {msg}", file.display())]
    Spec { file: PathBuf, key: String, msg: String },

    /// A `.npy` file could not be read or written.
    #[error("{}: {msg}", path.display())]
    Npy { path: PathBuf, msg: String },

    /// An I/O error on a named path.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op: op.into(), msg: msg.into() }
    }

    /// Shorthand for [`Error::ShapeMismatch`].
    pub fn shape(op: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::ShapeMismatch { op: op.into(), msg: msg.into() }
    }

    /// Shorthand for [`Error::UnsupportedDType`].
    pub fn dtype(op: impl Into<String>, dtype: crate::dtype::DType, msg: impl Into<String>) -> Self {
        Error::UnsupportedDType { op: op.into(), dtype: dtype.name().to_string(), msg: msg.into() }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
