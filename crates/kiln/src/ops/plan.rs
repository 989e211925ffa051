//! The one shape of an op's work: an [`OpPlan`], the kernel calls the op's rule picked for given
//! inputs, in order, each an [`OpCall`] (a kernel or a function of a Metal library, its inputs,
//! its launch, and which outputs of earlier calls it reads). A plan can be inspected (its
//! variant, its calls and launches), poisoned (outputs filled with NaN first, for tests) or run.
//! Ops of one kernel call also hand out that [`OpCall`] itself (`*_call`).

use std::sync::Arc;

use crate::array::Array;
use crate::backend::ExternalStream;
use crate::backend::MetalProgram;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};

/// The kernel of one call: the portable Metal kernel or library, or a CUDA one where the op's
/// rule picks a CUDA-only path.
#[derive(Clone, Debug)]
pub enum OpKernel {
    /// A Metal kernel (runs on every backend).
    Metal(&'static MetalKernel),
    /// A CUDA C++ kernel (NVIDIA devices only).
    Cuda(&'static CudaKernel),
    /// A CUDA C++ kernel built for this call (its shared memory depends on the inputs).
    CudaBuilt(Arc<CudaKernel>),
    /// A function of a Metal library (runs on every backend), dispatched as the call says.
    Library(&'static MetalLibrary),
}

impl OpKernel {
    /// The kernel's name: the variant it stands for (a library's name for its functions).
    pub fn name(&self) -> &str {
        match self {
            OpKernel::Metal(k) => k.name(),
            OpKernel::Cuda(k) => k.name(),
            OpKernel::CudaBuilt(k) => k.name(),
            OpKernel::Library(l) => l.name(),
        }
    }
}

/// A library function's dispatch within a call: its launch, its own arguments and the device.
#[derive(Clone, Debug)]
pub(crate) struct LibraryCall {
    launch: LibraryLaunch,
    args: Vec<LibraryArg>,
    device: Device,
}

/// A validated kernel call: the kernel the variant rule picked, its inputs and its launch.
#[derive(Clone, Debug)]
pub struct OpCall {
    pub(crate) kernel: OpKernel,
    pub(crate) inputs: Vec<KernelInput>,
    pub(crate) spec: LaunchSpec,
    /// Library calls: the dispatch (the `spec` is then unused).
    library: Option<LibraryCall>,
    /// Outputs of earlier calls of a plan this call reads, as (call, output); `None`: every
    /// output of the call before it. A kernel reads them after its `inputs`; a library
    /// function as its first buffers, before its own arguments (the arrays it updates in place).
    reads: Option<Vec<(usize, usize)>>,
}

impl OpCall {
    /// A call of the Metal `kernel` on `inputs` with the launch `spec` (the caller has validated
    /// them).
    pub fn new(kernel: &'static MetalKernel, inputs: Vec<KernelInput>, spec: LaunchSpec) -> Self {
        OpCall { kernel: OpKernel::Metal(kernel), inputs, spec, library: None, reads: None }
    }

    /// A call of the CUDA `kernel` on `inputs` with the launch `spec`.
    pub fn cuda(kernel: &'static CudaKernel, inputs: Vec<KernelInput>, spec: LaunchSpec) -> Self {
        OpCall { kernel: OpKernel::Cuda(kernel), inputs, spec, library: None, reads: None }
    }

    /// A call of a CUDA `kernel` built for these inputs.
    pub fn cuda_built(kernel: CudaKernel, inputs: Vec<KernelInput>, spec: LaunchSpec) -> Self {
        OpCall { kernel: OpKernel::CudaBuilt(Arc::new(kernel)), inputs, spec, library: None, reads: None }
    }

    /// A dispatch of `launch` (a function of `library`) on `device` with `args` (after the
    /// outputs of earlier calls it [`reads`](Self::reads)).
    pub fn library(
        library: &'static MetalLibrary,
        launch: LibraryLaunch,
        args: Vec<LibraryArg>,
        device: Device,
    ) -> Self {
        let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).device(device);
        let dispatch = Some(LibraryCall { launch, args, device });
        OpCall { kernel: OpKernel::Library(library), inputs: Vec::new(), spec, library: dispatch, reads: None }
    }

    /// This call reading the outputs `reads` of earlier calls of its plan, as (call, output),
    /// instead of every output of the call before it.
    pub fn reads(mut self, reads: &[(usize, usize)]) -> Self {
        self.reads = Some(reads.to_vec());
        self
    }

    /// The device the call runs on where known before it runs: a library call's, else the
    /// launch's or its first array input's (`None` for a kernel reading only earlier outputs).
    fn device(&self) -> Option<Device> {
        match &self.library {
            Some(library) => Some(library.device),
            None => self.spec.device.or_else(|| {
                self.inputs.iter().find_map(|i| match i {
                    KernelInput::Array(a) => Some(a.device()),
                    _ => None,
                })
            }),
        }
    }

    /// The name of the kernel variant the rule picked.
    pub fn variant(&self) -> &str {
        self.kernel.name()
    }

    /// The kernel the rule picked.
    pub fn kernel(&self) -> OpKernel {
        self.kernel.clone()
    }

    /// The Metal kernel the rule picked, if it is one.
    pub fn metal_kernel(&self) -> Option<&'static MetalKernel> {
        match self.kernel {
            OpKernel::Metal(k) => Some(k),
            _ => None,
        }
    }

    /// The inputs the kernel is called with.
    pub fn inputs(&self) -> &[KernelInput] {
        &self.inputs
    }

    /// The launch (grid, threadgroup, outputs).
    pub fn spec(&self) -> &LaunchSpec {
        &self.spec
    }

    /// The launch, to adjust before running: a caller's stream, caller-allocated outputs, a
    /// cancel flag (`LaunchSpec::stream`, `outputs_into`, `cancel`).
    pub fn spec_mut(&mut self) -> &mut LaunchSpec {
        &mut self.spec
    }

    /// Fills the outputs with NaN before the kernel runs, so an element it fails to write can
    /// never pass a check. Outputs that accumulate from a defined start value keep it.
    pub fn poisoned(self) -> Self {
        self.with_init(None, f64::NAN)
    }

    /// Fills output `output` (every output when `None`) with `init` before the call runs,
    /// unless it has a start value of its own.
    fn with_init(mut self, output: Option<usize>, init: f64) -> Self {
        match &mut self.library {
            Some(call) => {
                let outputs = call.args.iter_mut().filter_map(|a| match a {
                    LibraryArg::Output { init_value, .. } => Some(init_value),
                    _ => None,
                });
                for (i, init_value) in outputs.enumerate() {
                    if output.is_none_or(|o| o == i) && init_value.is_none() {
                        *init_value = Some(init);
                    }
                }
            }
            None if self.spec.init_value.is_none() => self.spec = self.spec.init_value(init),
            None => {}
        }
        self
    }

    /// The program a backend compiles for this call (Metal source generated for these inputs,
    /// or the library's function), e.g. to compile it ahead of time; an error for a CUDA kernel,
    /// which has none.
    pub fn program(&self) -> Result<MetalProgram> {
        match (&self.kernel, &self.library) {
            (OpKernel::Metal(kernel), _) => {
                let arrays: Vec<Array> = self.inputs.iter().map(KernelInput::to_array).collect();
                let generated = kernel.generate(&arrays, &self.spec)?;
                Ok(kernel.program(&generated))
            }
            (OpKernel::Library(library), Some(call)) => Ok(library.program(&call.launch)),
            _ => Err(Error::invalid(self.variant(), "a CUDA kernel has no Metal program")),
        }
    }

    /// Runs the call; the outputs live on the inputs' device.
    pub fn run(&self) -> Result<Vec<Array>> {
        self.run_reading(Vec::new())
    }

    /// Runs a call with a single output.
    pub fn run_one(&self) -> Result<Array> {
        one_output(self.variant(), self.run()?)
    }

    /// Calls once to compile and warm up, then times a second call including the copy of its
    /// outputs back to the host; returns the host outputs of the timed call.
    pub fn timed(&self) -> Result<(Vec<Array>, std::time::Duration)> {
        self.run()?;
        let start = std::time::Instant::now();
        let outs = self.run()?;
        let host = outs.iter().map(Array::to_host).collect::<Result<Vec<_>>>()?;
        Ok((host, start.elapsed()))
    }

    /// Runs the call with `earlier` (the outputs of earlier calls it reads).
    fn run_reading(&self, earlier: Vec<Array>) -> Result<Vec<Array>> {
        match (&self.kernel, &self.library) {
            (OpKernel::Library(library), Some(call)) => {
                let mut args: Vec<LibraryArg> = earlier.into_iter().map(LibraryArg::Array).collect();
                args.extend(call.args.iter().cloned());
                library.dispatch(call.device, &args, &call.launch)
            }
            (kernel, _) => {
                let mut inputs = self.inputs.clone();
                inputs.extend(earlier.into_iter().map(KernelInput::Array));
                match kernel {
                    OpKernel::Metal(k) => k.call(&inputs, &self.spec),
                    OpKernel::Cuda(k) => k.call(&inputs, &self.spec),
                    OpKernel::CudaBuilt(k) => k.call(&inputs, &self.spec),
                    OpKernel::Library(_) => Err(Error::invalid(self.variant(), "a library call without its dispatch")),
                }
            }
        }
    }
}

/// What a plan does with its outputs once its calls ran, given also the outputs it reads for the
/// purpose: checks them (an error the op reports, such as a matrix that is not positive
/// definite) or trims them to the op's result.
pub type OpFinish = Arc<dyn Fn(Vec<Array>, Vec<Array>) -> Result<Vec<Array>> + Send + Sync>;

/// An op's work on given inputs: the kernel calls its rule picked, in order. Each call reads the
/// outputs of earlier calls it names (by default every output of the call before it); the op's
/// outputs are the outputs the plan names (by default the last call's), finished by the plan's
/// own step where it has one.
#[derive(Clone)]
pub struct OpPlan {
    calls: Vec<OpCall>,
    outputs: Option<Vec<(usize, usize)>>,
    /// The finishing step and the outputs it reads besides the op's, as (call, output).
    finish: Option<(Vec<(usize, usize)>, OpFinish)>,
}

impl std::fmt::Debug for OpPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpPlan")
            .field("calls", &self.calls)
            .field("outputs", &self.outputs)
            .field("finish", &self.finish.is_some())
            .finish()
    }
}

