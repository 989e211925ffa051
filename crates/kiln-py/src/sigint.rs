//! Ctrl-C for a CPU launch that runs on Python's main thread. Python's own SIGINT handler only
//! marks the signal for the interpreter to raise `KeyboardInterrupt` at its next check, which a
//! thread busy running a kernel never reaches. A launch puts a handler in front of Python's
//! where it is not already there, and it stays: while a launch runs ([`Forward`] lives) it sets
//! the launch's cancel flag (the kernel stops at its next poll), and it always calls the handler
//! it was put in front of, so a Ctrl-C outside launches is Python's alone, as before. A program
//! that installs a SIGINT handler (`signal.signal`, even the one it had: saving and restoring a
//! handler reinstalls Python's C function) replaces ours; each launch reads SIGINT's disposition
//! (one `sigaction` query) and puts ours in front again where it was replaced. Where SIGINT has
//! no handler of Python's to chain to (ignored, or the default action), none is put in front and
//! the caller runs the launch another way.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

/// The cancel flag of the launch running on the main thread, while a [`Forward`] lives.
static CANCEL: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());
/// The handler ours forwards to. Each disposition published here stays allocated for the life
/// of the process: a signal may arrive, and read it, at any time.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises putting ours in front (the main thread's launches; a test's threads).
static INSTALLING: Mutex<()> = Mutex::new(());

/// While it lives, SIGINT sets the launch's cancel flag before reaching Python's handler.
pub struct Forward(());

impl Forward {
    /// Publishes `cancel` to the forwarding handler, putting that in front of SIGINT's handler
    /// first where it is not; `None` when SIGINT has no handler function to forward to, or when
    /// ours cannot be installed. Called on Python's main thread (`_py` held).
    pub fn install(_py: Python<'_>, cancel: &Arc<AtomicBool>) -> Option<Forward> {
        let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        if !put_ours_in_front() {
            return None;
        }
        CANCEL.store(Arc::as_ptr(cancel) as *mut AtomicBool, Ordering::SeqCst);
        Some(Forward(()))
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
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
