//! Threadgroup memory for kernel library calls. Every threadgroup array of a running group (a
//! `threadgroup` declaration or a `[[threadgroup(n)]]` parameter) lives in a region of its own
//! between guard ranges (`prelude/cpu/threadgroup.h`), so a write past it faults and is reported
//! as `Error::KernelFault` naming the array. The regions are mapped once and reused: they come
//! in arenas lent to one `kiln_run` call at a time, shared by every kernel library of the
//! process, so the process holds the regions of the calls running at once (a few mappings
//! each), not of every pair of kernel library and worker thread.

use std::sync::{Mutex, OnceLock};

use super::abi::{ThreadgroupArena, ARENA_SLOTS};

/// Arenas not lent to any call.
fn idle() -> &'static Mutex<Vec<Box<ThreadgroupArena>>> {
    static IDLE: OnceLock<Mutex<Vec<Box<ThreadgroupArena>>>> = OnceLock::new();
    IDLE.get_or_init(|| Mutex::new(Vec::new()))
}

/// An arena lent to one call, returned when dropped.
pub struct ArenaLease(Option<Box<ThreadgroupArena>>);

/// An idle arena, or a fresh one when every arena is lent.
pub fn take() -> ArenaLease {
    let reused = idle().lock().unwrap_or_else(|e| e.into_inner()).pop();
    ArenaLease(Some(reused.unwrap_or_else(|| Box::new(ThreadgroupArena { regions: [[0; 8]; ARENA_SLOTS] }))))
}

impl ArenaLease {
    /// The arena, for the generated `kiln_run`.
    pub fn as_ptr(&mut self) -> *mut ThreadgroupArena {
        self.0.as_mut().map_or(std::ptr::null_mut(), |a| &mut **a as *mut ThreadgroupArena)
    }
}

impl Drop for ArenaLease {
    fn drop(&mut self) {
        if let Some(arena) = self.0.take() {
            idle().lock().unwrap_or_else(|e| e.into_inner()).push(arena);
        }
    }
}