impl OpPlan {
    /// A plan of `calls`, run in order.
    pub fn new(calls: Vec<OpCall>) -> Self {
        OpPlan { calls, outputs: None, finish: None }
    }

    /// This plan giving the outputs `outputs`, as (call, output), instead of the last call's.
    pub fn outputs(mut self, outputs: &[(usize, usize)]) -> Self {
        self.outputs = Some(outputs.to_vec());
        self
    }

    /// This plan passing its outputs through `finish` (a check or a trim) after its calls, with
    /// the outputs `reads` (call, output) beside them.
    pub fn finish(
        mut self,
        reads: &[(usize, usize)],
        finish: impl Fn(Vec<Array>, Vec<Array>) -> Result<Vec<Array>> + Send + Sync + 'static,
    ) -> Self {
        self.finish = Some((reads.to_vec(), Arc::new(finish)));
        self
    }

    /// The variant the rule picked: its kernels' names, joined by `+` (a name repeated by
    /// consecutive calls, such as a library's steps, once).
    pub fn variant(&self) -> String {
        let mut names: Vec<&str> = self.calls.iter().map(OpCall::variant).collect();
        names.dedup();
        names.join("+")
    }

    /// The calls, in order.
    pub fn calls(&self) -> &[OpCall] {
        &self.calls
    }

