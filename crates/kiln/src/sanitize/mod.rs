//! `kiln check`: the kernel sanitizer. A checked launch runs on the CPU emulator with every load
//! and store of the kernel recorded (see `backend::cpu::sanitize`) and reports, on the user's
//! own lines:
//!
//! - `race`: two accesses to one address, at least one a write, not both atomic, that no barrier
//!   orders (threadgroup memory within a group; device memory across the whole launch). Between
//!   lanes of one SIMD group with no SIMD-group function or `simdgroup_barrier` between, a
//!   warning: the kernel relies on lanes running in lockstep.
//! - `uninitialized-read`: a read of threadgroup memory no thread of the group wrote, or of an
//!   output element (without `init_value`) no thread wrote.
//! - `unwritten-output`: output elements no thread wrote (outputs without `init_value`), and
//!   elements written by several threads without atomics.
//! - `barrier-divergence`: a barrier that some threads of the group left the kernel before, or
//!   that threads reached at different barriers.
//! - `out-of-bounds`: accesses outside a buffer or threadgroup array, with the distance; a read
//!   whose value never reached an output (load, then select) is a warning.
//!
//! `check(|| ...)` collects the findings of every CPU launch made from the closure's thread;
//! `CpuBackend::sanitize(true)` runs its own launches checked.

mod lines;
mod report;

use std::cell::RefCell;

pub use lines::{excerpt, user_compile_error, user_compile_log, UserLine, UserLines};
pub use report::{findings_of, to_json};

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Wrong on some GPU or schedule: `kiln check` exits with 2.
    Error,
    /// Works where lanes run in lockstep, or harmless as written (load, then select).
    Warning,
}

impl Severity {
    /// `"error"` or `"warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One thing the sanitizer found in one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// `race`, `uninitialized-read`, `unwritten-output`, `barrier-divergence` or `out-of-bounds`.
    pub kind: &'static str,
    /// How serious the finding is.
    pub severity: Severity,
    /// The kernel's name.
    pub kernel: String,
    /// The user's line (1-based in the body, header or `.metal` file) and its text.
    pub line: Option<UserLine>,
    /// The other access of a race (or the barrier others reached).
    pub other_line: Option<UserLine>,
    /// Global linear indices (and `thread_position_in_grid`) of the threads involved.
    pub threads: Vec<(u64, [u32; 3])>,
    /// The buffer or threadgroup array's name.
    pub buffer: Option<String>,
    /// Element index of the first occurrence (negative: before the start).
    pub index: Option<i64>,
    /// How many times it happened (accesses, elements or threads).
    pub count: u64,
    /// For out-of-bounds accesses: elements outside (before the start or past the end).
    pub distance: Option<i64>,
    /// One sentence saying what happened.
    pub message: String,
}

impl Finding {
    /// The finding as text: a headline, then the line with a caret under the memory's name.
    pub fn render(&self) -> String {
        let mut out = format!("{}[{}] {}: {}", self.severity.as_str(), self.kind, self.kernel, self.message);
        for l in self.line.iter().chain(&self.other_line) {
            out.push('\n');
            out.push_str(&excerpt(l, self.buffer.as_deref()));
        }
        out
    }
}

thread_local! {
    static COLLECTED: RefCell<Option<Vec<Finding>>> = const { RefCell::new(None) };
}

/// Runs `f` with every CPU launch made from this thread checked by the sanitizer, and returns
/// beside its result the findings of those launches. Launches run one at a time in the process
/// while checked, on the calling thread.
pub fn check<R>(f: impl FnOnce() -> R) -> (R, Vec<Finding>) {
    let previous = COLLECTED.with(|c| c.replace(Some(Vec::new())));
    let out = f();
    let found = COLLECTED.with(|c| c.replace(previous)).unwrap_or_default();
    (out, found)
}

/// Whether launches from this thread are being checked (inside `check`).
pub fn active() -> bool {
    COLLECTED.with(|c| c.borrow().is_some())
}

/// Adds findings to this thread's collection (inside `check`); returns them when there is none.
pub fn collect(findings: Vec<Finding>) -> Option<Vec<Finding>> {
    COLLECTED.with(|c| match c.borrow_mut().as_mut() {
        Some(all) => {
            all.extend(findings);
            None
        }
        None => Some(findings),
    })
}

#[cfg(test)]
mod tests;
