//! Running one dispatch on the CPU: binds buffers, allocates outputs (filled with `init_value`,
//! else poisoned with 0xFF bytes, which read as NaN for every float type), splits the groups
//! over the rayon pool and stops the kernel through a shared cancel flag when it faults or runs
//! past its timeout.
//!
//! Out-of-bounds writes to outputs are caught by red zones: each output is allocated with
//! `RED_ZONE` canary bytes on both sides, checked after the run, and a changed canary is an
//! `Error::KernelFault` naming the output. Writes further out than the red zone, and
//! out-of-bounds reads, are not detected.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Mutex};

use rayon::prelude::*;

use super::compile::Compiled;
use crate::array::{Array, HostBuffer};
use crate::backend::{Binding, Dispatch, Launch};
use crate::dtype::f64_to_element_bytes;
use crate::error::{Error, Result};

/// The launch description the generated `kiln_run` reads (mirrors `kiln::rt::LaunchDesc`).
#[repr(C)]
pub struct LaunchDesc {
    buffers: *const *mut c_void,
    tg_sizes: *const u64,
    cancel: *const i32,
    n_buffers: u32,
    n_tg: u32,
    grid: [u32; 3],
    tg: [u32; 3],
    groups: [u32; 3],
}

/// Shares the descriptor with the worker threads.
struct Shared<'a>(&'a LaunchDesc);
// SAFETY: the descriptor and everything it points to outlive the parallel section (they are
// owned by `run` below); kernels write only to output buffers, which the host does not touch
// until every worker has finished.
unsafe impl Sync for Shared<'_> {}

/// Canary bytes on each side of every output.
const RED_ZONE: usize = 4096;
const CANARY: u8 = 0xA5;

/// Largest threadgroup the emulator runs (Metal's limit).
const MAX_GROUP: u64 = 1024;

