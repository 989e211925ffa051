//! The target-independent parse of a Metal program, read by launch validation and by both
//! lowerings: the program preprocessed and tokenized once, where each significant token stands
//! (in a function, at file scope, inside parentheses), its kernel entries with their
//! parameters, its explicit instantiations and its function constant declarations.
//!
//! Beside it, for validation before any compiler runs: an outline of the raw text
//! (`outline`: top-level declarations, function attributes, `#define`s) and compile-time
//! evaluation over it (`const_eval`: integer constant expressions, type sizes).

mod const_eval;
mod deduce;
mod entry;
mod outline;
mod overloads;
mod process_calls;
mod program;
mod this_space;

pub(crate) use const_eval::{constant_index, split_args, Scope};
pub(crate) use entry::{first_declarator, join};
pub(crate) use outline::Outline;
pub(crate) use program::{in_template_arguments, is_function_qualifier, is_kernel_attribute};

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::program::MathMode;
use crate::program::MetalProgram;
use crate::source::cursor::Cursor;
use crate::source::preprocess;
use crate::source::user_lines::{user_translate_log, UserLines};

/// The address space of a buffer parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSpace {
    /// `device` memory.
    Device,
    /// `constant` memory.
    Constant,
}

/// One parameter of a kernel entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryParam {
    /// `[[buffer(index)]]`: a pointer (or, when `by_ref`, a reference) to `pointee`.
    Buffer {
        /// The parameter's name.
        name: String,
        /// The buffer index.
        index: u32,
        /// The element type pointed to.
        pointee: String,
        /// The address space.
        space: AddressSpace,
        /// Whether the pointee is `const`.
        is_const: bool,
        /// Whether the parameter is a reference rather than a pointer.
        by_ref: bool,
    },
    /// `[[threadgroup(index)]]`: dynamic threadgroup memory of `pointee` elements.
    Threadgroup {
        /// The parameter's name.
        name: String,
        /// The threadgroup memory index.
        index: u32,
        /// The element type.
        pointee: String,
    },
    /// A thread-position builtin such as `[[thread_position_in_grid]]`; `ty` is its declared
    /// type (`uint`, `uint3`, `ushort2`, ...).
    Builtin {
        /// The parameter's name.
        name: String,
        /// The attribute's name, e.g. `thread_position_in_grid`.
        attribute: String,
        /// The declared type.
        ty: String,
    },
}

/// A kernel function that can be dispatched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name the host dispatches by (`[[host_name]]` for instantiations, else the function).
    pub host_name: String,
    /// The C++ expression that names the function to call, e.g. `my_kernel<float, 4>`.
    pub callee: String,
    /// The entry's parameters, in declaration order.
    pub params: Vec<EntryParam>,
}

/// Where a significant token stands, as the walk over the program found it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Context {
    /// Inside a function (or lambda) body.
    pub in_function: bool,
    /// At file or namespace scope, outside parentheses.
    pub file_scope: bool,
    /// Inside parentheses.
    pub in_parens: bool,
}

/// `constant T name [[function_constant(index)]];` at file scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FunctionConstant {
    /// The position of its `;`.
    pub end: usize,
    pub name: String,
    /// The declared type, as C++ text.
    pub ty: String,
    /// The attribute's index, when it is an integer.
    pub index: Option<u32>,
}

/// A program parsed once for every target.
pub(crate) struct ProgramParse {
    /// The preprocessed program's tokens.
    pub cursor: Cursor,
    /// For each significant token, where it stands.
    pub context: Vec<Context>,
    /// The dispatchable entries, in source order.
    pub entries: Vec<Entry>,
    /// Every kernel function by name (templates too), with its parameters.
    pub kernels: HashMap<String, Vec<EntryParam>>,
    /// Explicit instantiations: the position of `template` → the position of their `;`.
    pub instantiations: HashMap<usize, usize>,
    /// Function constant declarations by the position of their `constant`.
    pub function_constants: HashMap<usize, FunctionConstant>,
    /// Inclusive ranges of class template specialisations that repeat an earlier one but for
    /// address spaces (one thing once lowered).
    pub repeated: Vec<(usize, usize)>,
    /// The outline of the preprocessed tokens, with the cursor position of each of its tokens;
    /// built on first use.
    pub(crate) outline: OnceLock<(Outline, Vec<usize>)>,
}

impl ProgramParse {
    /// The entry named `host_name`.
    pub fn entry(&self, host_name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.host_name == host_name)
    }

    /// The outline of the preprocessed program (macros expanded where they are used, as the
    /// compilers see them, `#undef`s and inactive branches honoured; so it has no `#define`s of
    /// its own), and for each outline token its position in [`Self::cursor`].
    pub fn outline(&self) -> (&Outline, &[usize]) {
        let (outline, at) = self.outline.get_or_init(|| {
            let mut at = Vec::with_capacity(self.cursor.len());
            let mut toks = Vec::with_capacity(self.cursor.len());
            for k in 0..self.cursor.len() {
                let t = self.cursor.tok(k);
                if t.kind != crate::source::tokens::Kind::Preproc {
                    at.push(k);
                    toks.push(t.clone());
                }
            }
            (Outline::of_tokens(toks), at)
        });
        (outline, at)
    }
}

