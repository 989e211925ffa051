//! MSL lowering: a tokenizer and light parser over Metal Shading Language that turns a program
//! (MLX body-generated source or a full `.metal` file) into C++ the CPU emulator and NVRTC can
//! compile, plus a description of every kernel entry point so a backend can bind and dispatch it.
//!
//! The program is first preprocessed (`preprocess`: the user's macros expanded, inactive `#if`
//! branches dropped), so what macros produce is lowered like any other text. The rewrite then
//! handles only what C++ cannot express (address-space keywords, `[[attributes]]`, `kernel`,
//! `threadgroup` declarations, function constants, conditionals with mixed half/float arms);
//! everything else is left to the target's prelude. What cannot be lowered faithfully (a host
//! name defined twice, overloads that differ only in address spaces) is refused by name.

mod convergence;
mod entry;
mod functions;
mod members;
mod oslog;
mod overloads;
pub mod preprocess;
mod rewrite;
mod ternary;
pub mod tokens;

use crate::backend::MetalProgram;
use crate::error::{Error, Result};
use crate::kernel::MathMode;

/// The language a lowering produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LowerTarget {
    /// Host C++17 for the CPU emulator.
    Cpu,
    /// CUDA C++17 for NVRTC.
    Cuda,
}

/// The address space of a buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSpace {
    Device,
    Constant,
}

/// One parameter of a kernel entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryParam {
    /// `[[buffer(index)]]`: a pointer (or, when `by_ref`, a reference) to `pointee`.
    Buffer { name: String, index: u32, pointee: String, space: AddressSpace, is_const: bool, by_ref: bool },
    /// `[[threadgroup(index)]]`: dynamic threadgroup memory of `pointee` elements.
    Threadgroup { name: String, index: u32, pointee: String },
    /// A thread-position builtin such as `[[thread_position_in_grid]]`; `ty` is its declared
    /// type (`uint`, `uint3`, `ushort2`, ...).
    Builtin { name: String, attribute: String, ty: String },
}

/// A kernel function that can be dispatched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name the host dispatches by (`[[host_name]]` for instantiations, else the function).
    pub host_name: String,
    /// The C++ expression that names the function to call, e.g. `my_kernel<float, 4>`.
    pub callee: String,
    pub params: Vec<EntryParam>,
}

/// A lowered program: rewritten user code plus its entry points. Backends wrap each entry in
/// their own launch ABI.
#[derive(Clone, Debug)]
pub struct LoweredModule {
    /// The rewritten translation unit (without prelude and without entry wrappers).
    pub code: String,
    pub entries: Vec<Entry>,
    /// True when the code uses barriers, SIMD/quad collectives or simdgroup matrices, i.e. the
    /// threads of a group cannot run one after another.
    pub needs_cooperative_threads: bool,
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

/// Lowers `program` for `target`.
///
/// The program is preprocessed first (its macros expanded, inactive `#if` branches dropped), so
/// kernels and Metal syntax produced by macros are lowered like any other text. The output keeps
/// the input's line structure exactly (line N of `code` is line N of `program.source`), so
/// `line_map` is the identity; backends may prefix `#line 1` to have the compiler report the
/// user's own lines directly.
pub fn lower(program: &MetalProgram, target: LowerTarget) -> Result<LoweredModule> {
    let error = |log: String| Error::Compile { backend: "translate", kernel: program.kernel.clone(), log };
    let mut predefined = preprocess::METAL_PREDEFINED.to_vec();
    if program.math_mode == MathMode::Fast {
        predefined.push(("__FAST_MATH__", "1"));
    }
    let source = preprocess::preprocess(&program.source, &predefined).map_err(error)?;
    let rewritten = rewrite::rewrite(program, &source, target).map_err(error)?;
    let lines = rewritten.code.lines().count().max(program.source.lines().count());
    let code = ternary::wrap_conditionals(&rewritten.code);
    Ok(LoweredModule {
        code,
        entries: rewritten.entries,
        needs_cooperative_threads: rewritten.cooperative,
        line_map: (1..=lines as u32).collect(),
    })
}
