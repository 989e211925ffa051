//! Fiber stacks for cooperative kernels, shared by every kernel library of the process.
//!
//! The threads of a group with barriers or SIMD collectives run as fibers, each on a stack of
//! its own (256 KiB above a guard of nearly that size, `prelude/cpu/scheduler.h`): two memory
//! mappings per stack, and Linux allows a process `vm.max_map_count` of them (65 530 by
//! default). Stacks therefore live in sets of up to 1 024 lent to one `kiln_run` call at a time
//! and returned after it, so the process holds stacks for the calls running at once, not for
//! every pair of kernel library and worker thread. The sets together hold at most half the
//! mapping limit; a call that would pass it first unmaps idle sets, then waits for one to come
//! back (one is always in use when it waits, and returns without waiting on anything).

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::compile::ReleaseFn;

/// Stacks of one set (mirrors `kiln::rt::StackSet`); the library maps them on first use.
#[repr(C)]
pub struct StackSet {
    stacks: [*mut std::ffi::c_void; MAX_STACKS],
    count: u32,
}

/// Most stacks one call needs: the largest threadgroup.
pub const MAX_STACKS: usize = 1024;

/// A set holds stacks it mapped itself; moving it moves that ownership.
struct OwnedSet(Box<StackSet>);
// SAFETY: the mappings are used only by the one call the set is lent to at a time.
unsafe impl Send for OwnedSet {}

struct Pool {
    idle: Vec<OwnedSet>,
    /// Stacks mapped or promised: those of idle sets, of lent sets and what lent sets may map.
    reserved: usize,
}

fn pool() -> &'static (Mutex<Pool>, Condvar) {
    static POOL: OnceLock<(Mutex<Pool>, Condvar)> = OnceLock::new();
    POOL.get_or_init(|| (Mutex::new(Pool { idle: Vec::new(), reserved: 0 }), Condvar::new()))
}

/// Stacks the process may hold: half of `vm.max_map_count` mappings, two per stack, and never
/// fewer than one full set.
fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530);
        (maps / 4).max(MAX_STACKS)
    })
}

/// A set lent to one call, returned to the pool when dropped.
pub struct Lease {
    set: Option<OwnedSet>,
    /// Stacks this lease counts in `reserved` (at least the set's count).
    reserved: usize,
}

impl Lease {
    /// A set with room for `need` stacks within the budget; waits while other calls hold the
    /// stacks it would need. `release` unmaps a set's stacks (any kernel library's will do).
    pub fn take(need: usize, release: ReleaseFn) -> Lease {
        let need = need.clamp(1, MAX_STACKS);
        let (lock, ready) = pool();
        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // The idle set with the most stacks: no growth if it has enough.
            if let Some(i) = (0..p.idle.len()).max_by_key(|&i| p.idle[i].0.count) {
                let have = p.idle[i].0.count as usize;
                if have >= need || p.reserved + (need - have) <= budget() {
                    let set = p.idle.swap_remove(i);
                    p.reserved += need.saturating_sub(have);
                    return Lease { set: Some(set), reserved: have.max(need) };
                }
            } else if p.reserved + need <= budget() {
                p.reserved += need;
                let set = OwnedSet(Box::new(StackSet { stacks: [std::ptr::null_mut(); MAX_STACKS], count: 0 }));
                return Lease { set: Some(set), reserved: need };
            }
            if !unmap_smallest_idle(&mut p, release) {
                p = ready.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// The set, for the generated `kiln_run`.
    pub fn as_ptr(&mut self) -> *mut StackSet {
        self.set.as_mut().map_or(std::ptr::null_mut(), |s| &mut *s.0 as *mut StackSet)
    }
}

/// Unmaps the stacks of the idle set with the fewest (its budget goes back to the pool); false
/// when no idle set has any.
fn unmap_smallest_idle(p: &mut MutexGuard<'_, Pool>, release: ReleaseFn) -> bool {
    let Some(i) = (0..p.idle.len()).filter(|&i| p.idle[i].0.count > 0).min_by_key(|&i| p.idle[i].0.count) else {
        return false;
    };
    let mut set = p.idle.swap_remove(i);
    let freed = set.0.count as usize;
    // SAFETY: the set is idle (owned by the pool, lent to no call) and its stacks were mapped
    // by a kernel library's `stack_at`; any library's `kiln_release_stacks` unmaps them.
    unsafe { release(&mut *set.0) };
    p.reserved -= freed;
    true
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(set) = self.set.take() else { return };
        let (lock, ready) = pool();
        let mut p = lock.lock().unwrap_or_else(|e| e.into_inner());
        // What the call did not map goes back to the budget.
        p.reserved -= self.reserved - set.0.count as usize;
        p.idle.push(set);
        ready.notify_all();
    }
}
