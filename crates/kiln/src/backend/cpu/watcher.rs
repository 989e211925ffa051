//! One thread for the whole process that stops CPU launches past their timeout or whose
//! caller set their cancel flag, instead of a thread started (and torn down) for every launch
//! that has either. A launch registers its flags for as long as it runs ([`watch`]); the
//! watcher sleeps until the nearest deadline, or polls the callers' flags every
//! [`CANCEL_POLL`] while one is registered, and keeps that tick for [`LINGER`] after the last
//! launch left, then waits to be woken. A launch registering while the watcher will wake soon
//! enough anyway (the common case of back-to-back calls) does not wake it: a wake-up is a
//! context switch per launch.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the watcher looks at the callers' cancel flags.
pub(super) const CANCEL_POLL: Duration = Duration::from_millis(10);

/// What the watcher calls on each tick while a launch whose caller can cancel it runs (see
/// [`on_cancellable_tick`]); none until one is set.
static CANCELLABLE_TICK: Mutex<Option<fn()>> = Mutex::new(None);

/// Has the watcher call `hook` on each of its ticks (every 10 ms) while a launch with a
/// caller's cancel flag runs, from the watcher's thread: for work that keeps a long launch
/// cancellable and is too costly for every launch (the Python package's check that its SIGINT
/// handler is still in front). The last hook set is the one called.
pub fn on_cancellable_tick(hook: fn()) {
    *CANCELLABLE_TICK.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
}

/// How long the watcher keeps ticking after the last launch it watched ended.
const LINGER: Duration = Duration::from_secs(1);

/// What `why` is set to when the watcher stops a launch.
pub(super) const TIMED_OUT: i32 = 1;
pub(super) const CANCELLED: i32 = 2;

/// One running launch's flags.
struct Watched {
    id: u64,
    deadline: Option<Instant>,
    caller: *const AtomicBool,
    /// The kernel's own stop flag (set to 1 to stop it).
    cancel: *const AtomicI32,
    /// Why it was stopped (0 until then).
    why: *const AtomicI32,
}

// SAFETY: the pointers are only read while the registry's lock is held, and the launch that
// owns the atomics removes its entry under that lock before they go out of scope (`Watch::drop`).
unsafe impl Send for Watched {}

#[derive(Default)]
struct Registry {
    next_id: u64,
    watched: Vec<Watched>,
    /// When the watcher's current sleep ends (`None`: it sleeps until woken).
    wakes_at: Option<Instant>,
    /// When the last watched launch ended.
    last_left: Option<Instant>,
}

struct Watcher {
    registry: Mutex<Registry>,
    wake: Condvar,
}

/// The watcher, started on first use; why not when its thread cannot start.
fn watcher() -> Result<&'static Watcher, String> {
    static WATCHER: OnceLock<Result<&'static Watcher, String>> = OnceLock::new();
    WATCHER
        .get_or_init(|| {
            let w: &'static Watcher = Box::leak(Box::new(Watcher { registry: Mutex::default(), wake: Condvar::new() }));
            std::thread::Builder::new()
                .name("kiln-cpu-watcher".into())
                .spawn(move || w.run())
                .map(|_| w)
                .map_err(|e| format!("cannot start the thread that stops CPU kernels past their timeout: {e}"))
        })
        .clone()
}

