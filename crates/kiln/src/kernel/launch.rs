//! What one kernel call needs besides its inputs: output shapes and dtypes, grid and threadgroup,
//! template arguments, `init_value`, the device and options.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::array::{byte_size, Array, Shape};
use crate::backend::cuda::ExternalStream;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Error;
use crate::source::mangle::TemplateArg;
pub use crate::source::mangle::TemplateName;

/// A kernel input: an array, or a scalar converted with MLX's rules (bool → bool, integer →
/// int32, or int64 outside the int32 range, float → float32).
#[derive(Clone, Debug)]
pub enum KernelInput {
    Array(Array),
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl KernelInput {
    /// The input as an array: scalars become 0-d host arrays.
    pub fn to_array(&self) -> Array {
        match self {
            KernelInput::Array(a) => a.clone(),
            KernelInput::Bool(b) => Array::scalar(*b),
            KernelInput::Int(v) => match i32::try_from(*v) {
                Ok(v32) => Array::scalar(v32),
                Err(_) => Array::scalar(*v),
            },
            KernelInput::Float(v) => Array::scalar(*v as f32),
        }
    }
}

impl From<Array> for KernelInput {
    fn from(a: Array) -> Self {
        KernelInput::Array(a)
    }
}
impl From<&Array> for KernelInput {
    fn from(a: &Array) -> Self {
        KernelInput::Array(a.clone())
    }
}
impl From<bool> for KernelInput {
    fn from(v: bool) -> Self {
        KernelInput::Bool(v)
    }
}
impl From<i32> for KernelInput {
    fn from(v: i32) -> Self {
        KernelInput::Int(v as i64)
    }
}
impl From<i64> for KernelInput {
    fn from(v: i64) -> Self {
        KernelInput::Int(v)
    }
}
impl From<f32> for KernelInput {
    fn from(v: f32) -> Self {
        KernelInput::Float(v as f64)
    }
}
impl From<f64> for KernelInput {
    fn from(v: f64) -> Self {
        KernelInput::Float(v)
    }
}

/// Ordered template arguments of a call (inline up to four, so that building a spec at every
/// call, as ops do, allocates nothing on the heap).
pub type TemplateArgs = SmallVec<[(TemplateName, TemplateArg); 4]>;
/// Output shapes of a call (inline up to two outputs of up to four axes each).
pub type OutputShapes = SmallVec<[Shape; 2]>;
/// Output dtypes of a call.
pub type OutputDTypes = SmallVec<[DType; 2]>;

/// The launch description of one `MetalKernel` call (MLX's call keywords).
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub output_shapes: OutputShapes,
    pub output_dtypes: OutputDTypes,
    /// Total threads per dimension (not threadgroups).
    pub grid: [u32; 3],
    /// Threads per threadgroup; clamped to the grid per dimension at dispatch.
    pub threadgroup: [u32; 3],
    /// Ordered template arguments.
    pub template: TemplateArgs,
    /// Fill every output with this value (cast to its dtype) before the kernel runs.
    pub init_value: Option<f64>,
    /// Print the generated source as MLX does.
    pub verbose: bool,
    /// Where to run; `None` means the device of the array inputs, else the best available.
    pub device: Option<Device>,
    /// Stop the kernel after this long (backends that can interrupt a kernel honour it).
    pub timeout: Option<Duration>,
    /// Stop the kernel when this flag is set (backends that can interrupt a kernel honour it):
    /// the call fails with `Error::Interrupted`.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Queue a CUDA launch on the caller's stream instead of the backend's own.
    pub stream: Option<ExternalStream>,
    /// Caller-allocated outputs, one per output name, row-contiguous on the launch device with
    /// the output shapes and dtypes: the kernel writes them in place and the call returns them.
    /// `init_value` does not apply to them (their owner fills them).
    pub outputs_into: Option<Vec<Array>>,
}

impl LaunchSpec {
    /// A launch of `grid` threads in groups of `threadgroup`, with no outputs yet.
    pub fn new(grid: [u32; 3], threadgroup: [u32; 3]) -> Self {
        LaunchSpec {
            output_shapes: OutputShapes::new(),
            output_dtypes: OutputDTypes::new(),
            grid,
            threadgroup,
            template: TemplateArgs::new(),
            init_value: None,
            verbose: false,
            device: None,
            timeout: None,
            cancel: None,
            stream: None,
            outputs_into: None,
        }
    }

    /// Adds an output of `shape` and `dtype`.
    pub fn output(mut self, shape: &[usize], dtype: DType) -> Self {
        self.output_shapes.push(Shape::from_slice(shape));
        self.output_dtypes.push(dtype);
        self
    }

    /// Appends a template argument (`name` a `&'static str` or a `String`).
    pub fn template(mut self, name: impl Into<TemplateName>, arg: impl Into<TemplateArg>) -> Self {
        self.template.push((name.into(), arg.into()));
        self
    }

    pub fn init_value(mut self, value: f64) -> Self {
        self.init_value = Some(value);
        self
    }

    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Stops the kernel when `flag` is set (see the `cancel` field).
    pub fn cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// Queues a CUDA launch on `stream` (see the `stream` field).
    pub fn stream(mut self, stream: ExternalStream) -> Self {
        self.stream = Some(stream);
        self
    }

    /// Writes the outputs into `outputs` (see the `outputs_into` field).
    pub fn outputs_into(mut self, outputs: Vec<Array>) -> Self {
        self.outputs_into = Some(outputs);
        self
    }
}

impl From<DType> for TemplateArg {
    fn from(d: DType) -> Self {
        TemplateArg::DType(d)
    }
}
impl From<i32> for TemplateArg {
    fn from(v: i32) -> Self {
        TemplateArg::Int(v)
    }
}
impl From<bool> for TemplateArg {
    fn from(v: bool) -> Self {
        TemplateArg::Bool(v)
    }
}

impl LaunchSpec {
    /// MLX's call-time size checks: one input per input name, one output shape and dtype per
    /// output name; and every output's bytes fit an address space.
    pub(crate) fn check_counts(
        &self,
        op: &str,
        n_input_names: usize,
        n_inputs: usize,
        n_outputs: usize,
    ) -> Result<(), Error> {
        let check = |what: &str, want: usize, got: usize| {
            if want == got {
                Ok(())
            } else {
                Err(Error::invalid(op, format!("Expected `{what}` to have size {want} but got size {got}.")))
            }
        };
        check("inputs", n_input_names, n_inputs)?;
        check("output_shapes", n_outputs, self.output_shapes.len())?;
        check("output_dtypes", n_outputs, self.output_dtypes.len())?;
        for (k, (shape, &dtype)) in self.output_shapes.iter().zip(&self.output_dtypes).enumerate() {
            byte_size(op, format_args!("output {k}"), shape, dtype)?;
        }
        if let Some(outputs) = &self.outputs_into {
            check("outputs_into", n_outputs, outputs.len())?;
            for (k, ((shape, &dtype), out)) in
                self.output_shapes.iter().zip(&self.output_dtypes).zip(outputs).enumerate()
            {
                if out.shape() != shape.as_slice() || out.dtype() != dtype || !out.is_row_contiguous() {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "output {k} given as {out:?}; expected a row-contiguous {dtype} array of shape {shape:?}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
