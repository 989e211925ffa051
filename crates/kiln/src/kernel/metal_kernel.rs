//! `MetalKernel`: the `mx.fast.metal_kernel` contract. Built once from a body, names and options;
//! each call validates its arguments in MLX's order, generates MLX's exact Metal source for the
//! input dtypes and layouts, and dispatches on a backend. The generated source and program are
//! memoised per call signature (what the source depends on), so a repeated call costs a table
//! lookup, not code generation.

use std::io::Write;
use std::sync::Arc;

use smallvec::SmallVec;

use super::entry_contract::EntryContract;
use super::launch::{KernelInput, LaunchSpec};
use super::marshal::{is_host_scalar, Convention, Marshal};
use super::signature_memo::SignatureMemo;
use crate::array::Array;
use crate::backend::{self, Dispatch, Launch, ProgramMemo};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::program::{check_threadgroup, MathMode, MetalProgram, ProgramKind, MAX_BUFFERS, MAX_NDIM};
use crate::source::mangle::{metal_kernel_name, InputKind};
use crate::source::metal_codegen::{self, MetalSourceParts, SignatureInput};
use crate::source::scan::{self, ShapeInfo};

/// A custom Metal kernel defined by its body, exactly as for `mx.fast.metal_kernel`: the
/// signature is generated from the input and output names and the call's dtypes, and inputs
/// named in the body as `<name>_shape`, `<name>_strides` or `<name>_ndim` get those too. Build
/// once, call many times (each call signature is generated and compiled once).
///
/// ```
/// use kiln::{Array, DType, LaunchSpec, MetalKernel};
///
/// // out = a * x + y, with `a` a scalar input.
/// let axpy = MetalKernel::new("axpy", &["a", "x", "y"], &["out"], r#"
///     uint i = thread_position_in_grid.x;
///     out[i] = a * x[i] + y[i];
/// "#)?;
/// let device = kiln::best_device();
/// let x = Array::from_slice(&[5], &[1.0f32, 2.0, 3.0, 4.0, 5.0])?.to_device(device)?;
/// let y = Array::from_slice(&[5], &[0.5f32; 5])?.to_device(device)?;
/// let spec = LaunchSpec::new(5usize, 32usize).output(&[5], DType::F32);
/// let out = axpy.call(&[2.0f32.into(), (&x).into(), (&y).into()], &spec)?;
/// assert_eq!(out[0].to_host()?.to_vec::<f32>()?, [2.5, 4.5, 6.5, 8.5, 10.5]);
/// // The Metal source MLX would generate for this call:
/// let generated = axpy.generate(&[Array::scalar(2.0f32), x.clone(), y.clone()], &spec)?;
/// assert!(generated.source.contains("[[kernel]] void custom_kernel_axpy"));
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MetalKernel {
    pub(super) name: String,
    pub(super) input_names: Vec<String>,
    pub(super) output_names: Vec<String>,
    source: String,
    header: String,
    pub(super) ensure_row_contiguous: bool,
    atomic_outputs: bool,
    math_mode: MathMode,
    attributes: Vec<(&'static str, &'static str)>,
    pub(super) shape_info: Vec<ShapeInfo>,
    memo: SignatureMemo<Generated>,
    /// `"metal_kernel <name>"`, the op named in errors.
    op: String,
    pub(super) restrict_pointers: bool,
}

/// The generated source of one signature, the program compiled from it, its memo (the
/// program's parse and what backends resolved for it), and what its launches must satisfy.
struct Generated {
    source: GeneratedSource,
    program: MetalProgram,
    memo: ProgramMemo,
    contract: Option<EntryContract>,
}

impl std::fmt::Debug for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generated").field("kernel_name", &self.source.kernel_name).finish_non_exhaustive()
    }
}

/// The Metal source generated for one call, with its mangled entry name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedSource {
    /// The mangled entry name (MLX's `custom_kernel_<name>_<types>`).
    pub kernel_name: String,
    /// The whole Metal source, as MLX generates it.
    pub source: String,
}

