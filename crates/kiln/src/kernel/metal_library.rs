//! `MetalLibrary`: a whole `.metal` file (mlx-native style) whose kernel functions take
//! `[[buffer(n)]]`, `[[threadgroup(n)]]` and builtin parameters directly. Buffers are bound in
//! slot order; dispatch is by thread count or by threadgroup count.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::dim3::Dim3;
use super::entry_contract::EntryContract;
use crate::array::{byte_size, Array};
use crate::backend::ExternalStream;
use crate::backend::{self, Binding, Dispatch, Launch, OutputSpec, ProgramMemo};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::program::{
    check_threadgroup, ConstantKey, ConstantValue, MathMode, MetalProgram, ProgramKind, MAX_BUFFERS,
    MAX_THREADGROUP_MEMORY,
};
use crate::source::parse::ParseSlot;
use crate::source::preprocess::{self, IncludePaths};

/// A full Metal source file (mlx-native style): kernel functions take `[[buffer(n)]]`,
/// `[[threadgroup(n)]]` and builtin parameters directly, and [`MetalLibrary::dispatch`] binds
/// [`LibraryArg`]s to the buffer slots in order.
///
/// ```
/// use kiln::{Array, DType, LibraryArg, LibraryLaunch, MetalLibrary};
///
/// let library = MetalLibrary::new("scale.metal", r#"
///     #include <metal_stdlib>
///     using namespace metal;
///     kernel void scale(const device float* x [[buffer(0)]], constant float& k [[buffer(1)]],
///                       device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
///         out[i] = k * x[i];
///     }
/// "#);
/// let device = kiln::best_device();
/// let x = Array::from_slice(&[4], &[1.0f32, -2.0, 3.0, 0.25])?.to_device(device)?;
/// let args = [
///     LibraryArg::Array(x),
///     LibraryArg::Bytes(3.0f32.to_le_bytes().to_vec()),
///     LibraryArg::Output { shape: vec![4], dtype: DType::F32, init_value: None },
/// ];
/// let out = library.dispatch(device, &args, &LibraryLaunch::threads("scale", 4usize, 32usize))?;
/// assert_eq!(out[0].to_host()?.to_vec::<f32>()?, [3.0, -6.0, 9.0, 0.75]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MetalLibrary {
    name: String,
    source: String,
    math_mode: MathMode,
    programs: Arc<Programs>,
    includes: IncludePaths,
    /// Macros defined before the source, as Metal's `MTLCompileOptions.preprocessorMacros`.
    defines: Vec<(String, String)>,
    /// The source with its own headers pasted in (`preprocess::resolve_includes`), made once.
    resolved: Arc<OnceLock<std::result::Result<String, String>>>,
}

/// What the library keeps for one function under one set of constant values, made at its
/// first dispatch: the program a backend compiles, its memo (the library's one parse and what
/// backends resolved for the program) and what its launches must satisfy.
#[derive(Debug)]
struct Prepared {
    program: MetalProgram,
    memo: ProgramMemo,
    contract: Option<EntryContract>,
}

/// The library's prepared programs by function, then by constant values, and the one parse of
/// its source that all of them share.
#[derive(Debug, Default)]
struct Programs {
    parse: Arc<ParseSlot>,
    by_function: Mutex<FxHashMap<String, Vec<ByConstants>>>,
}

type Constants = Vec<(ConstantKey, ConstantValue)>;

/// One function's program under one set of constant values.
type ByConstants = (Constants, Arc<Prepared>);

/// Whether two sets of constant values are the same (floats by their bits, so a NaN value
/// finds its own entry).
fn same_constants(a: &Constants, b: &Constants) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && match (va, vb) {
                    (ConstantValue::Float(x), ConstantValue::Float(y)) => x.to_bits() == y.to_bits(),
                    _ => va == vb,
                }
        })
}

