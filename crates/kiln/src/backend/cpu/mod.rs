//! The CPU emulator: MSL lowered to host C++ (see `backend::cpu::emit`), compiled by the host compiler
//! (`CXX`, else `c++`) into a cached shared library, run with exact Metal semantics: exactly
//! `grid` threads, partial edge groups, 32-lane simdgroups, barriers and collectives through
//! cooperative fibers, groups spread over cores.
//!
//! Outputs without `init_value` are poisoned with 0xFF bytes (NaN for float types) so unwritten
//! elements are visible. Inputs are bound in place with their true strides.
//!
//! A kernel that accesses memory outside every mapping, divides an integer by zero or reaches a
//! compiler trap stops with `Error::KernelFault` naming the thread (SIGSEGV, SIGBUS, SIGFPE and
//! SIGILL raised while a worker runs groups jump back to the worker; see `prelude/cpu/
//! faults.h`); the process and the kernel library go on.
//!
//! Outputs lie between guard ranges on every launch, so a kernel writing past one gets an
//! `Error::KernelFault` naming it. Checked mode (`CpuBackend::checked`, or `CheckedScope` for
//! kernels launched from the current thread through `MetalKernel::call` and friends) also
//! catches out-of-bounds reads of inputs: the inputs are copied between guard ranges too, and
//! the first access to a guard is an `Error::KernelFault` naming the buffer. It costs a copy of
//! each input and a few system calls per launch.
//!
//! Threadgroup memory is guarded on every launch (`threadgroup`): a write past a threadgroup
//! array or a `[[threadgroup(n)]]` parameter is an `Error::KernelFault` naming it; in checked
//! mode a read past it is too.

mod abi;
mod built_once;
mod checked;
mod compile;
pub mod emit;
mod exec;
mod kernel_log;
mod lent;
mod pch;
pub mod sanitize;
pub mod sanitize_report;
mod scheduler_object;
mod stacks;
mod threadgroup;
mod toolchain;
mod watcher;

use std::cell::Cell;
use std::sync::{Arc, Mutex, OnceLock};

use super::{Backend, BackendStatus, Capabilities, Launch, ProgramMemo};
use crate::array::Array;
use crate::backend::cpu::emit::{prelude, translation_unit};
use crate::backend::program_table::{self, ProgramTable};
use crate::config;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::program::{MathMode, MetalProgram, ProgramKind};
use crate::source::lower::{lower, lower_kept, AddressSpace, EntryParam, LowerTarget};
use crate::source::parse::ParseSlot;
use crate::source::user_lines::user_compile_error;

pub use lent::{lent_host_array, LentHostMemory};
pub use toolchain::flags as compile_flags;
pub use watcher::on_cancellable_tick;

/// The CPU backend. `CpuBackend::default()` uses the compiler from `config::host_cxx()`.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    cxx: String,
    checked: bool,
    /// Sanitizer mode (`kiln check`) and the findings of its launches made outside
    /// `sanitize::check`.
    sanitize: bool,
    findings: Arc<Mutex<Vec<crate::finding::Finding>>>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend { cxx: config::host_cxx(), checked: false, sanitize: false, findings: Arc::default() }
    }
}

impl CpuBackend {
    /// A backend that compiles with `cxx`; fails when that compiler cannot run.
    pub fn with_compiler(cxx: impl Into<String>) -> Result<CpuBackend> {
        let cxx = cxx.into();
        toolchain::host_compiler(&cxx)?;
        Ok(CpuBackend { cxx, checked: false, sanitize: false, findings: Arc::default() })
    }

    /// This backend with checked mode on or off (see the module documentation).
    pub fn checked(mut self, on: bool) -> CpuBackend {
        self.checked = on;
        self
    }

    /// This backend with the sanitizer on or off (`kiln check`, see `crate::sanitize`): each
    /// launch runs instrumented, and its findings go to the enclosing `sanitize::check`, else
    /// to this backend's list (`take_findings`).
    pub fn sanitize(mut self, on: bool) -> CpuBackend {
        self.sanitize = on;
        self
    }