impl MetalKernel {
    /// Defines a kernel. Fails when `output_names` is empty (MLX's factory-time check).
    pub fn new(
        name: impl Into<String>,
        input_names: &[&str],
        output_names: &[&str],
        source: impl Into<String>,
    ) -> Result<MetalKernel> {
        let name = name.into();
        if output_names.is_empty() {
            return Err(Error::invalid(format!("metal_kernel {name}"), "must specify at least one output"));
        }
        let op = format!("metal_kernel {name}");
        check_names(&op, input_names, output_names)?;
        let source = source.into();
        let attributes = scan::detect_attributes(&source);
        let shape_info = input_names.iter().map(|n| scan::detect_shape_info(&source, n)).collect();
        Ok(MetalKernel {
            input_names: input_names.iter().map(|s| s.to_string()).collect(),
            output_names: output_names.iter().map(|s| s.to_string()).collect(),
            source,
            header: String::new(),
            ensure_row_contiguous: true,
            atomic_outputs: false,
            math_mode: MathMode::Safe,
            attributes,
            shape_info,
            memo: SignatureMemo::default(),
            op,
            restrict_pointers: true,
            name,
        })
    }

    /// Text placed before the kernel (helpers, structs, includes).
    pub fn header(mut self, header: impl Into<String>) -> Self {
        self.header = header.into();
        self.memo = SignatureMemo::default();
        self
    }

    /// Copy non-row-contiguous inputs before the launch (default true).
    pub fn ensure_row_contiguous(mut self, on: bool) -> Self {
        self.ensure_row_contiguous = on;
        self.memo = SignatureMemo::default();
        self
    }

    /// Declare every output `device atomic<T>*` (default false).
    pub fn atomic_outputs(mut self, on: bool) -> Self {
        self.atomic_outputs = on;
        self.memo = SignatureMemo::default();
        self
    }

    /// Whether the CUDA translation passes read-only inputs as `__restrict__` and outputs as
    /// global pointers (default true, which MLX's contract allows: outputs are fresh and inputs
    /// read-only). `false` keeps plain generic pointers, for kernels that schedule better so.
    pub fn restrict_pointers(mut self, on: bool) -> Self {
        self.restrict_pointers = on;
        self.memo = SignatureMemo::default();
        self
    }

    /// The compiler's math mode (default safe).
    pub fn math_mode(mut self, mode: MathMode) -> Self {
        self.math_mode = mode;
        self.memo = SignatureMemo::default();
        self
    }

    /// The name the kernel was defined with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What errors of this kernel name it by (`metal_kernel myexp`).
    pub fn op(&self) -> &str {
        &self.op
    }

    /// Checks the argument counts against the names, as MLX does at call time.
    pub(super) fn check_counts(&self, n_inputs: usize, spec: &LaunchSpec) -> Result<()> {
        spec.check_counts(self.op(), self.input_names.len(), n_inputs, self.output_names.len())
    }

    /// A grid without threads writes nothing: outputs kiln allocates without `init_value` would
    /// come back as uninitialised memory, so such a call is refused.
    fn refuse_unwritten_outputs(&self, spec: &LaunchSpec) -> Result<()> {
        if !spec.grid.contains(&0) || spec.init_value.is_some() {
            return Ok(());
        }
        let given = |k: usize| spec.outputs_into.as_ref().is_some_and(|o| o.get(k).is_some_and(Option::is_some));
        let unwritten: Vec<String> = (0..self.output_names.len())
            .filter(|&k| !given(k) && spec.output_shapes.get(k).is_some_and(|s| !s.contains(&0)))
            .map(|k| format!("{:?}", self.output_names[k]))
            .collect();
        if unwritten.is_empty() {
            return Ok(());
        }
        Err(Error::invalid(
            self.op(),
            format!(
                "grid {:?} has a zero dimension, so the kernel runs no thread and output {} would hold \
                 uninitialised memory; give every dimension at least 1, or an init_value",
                spec.grid,
                unwritten.join(", ")
            ),
        ))
    }