/// What is bound to one buffer slot of a library function.
#[derive(Clone, Debug)]
pub enum LibraryArg {
    /// An input array (bound with its own layout; the function indexes it as it wants).
    Array(Array),
    /// Small constant data: a parameter struct, a table of values.
    Bytes(Vec<u8>),
    /// A fresh row-contiguous output, optionally filled first.
    Output {
        /// The output's shape.
        shape: Vec<usize>,
        /// The output's dtype.
        dtype: DType,
        /// A value to fill it with first (else its contents are unspecified).
        init_value: Option<f64>,
    },
    /// An array the function reads and updates in place. The function works on a row-contiguous
    /// copy (of the view's elements, in row-major order), which comes back among the outputs in
    /// slot order with the array's shape and dtype; the array passed here is never changed.
    InOut(Array),
    /// A caller-allocated output (row-contiguous, on the launch device): the function writes it
    /// in place and it comes back among the outputs in slot order, as an `Output` would.
    OutputInto(Array),
    /// A caller's array (row-contiguous, on the launch device) that the function reads and
    /// updates in place; it is not among the outputs. On the CPU the function works on a guarded
    /// copy, written back only when the run succeeds, so a write outside the array is an
    /// `Error::KernelFault` naming it and leaves the array unchanged.
    InPlace(Array),
}

/// How one function of a library is dispatched: by thread count ([`LibraryLaunch::threads`],
/// Metal's `dispatchThreads`) or by threadgroup count ([`LibraryLaunch::threadgroups`]).
///
/// ```
/// use kiln::LibraryLaunch;
/// let rows: usize = 4096;
/// let launch = LibraryLaunch::threadgroups("row_sum", rows, 256usize).threadgroup_memory(&[1024]);
/// assert_eq!(launch.threadgroup, [256, 1, 1]);
/// ```
#[derive(Clone, Debug)]
pub struct LibraryLaunch {
    /// The kernel function's name in the source.
    pub function: String,
    /// Threads or threadgroups to dispatch.
    pub dispatch: Dispatch,
    /// Threads per threadgroup.
    pub threadgroup: [u32; 3],
    /// Bytes for `[[threadgroup(0)]]`, `[[threadgroup(1)]]`, ...
    pub threadgroup_memory: Vec<usize>,
    /// `[[function_constant(i)]]` values, by index or name.
    pub constants: Vec<(ConstantKey, ConstantValue)>,
    /// Stops the kernel after this long (on backends that can interrupt a kernel: the CPU).
    pub timeout: Option<Duration>,
    /// Stops the kernel when set (see `LaunchSpec::cancel`).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Queues a CUDA launch on the caller's stream (see `LaunchSpec::stream`).
    pub stream: Option<ExternalStream>,
    /// A size given out of range while building, reported by the dispatch.
    out_of_range: Option<String>,
}

impl LibraryLaunch {
    /// Dispatches `function` over `dispatch` with groups of `threadgroup` threads (a [`Dim3`]:
    /// an array, a tuple or one number).
    pub fn new(function: impl Into<String>, dispatch: Dispatch, threadgroup: impl Into<Dim3>) -> Self {
        let threadgroup = threadgroup.into().to_u32("threadgroup");
        LibraryLaunch {
            function: function.into(),
            dispatch,
            threadgroup: threadgroup.clone().unwrap_or_default(),
            threadgroup_memory: Vec::new(),
            constants: Vec::new(),
            timeout: None,
            cancel: None,
            stream: None,
            out_of_range: threadgroup.err(),
        }
    }

    /// Dispatches `grid` threads (Metal's `dispatchThreads`; edge groups may be partial).
    pub fn threads(function: impl Into<String>, grid: impl Into<Dim3>, threadgroup: impl Into<Dim3>) -> Self {
        Self::sized(function, grid.into().to_u32("grid"), Dispatch::Threads, threadgroup)
    }

    /// Dispatches `groups` full threadgroups (Metal's `dispatchThreadgroups`).
    pub fn threadgroups(function: impl Into<String>, groups: impl Into<Dim3>, threadgroup: impl Into<Dim3>) -> Self {
        Self::sized(function, groups.into().to_u32("threadgroup count"), Dispatch::Threadgroups, threadgroup)
    }

    fn sized(
        function: impl Into<String>,
        size: std::result::Result<[u32; 3], String>,
        dispatch: fn([u32; 3]) -> Dispatch,
        threadgroup: impl Into<Dim3>,
    ) -> Self {
        let mut launch = LibraryLaunch::new(function, dispatch(size.clone().unwrap_or_default()), threadgroup);
        if let Err(msg) = size {
            launch.out_of_range = Some(msg);
        }
        launch
    }

    /// Bytes for `[[threadgroup(0)]]`, `[[threadgroup(1)]]`, ... in order.
    pub fn threadgroup_memory(mut self, bytes: &[usize]) -> Self {
        self.threadgroup_memory = bytes.to_vec();
        self
    }