    /// The findings of this backend's sanitized launches made outside `sanitize::check`, since
    /// the last call.
    pub fn take_findings(&self) -> Vec<crate::finding::Finding> {
        self.findings.lock().map(|mut f| std::mem::take(&mut *f)).unwrap_or_default()
    }

    fn launch_sanitized(&self, launch: &Launch<'_>) -> Result<Vec<Array>> {
        let run = sanitize::run(&self.cxx, launch)?;
        let found = sanitize_report::findings_of(launch.program, &run);
        if let Some(left) = crate::finding::collect(found) {
            if let Ok(mut f) = self.findings.lock() {
                f.extend(left);
            }
        }
        Ok(run.outputs)
    }
}

thread_local! {
    static CHECKED_SCOPES: Cell<u32> = const { Cell::new(0) };
}

/// While a value lives, CPU launches made from this thread run in checked mode. Other threads
/// are not affected.
#[derive(Debug)]
pub struct CheckedScope(());

impl CheckedScope {
    /// Enters a checked scope on this thread; it ends when the value is dropped.
    pub fn enter() -> CheckedScope {
        CHECKED_SCOPES.with(|n| n.set(n.get() + 1));
        CheckedScope(())
    }
}

impl Drop for CheckedScope {
    fn drop(&mut self) {
        CHECKED_SCOPES.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

thread_local! {
    static RECORDED: std::cell::RefCell<Option<Vec<MetalProgram>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns, beside its result, every program launched on the CPU backend from
/// this thread meanwhile (for example to compile a whole demo for another target ahead of time).
/// A recording inside `f` takes the programs launched within it.
pub fn record_programs<R>(f: impl FnOnce() -> R) -> (R, Vec<MetalProgram>) {
    let previous = RECORDED.with(|r| r.replace(Some(Vec::new())));
    let out = f();
    let recorded = RECORDED.with(|r| r.replace(previous)).unwrap_or_default();
    (out, recorded)
}

/// The CPU backend with the configured compiler: one, made on first use, while the compiler
/// stays the same (a launch asks for it every time).
pub fn backend() -> Result<Arc<dyn Backend>> {
    static MADE: Mutex<Option<(String, Arc<dyn Backend>)>> = Mutex::new(None);
    let cxx = config::host_cxx();
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((made_with, backend)) = made.as_ref() {
        if *made_with == cxx {
            return Ok(backend.clone());
        }
    }
    let backend: Arc<dyn Backend> = Arc::new(CpuBackend::with_compiler(cxx.clone())?);
    *made = Some((cxx, backend.clone()));
    Ok(backend)
}

/// What `kiln devices` reports for the CPU backend.
pub fn status() -> BackendStatus {
    let cxx = config::host_cxx();
    match toolchain::host_compiler(&cxx) {
        Ok(c) => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let probes = if c.stack_probes { "" } else { ", without stack probes" };
            let about = format!("emulator on {cores} cores, compiler {cxx} ({}{probes})", c.identity);
            BackendStatus { backend: "cpu", devices: vec![(Device::Cpu, about)], unavailable: None }
        }
        Err(e) => BackendStatus { backend: "cpu", devices: Vec::new(), unavailable: Some(e.to_string()) },
    }
}

/// Compiles `program` past the in-memory caches, with the prelude precompiled or inline and
/// the scheduler linked as an object or compiled inline: a disk-cache hit when the library is
/// there. For the compile benchmark.
pub fn compile_past_memory(program: &MetalProgram, precompiled_prelude: bool, scheduler_object: bool) -> Result<()> {
    let tu = translate(program)?;
    let shortcuts = compile::Shortcuts { precompiled_prelude, scheduler_object };
    let cxx = config::host_cxx();
    compile::compile_past_memory(&cxx, &program.kernel, &tu, prelude(program.kind), program.math_mode, shortcuts)
}

/// What building the once-per-compiler parts afresh took (`None`: the compiler cannot).
#[derive(Clone, Copy, Debug)]
pub struct FreshBuild {
    /// The precompiled prelude (`pch`).
    pub precompiled_prelude: Option<std::time::Duration>,
    /// The scheduler object, after the precompiled prelude (`scheduler_object`).
    pub scheduler_object: Option<std::time::Duration>,
}

/// Builds the precompiled prelude of a `kind` of program and then its scheduler object afresh
/// (under new keys, the cached ones untouched). For the compile benchmark.
pub fn build_fresh_prelude(kind: ProgramKind, nonce: u128) -> Result<FreshBuild> {
    let cxx = config::host_cxx();
    let compiler = toolchain::host_compiler(&cxx)?;
    let flags = toolchain::flags(MathMode::Safe, &compiler);
    let text = format!("{}// {nonce}\n", prelude(kind));
    let t = std::time::Instant::now();
    let built = pch::prepare(&cxx, &compiler, &flags, &text);
    let precompiled_prelude = built.as_ref().map(|_| t.elapsed());
    let t = std::time::Instant::now();
    let object = scheduler_object::prepare(&cxx, &compiler, &flags, &text, built.as_ref());
    let scheduler_object = object.map(|_| t.elapsed());
    let _ = std::fs::remove_dir_all(pch::prelude_dir(&pch::prelude_key(&cxx, &compiler, &flags, &text)));
    let _ = std::fs::remove_dir_all(scheduler_object::object_dir(&scheduler_object::object_key(
        &cxx, &compiler, &flags, &text,
    )));
    Ok(FreshBuild { precompiled_prelude, scheduler_object })
}

/// Compiles a one-function C++ file with the configured compiler, the safe-math flags and the
/// linker kernel libraries link with.
pub fn compile_trivial() -> Result<()> {
    let cxx = config::host_cxx();
    let object = compile::scheduler_object_for(&cxx, prelude(ProgramKind::MlxBody), MathMode::Safe)?;
    compile::compile_trivial(&cxx, MathMode::Safe, object.and_then(|o| o.linker))
}

/// The linker flag kernel libraries link with (`None`: the compiler's default), for reports.
pub fn kernel_linker() -> Result<Option<&'static str>> {
    let object = compile::scheduler_object_for(&config::host_cxx(), prelude(ProgramKind::MlxBody), MathMode::Safe)?;
    Ok(object.and_then(|o| o.linker))
}

/// The full host C++ translation unit for `program` (what `kiln translate --emit cpu` prints).
pub fn translate(program: &MetalProgram) -> Result<String> {
    metal_only(program)?;
    let module = lower(program, LowerTarget::Cpu)?;
    translation_unit(program, &module)
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn capabilities(&self) -> Capabilities {
        static HOST: OnceLock<Capabilities> = OnceLock::new();
        HOST.get_or_init(host_capabilities).clone()
    }

    fn upload(&self, host: &Array) -> Result<Array> {
        Ok(host.clone())
    }

    fn to_host(&self, array: &Array) -> Result<Array> {
        Ok(array.clone())
    }

    fn row_contiguous(&self, array: &Array) -> Result<Array> {
        array.to_row_contiguous()
    }

    fn launch(&self, launch: &Launch<'_>) -> Result<Vec<Array>> {
        let program = launch.program;
        RECORDED.with(|r| {
            if let Some(programs) = r.borrow_mut().as_mut() {
                programs.push(program.clone());
            }
        });
        if self.sanitize || crate::finding::active() {
            return self.launch_sanitized(launch);
        }
        let checked = self.checked || CHECKED_SCOPES.with(|n| n.get() > 0);
        let kept = launch.memo.and_then(|m| m.resolved().get::<SlotEntry>(Device::Cpu)).filter(|e| e.cxx == self.cxx);
        if let Some(entry) = kept {
            return exec::run(&entry.resolved, launch, checked);
        }
        let resolved = self.resolve_into(program, launch.memo)?;
        exec::run(&resolved, launch, checked)
    }

    fn prepare(&self, program: &MetalProgram, memo: Option<&ProgramMemo>) -> Result<()> {
        self.resolve_into(program, memo).map(|_| ())
    }
}

/// The emulator runs Metal; a CUDA program (`CudaKernel`) is refused with an error naming it.
fn metal_only(program: &MetalProgram) -> Result<()> {
    if program.kind.is_metal() {
        return Ok(());
    }
    Err(Error::invalid(program.kernel.clone(), "a CUDA program runs on CUDA devices only, not on the CPU"))
}

/// The host as a device: its cores, its processor's name and its physical memory, where the
/// system tells them (Linux's `/proc`), else "host CPU" and 0 bytes.
fn host_capabilities() -> Capabilities {
    let field = |path: &str, key: &str| -> Option<String> {
        let text = std::fs::read_to_string(path).ok()?;
        let line = text.lines().find(|l| l.starts_with(key))?;
        Some(line.split_once(':')?.1.trim().to_string())
    };
    let memory_kib = field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Capabilities {
        device: Device::Cpu,
        name: field("/proc/cpuinfo", "model name").unwrap_or_else(|| "host CPU".to_string()),
        compute_capability: None,
        multiprocessors: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes: memory_kib.saturating_mul(1024),
    }
}

/// Whether `bytes` more can be allocated and written without exhausting the host's memory:
/// always for up to 1 GiB; larger amounts are weighed against the memory the system reports
/// available now (Linux's `MemAvailable`; elsewhere assumed to fit).
pub(super) fn fits_in_memory(bytes: usize) -> bool {
    const SMALL: usize = 1 << 30;
    if bytes <= SMALL {
        return true;
    }
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        line.split_once(':')?.1.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
    });
    available.is_none_or(|kib| bytes as u64 <= kib.saturating_mul(1024))
}

