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
    InvalidArgument {
        /// The kernel or op (`metal_kernel myexp`, `rms_norm`).
        op: String,
        /// What was wrong.
        msg: String,
    },

    /// An input has the wrong shape.
    #[error("[{op}] shape mismatch: {msg}")]
    ShapeMismatch {
        /// The kernel or op.
        op: String,
        /// Which shape, and what was expected.
        msg: String,
    },

    /// A dtype the kernel or op does not support.
    #[error("[{op}] unsupported dtype {dtype}: {msg}")]
    UnsupportedDType {
        /// The kernel or op.
        op: String,
        /// The dtype's MLX name.
        dtype: String,
        /// What is supported instead.
        msg: String,
    },

    /// Translating or compiling a kernel failed; `log` is the compiler's log mapped onto the
    /// user's own source where possible.
    #[error("[{kernel}] {backend} compilation failed:\n{log}")]
    Compile {
        /// `cpu`, `cuda` or `metal`.
        backend: &'static str,
        /// The kernel's name.
        kernel: String,
        /// The compiler's messages.
        log: String,
    },

    /// A backend cannot run here (not compiled in, no driver, no device, no compiler).
    #[error("{backend} backend unavailable: {reason}")]
    BackendUnavailable {
        /// `cpu`, `cuda` or `metal`.
        backend: &'static str,
        /// What is missing.
        reason: String,
    },

    /// A device driver call failed.
    #[error("[{kernel}] {backend} driver error: {msg}")]
    Driver {
        /// `cuda` or `metal`.
        backend: &'static str,
        /// The kernel (or operation) the call was for.
        kernel: String,
        /// The driver's message.
        msg: String,
    },

    /// A kernel ran past its time limit and was stopped.
    #[error("[{kernel}] stopped after exceeding its time limit of {seconds:.3} s")]
    Timeout {
        /// The kernel's name.
        kernel: String,
        /// The limit it exceeded.
        seconds: f64,
    },

    /// A kernel was stopped by its caller's cancel flag (Ctrl-C in Python) before it finished.
    #[error("[{kernel}] interrupted")]
    Interrupted {
        /// The kernel's name.
        kernel: String,
    },

    /// A kernel faulted while running (emulator checks, device exceptions).
    #[error("[{kernel}] fault while running: {msg}")]
    KernelFault {
        /// The kernel's name.
        kernel: String,
        /// What faulted, and where (thread, buffer).
        msg: String,
    },

    /// A kernel spec file is malformed; `key` is the dotted path of the offending entry.
    #[error("{}: {key}: {msg}", file.display())]
    Spec {
        /// The spec file.
        file: PathBuf,
        /// The dotted key (`call.grid`).
        key: String,
        /// What was wrong.
        msg: String,
    },

    /// A `.npy` file could not be read or written.
    #[error("{}: {msg}", path.display())]
    Npy {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        msg: String,
    },

    /// An I/O error on a named path.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
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