    /// Validates the call and generates MLX's Metal source for these inputs.
    pub fn generate(&self, inputs: &[Array], spec: &LaunchSpec) -> Result<GeneratedSource> {
        self.check_counts(inputs.len(), spec)?;
        let sig_inputs = self.signature_inputs(inputs);
        for (input, array) in sig_inputs.iter().zip(inputs) {
            let info = input.passes_shape_info();
            if info.any() && array.ndim() > MAX_NDIM {
                return Err(Error::invalid(
                    self.op(),
                    format!(
                        "input {:?} has {} dimensions; ndim can not be larger than {MAX_NDIM} when its shape or strides are passed",
                        input.name,
                        array.ndim()
                    ),
                ));
            }
        }
        if self.atomic_outputs {
            for (name, &dtype) in self.output_names.iter().zip(&spec.output_dtypes) {
                if !matches!(dtype, DType::I32 | DType::U32 | DType::F32) {
                    return Err(Error::dtype(
                        self.op(),
                        dtype,
                        format!("atomic output {name:?} must be int32, uint32 or float32"),
                    ));
                }
            }
        }
        let n_buffers = metal_codegen::buffer_count(&sig_inputs, self.output_names.len());
        if n_buffers > MAX_BUFFERS {
            return Err(Error::invalid(
                self.op(),
                format!("the kernel binds {n_buffers} buffers; Metal allows at most {MAX_BUFFERS}"),
            ));
        }
        let kinds: Vec<InputKind> =
            inputs.iter().map(|a| InputKind { dtype: a.dtype(), ndim: a.ndim(), size: a.size() }).collect();
        let kernel_name = metal_kernel_name(&self.name, &spec.template, &kinds, &spec.output_dtypes);
        let outputs: Vec<(&str, DType)> =
            self.output_names.iter().map(String::as_str).zip(spec.output_dtypes.iter().copied()).collect();
        let source = metal_codegen::generate(&MetalSourceParts {
            kernel_name: &kernel_name,
            header: &self.header,
            body: &self.source,
            template: &spec.template,
            inputs: &sig_inputs,
            outputs: &outputs,
            atomic_outputs: self.atomic_outputs,
            attributes: &self.attributes,
        });
        Ok(GeneratedSource { kernel_name, source })
    }

