//! What one kernel call needs besides its inputs: output shapes and dtypes, grid and threadgroup,
//! template arguments, `init_value`, the device and options.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::array::{byte_size, Array, Shape};
use crate::backend::ExternalStream;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Error;
use crate::source::mangle::TemplateArg;
pub use crate::source::mangle::TemplateName;

use super::dim3::Dim3;

/// A kernel input: an array, or a scalar converted with MLX's rules (bool → bool, integer →
/// int32, or int64 outside the int32 range, float → float32).
///
/// The rules hold whatever the Rust type of the number; for a scalar of another dtype pass a
/// 0-d array (`Array::scalar(7u32)`).
///
/// ```
/// use kiln::{Array, KernelInput};
/// let inputs: Vec<KernelInput> = vec![Array::scalar(1.5f32).into(), 3usize.into(), true.into(), 0.25.into()];
/// assert!(matches!(inputs[1], KernelInput::Int(3)));
/// ```
#[derive(Clone, Debug)]
pub enum KernelInput {
    /// An array, bound with its own dtype, shape and strides.
    Array(Array),
    /// A `bool` 0-d input.
    Bool(bool),
    /// An integer: an int32 0-d input, or int64 outside the int32 range.
    Int(i64),
    /// A float32 0-d input.
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
impl From<u32> for KernelInput {
    fn from(v: u32) -> Self {
        KernelInput::Int(i64::from(v))
    }
}
impl From<usize> for KernelInput {
    /// An integer by MLX's rule; beyond `i64::MAX` a uint64 0-d array (exact, never wrapped).
    fn from(v: usize) -> Self {
        match i64::try_from(v) {
            Ok(v) => KernelInput::Int(v),
            Err(_) => KernelInput::Array(Array::scalar(v as u64)),
        }
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

/// The launch description of one `MetalKernel` call (MLX's call keywords): outputs, grid and
/// threadgroup, template arguments and options, built with chained methods.
///
/// ```
/// use kiln::{DType, LaunchSpec};
/// let n: usize = 1000;
/// let spec = LaunchSpec::new(n, 256usize)      // n threads (not groups), 256 per group
///     .output(&[n], DType::F32)
///     .template("T", DType::F32)
///     .template("N", n)                        // checked to fit Metal's `int`
///     .init_value(0.0);
/// assert_eq!((spec.grid, spec.threadgroup), ([1000, 1, 1], [256, 1, 1]));
/// ```
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// Output shapes, one per output name (`LaunchSpec::output` adds a shape and a dtype).
    pub output_shapes: OutputShapes,
    /// Output dtypes, one per output name.
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
    /// Caller-allocated outputs, one entry per output name: an array row-contiguous on the
    /// launch device with the output's shape and dtype, which the kernel writes in place and the
    /// call returns (`init_value` does not apply to it: its owner fills it), or `None` for an
    /// output kiln allocates as it would without this field.
    pub outputs_into: Option<Vec<Option<Array>>>,
    /// Errors name MLX's call keywords (`output_shapes`, `inputs`) instead of this type's
    /// methods: for callers that take MLX's keywords (the Python package).
    pub mlx_keywords: bool,
    /// The first argument given out of range while building (a size or template value that
    /// does not fit), reported by the call.
    out_of_range: Option<String>,
}

impl LaunchSpec {
    /// A launch of `grid` threads in groups of `threadgroup`, with no outputs yet. Each is a
    /// [`Dim3`]: `[x, y, z]` or `(x, y, z)` of `u32`, `usize` or integer literals, or one
    /// number for `(n, 1, 1)`; an extent outside `u32` fails the call with an error naming it.
    pub fn new(grid: impl Into<Dim3>, threadgroup: impl Into<Dim3>) -> Self {
        let (grid, threadgroup) = (grid.into(), threadgroup.into());
        let out_of_range = grid.to_u32("grid").and_then(|_| threadgroup.to_u32("threadgroup")).err();
        LaunchSpec {
            output_shapes: OutputShapes::new(),
            output_dtypes: OutputDTypes::new(),
            grid: grid.to_u32("grid").unwrap_or_default(),
            threadgroup: threadgroup.to_u32("threadgroup").unwrap_or_default(),
            template: TemplateArgs::new(),
            init_value: None,
            verbose: false,
            device: None,
            timeout: None,
            cancel: None,
            stream: None,
            outputs_into: None,
            mlx_keywords: false,
            out_of_range,
        }
    }

    /// Adds an output of `shape` and `dtype`.
    pub fn output(mut self, shape: &[usize], dtype: DType) -> Self {
        self.output_shapes.push(Shape::from_slice(shape));
        self.output_dtypes.push(dtype);
        self
    }

