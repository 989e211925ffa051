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

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

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
    pub(crate) outline: std::cell::OnceCell<(Outline, Vec<usize>)>,
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

/// Parses kept, per thread, for the programs that thread parsed last, so that the one parse of
/// a program feeds both its launch validation (read before its first compile) and its lowering
/// (at that compile), which a launch runs on its caller's thread.
const RECENT_PARSES: usize = 4;

type RecentParses = VecDeque<(MathMode, String, Rc<ProgramParse>)>;

thread_local! {
    static RECENT: RefCell<RecentParses> = const { RefCell::new(VecDeque::new()) };
}

/// The parse of `program` ([`parse`]), shared with this thread's recent parse of the same text
/// under the same math mode. Errors are not kept: each caller gets its own, naming its kernel.
pub(crate) fn parse_shared(program: &MetalProgram) -> Result<Rc<ProgramParse>> {
    let same = |(mode, source, _): &&(MathMode, String, Rc<ProgramParse>)| {
        *mode == program.math_mode && *source == program.source
    };
    if let Some(hit) = RECENT.with(|r| r.borrow().iter().find(same).map(|e| e.2.clone())) {
        return Ok(hit);
    }
    let parsed = Rc::new(parse(program)?);
    RECENT.with(|r| {
        let mut recent = r.borrow_mut();
        if recent.len() == RECENT_PARSES {
            recent.pop_front();
        }
        recent.push_back((program.math_mode, program.source.clone(), parsed.clone()));
    });
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::parse_shared;
    use crate::program::{MathMode, MetalProgram, ProgramKind};

    #[test]
    fn a_program_validated_before_its_compile_is_parsed_once() {
        let program = MetalProgram {
            kernel: "once".into(),
            source: "kernel void k(device float* y [[buffer(0)]]) { y[0] = 1.0f; }\n".into(),
            kind: ProgramKind::FullFile,
            function: "k".into(),
            math_mode: MathMode::Safe,
            constants: vec![],
        };
        let first = parse_shared(&program).unwrap();
        assert!(Rc::ptr_eq(&first, &parse_shared(&program).unwrap()), "the second reader parsed again");
        let fast = MetalProgram { math_mode: MathMode::Fast, ..program.clone() };
        assert!(!Rc::ptr_eq(&first, &parse_shared(&fast).unwrap()), "another math mode is another parse");
    }
}