    /// Sets a `[[function_constant(i)]]` value, by index or name.
    pub fn constant(mut self, key: ConstantKey, value: ConstantValue) -> Self {
        self.constants.push((key, value));
        self
    }

    /// Stops the kernel after `timeout` (on backends that can interrupt a kernel: the CPU).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl MetalLibrary {
    /// A library from MSL text; `name` labels errors.
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Self {
        MetalLibrary {
            name: name.into(),
            source: source.into(),
            math_mode: MathMode::Safe,
            programs: Arc::default(),
            includes: IncludePaths::default(),
            defines: Vec::new(),
            resolved: Arc::default(),
        }
    }

    /// The library in the file at `path`, named by its file name; its quoted `#include`s are
    /// looked up in the file's directory first.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let source = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let mut library = MetalLibrary::new(name, source);
        library.includes.file_dir = Some(path.parent().map(Path::to_path_buf).unwrap_or_default());
        Ok(library)
    }

    /// Directories `#include` looks in for the library's own headers, in order: a quoted name
    /// (`#include "utils.h"`) is looked up beside the including file first, then here; an
    /// angled one (`#include <mlx/...>`) here only. Metal's own headers need none.
    pub fn include_dirs<P: Into<PathBuf>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        self.includes.dirs = dirs.into_iter().map(Into::into).collect();
        self.resolved = Arc::default();
        self.programs = Arc::default();
        self
    }

    /// The directory quoted `#include`s of the source itself are looked up in first (set by
    /// [`MetalLibrary::from_file`]).
    pub fn file_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.includes.file_dir = Some(dir.into());
        self.resolved = Arc::default();
        self.programs = Arc::default();
        self
    }

    /// Macros defined for the whole source, as `(name, value)` (Metal's
    /// `MTLCompileOptions.preprocessorMacros`, a compiler's `-D name=value`).
    pub fn defines<N: Into<String>, V: Into<String>>(mut self, defines: impl IntoIterator<Item = (N, V)>) -> Self {
        self.defines = defines.into_iter().map(|(n, v)| (n.into(), v.into())).collect();
        self.resolved = Arc::default();
        self.programs = Arc::default();
        self
    }

    /// The compiler's math mode (default safe).
    pub fn math_mode(mut self, mode: MathMode) -> Self {
        self.math_mode = mode;
        self.resolved = Arc::default();
        self.programs = Arc::default();
        self
    }

    /// The source with the library's defines before it and its own headers pasted in place of
    /// their `#include`s, or the error naming the `#include` that could not be read.
    fn resolved_source(&self) -> std::result::Result<&str, String> {
        let resolved = self.resolved.get_or_init(|| {
            let mut predefined = preprocess::METAL_PREDEFINED.to_vec();
            if self.math_mode == MathMode::Fast {
                predefined.push(("__FAST_MATH__", "1"));
            }
            predefined.extend(self.defines.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            let text = preprocess::resolve_includes(&self.name, &self.source, &predefined, &self.includes)?;
            if self.defines.is_empty() {
                return Ok(text);
            }
            let mut out = String::with_capacity(text.len() + 64 * self.defines.len());
            for (name, value) in &self.defines {
                if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || value.contains('\n') {
                    return Err(format!(
                        "define {name:?} = {value:?}: a macro name is an identifier and its value one line"
                    ));
                }
                out.push_str(&format!("#define {name} {value}\n"));
            }
            out.push_str(&format!("#line 1 \"{}\"\n", self.name.replace(['"', '\\'], "_")));
            out.push_str(&text);
            Ok(out)
        });
        resolved.as_deref().map_err(Clone::clone)
    }

    /// The name that labels errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Metal source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The program a backend compiles for `launch`: the source with the library's own headers
    /// pasted in (as it is when one of them cannot be read: [`MetalLibrary::dispatch`] reports
    /// that).
    pub fn program(&self, launch: &LibraryLaunch) -> MetalProgram {
        MetalProgram {
            kernel: format!("{}:{}", self.name, launch.function),
            source: self.resolved_source().unwrap_or(&self.source).to_string(),
            kind: ProgramKind::FullFile,
            function: launch.function.clone(),
            math_mode: self.math_mode,
            constants: launch.constants.clone(),
        }
    }

    /// Runs one function on `device`; returns the outputs and the updated `InOut` arrays, in
    /// slot order.
    pub fn dispatch(&self, device: Device, args: &[LibraryArg], launch: &LibraryLaunch) -> Result<Vec<Array>> {
        let op = format!("metal_library {}:{}", self.name, launch.function);
        check_threadgroup(&op, launch.threadgroup)?;
        if args.len() > MAX_BUFFERS {
            return Err(Error::invalid(
                op,
                format!("{} buffers bound; Metal allows at most {MAX_BUFFERS}", args.len()),
            ));
        }
        if let Some(msg) = &launch.out_of_range {
            return Err(Error::invalid(op, msg.clone()));
        }
        refuse_unwritten_outputs(&op, args, launch)?;
        self.resolved_source().map_err(|log| Error::Compile {
            backend: "translate",
            kernel: format!("{}:{}", self.name, launch.function),
            log,
        })?;
        let bound = launch.threadgroup_memory.iter().fold(0usize, |sum, &b| sum.saturating_add(b.div_ceil(16) * 16));
        if bound > MAX_THREADGROUP_MEMORY {
            return Err(Error::invalid(
                op,
                format!(
                    "threadgroup_memory {:?} binds {bound} bytes; Metal allows at most {MAX_THREADGROUP_MEMORY} bytes \
                     (32 KiB) of threadgroup memory per threadgroup",
                    launch.threadgroup_memory
                ),
            ));
        }
        let backend = backend::backend_for(device)?;
        let mut bindings = Vec::with_capacity(args.len());
        for (slot, arg) in args.iter().enumerate() {
            bindings.push(match arg {
                LibraryArg::Array(a) | LibraryArg::InOut(a) => {
                    if a.device() != device {
                        return Err(Error::invalid(
                            op,
                            format!("buffer {slot} lives on {} but the kernel runs on {device}; move it with Array::to_device", a.device()),
                        ));
                    }
                    match arg {
                        LibraryArg::InOut(_) => Binding::InOut(a.clone()),
                        _ => Binding::Array(a.clone()),
                    }
                }
                LibraryArg::Bytes(b) => Binding::Bytes(b.as_slice().into()),
                LibraryArg::Output { shape, dtype, init_value } => {
                    byte_size(&op, format_args!("output buffer {slot}"), shape, *dtype)?;
                    Binding::Output(OutputSpec { shape: shape.as_slice().into(), dtype: *dtype, init_value: *init_value })
                }
                LibraryArg::OutputInto(a) | LibraryArg::InPlace(a) => {
                    if a.device() != device || !a.is_row_contiguous() {
                        let what = if matches!(arg, LibraryArg::InPlace(_)) { "in-place" } else { "output" };
                        return Err(Error::invalid(
                            op,
                            format!("{what} buffer {slot} given as {a:?}; expected a row-contiguous array on {device}"),
                        ));
                    }
                    Binding::OutputInto(a.clone())
                }
            });
        }
        let prepared = self.prepared(&op, launch)?;
        let run = Launch {
            program: &prepared.program,
            bindings,
            dispatch: launch.dispatch,
            threadgroup: launch.threadgroup,
            threadgroup_memory: launch.threadgroup_memory.clone(),
            timeout: launch.timeout,
            cancel: launch.cancel.clone(),
            stream: launch.stream,
            memo: Some(&prepared.memo),
        };
        if let Some(contract) = &prepared.contract {
            contract.check(&op, run.effective_threadgroup(), run.bindings.len(), &run.threadgroup_memory)?;
        }
        let outputs = backend.launch(&run)?;
        // The backend returns every written binding in slot order; in-place arrays are the
        // caller's and are not among the outputs.
        let returned = args.iter().filter(|a| {
            matches!(
                a,
                LibraryArg::Output { .. } | LibraryArg::InOut(_) | LibraryArg::OutputInto(_) | LibraryArg::InPlace(_)
            )
        });
        Ok(outputs
            .into_iter()
            .zip(returned)
            .filter(|(_, a)| !matches!(a, LibraryArg::InPlace(_)))
            .map(|(o, _)| o)
            .collect())
    }

    /// The `[[buffer(n)]]` parameters of `launch`'s function that it may write (`device`
    /// pointers or references not declared `const`), as (slot, parameter name) in slot order.
    /// Empty when the function cannot be read before compiling (compiling then reports why).
    pub fn writable_buffers(&self, launch: &LibraryLaunch) -> Result<Vec<(u32, String)>> {
        let op = format!("metal_library {}:{}", self.name, launch.function);
        Ok(self.prepared(&op, launch)?.contract.as_ref().map(EntryContract::writable_buffers).unwrap_or_default())
    }

    /// What the library keeps for `launch`'s function and constant values, made on first use.
    fn prepared(&self, op: &str, launch: &LibraryLaunch) -> Result<Arc<Prepared>> {
        let poisoned = || Error::invalid(op, "program table lock poisoned");
        let find = |entries: &[ByConstants]| {
            entries.iter().find(|(c, _)| same_constants(c, &launch.constants)).map(|(_, p)| p.clone())
        };
        let table = self.programs.by_function.lock().map_err(|_| poisoned())?;
        if let Some(hit) = table.get(&launch.function).and_then(|e| find(e)) {
            return Ok(hit);
        }
        drop(table);
        let program = self.program(launch);
        let memo = ProgramMemo::sharing_parse(&self.programs.parse);
        let contract = EntryContract::of(op, &program, memo.parse())?;
        let made = Arc::new(Prepared { program, memo, contract });
        let mut table = self.programs.by_function.lock().map_err(|_| poisoned())?;
        let entries = table.entry(launch.function.clone()).or_default();
        // Another thread may have made the same one meanwhile: keep the first.
        if let Some(hit) = find(entries) {
            return Ok(hit);
        }
        entries.push((launch.constants.clone(), made.clone()));
        Ok(made)
    }
}

