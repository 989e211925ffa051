//! Collecting what CPU kernels log (`os_log`): each worker's kernel library buffers the lines of
//! the groups it ran (prelude/cpu/oslog.h); after every `kiln_run` call the worker takes them,
//! keyed by the first group of its range, and the launch prints them in group order.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;

/// `kiln_log_drain(sink, ctx)`: calls `sink(ctx, bytes, len)` with the calling thread's lines
/// (zero or more times) and empties its buffer.
pub type LogDrainFn = unsafe extern "C" fn(extern "C" fn(*mut c_void, *const c_char, usize), *mut c_void);

/// The lines of one launch, by the first group of the range that logged them.
#[derive(Default)]
pub struct LaunchLog(Mutex<Vec<(u64, Vec<u8>)>>);

extern "C" fn append(ctx: *mut c_void, data: *const c_char, len: usize) {
    if ctx.is_null() || data.is_null() {
        return;
    }
    // SAFETY: `ctx` is the `Vec<u8>` that `take` passes, alive and not otherwise borrowed for
    // the duration of the drain call; `data` points to `len` readable bytes for this call.
    let (out, bytes) = unsafe { (&mut *(ctx as *mut Vec<u8>), std::slice::from_raw_parts(data as *const u8, len)) };
    out.extend_from_slice(bytes);
}

impl LaunchLog {
    /// Takes what the calling worker's kernel library buffered while it ran groups from `begin`.
    pub fn take(&self, drain: Option<LogDrainFn>, begin: u64) {
        let Some(drain) = drain else { return };
        let mut bytes: Vec<u8> = Vec::new();
        // SAFETY: `drain` is the library's `kiln_log_drain`, called on the thread that ran the
        // groups; `append` matches the sink signature and `bytes` outlives the call.
        unsafe { drain(append, &mut bytes as *mut Vec<u8> as *mut c_void) };
        if !bytes.is_empty() {
            if let Ok(mut parts) = self.0.lock() {
                parts.push((begin, bytes));
            }
        }
    }

    /// Delivers the launch's lines in group order (see `crate::kernel_log`).
    pub fn finish(self) {
        let mut parts = self.0.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
        if parts.is_empty() {
            return;
        }
        parts.sort_by_key(|(begin, _)| *begin);
        let bytes: Vec<u8> = parts.into_iter().flat_map(|(_, b)| b).collect();
        crate::kernel_log::emit(&String::from_utf8_lossy(&bytes));
    }
}