    /// Fills the op's outputs with NaN before it runs (see [`OpCall::poisoned`]).
    pub fn poisoned(self) -> Self {
        self.with_init(Some(f64::NAN))
    }

    /// Fills the op's outputs with `init` before it runs, if given.
    pub fn with_init(mut self, init: Option<f64>) -> Self {
        let Some(v) = init else { return self };
        let targets: Vec<(usize, Option<usize>)> = match &self.outputs {
            Some(outputs) => outputs.iter().map(|&(c, o)| (c, Some(o))).collect(),
            None => vec![(self.calls.len().saturating_sub(1), None)],
        };
        for (c, o) in targets {
            if let Some(call) = self.calls.get_mut(c) {
                *call = call.clone().with_init(o, v);
            }
        }
        self
    }

    /// Runs the calls in order; returns the op's outputs.
    pub fn run(&self) -> Result<Vec<Array>> {
        let mut made: Vec<Vec<Array>> = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let earlier = match &call.reads {
                Some(reads) => reads.iter().map(|&r| self.output(&made, r)).collect::<Result<Vec<_>>>()?,
                None => made.last().cloned().unwrap_or_default(),
            };
            made.push(call.run_reading(earlier)?);
        }
        let read = |reads: &[(usize, usize)]| reads.iter().map(|&r| self.output(&made, r)).collect::<Result<Vec<_>>>();
        let outputs = match &self.outputs {
            Some(outputs) => read(outputs)?,
            None => made.last().cloned().unwrap_or_default(),
        };
        match &self.finish {
            Some((reads, finish)) => finish(outputs, read(reads)?),
            None => Ok(outputs),
        }
    }

    /// Runs a plan with a single output.
    pub fn run_one(&self) -> Result<Array> {
        one_output(&self.variant(), self.run()?)
    }

    /// This plan queueing every call (kernel launches and library dispatches) on a caller's CUDA
    /// `stream` instead of the backend's own.
    pub fn on_stream(mut self, stream: ExternalStream) -> Self {
        for call in &mut self.calls {
            call.spec.stream = Some(stream);
            if let Some(library) = &mut call.library {
                library.launch.stream = Some(stream);
            }
        }
        self
    }

    /// The op's outputs (the plan's named outputs, else the last call's), as a caller that
    /// allocates them for [`run_into`](Self::run_into) needs them.
    pub fn output_specs(&self) -> Result<Vec<OpOutput>> {
        self.targets()?.iter().map(|&t| self.output_slot(t).map(|(_, spec)| spec)).collect()
    }

    /// Runs the plan with the op's outputs written into `outputs` (caller-allocated, one per
    /// [`output_specs`](Self::output_specs) entry: row-contiguous on the plan's device with that
    /// shape and dtype; their `init_value` is the caller's to apply) wherever its calls make them.
    /// Returns those arrays. Other outputs of a kernel call that makes one of them are kiln's.
    pub fn run_into(&self, outputs: Vec<Array>) -> Result<Vec<Array>> {
        let targets = self.targets()?;
        if outputs.len() != targets.len() {
            return Err(self.unplaceable(format!("{} outputs given for the op's {}", outputs.len(), targets.len())));
        }
        let mut placed = self.clone();
        // Per kernel call, the arrays given for its outputs (the rest are allocated below).
        let mut kernel_outputs: Vec<Option<Vec<Option<Array>>>> = vec![None; self.calls.len()];
        for (k, (&(c, o), given)) in targets.iter().zip(&outputs).enumerate() {
            let (slot, spec) = self.output_slot((c, o))?;
            let device = self.calls[c].device().unwrap_or(given.device());
            if given.device() != device
                || given.dtype() != spec.dtype
                || given.shape() != spec.shape.as_slice()
                || !given.is_row_contiguous()
            {
                return Err(Error::invalid(
                    self.variant(),
                    format!(
                        "output {k} given as {given:?}; expected a row-contiguous {} array of shape {:?} on {device}",
                        spec.dtype, spec.shape
                    ),
                ));
            }
            let call = &mut placed.calls[c];
            match (&mut call.library, slot) {
                (Some(library), Some(arg)) => match &library.args[arg] {
                    LibraryArg::Output { .. } => library.args[arg] = LibraryArg::OutputInto(given.clone()),
                    LibraryArg::InOut(_) => {
                        return Err(self.unplaceable(format!("output {o} of call {c} is a copy of an input it updates")))
                    }
                    _ => return Err(self.unplaceable(format!("output {o} of call {c} is given twice"))),
                },
                _ => {
                    let n = call.spec.output_shapes.len();
                    let slots = kernel_outputs[c].get_or_insert_with(|| vec![None; n]);
                    if slots[o].replace(given.clone()).is_some() {
                        return Err(self.unplaceable(format!("output {o} of call {c} is given twice")));
                    }
                }
            }
        }
        for (call, given) in placed.calls.iter_mut().zip(kernel_outputs) {
            // The call's other outputs are allocated by the launch, as they would be without.
            if let Some(given) = given {
                call.spec.outputs_into = Some(given);
            }
        }
        let got = placed.run()?;
        let same = got.len() == outputs.len()
            && got.iter().zip(&outputs).all(|(g, o)| Arc::ptr_eq(g.storage(), o.storage()) && g.shape() == o.shape());
        if !same {
            return Err(self.unplaceable(
                "it returns other arrays than the given ones (a finishing step that makes its own)".to_string(),
            ));
        }
        Ok(got)
    }

    /// The op's outputs as (call, output).
    fn targets(&self) -> Result<Vec<(usize, usize)>> {
        if let Some(outputs) = &self.outputs {
            return Ok(outputs.clone());
        }
        let Some(c) = self.calls.len().checked_sub(1) else { return Ok(Vec::new()) };
        let n = match &self.calls[c].library {
            Some(library) => library.args.iter().filter(|a| returned(a)).count(),
            None => self.calls[c].spec.output_shapes.len(),
        };
        Ok((0..n).map(|o| (c, o)).collect())
    }

    /// Where output `o` of call `c` is made (a library call's argument index; `None` for a
    /// kernel call's output `o`) and what it is.
    fn output_slot(&self, (c, o): (usize, usize)) -> Result<(Option<usize>, OpOutput)> {
        let missing = || self.unplaceable(format!("it names output {o} of call {c}, which no call makes"));
        let call = self.calls.get(c).ok_or_else(missing)?;
        match &call.library {
            Some(library) => {
                let (arg, made) =
                    library.args.iter().enumerate().filter(|(_, a)| returned(a)).nth(o).ok_or_else(missing)?;
                let spec = match made {
                    LibraryArg::Output { shape, dtype, init_value } => {
                        OpOutput { shape: shape.clone(), dtype: *dtype, init_value: *init_value }
                    }
                    LibraryArg::OutputInto(a) | LibraryArg::InOut(a) => {
                        OpOutput { shape: a.shape().to_vec(), dtype: a.dtype(), init_value: None }
                    }
                    _ => return Err(missing()),
                };
                Ok((Some(arg), spec))
            }
            None => {
                let spec = &call.spec;
                let (shape, dtype) = spec.output_shapes.get(o).zip(spec.output_dtypes.get(o)).ok_or_else(missing)?;
                Ok((None, OpOutput { shape: shape.to_vec(), dtype: *dtype, init_value: spec.init_value }))
            }
        }
    }

    fn unplaceable(&self, why: String) -> Error {
        Error::invalid(self.variant(), format!("the plan's outputs cannot be written into given arrays: {why}"))
    }

    /// Output `output` of call `call`, among the outputs `made` so far.
    fn output(&self, made: &[Vec<Array>], (call, output): (usize, usize)) -> Result<Array> {
        made.get(call).and_then(|outs| outs.get(output)).cloned().ok_or_else(|| {
            Error::invalid(
                self.variant(),
                format!("the plan reads output {output} of call {call}, which it has not made"),
            )
        })
    }
}

/// One of an op's outputs: what a caller allocates for [`OpPlan::run_into`].
#[derive(Clone, Debug, PartialEq)]
pub struct OpOutput {
    /// The output's shape.
    pub shape: Vec<usize>,
    /// The output's dtype.
    pub dtype: DType,
    /// The value the op fills it with before its calls run, if any (the caller's to apply).
    pub init_value: Option<f64>,
}

/// Whether a library argument comes back among the call's outputs.
fn returned(arg: &LibraryArg) -> bool {
    matches!(arg, LibraryArg::Output { .. } | LibraryArg::OutputInto(_) | LibraryArg::InOut(_))
}

impl From<OpCall> for OpPlan {
    fn from(call: OpCall) -> Self {
        OpPlan::new(vec![call])
    }
}

fn one_output(what: &str, mut outs: Vec<Array>) -> Result<Array> {
    match outs.len() {
        1 => Ok(outs.remove(0)),
        n => Err(Error::invalid(what, format!("expected one output, got {n}"))),
    }
}
