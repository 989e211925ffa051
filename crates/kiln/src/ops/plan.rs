//! The one shape of an op's work: an [`OpPlan`], the kernel calls the op's rule picked for given
//! inputs, in order, each an [`OpCall`] (a kernel, its inputs, its launch). A plan can be
//! inspected (its variant, its calls and launches), poisoned (outputs filled with NaN first, for
//! tests) or run. Ops of one kernel call also hand out that [`OpCall`] itself (`*_call`).

use crate::array::Array;
use crate::backend::MetalProgram;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec, MetalKernel};

/// The kernel of one call: the portable Metal kernel, or a CUDA one where the op's rule picks a
/// CUDA-only path.
#[derive(Clone, Copy, Debug)]
pub enum OpKernel {
    /// A Metal kernel (runs on every backend).
    Metal(&'static MetalKernel),
    /// A CUDA C++ kernel (NVIDIA devices only).
    Cuda(&'static CudaKernel),
}

impl OpKernel {
    /// The kernel's name: the variant it stands for.
    pub fn name(&self) -> &str {
        match self {
            OpKernel::Metal(k) => k.name(),
            OpKernel::Cuda(k) => k.name(),
        }
    }

    fn call(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<Vec<Array>> {
        match self {
            OpKernel::Metal(k) => k.call(inputs, spec),
            OpKernel::Cuda(k) => k.call(inputs, spec),
        }
    }
}

/// A validated kernel call: the kernel the variant rule picked, its inputs and its launch.
#[derive(Clone, Debug)]
pub struct OpCall {
    pub(crate) kernel: OpKernel,
    pub(crate) inputs: Vec<KernelInput>,
    pub(crate) spec: LaunchSpec,
}

impl OpCall {
    /// A call of the Metal `kernel` on `inputs` with the launch `spec` (the caller has validated
    /// them).
    pub fn new(kernel: &'static MetalKernel, inputs: Vec<KernelInput>, spec: LaunchSpec) -> Self {
        OpCall { kernel: OpKernel::Metal(kernel), inputs, spec }
    }

    /// A call of the CUDA `kernel` on `inputs` with the launch `spec`.
    pub fn cuda(kernel: &'static CudaKernel, inputs: Vec<KernelInput>, spec: LaunchSpec) -> Self {
        OpCall { kernel: OpKernel::Cuda(kernel), inputs, spec }
    }

    /// The name of the kernel variant the rule picked.
    pub fn variant(&self) -> &str {
        self.kernel.name()
    }

    /// The kernel the rule picked.
    pub fn kernel(&self) -> OpKernel {
        self.kernel
    }

    /// The Metal kernel the rule picked, if it is one.
    pub fn metal_kernel(&self) -> Option<&'static MetalKernel> {
        match self.kernel {
            OpKernel::Metal(k) => Some(k),
            OpKernel::Cuda(_) => None,
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
    pub fn poisoned(mut self) -> Self {
        if self.spec.init_value.is_none() {
            self.spec = self.spec.init_value(f64::NAN);
        }
        self
    }

    /// The program a backend compiles for this call (Metal source generated for these inputs),
    /// e.g. to compile it ahead of time; an error for a CUDA kernel, which has none.
    pub fn program(&self) -> Result<MetalProgram> {
        let OpKernel::Metal(kernel) = self.kernel else {
            return Err(Error::invalid(self.variant(), "a CUDA kernel has no Metal program"));
        };
        let arrays: Vec<Array> = self.inputs.iter().map(KernelInput::to_array).collect();
        let generated = kernel.generate(&arrays, &self.spec)?;
        Ok(kernel.program(&generated))
    }

    /// Runs the call; the outputs live on the inputs' device.
    pub fn run(&self) -> Result<Vec<Array>> {
        self.kernel.call(&self.inputs, &self.spec)
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

    /// Runs the call with `carried` (the previous call's outputs) appended to its inputs.
    fn run_after(&self, carried: Vec<Array>) -> Result<Vec<Array>> {
        if carried.is_empty() {
            return self.run();
        }
        let mut inputs = self.inputs.clone();
        inputs.extend(carried.into_iter().map(KernelInput::Array));
        self.kernel.call(&inputs, &self.spec)
    }
}

/// An op's work on given inputs: the kernel calls its rule picked, in order. Each call's outputs
/// are appended to the next call's inputs; the last call's outputs are the op's.
#[derive(Clone, Debug)]
pub struct OpPlan {
    calls: Vec<OpCall>,
}

impl OpPlan {
    /// A plan of `calls`, run in order.
    pub fn new(calls: Vec<OpCall>) -> Self {
        OpPlan { calls }
    }

    /// The variant the rule picked: its kernels' names, joined by `+`.
    pub fn variant(&self) -> String {
        self.calls.iter().map(OpCall::variant).collect::<Vec<_>>().join("+")
    }

    /// The calls, in order.
    pub fn calls(&self) -> &[OpCall] {
        &self.calls
    }

    /// Fills the op's outputs (the last call's) with NaN before it runs (see
    /// [`OpCall::poisoned`]).
    pub fn poisoned(self) -> Self {
        self.with_init(Some(f64::NAN))
    }

    /// Fills the op's outputs (the last call's) with `init` before it runs, if given.
    pub fn with_init(mut self, init: Option<f64>) -> Self {
        if let (Some(last), Some(v)) = (self.calls.last_mut(), init) {
            if last.spec.init_value.is_none() {
                last.spec.init_value = Some(v);
            }
        }
        self
    }

    /// Runs the calls in order; returns the last call's outputs.
    pub fn run(&self) -> Result<Vec<Array>> {
        let mut carried = Vec::new();
        for call in &self.calls {
            carried = call.run_after(carried)?;
        }
        Ok(carried)
    }

    /// Runs a plan with a single output.
    pub fn run_one(&self) -> Result<Array> {
        one_output(&self.variant(), self.run()?)
    }
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