pub fn run(compiled: &Compiled, entry: usize, launch: &Launch<'_>) -> Result<Vec<Array>> {
    let kernel = &launch.program.kernel;
    let (grid, tg, groups) = geometry(launch)?;
    let mut owned: Vec<HostBuffer> = Vec::new();
    let mut outputs = Vec::new();
    let mut inputs: Vec<Option<(usize, usize)>> = Vec::new();
    for binding in &launch.bindings {
        match binding {
            Binding::Array(a) => {
                if a.host_buffer().is_none() {
                    return Err(Error::invalid(
                        kernel.clone(),
                        format!("input lives on {}; the CPU backend needs host arrays", a.device()),
                    ));
                }
                inputs.push(Some((a.offset() * a.dtype().size(), 0)));
            }
            Binding::Bytes(bytes) => {
                owned.push(HostBuffer::from_bytes(bytes));
                inputs.push(None);
            }
            Binding::Output(spec) => {
                let n: usize = spec.shape.iter().product::<usize>() * spec.dtype.size();
                let mut buf = HostBuffer::zeroed(n + 2 * RED_ZONE);
                let bytes = buf.bytes_mut();
                bytes.fill(CANARY);
                let body = &mut bytes[RED_ZONE..RED_ZONE + n];
                match spec.init_value {
                    Some(v) => {
                        let one = f64_to_element_bytes(v, spec.dtype);
                        for c in body.chunks_exact_mut(spec.dtype.size()) {
                            c.copy_from_slice(&one);
                        }
                    }
                    None => body.fill(0xFF),
                }
                owned.push(buf);
                outputs.push(owned.len() - 1);
                inputs.push(None);
            }
        }
    }
    // Pointers are taken only now that `owned` no longer grows.
    let mut ptrs: Vec<*mut c_void> = Vec::with_capacity(launch.bindings.len());
    let mut next_owned = 0;
    for (binding, input) in launch.bindings.iter().zip(&inputs) {
        match (binding, input) {
            (Binding::Array(a), Some((offset, _))) => {
                let bytes = a.host_buffer().map(|b| b.bytes()).unwrap_or(&[]);
                // SAFETY: `offset` is the array's element offset within its own buffer, so the
                // pointer stays inside (or one past) the allocation the array holds alive.
                ptrs.push(unsafe { bytes.as_ptr().add(*offset) } as *mut c_void);
            }
            (binding, _) => {
                let buf = &mut owned[next_owned];
                next_owned += 1;
                let skip = if matches!(binding, Binding::Output(_)) { RED_ZONE } else { 0 };
                ptrs.push(buf.bytes_mut()[skip..].as_mut_ptr() as *mut c_void);
            }
        }
    }
    let tg_sizes: Vec<u64> = launch.threadgroup_memory.iter().map(|&s| s as u64).collect();
    if tg_sizes.len() > 16 {
        return Err(Error::invalid(kernel.clone(), "more than 16 [[threadgroup(n)]] bindings"));
    }
    let cancel = AtomicI32::new(0);
    let desc = LaunchDesc {
        buffers: ptrs.as_ptr(),
        tg_sizes: tg_sizes.as_ptr(),
        cancel: cancel.as_ptr() as *const i32,
        n_buffers: ptrs.len() as u32,
        n_tg: tg_sizes.len() as u32,
        grid,
        tg,
        groups,
    };
    let total = groups.iter().map(|&g| g as u64).product::<u64>();
    let fault: Mutex<Option<String>> = Mutex::new(None);
    let timed_out = AtomicI32::new(0);
    let shared = Shared(&desc);
    let work = || {
        let per_chunk = (total / (rayon::current_num_threads() as u64 * 8)).max(1);
        let chunks = total.div_ceil(per_chunk);
        (0..chunks).into_par_iter().for_each(|c| {
            let begin = c * per_chunk;
            let end = (begin + per_chunk).min(total);
            let mut msg = [0 as c_char; 512];
            let d = &shared;
            // SAFETY: `kiln_run` reads the descriptor (valid for this scope), runs groups
            // [begin, end) and writes at most `msg.len()` bytes of NUL-terminated message.
            let rc = unsafe { (compiled.run)(entry as i32, d.0, begin, end, msg.as_mut_ptr(), msg.len() as i32) };
            if rc == 2 {
                let text: String = msg.iter().take_while(|&&b| b != 0).map(|&b| b as u8 as char).collect();
                if let Ok(mut f) = fault.lock() {
                    f.get_or_insert(text);
                }
                cancel.store(2, Ordering::SeqCst);
            }
        });
    };
    match launch.timeout {
        None => work(),
        Some(limit) => {
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let (timed_out, cancel) = (&timed_out, &cancel);
            std::thread::scope(|s| {
                s.spawn(move || {
                    if done_rx.recv_timeout(limit).is_err() {
                        timed_out.store(1, Ordering::SeqCst);
                        cancel.store(1, Ordering::SeqCst);
                    }
                });
                work();
                let _ = done_tx.send(());
            });
        }
    }
    if let Some(msg) = fault.lock().ok().and_then(|mut f| f.take()) {
        return Err(Error::KernelFault { kernel: kernel.clone(), msg });
    }
    if timed_out.load(Ordering::SeqCst) != 0 {
        return Err(Error::Timeout {
            kernel: kernel.clone(),
            seconds: launch.timeout.map_or(0.0, |t| t.as_secs_f64()),
        });
    }
    let mut result = Vec::new();
    let specs = launch.bindings.iter().enumerate().filter_map(|(slot, b)| match b {
        Binding::Output(s) => Some((slot, s)),
        _ => None,
    });
    for (k, ((slot, spec), idx)) in specs.zip(outputs).enumerate() {
        let bytes = owned[idx].bytes();
        let n = bytes.len() - 2 * RED_ZONE;
        let before = bytes[..RED_ZONE].iter().rposition(|&b| b != CANARY).map(|p| RED_ZONE - p);
        let after = bytes[RED_ZONE + n..].iter().position(|&b| b != CANARY).map(|p| p + 1);
        if before.is_some() || after.is_some() {
            let (side, dist) = match (before, after) {
                (Some(d), _) => ("before the start", d),
                (None, Some(d)) => ("past the end", d),
                (None, None) => ("", 0),
            };
            return Err(Error::KernelFault {
                kernel: kernel.clone(),
                msg: format!(
                    "out-of-bounds write to output {k} (buffer slot {slot}, {n} bytes): up to {dist} bytes {side}"
                ),
            });
        }
        result.push(Array::from_host(HostBuffer::from_bytes(&bytes[RED_ZONE..RED_ZONE + n]), spec.dtype, &spec.shape));
    }
    Ok(result)
}

/// (threads per dimension, threads per group, groups per dimension) of a dispatch.
fn geometry(launch: &Launch<'_>) -> Result<([u32; 3], [u32; 3], [u32; 3])> {
    let kernel = &launch.program.kernel;
    let tg = launch.effective_threadgroup();
    if tg.contains(&0) {
        return Err(Error::invalid(
            kernel.clone(),
            format!("threadgroup {:?} has a zero dimension", launch.threadgroup),
        ));
    }
    if tg.iter().map(|&t| t as u64).product::<u64>() > MAX_GROUP {
        return Err(Error::invalid(kernel.clone(), format!("threadgroup {tg:?} exceeds {MAX_GROUP} threads")));
    }
    Ok(match launch.dispatch {
        Dispatch::Threads(grid) => (grid, tg, [0, 1, 2].map(|d| grid[d].div_ceil(tg[d]))),
        Dispatch::Threadgroups(groups) => {
            let grid = [0, 1, 2].map(|d| groups[d].saturating_mul(tg[d]));
            (grid, tg, groups)
        }
    })
}