/// What the CPU keeps in a program's [`super::ResolvedSlot`]: the resolution and the compiler it was
/// built with (a backend with another compiler looks its programs up by content).
struct SlotEntry {
    cxx: String,
    resolved: exec::Resolved,
}

impl CpuBackend {
    /// [`CpuBackend::resolve`] (lowered from the parse kept in `memo`), kept in `memo` (when
    /// given) so that the program's next launch skips the lookup by content.
    fn resolve_into(&self, program: &MetalProgram, memo: Option<&ProgramMemo>) -> Result<exec::Resolved> {
        let resolved = self.resolve(program, memo.map(ProgramMemo::parse))?;
        if let Some(memo) = memo {
            let entry = SlotEntry { cxx: self.cxx.clone(), resolved: resolved.clone() };
            memo.resolved().set(Device::Cpu, Arc::new(entry));
        }
        Ok(resolved)
    }

    /// The loaded library and entry of `program`. Programs seen before are looked up by
    /// their content (compiler, source, entry, math mode, constants), so a repeated launch does
    /// not lower, assemble and hash the translation unit again.
    fn resolve(&self, program: &MetalProgram, parse: Option<&ParseSlot>) -> Result<exec::Resolved> {
        static RESOLVED: OnceLock<ProgramTable<exec::Resolved>> = OnceLock::new();
        let resolved = RESOLVED.get_or_init(ProgramTable::default);
        let hash = program_table::fingerprint(program);
        if let Some(hit) = resolved.get(hash, program, &self.cxx)? {
            return Ok(hit);
        }
        metal_only(program)?;
        let module = lower_kept(program, parse, LowerTarget::Cpu)?;
        let entry = module.entries.iter().position(|e| e.host_name == program.function).ok_or_else(|| {
            let names: Vec<&str> = module.entries.iter().map(|e| e.host_name.as_str()).collect();
            Error::invalid(
                program.kernel.clone(),
                format!("no kernel entry named {:?} (found {names:?})", program.function),
            )
        })?;
        let writable = module.entries[entry]
            .params
            .iter()
            .filter_map(|p| match p {
                EntryParam::Buffer { index, space: AddressSpace::Device, is_const: false, .. } => Some(*index),
                _ => None,
            })
            .filter(|&i| i < 64)
            .fold(0u64, |mask, i| mask | 1 << i);
        let tu = translation_unit(program, &module)?;
        let compiled = compile::compile(&self.cxx, &program.kernel, &tu, prelude(program.kind), program.math_mode)
            .map_err(|e| user_compile_error(program, e))?;
        let found = exec::Resolved { compiled, entry, writable };
        resolved.insert(hash, program, &self.cxx, found.clone())?;
        Ok(found)
    }
}

#[cfg(test)]
mod coroutine_tests;
#[cfg(test)]
mod direct_tests;
#[cfg(test)]
mod precompile_tests;
#[cfg(test)]
mod region_tests;
#[cfg(test)]
mod scheduler_tests;
#[cfg(test)]
mod tests;
