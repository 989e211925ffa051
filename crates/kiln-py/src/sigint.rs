//! Ctrl-C for a CPU launch that runs on Python's main thread. Python's own SIGINT handler only
//! marks the signal for the interpreter to raise `KeyboardInterrupt` at its next check, which a
//! thread busy running a kernel never reaches. While such a launch runs, [`Forward`] puts a
//! handler in front of Python's: it sets the launch's cancel flag (the kernel stops at its next
//! poll) and calls Python's handler, so the interpreter raises as usual once the launch returns.
//! The caller's handler is put back afterwards (unless someone replaced ours meanwhile). Where
//! SIGINT has no handler of Python's to chain to (ignored, or the default action), none is put in
//! front and the caller runs the launch another way.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

/// The cancel flag of the launch running on the main thread, while a [`Forward`] lives.
static CANCEL: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());
/// The handler ours forwards to, written before ours is installed.
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// While it lives, SIGINT sets `cancel` before reaching the handler that was installed.
pub struct Forward {
    previous: Box<libc::sigaction>,
}

impl Forward {
    /// Puts the forwarding handler in front of SIGINT's handler; `None` when SIGINT has no
    /// handler function to forward to, or when it cannot be installed.
    pub fn install(cancel: &Arc<AtomicBool>) -> Option<Forward> {
        // SAFETY: an all-zero `sigaction` is a valid value of the C struct (no handler, no flags,
        // an empty mask); `previous` is only written by `sigaction` below.
        let mut previous: Box<libc::sigaction> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: as above, a valid all-zero struct, filled in below.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_sigint as *const () as usize;
        // As Python installs its own: interrupted system calls return EINTR, not restart.
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // The flag is published first: a SIGINT between the swap below and the publication of
        // the previous handler still stops the kernel (kiln then raises KeyboardInterrupt).
        CANCEL.store(Arc::as_ptr(cancel) as *mut AtomicBool, Ordering::SeqCst);
        // SAFETY: `sa_mask` is ours to initialise; the swap installs `on_sigint`, which only
        // touches atomics and calls the previous handler, as a signal handler may, and reads the
        // previous disposition into `previous`, which outlives the call.
        let swapped = unsafe {
            libc::sigemptyset(&mut ours.sa_mask);
            libc::sigaction(libc::SIGINT, &ours, &mut *previous) == 0
        };
        if !swapped {
            CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
            return None;
        }
        PREVIOUS.store(&mut *previous, Ordering::SeqCst);
        let forward = Forward { previous };
        let handler = forward.previous.sa_sigaction;
        // Nothing of Python's to forward to (ignored, or the default action): put it back.
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            return None;
        }
        Some(forward)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        // SAFETY: a valid all-zero struct, written by `sigaction` below.
        let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: puts back the disposition read in `install` (a valid struct we own) and reads
        // the one it replaces.
        let swapped = unsafe { libc::sigaction(libc::SIGINT, &*self.previous, &mut current) } == 0;
        if swapped && current.sa_sigaction != on_sigint as *const () as usize {
            // Someone installed a handler of their own meanwhile: theirs stays.
            // SAFETY: `current` is the disposition `sigaction` just returned.
            unsafe { libc::sigaction(libc::SIGINT, &current, std::ptr::null_mut()) };
        }
        CANCEL.store(std::ptr::null_mut(), Ordering::SeqCst);
        // The previous disposition stays readable until it is unpublished here; a SIGINT that
        // reached our handler before the restore has finished with it once `sigaction` returned.
        PREVIOUS.store(std::ptr::null_mut(), Ordering::SeqCst);
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