    pub(super) fn signature_inputs<'a>(&'a self, inputs: &[Array]) -> Vec<SignatureInput<'a>> {
        self.input_names
            .iter()
            .zip(inputs)
            .zip(&self.shape_info)
            .map(|((name, a), &shape_info)| SignatureInput {
                name,
                dtype: a.dtype(),
                ndim: a.ndim(),
                size: a.size(),
                shape_info,
            })
            .collect()
    }

    /// The text MLX prints for `verbose=True`.
    pub fn verbose_text(&self, generated: &GeneratedSource) -> String {
        format!("Generated source code for `{}`:\n```\n{}\n```\n", self.name, generated.source)
    }

    /// The program a backend compiles for this call.
    pub fn program(&self, generated: &GeneratedSource) -> MetalProgram {
        MetalProgram {
            kernel: self.name.clone(),
            source: generated.source.clone(),
            kind: if self.restrict_pointers { ProgramKind::MlxBody } else { ProgramKind::MlxBodyGenericPointers },
            function: generated.kernel_name.clone(),
            math_mode: self.math_mode,
            constants: Vec::new(),
        }
    }

    /// The generated source and program for this call, from the memo when seen before.
    fn generate_memoised(&self, arrays: &[Array], spec: &LaunchSpec) -> Result<Arc<Generated>> {
        self.memo.get_or_make(self.op(), arrays, spec, || {
            let generated = self.generate(arrays, spec)?;
            let program = self.program(&generated);
            let memo = ProgramMemo::default();
            let contract = EntryContract::of(self.op(), &program, memo.parse())?;
            Ok(Generated { source: generated, program, memo, contract })
        })
    }

    /// Runs the kernel and returns its outputs, in `output_names` order, on the launch device.
    /// On a GPU the call returns once the kernel is queued; reading an output
    /// (`Array::to_host`) waits for it.
    pub fn call(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<Vec<Array>> {
        self.check_counts(inputs.len(), spec)?;
        self.refuse_unwritten_outputs(spec)?;
        let device = self.resolve_device(inputs, spec)?;
        let arrays: SmallVec<[Array; 4]> = inputs.iter().map(KernelInput::to_array).collect();
        let memo = self.generate_memoised(&arrays, spec)?;
        let (generated, program) = (&memo.source, &memo.program);
        if spec.verbose {
            let mut stdout = std::io::stdout().lock();
            // A closed stdout must not fail the kernel; the print is diagnostic only.
            let _ = stdout.write_all(self.verbose_text(generated).as_bytes());
        }
        check_threadgroup(self.op(), spec.threadgroup)?;
        let backend = backend::backend_for(device)?;
        let marshal = Marshal {
            op: self.op(),
            device,
            backend: backend.as_ref(),
            shape_info: &self.shape_info,
            ensure_row_contiguous: self.ensure_row_contiguous,
            convention: Convention::Metal,
        };
        let bindings = marshal.bindings(inputs, arrays, spec)?;
        let launch = Launch {
            program,
            bindings,
            dispatch: Dispatch::Threads(spec.grid),
            threadgroup: spec.threadgroup,
            threadgroup_memory: Vec::new(),
            timeout: spec.timeout,
            cancel: spec.cancel.clone(),
            stream: spec.stream,
            memo: Some(&memo.memo),
        };
        if let Some(contract) = &memo.contract {
            contract.check(self.op(), launch.effective_threadgroup(), launch.bindings.len(), &[])?;
        }
        backend.launch(&launch)
    }

    /// Compiles and loads the kernel a `call` with these inputs and `spec` would run, without
    /// running it: the source depends only on the inputs' dtypes and ranks and on the spec, so
    /// a later `call` with the same finds the kernel ready (and the compile is in the disk cache
    /// for other processes). The inputs' data is not read.
    pub fn precompile(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<()> {
        self.check_counts(inputs.len(), spec)?;
        let device = self.resolve_device(inputs, spec)?;
        let arrays: SmallVec<[Array; 4]> = inputs.iter().map(KernelInput::to_array).collect();
        let memo = self.generate_memoised(&arrays, spec)?;
        check_threadgroup(self.op(), spec.threadgroup)?;
        backend::backend_for(device)?.prepare(&memo.program, Some(&memo.memo))
    }

    /// The launch device: the spec's, else the one every array input lives on (the CPU when
    /// the only arrays are 0-d host arrays), else the best available. Array inputs on another
    /// device are an error (moving is explicit); 0-d host arrays travel as constant bytes to any
    /// device, as scalars do.
    fn resolve_device(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<Device> {
        let mut device = spec.device;
        let mut host_scalars = false;
        for (name, input) in self.input_names.iter().zip(inputs) {
            if let KernelInput::Array(a) = input {
                if is_host_scalar(a) {
                    host_scalars = true;
                    continue;
                }
                let here = a.device();
                match device {
                    None => device = Some(here),
                    Some(d) if d != here => {
                        return Err(Error::invalid(
                            self.op(),
                            format!(
                            "input {name:?} lives on {here} but the kernel runs on {d}; move it with Array::to_device"
                        ),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        if host_scalars && device.is_none() {
            return Ok(Device::Cpu);
        }
        Ok(device.unwrap_or_else(backend::best_device))
    }
}

/// Input and output names become parameter names of the generated kernel: each must be an
/// identifier (MLX pastes them unchecked, and a name such as `x) { ...` would change the
/// program), and no two may be equal.
fn check_names(op: &str, input_names: &[&str], output_names: &[&str]) -> Result<()> {
    let mut seen: Vec<&str> = Vec::with_capacity(input_names.len() + output_names.len());
    for (role, name) in input_names.iter().map(|n| ("input", *n)).chain(output_names.iter().map(|n| ("output", *n))) {
        let mut chars = name.chars();
        let identifier = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(Error::invalid(
                op,
                format!("{role} name {name:?} is not an identifier (letters, digits and '_', not starting with a digit); it names a parameter of the generated kernel"),
            ));
        }
        if seen.contains(&name) {
            return Err(Error::invalid(
                op,
                format!("{role} name {name:?} is given twice; each input and output needs its own name"),
            ));
        }
        seen.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MetalKernel;
    use crate::array::Array;
    use crate::device::Device;
    use crate::dtype::DType;
    use crate::kernel::{KernelInput, LaunchSpec};
    use crate::source::parse::PARSES;

    #[test]
    fn a_signature_is_parsed_once_for_its_contract_and_its_lowering() {
        let kernel =
            MetalKernel::new("plus_one", &["x"], &["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] + 1;")
                .unwrap();
        let spec = |dtype| LaunchSpec::new(4usize, 32usize).output(&[4], dtype).device(Device::Cpu);
        let before = PARSES.with(|n| n.get());
        let x = Array::from_slice(&[4], &[1.0f32, -2.0, 0.5, 8.0]).unwrap();
        for _ in 0..2 {
            let out = kernel.call(&[KernelInput::Array(x.clone())], &spec(DType::F32)).unwrap();
            assert_eq!(out[0].to_host().unwrap().to_vec::<f32>().unwrap(), [2.0, -1.0, 1.5, 9.0]);
        }
        assert_eq!(PARSES.with(|n| n.get()) - before, 1, "one signature's source was parsed more than once");
        let ints = Array::from_slice(&[4], &[1i32, -2, 5, 8]).unwrap();
        let out = kernel.call(&[KernelInput::Array(ints)], &spec(DType::I32)).unwrap();
        assert_eq!(out[0].to_host().unwrap().to_vec::<i32>().unwrap(), [2, -1, 6, 9]);
        assert_eq!(PARSES.with(|n| n.get()) - before, 2, "another signature is another source, parsed once");
    }
}
