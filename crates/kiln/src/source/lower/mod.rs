//! MSL lowering: a tokenizer and light parser over Metal Shading Language that turns a program
//! (MLX body-generated source or a full `.metal` file) into C++ the CPU emulator and NVRTC can
//! compile, plus a description of every kernel entry point so a backend can bind and dispatch it.
//!
//! The program is first parsed (`source::parse`: preprocessed, the user's macros expanded and
//! inactive `#if` branches dropped), so what macros produce is lowered like any other text. The
//! rewrite then handles only what C++ cannot express (address-space keywords, `[[attributes]]`, `kernel`,
//! `threadgroup` declarations, function constants, conditionals with mixed half/float arms);
//! everything else is left to the target's prelude. What cannot be lowered faithfully (a host
//! name defined twice, overloads that differ only in address spaces) is refused by name.

mod anon_structs;
mod convergence;
mod coroutines;
mod designators;
mod float_args;
mod functions;
mod members;
mod oslog;
mod private_arrays;
mod prune;
mod regions;
mod rewrite;
mod statements;
mod ternary;

use crate::error::{Error, Result};
use crate::program::MetalProgram;
pub use crate::source::parse::{AddressSpace, Entry, EntryParam};
use crate::source::parse::{ParseSlot, ProgramParse};
use crate::source::user_lines::user_translate_log;
pub use regions::{Boundary, RegionKernel};

/// The language a lowering produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LowerTarget {
    /// Host C++17 for the CPU emulator.
    Cpu,
    /// CUDA C++17 for NVRTC.
    Cuda,
}

/// A lowered program: rewritten user code plus its entry points. Backends wrap each entry in
/// their own launch ABI.
#[derive(Clone, Debug)]
pub struct LoweredModule {
    /// The rewritten translation unit (without prelude and without entry wrappers).
    pub code: String,
    /// The kernel entry points found in the code.
    pub entries: Vec<Entry>,
    /// True when the code uses barriers, SIMD/quad collectives or simdgroup matrices, i.e. the
    /// threads of a group cannot run one after another.
    pub needs_cooperative_threads: bool,
    /// True when the CPU may run the kernels' threads as stackless coroutines instead of fibers
    /// (every barrier and SIMD-group call in a kernel function's own body; see
    /// prelude/cpu/runtime.h).
    pub coroutines: bool,
    /// The kernels that also have a region form (their barriers all at the top level of their
    /// body; `regions`): the unit runs a group's threads region by region in loops, and keeps
    /// the kernel as written for checked launches and to name a faulting thread.
    pub regions: Vec<RegionKernel>,
    /// For each line of `code`, the line of the user's source it came from (1-based; 0 for
    /// generated lines), so compiler logs can point at the user's text.
    pub line_map: Vec<u32>,
}

impl LoweredModule {
    /// The entry named `host_name`.
    pub fn entry(&self, host_name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.host_name == host_name)
    }
}

/// Lowers `program` for `target`, parsing it first.
///
/// The program is parsed first (`source::parse`: preprocessed, its macros expanded and
/// inactive `#if` branches dropped, so kernels and Metal syntax produced by macros are lowered
/// like any other text). The output keeps the input's line structure exactly (line N of `code`
/// is line N of `program.source`), so `line_map` is the identity; backends may prefix `#line 1`
/// to have the compiler report the user's own lines directly.
pub fn lower(program: &MetalProgram, target: LowerTarget) -> Result<LoweredModule> {
    lower_kept(program, None, target)
}

/// [`lower`] from the parse the program's owner keeps in `parse` (made there now if it is not
/// yet): how a launch lowers, reading the parse its contract read. `None` parses afresh.
pub(crate) fn lower_kept(
    program: &MetalProgram,
    parse: Option<&ParseSlot>,
    target: LowerTarget,
) -> Result<LoweredModule> {
    match parse {
        Some(slot) => lower_parsed(program, &*slot.parse(program)?, target),
        None => lower_parsed(program, &*ParseSlot::default().parse(program)?, target),
    }
}

/// Lowers an already parsed `program` for `target`. This is where the lowered text of the
/// user's code is made, once, for every target: the one place to map its lines or add
/// instrumentation.
fn lower_parsed(program: &MetalProgram, parse: &ProgramParse, target: LowerTarget) -> Result<LoweredModule> {
    let error = |log: String| Error::Compile {
        backend: "translate",
        kernel: program.kernel.clone(),
        log: user_translate_log(program, &log),
    };
    let rewritten = rewrite::rewrite(program, parse, target).map_err(error)?;
    let lines = rewritten.code.lines().count().max(program.source.lines().count());
    let code = ternary::wrap_conditionals(&rewritten.code);
    Ok(LoweredModule {
        code,
        entries: dispatched_entries(program, parse),
        needs_cooperative_threads: rewritten.cooperative,
        coroutines: rewritten.coroutines,
        regions: rewritten
            .regions
            .into_iter()
            .map(|r| RegionKernel { code: ternary::wrap_conditionals(&r.code), ..r })
            .collect(),
        line_map: (1..=lines as u32).collect(),
    })
}

/// The entries a program's unit wraps: of a whole file, only the one it dispatches (its other
/// instantiations are never instantiated, so a large library compiles what one kernel needs,
/// and each kernel's unit is cached on its own); every entry when the program names none of
/// them (compiling then reports that).
fn dispatched_entries(program: &MetalProgram, parse: &ProgramParse) -> Vec<Entry> {
    match parse.entry(&program.function) {
        Some(entry) if program.kind == crate::program::ProgramKind::FullFile => vec![entry.clone()],
        _ => parse.entries.clone(),
    }
}
