//! Ctrl-C for a CPU launch that runs on Python's main thread. Python's own SIGINT handler only
//! marks the signal for the interpreter to raise `KeyboardInterrupt` at its next check, which a
//! thread busy running a kernel never reaches. The first such launch puts a handler in front of
//! Python's, and it stays there: while a launch runs ([`Forward`] lives) it sets the launch's
//! cancel flag (the kernel stops at its next poll), and it always calls the handler it was put in
//! front of, so a Ctrl-C outside launches is Python's alone, as before. A program that installs
//! a SIGINT handler (`signal.signal`) replaces ours: the next launch sees that Python's handler
//! object changed and puts ours in front again (one `sigaction` query and swap; a launch whose
//! handler object is unchanged makes no system call). Reinstalling the same handler object (a
//! program saving and restoring its handler) replaces ours unseen by that test, so while a launch
//! runs the CPU backend's watcher also checks, on each of its ticks (`on_cancellable_tick`, every
//! 10 ms), that ours is still in front and puts it back: a long kernel stays stoppable, for one
//! system call per tick rather than per launch. Where SIGINT has no handler of Python's to chain
//! to (ignored, or the default action), none is put in front and the caller runs the launch
//! another way.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, Once};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The cancel flag of the launch running on the main thread, while a [`Forward`] lives.
static CANCEL: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());
/// The handler ours forwards to. Each disposition published here stays allocated for the life
/// of the process: a signal may arrive, and read it, at any time.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
/// Python's SIGINT handler object (`python_handler`) when ours was put in front of it.
static FRONTED: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

/// While it lives, SIGINT sets the launch's cancel flag before reaching Python's handler.
pub struct Forward(());

impl Forward {
    /// Publishes `cancel` to the forwarding handler, putting that in front of SIGINT's handler
    /// first where it is not; `None` when SIGINT has no handler function to forward to, or when
    /// ours cannot be installed. Called on Python's main thread (`py` held).
    pub fn install(py: Python<'_>, cancel: &Arc<AtomicBool>) -> Option<Forward> {
        static WATCHED: Once = Once::new();
        WATCHED.call_once(|| kiln::backend::cpu::on_cancellable_tick(keep_ours_in_front));
        let python_handler = python_handler(py)?;
        let mut fronted = FRONTED.lock().unwrap_or_else(|e| e.into_inner());
        if !fronted.as_ref().is_some_and(|h| python_handler.is(h)) {
            *fronted = None;
            if !put_ours_in_front() {
                return None;
            }
            *fronted = Some(python_handler.unbind());
        }
        CANCEL.store(Arc::as_ptr(cancel) as *mut AtomicBool, Ordering::SeqCst);
        Some(Forward(()))
    }
}

/// The watcher's tick while a launch runs: ours back in front of SIGINT's handler where the
/// program reinstalled its own (`FRONTED`'s lock keeps this and `install` apart).
fn keep_ours_in_front() {
    let _fronted = FRONTED.lock().unwrap_or_else(|e| e.into_inner());
    if !CANCEL.load(Ordering::SeqCst).is_null() {
        put_ours_in_front();
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
}

/// `_signal.getsignal(SIGINT)` (the C function behind `signal.getsignal`, without its Python
/// wrapper's enum conversion): the handler object Python holds, which changes whenever the
/// program installs another.
fn python_handler(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    static GETSIGNAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let getsignal =
        GETSIGNAL.get_or_try_init(py, || py.import("_signal")?.getattr("getsignal").map(Bound::unbind)).ok()?;
    getsignal.bind(py).call1((libc::SIGINT,)).ok()
}

/// Installs `on_sigint` in front of SIGINT's handler function; false (and nothing changed) when
/// SIGINT has none (ignored, the default action) or `sigaction` fails.
fn put_ours_in_front() -> bool {
    let ours_address = on_sigint as *const () as usize;
    // SAFETY: an all-zero `sigaction` is a valid value of the C struct (no handler, no flags,
    // an empty mask).
    let mut current: Box<libc::sigaction> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: with no new disposition, `sigaction` only reads the current one into `current`.
    let read = unsafe { libc::sigaction(libc::SIGINT, std::ptr::null(), &mut *current) } == 0;
    if !read {
        return false;
    }
    let handler = current.sa_sigaction;
    if handler == ours_address {
        return true;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return false;
    }
    // Published before ours is installed, so a SIGINT right after the swap reaches it; kept for
    // the life of the process (above).
    PREVIOUS.store(Box::leak(current), Ordering::SeqCst);
    // SAFETY: as above, a valid all-zero struct, filled in below.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = ours_address;
    // As Python installs its own: interrupted system calls return EINTR, not restart.
    ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: `sa_mask` is ours to initialise; `on_sigint` only touches atomics and calls the
    // published handler, as a signal handler may.
    unsafe {
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(libc::SIGINT, &ours, std::ptr::null_mut()) == 0
    }
}

extern "C" fn on_sigint(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let cancel = CANCEL.load(Ordering::SeqCst);
    if !cancel.is_null() {
        // SAFETY: the flag is kept alive by the launch's caller while `Forward` lives (it
        // unpublishes the pointer before returning).
        unsafe { (*cancel).store(true, Ordering::SeqCst) };
    }
    let previous = PREVIOUS.load(Ordering::SeqCst);
    if previous.is_null() {
        return;
    }
    // SAFETY: `previous` points at the disposition `install` read, alive while published.
    let (handler, flags) = unsafe { ((*previous).sa_sigaction, (*previous).sa_flags) };
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return;
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO the installed value is a three-argument handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the installed value is a one-argument handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}