impl Watcher {
    fn run(&self) {
        let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let mut wait: Option<Duration> = None;
            for w in &registry.watched {
                // SAFETY: see `Watched`: the entry is registered, so its atomics are alive.
                let (caller, cancel, why) = unsafe { (w.caller.as_ref(), &*w.cancel, &*w.why) };
                if why.load(Ordering::SeqCst) != 0 {
                    continue;
                }
                let stop = if caller.is_some_and(|c| c.load(Ordering::SeqCst)) {
                    CANCELLED
                } else if w.deadline.is_some_and(|d| now >= d) {
                    TIMED_OUT
                } else {
                    let left = w.deadline.map(|d| d - now);
                    let next = match (left, caller.is_some()) {
                        (Some(left), true) => left.min(CANCEL_POLL),
                        (Some(left), false) => left,
                        (None, _) => CANCEL_POLL,
                    };
                    wait = Some(wait.map_or(next, |w| w.min(next)));
                    continue;
                };
                why.store(stop, Ordering::SeqCst);
                cancel.store(1, Ordering::SeqCst);
            }
            let cancellable = registry.watched.iter().any(|w| !w.caller.is_null());
            // With no launch left, keep the poll's tick a while, so the next launch of a run of
            // calls finds the watcher awake soon enough and needs no wake-up.
            if registry.watched.is_empty() && registry.last_left.is_some_and(|t| now.duration_since(t) < LINGER) {
                wait = Some(CANCEL_POLL);
            }
            registry.wakes_at = wait.map(|w| now + w);
            let hook = *CANCELLABLE_TICK.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(hook) = hook.filter(|_| cancellable) {
                drop(registry);
                hook();
                registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            }
            registry = match wait {
                Some(wait) => self.wake.wait_timeout(registry, wait).unwrap_or_else(|e| e.into_inner()).0,
                None => self.wake.wait(registry).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// A launch's registration; dropping it ends the watch.
pub(super) struct Watch {
    id: u64,
    watcher: &'static Watcher,
}

/// Watches a launch until the returned value is dropped: past `timeout` from now, or once
/// `caller` is set, `why` becomes [`TIMED_OUT`] or [`CANCELLED`] and `cancel` 1. The atomics
/// must outlive the returned value.
pub(super) fn watch(
    timeout: Option<Duration>,
    caller: Option<&AtomicBool>,
    cancel: &AtomicI32,
    why: &AtomicI32,
) -> Result<Watch, String> {
    let w = watcher()?;
    let mut registry = w.registry.lock().unwrap_or_else(|e| e.into_inner());
    registry.next_id += 1;
    let id = registry.next_id;
    let now = Instant::now();
    let deadline = timeout.map(|t| now + t);
    // The latest the watcher may first look at this launch: its deadline, or a poll from now.
    let first_look = match (deadline, caller.is_some()) {
        (Some(d), true) => d.min(now + CANCEL_POLL),
        (Some(d), false) => d,
        (None, _) => now + CANCEL_POLL,
    };
    registry.watched.push(Watched {
        id,
        deadline,
        caller: caller.map_or(std::ptr::null(), |c| c as *const AtomicBool),
        cancel,
        why,
    });
    let wake = registry.wakes_at.is_none_or(|t| t > first_look);
    drop(registry);
    if wake {
        w.wake.notify_one();
    }
    Ok(Watch { id, watcher: w })
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut registry = self.watcher.registry.lock().unwrap_or_else(|e| e.into_inner());
        registry.watched.retain(|w| w.id != self.id);
        registry.last_left = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cancellable_tick_runs_while_a_cancellable_launch_is_watched() {
        use std::sync::atomic::AtomicUsize;
        static TICKS: AtomicUsize = AtomicUsize::new(0);
        on_cancellable_tick(|| {
            TICKS.fetch_add(1, Ordering::SeqCst);
        });
        let (cancel, why, caller) = (AtomicI32::new(0), AtomicI32::new(0), AtomicBool::new(false));
        let before = TICKS.load(Ordering::SeqCst);
        let watch = super::watch(None, Some(&caller), &cancel, &why).unwrap();
        let start = Instant::now();
        while TICKS.load(Ordering::SeqCst) < before + 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "the watcher never called the hook");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(watch);
        assert_eq!(cancel.load(Ordering::SeqCst), 0, "the hook stops nothing");
    }

    #[test]
    fn stops_past_the_deadline_or_when_the_caller_asks_and_forgets_finished_launches() {
        let (cancel, why) = (AtomicI32::new(0), AtomicI32::new(0));
        let start = Instant::now();
        let first = watch(Some(Duration::from_millis(30)), None, &cancel, &why).unwrap();
        while cancel.load(Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the deadline never fired");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert_eq!(why.load(Ordering::SeqCst), TIMED_OUT);
        let first_id = first.id;
        drop(first);

        let (cancel, why, caller) = (AtomicI32::new(0), AtomicI32::new(0), AtomicBool::new(false));
        let watch = super::watch(None, Some(&caller), &cancel, &why).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(cancel.load(Ordering::SeqCst), 0, "nothing asked it to stop");
        caller.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while cancel.load(Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the caller's flag was never seen");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(why.load(Ordering::SeqCst), CANCELLED);
        let second_id = watch.id;
        drop(watch);
        let registry = watcher().unwrap().registry.lock().unwrap();
        assert!(
            registry.watched.iter().all(|w| w.id != first_id && w.id != second_id),
            "finished launches are forgotten"
        );
    }
}