    /// Appends a template argument (`name` a `&'static str` or a `String`): a [`DType`] for a
    /// `typename`, a `bool`, or an integer of any Rust type for an `int` (one outside the
    /// `i32` range fails the call with an error naming it).
    pub fn template(mut self, name: impl Into<TemplateName>, arg: impl IntoTemplateArg) -> Self {
        let name = name.into();
        match arg.into_template_arg() {
            Ok(arg) => self.template.push((name, arg)),
            Err(msg) => {
                let msg = format!("template argument {name:?} {msg}");
                self.out_of_range.get_or_insert(msg);
            }
        }
        self
    }

    /// Fills every output with `value` (cast to its dtype) before the kernel runs.
    pub fn init_value(mut self, value: f64) -> Self {
        self.init_value = Some(value);
        self
    }

    /// Prints the generated Metal source as MLX's `verbose=True` does.
    pub fn verbose(mut self, verbose: bool) -> Self {
        self.verbose = verbose;
        self
    }

    /// Runs on `device` (array inputs must live there: move them with `Array::to_device`).
    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }

    /// Errors name MLX's call keywords (see the `mlx_keywords` field).
    pub fn mlx_keywords(mut self, on: bool) -> Self {
        self.mlx_keywords = on;
        self
    }

    /// Stops the kernel after `timeout` (on backends that can interrupt a kernel: the CPU).
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
        self.outputs_into = Some(outputs.into_iter().map(Some).collect());
        self
    }

    /// Writes the outputs given as `Some` into those arrays and allocates the others (see the
    /// `outputs_into` field).
    pub fn outputs_partly_into(mut self, outputs: Vec<Option<Array>>) -> Self {
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

/// Values [`LaunchSpec::template`] takes: a [`DType`], a `bool`, an integer of any Rust type
/// (checked to fit the `int` of Metal's template), or a [`TemplateArg`].
pub trait IntoTemplateArg {
    /// The argument, or why the value does not fit one.
    fn into_template_arg(self) -> Result<TemplateArg, String>;
}

impl IntoTemplateArg for TemplateArg {
    fn into_template_arg(self) -> Result<TemplateArg, String> {
        Ok(self)
    }
}
impl IntoTemplateArg for DType {
    fn into_template_arg(self) -> Result<TemplateArg, String> {
        Ok(TemplateArg::DType(self))
    }
}
impl IntoTemplateArg for bool {
    fn into_template_arg(self) -> Result<TemplateArg, String> {
        Ok(TemplateArg::Bool(self))
    }
}

macro_rules! int_template_arg {
    ($($t:ty),*) => {$(
        impl IntoTemplateArg for $t {
            fn into_template_arg(self) -> Result<TemplateArg, String> {
                i32::try_from(self)
                    .map(TemplateArg::Int)
                    .map_err(|_| format!("= {self} does not fit the 32-bit int of a Metal template argument"))
            }
        }
        impl TryFrom<$t> for TemplateArg {
            type Error = Error;
            /// An `int` argument; a value outside `i32` is an error.
            fn try_from(v: $t) -> Result<Self, Error> {
                v.into_template_arg().map_err(|msg| Error::invalid("template", format!("argument {msg}")))
            }
        }
    )*};
}
int_template_arg!(u32, u64, usize, i64);

impl IntoTemplateArg for i32 {
    fn into_template_arg(self) -> Result<TemplateArg, String> {
        Ok(TemplateArg::Int(self))
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
        if let Some(msg) = &self.out_of_range {
            return Err(Error::invalid(op, msg.clone()));
        }
        let check = |what: &str, want: usize, got: usize| {
            if want == got {
                Ok(())
            } else if self.mlx_keywords {
                Err(Error::invalid(op, format!("Expected `{what}` to have size {want} but got size {got}.")))
            } else {
                Err(Error::invalid(op, rust_count_message(what, want, got)))
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
                // An output kiln allocates has nothing to check.
                let Some(out) = out else { continue };
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

/// A count mismatch in the Rust API's own terms (its methods, not MLX's keywords).
fn rust_count_message(what: &str, want: usize, got: usize) -> String {
    let names = |n: usize, kind: &str| format!("{n} {kind} name{}", if n == 1 { "" } else { "s" });
    match what {
        "inputs" => format!("{got} inputs given for {} (one input per name)", names(want, "input")),
        "output_shapes" => format!(
            "the LaunchSpec describes {got} outputs for {}: add one with LaunchSpec::output(shape, dtype) per output name",
            names(want, "output")
        ),
        "output_dtypes" => format!(
            "LaunchSpec::output_dtypes holds {got} dtypes for {} (LaunchSpec::output adds a shape and a dtype together)",
            names(want, "output")
        ),
        _ => format!("LaunchSpec::{what} holds {got} arrays for {}", names(want, "output")),
    }
}