/// A dispatch without threads writes nothing: outputs kiln allocates without an `init_value`
/// would come back as uninitialised memory, so such a dispatch is refused.
fn refuse_unwritten_outputs(op: &str, args: &[LibraryArg], launch: &LibraryLaunch) -> Result<()> {
    let (Dispatch::Threads(size) | Dispatch::Threadgroups(size)) = launch.dispatch;
    if !size.contains(&0) {
        return Ok(());
    }
    let unwritten: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, LibraryArg::Output { shape, init_value: None, .. } if !shape.contains(&0)))
        .map(|(slot, _)| format!("buffer {slot}"))
        .collect();
    if unwritten.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!(
            "the dispatch {size:?} has a zero dimension, so the function runs no thread and output {} would \
             hold uninitialised memory; give every dimension at least 1, or an init_value",
            unwritten.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::{LibraryArg, LibraryLaunch, MetalLibrary};
    use crate::array::Array;
    use crate::device::Device;
    use crate::dtype::DType;
    use crate::source::parse::PARSES;

    const TWO: &str = "#include <metal_stdlib>\nusing namespace metal;\n\
        kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = 2.0f * x[i]; }\n\
        kernel void thrice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = 3.0f * x[i]; }\n";

    #[test]
    fn a_library_is_parsed_once_for_its_functions_contracts_and_lowerings() {
        let library = MetalLibrary::new("two", TWO);
        let x = Array::from_slice(&[3], &[1.0f32, -2.0, 0.5]).unwrap();
        let args = [LibraryArg::Array(x), LibraryArg::Output { shape: vec![3], dtype: DType::F32, init_value: None }];
        let before = PARSES.with(|n| n.get());
        for (function, factor) in [("twice", 2.0f32), ("thrice", 3.0), ("twice", 2.0)] {
            let out = library.dispatch(Device::Cpu, &args, &LibraryLaunch::threads(function, 3usize, 32usize)).unwrap();
            let want: Vec<f32> = [1.0f32, -2.0, 0.5].iter().map(|v| v * factor).collect();
            assert_eq!(out[0].to_host().unwrap().to_vec::<f32>().unwrap(), want, "{function}");
        }
        // Two contracts and two CPU lowerings read one parse; the repeated dispatch reads none.
        assert_eq!(PARSES.with(|n| n.get()) - before, 1, "the library's source was parsed more than once");
        let other = library.clone().defines([("SCALE", "1")]);
        other.dispatch(Device::Cpu, &args, &LibraryLaunch::threads("twice", 3usize, 32usize)).unwrap();
        assert_eq!(PARSES.with(|n| n.get()) - before, 2, "a library with other defines is another text, parsed anew");
    }
}