/// Parses `program`: preprocesses it (its macros expanded, inactive `#if` branches dropped, so
/// kernels produced by macros count like any other), then refuses what no target can express
/// (a comment, literal or bracket left open, brackets nested too deep, a call that ends the
/// process, overloads and specialisations that differ only in address spaces, a host name
/// defined twice) and finds its entries. Errors name the program's kernel.
pub(crate) fn parse(program: &MetalProgram) -> Result<ProgramParse> {
    #[cfg(test)]
    PARSES.with(|n| n.set(n.get() + 1));
    let error = |log: String| Error::Compile {
        backend: "translate",
        kernel: program.kernel.clone(),
        log: user_translate_log(program, &log),
    };
    let mut predefined = preprocess::METAL_PREDEFINED.to_vec();
    if program.math_mode == MathMode::Fast {
        predefined.push(("__FAST_MATH__", "1"));
    }
    let source = preprocess::preprocess(&program.source, &predefined).map_err(error)?;
    let cursor = Cursor::new(&source);
    cursor.check_nesting().map_err(error)?;
    let lines = UserLines::of(program);
    let part = |line: u32| match lines.part_of(line) {
        None => 0,
        Some("header") => 1,
        Some("body") => 2,
        Some(_) => 3,
    };
    cursor.check_closed(part).map_err(error)?;
    process_calls::check(&cursor).map_err(error)?;
    let mut repeated = overloads::check(&cursor).map_err(error)?;
    repeated.extend(this_space::repeats(&cursor).map_err(error)?);
    program::walk(cursor, repeated).map_err(error)
}

#[cfg(test)]
thread_local! {
    /// How many programs this thread has parsed (for tests of who parses).
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The one parse of a program, kept by the program's owner (a kernel's memo of one signature, a
/// library for all its functions) and handed to its launch contract and to every backend's
/// lowering, so a program's text is parsed once however many targets and devices compile it.
///
/// A slot belongs to one text under one math mode: a reader with another program (which an
/// owner never hands it) gets a parse of its own, not the kept one. Parse errors are not kept:
/// each reader reports its own, naming its kernel.
#[derive(Default)]
pub struct ParseSlot(OnceLock<(ParsedText, ProgramParse)>);

/// What a kept parse was made from, compared on every read (reads are rare: a signature's
/// contract, a backend's compile).
#[derive(PartialEq, Eq)]
struct ParsedText {
    math_mode: MathMode,
    source: String,
}

impl ParsedText {
    fn matches(&self, program: &MetalProgram) -> bool {
        self.math_mode == program.math_mode && self.source == program.source
    }
}

impl ParseSlot {
    /// The parse of `program`: the kept one, or [`parse`]d now and kept.
    pub(crate) fn parse(&self, program: &MetalProgram) -> Result<ParseRef<'_>> {
        if self.0.get().is_none() {
            let parsed = parse(program)?;
            let text = ParsedText { math_mode: program.math_mode, source: program.source.clone() };
            let _ = self.0.set((text, parsed));
        }
        match self.0.get() {
            Some((kept, parse)) if kept.matches(program) => Ok(ParseRef::Kept(parse)),
            _ => Ok(ParseRef::Own(Box::new(parse(program)?))),
        }
    }

    /// Whether the slot holds a parse.
    pub fn is_filled(&self) -> bool {
        self.0.get().is_some()
    }
}

impl std::fmt::Debug for ParseSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ParseSlot").field(&self.is_filled()).finish()
    }
}

/// A parse read from a [`ParseSlot`]: the kept one, or a reader's own.
pub(crate) enum ParseRef<'a> {
    Kept(&'a ProgramParse),
    Own(Box<ProgramParse>),
}

impl std::ops::Deref for ParseRef<'_> {
    type Target = ProgramParse;
    fn deref(&self) -> &ProgramParse {
        match self {
            ParseRef::Kept(p) => p,
            ParseRef::Own(p) => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ParseRef, ParseSlot};
    use crate::program::{MathMode, MetalProgram, ProgramKind};

    fn program() -> MetalProgram {
        MetalProgram {
            kernel: "once".into(),
            source: "kernel void k(device float* y [[buffer(0)]]) { y[0] = 1.0f; }\n".into(),
            kind: ProgramKind::FullFile,
            function: "k".into(),
            math_mode: MathMode::Safe,
            constants: vec![],
        }
    }

    #[test]
    fn a_slot_parses_its_program_once() {
        let slot = ParseSlot::default();
        let program = program();
        let first: *const _ = match slot.parse(&program).unwrap() {
            ParseRef::Kept(p) => p,
            ParseRef::Own(_) => panic!("the first parse was not kept"),
        };
        match slot.parse(&program).unwrap() {
            ParseRef::Kept(p) => assert!(std::ptr::eq(first, p), "the second reader parsed again"),
            ParseRef::Own(_) => panic!("the second reader parsed again"),
        }
    }

    #[test]
    fn a_slot_never_hands_out_the_parse_of_another_text() {
        let slot = ParseSlot::default();
        let program = program();
        slot.parse(&program).unwrap();
        let fast = MetalProgram { math_mode: MathMode::Fast, ..program.clone() };
        assert!(matches!(slot.parse(&fast).unwrap(), ParseRef::Own(_)), "another math mode is another parse");
        let other = MetalProgram { source: program.source.replace("k(", "k2("), function: "k2".into(), ..program };
        let parse = slot.parse(&other).unwrap();
        assert!(matches!(parse, ParseRef::Own(_)));
        assert!(parse.entry("k2").is_some() && parse.entry("k").is_none(), "the other text's own parse");
    }
}
