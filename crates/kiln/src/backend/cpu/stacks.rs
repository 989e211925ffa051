//! Fiber stacks for cooperative kernels, shared by every kernel library of the process.
//!
//! The threads of a group with barriers or SIMD collectives run as fibers, each on a stack of
//! its own (256 KiB aligned to its size, above a guard as large, `prelude/cpu/scheduler.h`): two memory
//! mappings per stack, and Linux allows a process `vm.max_map_count` of them (65 530 by
//! default). Stacks therefore live in sets of up to 1 024 lent to one `kiln_run` call at a time
//! and returned after it, so the process holds stacks for the calls running at once, not for
//! every pair of kernel library and worker thread. The sets together hold at most half the
//! mapping limit; a call that would pass it first unmaps idle sets, then waits for one to come
//! back (one is always in use when it waits, and returns without waiting on anything). A set
//! also keeps the arena of the frames of threads run as coroutines (one mapping, made by the
//! first call that needs it and unmapped with the set's stacks).

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::abi::{ReleaseFn, StackSet, MAX_STACKS};

/// A set holds stacks it mapped itself; moving it moves that ownership.
struct OwnedSet(Box<StackSet>);
// SAFETY: the mappings are used only by the one call the set is lent to at a time.
unsafe impl Send for OwnedSet {}

struct PoolState {
    idle: Vec<OwnedSet>,
    /// Stacks mapped or promised: those of idle sets, of lent sets and what lent sets may map.
    reserved: usize,
}

/// Sets of stacks and the budget they share.
pub struct StackPool {
    state: Mutex<PoolState>,
    ready: Condvar,
    budget: usize,
}

/// The process's pool: half of `vm.max_map_count` mappings (two per stack), and never fewer
/// stacks than one full set.
pub fn pool() -> &'static StackPool {
    static POOL: OnceLock<StackPool> = OnceLock::new();
    POOL.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(65_530);
        StackPool::new(maps / 4)
    })
}

impl StackPool {
    pub fn new(budget: usize) -> StackPool {
        StackPool {
            state: Mutex::new(PoolState { idle: Vec::new(), reserved: 0 }),
            ready: Condvar::new(),
            budget: budget.max(MAX_STACKS),
        }
    }

    /// A set with room for `need` stacks within the budget; waits while other calls hold the
    /// stacks it would need. `release` unmaps a set's stacks (any kernel library's will do).
    pub fn take(&self, need: usize, release: ReleaseFn) -> Lease<'_> {
        let need = need.clamp(1, MAX_STACKS);
        let mut p = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // The idle set with the most stacks: no growth if it has enough.
            if let Some(i) = (0..p.idle.len()).max_by_key(|&i| p.idle[i].0.count) {
                let have = p.idle[i].0.count as usize;
                if have >= need || p.reserved + (need - have) <= self.budget {
                    let set = p.idle.swap_remove(i);
                    p.reserved += need.saturating_sub(have);
                    return Lease { pool: self, set: Some(set), reserved: have.max(need) };
                }
            } else if p.reserved + need <= self.budget {
                p.reserved += need;
                let set = OwnedSet(Box::new(StackSet::empty()));
                return Lease { pool: self, set: Some(set), reserved: need };
            }
            if !unmap_smallest_idle(&mut p, release) {
                p = self.ready.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// A set lent to one call, returned to its pool when dropped.
pub struct Lease<'a> {
    pool: &'a StackPool,
    set: Option<OwnedSet>,
    /// Stacks this lease counts in `reserved` (at least the set's count).
    reserved: usize,
}

impl Lease<'_> {
    /// The set, for the generated `kiln_run`.
    pub fn as_ptr(&mut self) -> *mut StackSet {
        self.set.as_mut().map_or(std::ptr::null_mut(), |s| &mut *s.0 as *mut StackSet)
    }
}

/// Unmaps the stacks of the idle set with the fewest (its budget goes back to the pool); false
/// when no idle set has any.
fn unmap_smallest_idle(p: &mut MutexGuard<'_, PoolState>, release: ReleaseFn) -> bool {
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

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let Some(set) = self.set.take() else { return };
        let mut p = self.pool.state.lock().unwrap_or_else(|e| e.into_inner());
        // What the call did not map goes back to the budget.
        p.reserved -= self.reserved - set.0.count as usize;
        p.idle.push(set);
        self.pool.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    static RELEASED: AtomicUsize = AtomicUsize::new(0);

    /// Stands in for `kiln_release_stacks`: forgets the (never mapped) stacks.
    unsafe extern "C" fn forget(set: *mut StackSet) {
        // SAFETY: the pool passes an idle set it owns.
        unsafe { (*set).count = 0 };
        RELEASED.fetch_add(1, Ordering::SeqCst);
    }

    /// What the kernel library does while it runs: maps `n` stacks of the lent set.
    fn map(lease: &mut Lease<'_>, n: u32) {
        // SAFETY: the lease owns the set for its lifetime.
        unsafe { (*lease.as_ptr()).count = n };
    }

    #[test]
    fn calls_past_the_budget_wait_for_a_set_to_come_back() {
        let pool = StackPool::new(2 * MAX_STACKS);
        let mut a = pool.take(MAX_STACKS, forget);
        let mut b = pool.take(MAX_STACKS, forget);
        map(&mut a, 1024);
        map(&mut b, 1024);
        let pool = &pool;
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            s.spawn(move || {
                let mut c = pool.take(MAX_STACKS, forget);
                tx.send(c.as_ptr() as usize).unwrap();
            });
            // Both sets are lent and the budget is spent: the third call waits.
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            let given = a.as_ptr() as usize;
            drop(a);
            // It gets the returned set, full of stacks, without mapping more.
            assert_eq!(rx.recv_timeout(Duration::from_secs(20)).unwrap(), given);
        });
        drop(b);
    }

    #[test]
    fn idle_sets_too_small_are_unmapped_to_make_room() {
        let pool = StackPool::new(MAX_STACKS);
        let mut a = pool.take(512, forget);
        let mut b = pool.take(512, forget);
        map(&mut a, 512);
        map(&mut b, 512);
        drop(a);
        drop(b);
        // Two idle sets of 512 hold the whole budget; a call needing 1024 unmaps one and grows
        // the other.
        let before = RELEASED.load(Ordering::SeqCst);
        let mut c = pool.take(MAX_STACKS, forget);
        assert_eq!(RELEASED.load(Ordering::SeqCst), before + 1);
        // SAFETY: the lease owns the set.
        assert_eq!(unsafe { (*c.as_ptr()).count }, 512);
        map(&mut c, 1024);
        drop(c);
        assert_eq!(pool.state.lock().unwrap().reserved, MAX_STACKS);
    }
}
