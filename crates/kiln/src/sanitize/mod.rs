//! `kiln check`: the kernel sanitizer. A checked launch runs on the CPU emulator with every load
//! and store of the kernel recorded (see `backend::cpu::sanitize`) and reports, on the user's
//! own lines:
//!
//! - `race`: two accesses to one address, at least one a write, not both atomic, that no barrier
//!   orders: threads of one group are ordered by a `threadgroup_barrier` whose flags name the
//!   memory (`mem_threadgroup` for threadgroup memory, `mem_device` for device memory), threads
//!   of different groups never. Across a barrier that names other memory (`mem_none`), a warning:
//!   it orders execution, and Metal leaves the memory unordered. Between lanes of one SIMD group,
//!   any barrier or SIMD-group function orders them; with none between, a warning: the kernel
//!   relies on lanes running in lockstep. An error race comes with its consequence where one
//!   shows: the launch runs again under another legal schedule and an output element that
//!   differs is named with both values.
//! - `uninitialized-read`: a read of threadgroup memory no thread of the group wrote, of an
//!   output element (without `init_value`) no thread wrote, or of an element of a private array
//!   its thread had not written.
//! - `unwritten-output`: output elements no thread wrote (outputs without `init_value`), and
//!   elements written by several threads without atomics and with nothing ordering the writes.
//! - `barrier-divergence`: a barrier that some threads of the group left the kernel before, or
//!   that threads reached at different barriers (one source barrier reached along different
//!   paths is one barrier); and a shuffle that read a lane not taking part in the call (a
//!   warning when the value read changed no output). Reductions, scans and votes over the
//!   active lanes are defined in Metal and not reported.
//! - `out-of-bounds`: accesses outside a buffer or threadgroup array, with the distance; a read
//!   whose value never reached an output (load, then select) is a warning.
//!
//! `check(|| ...)` collects the findings of every CPU launch made from the closure's thread;
//! `CpuBackend::sanitize(true)` runs its own launches checked.

use crate::finding::collecting;

pub use crate::backend::cpu::sanitize_report::findings_of;
pub use crate::finding::{active, collect, to_json, Finding, Severity};
pub use crate::source::user_lines::{excerpt, user_compile_error, user_compile_log, UserLine, UserLines};

/// Runs `f` with every CPU launch made from this thread checked by the sanitizer, and returns
/// beside its result the findings of those launches. Launches run one at a time in the process
/// while checked, on the calling thread.
pub fn check<R>(f: impl FnOnce() -> R) -> (R, Vec<Finding>) {
    collecting(f)
}

#[cfg(test)]
mod tests;
