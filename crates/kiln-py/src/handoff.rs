//! The result of a launch run on an emulator worker thread, handed back to the calling thread,
//! which waits for it while it checks Python's signal handlers. The caller first spins for a
//! moment ([`SPIN`]): a small kernel's result arrives within microseconds, sooner than a
//! sleeping thread is woken; then it sleeps in slices, and the worker wakes it only if it sleeps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long the caller spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// One result in flight from a worker to the caller.
pub struct Handoff<T> {
    slot: Mutex<Slot<T>>,
    ready: AtomicBool,
    wake: Condvar,
}

struct Slot<T> {
    value: Option<T>,
    sleeping: bool,
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Handoff {
            slot: Mutex::new(Slot { value: None, sleeping: false }),
            ready: AtomicBool::new(false),
            wake: Condvar::new(),
        }
    }
}

impl<T> Handoff<T> {
    /// Gives the result to the caller (the worker's side, once).
    pub fn put(&self, value: T) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.value = Some(value);
        self.ready.store(true, Ordering::Release);
        if slot.sleeping {
            self.wake.notify_one();
        }
    }

    /// The result, once it is there: spins first (only on the first call), then waits at most
    /// `slice`; `None` when the slice passed without it.
    pub fn take(&self, slice: Duration, spin: bool) -> Option<T> {
        if spin {
            let start = Instant::now();
            while !self.ready.load(Ordering::Acquire) && start.elapsed() < SPIN {
                std::hint::spin_loop();
            }
        }
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.value.is_none() {
            slot.sleeping = true;
            slot = self.wake.wait_timeout(slot, slice).unwrap_or_else(|e| e.into_inner()).0;
            slot.sleeping = false;
        }
        slot.value.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_arrives_whether_it_comes_while_the_caller_spins_or_sleeps() {
        for delay in [Duration::ZERO, Duration::from_millis(30)] {
            let handoff = Handoff::default();
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(delay);
                    handoff.put(7);
                });
                let mut got = handoff.take(Duration::from_millis(5), true);
                let mut slices = 0;
                while got.is_none() {
                    slices += 1;
                    assert!(slices < 1000, "no result");
                    got = handoff.take(Duration::from_millis(5), false);
                }
                assert_eq!(got, Some(7));
            });
        }
    }
}
