//! `MetalLibrary`: a whole `.metal` file (mlx-native style) whose kernel functions take
//! `[[buffer(n)]]`, `[[threadgroup(n)]]` and builtin parameters directly. Buffers are bound in
//! slot order; dispatch is by thread count or by threadgroup count.

use std::time::Duration;

use super::launch::MathMode;
use crate::array::{byte_size, Array};
use crate::backend::{
    self, Binding, ConstantKey, ConstantValue, Dispatch, Launch, MetalProgram, OutputSpec, ProgramKind,
};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// A full Metal source file.
#[derive(Clone, Debug)]
pub struct MetalLibrary {
    name: String,
    source: String,
    math_mode: MathMode,
}

/// What is bound to one buffer slot of a library function.
#[derive(Clone, Debug)]
pub enum LibraryArg {
    /// An input array (bound with its own layout; the function indexes it as it wants).
    Array(Array),
    /// Small constant data: a parameter struct, a table of values.
    Bytes(Vec<u8>),
    /// A fresh row-contiguous output, optionally filled first.
    Output { shape: Vec<usize>, dtype: DType, init_value: Option<f64> },
}

/// How one function of a library is dispatched.
#[derive(Clone, Debug)]
pub struct LibraryLaunch {
    pub function: String,
    pub dispatch: Dispatch,
    pub threadgroup: [u32; 3],
    /// Bytes for `[[threadgroup(0)]]`, `[[threadgroup(1)]]`, ...
    pub threadgroup_memory: Vec<usize>,
    pub constants: Vec<(ConstantKey, ConstantValue)>,
    pub timeout: Option<Duration>,
}

impl LibraryLaunch {
    /// Dispatches `function` over `dispatch` with groups of `threadgroup` threads.
    pub fn new(function: impl Into<String>, dispatch: Dispatch, threadgroup: [u32; 3]) -> Self {
        LibraryLaunch {
            function: function.into(),
            dispatch,
            threadgroup,
            threadgroup_memory: Vec::new(),
            constants: Vec::new(),
            timeout: None,
        }
    }
}

impl MetalLibrary {
    /// A library from MSL text; `name` labels errors.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Self {
        MetalLibrary { name: name.into(), source: source.into(), math_mode: MathMode::Safe }
    }

    /// The compiler's math mode (default safe).
    pub fn math_mode(mut self, mode: MathMode) -> Self {
        self.math_mode = mode;
        self
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The program a backend compiles for `launch`.
    pub fn program(&self, launch: &LibraryLaunch) -> MetalProgram {
        MetalProgram {
            kernel: format!("{}:{}", self.name, launch.function),
            source: self.source.clone(),
            kind: ProgramKind::FullFile,
            function: launch.function.clone(),
            math_mode: self.math_mode,
            constants: launch.constants.clone(),
        }
    }

    /// Runs one function on `device`; returns the outputs in slot order.
    pub fn dispatch(&self, device: Device, args: &[LibraryArg], launch: &LibraryLaunch) -> Result<Vec<Array>> {
        let op = format!("metal_library {}:{}", self.name, launch.function);
        let [x, y, z] = launch.threadgroup;
        if x == 0 || y == 0 || z == 0 {
            return Err(Error::invalid(op, format!("threadgroup {:?} has a zero dimension", launch.threadgroup)));
        }
        let total = x as u64 * y as u64 * z as u64;
        if total > super::MAX_THREADS_PER_THREADGROUP {
            return Err(Error::invalid(
                op,
                format!(
                    "thread group size ({total}) is greater than the maximum allowed threads per threadgroup ({})",
                    super::MAX_THREADS_PER_THREADGROUP
                ),
            ));
        }
        if args.len() > super::MAX_BUFFERS {
            return Err(Error::invalid(
                op,
                format!("{} buffers bound; Metal allows at most {}", args.len(), super::MAX_BUFFERS),
            ));
        }
        let backend = backend::backend_for(device)?;
        let mut bindings = Vec::with_capacity(args.len());
        for (slot, arg) in args.iter().enumerate() {
            bindings.push(match arg {
                LibraryArg::Array(a) => {
                    if a.device() != device {
                        return Err(Error::invalid(
                            op,
                            format!("buffer {slot} lives on {} but the kernel runs on {device}; move it with Array::to_device", a.device()),
                        ));
                    }
                    Binding::Array(a.clone())
                }
                LibraryArg::Bytes(b) => Binding::Bytes(b.as_slice().into()),
                LibraryArg::Output { shape, dtype, init_value } => {
                    byte_size(&op, &format!("output buffer {slot}"), shape, *dtype)?;
                    Binding::Output(OutputSpec { shape: shape.as_slice().into(), dtype: *dtype, init_value: *init_value })
                }
            });
        }
        let program = self.program(launch);
        backend.launch(&Launch {
            program: &program,
            bindings,
            dispatch: launch.dispatch,
            threadgroup: launch.threadgroup,
            threadgroup_memory: launch.threadgroup_memory.clone(),
            timeout: launch.timeout,
            resolved: None,
        })
    }
}
