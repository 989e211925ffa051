//! What the kernel sanitizer finds (`kiln check`): one [`Finding`] per problem, on the user's
//! own lines, and the per-thread collection a checked CPU launch hands its findings to. Below
//! the backends, which report into it; `sanitize::check` opens a collection around a call.

use std::cell::RefCell;

use serde_json::{json, Value};

use crate::source::user_lines::{excerpt, UserLine};

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// Wrong on some GPU or schedule: `kiln check` exits with 2.
    Error,
    /// Works where lanes run in lockstep or barriers order all memory, or harmless as written
    /// (load, then select; a shuffle value that is discarded).
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

/// Runs `f` with every CPU launch made from this thread handing its findings here (see
/// `sanitize::check`), and returns beside its result the findings of those launches.
pub fn collecting<R>(f: impl FnOnce() -> R) -> (R, Vec<Finding>) {
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

/// The findings as one JSON array (what `kiln check --json` prints).
pub fn to_json(findings: &[Finding]) -> Value {
    Value::Array(
        findings
            .iter()
            .map(|f| {
                let line = |l: &Option<UserLine>| l.as_ref().map(|l| l.line);
                let text = |l: &Option<UserLine>| l.as_ref().map(|l| l.text.clone());
                let mut lines: Vec<u32> = [line(&f.line), line(&f.other_line)].into_iter().flatten().collect();
                lines.sort_unstable();
                lines.dedup();
                json!({
                    "kind": f.kind,
                    "severity": f.severity.as_str(),
                    "kernel": f.kernel,
                    "line": line(&f.line),
                    "text": text(&f.line),
                    "part": f.line.as_ref().map(|l| l.part),
                    "file": f.line.as_ref().and_then(|l| l.file.clone()),
                    "other_line": line(&f.other_line),
                    "other_text": text(&f.other_line),
                    "other_file": f.other_line.as_ref().and_then(|l| l.file.clone()),
                    "lines": lines,
                    "threads": f.threads.iter().map(|t| t.0).collect::<Vec<_>>(),
                    "thread_positions": f.threads.iter().map(|t| t.1.to_vec()).collect::<Vec<_>>(),
                    "buffer": f.buffer,
                    "index": f.index,
                    "count": f.count,
                    "distance": f.distance,
                    "message": f.message,
                })
            })
            .collect(),
    )
}
