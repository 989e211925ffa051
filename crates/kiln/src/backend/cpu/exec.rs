//! Running one dispatch on the CPU: binds buffers, allocates outputs (filled with `init_value`,
//! else poisoned with 0xFF bytes, which read as NaN for every float type), splits the groups
//! over the rayon pool and stops the kernel through a shared cancel flag when it faults, runs
//! past its timeout or the caller's cancel flag (`LaunchSpec::cancel`) is set.
//!
//! Out-of-bounds accesses to outputs are caught on every launch: each output lies between two
//! guard ranges of 64 KiB (`checked::GuardedBuf`), armed while the kernel runs, and the slack
//! before its data is filled with canary bytes checked after the run; a touched guard or a
//! changed canary is an `Error::KernelFault` naming the output. (A launch that cannot arm its
//! guards, with 64 launches of one kernel armed at once, runs with the canaries alone.) Memory
//! the caller lent for the kernel to write (`Binding::OutputInto`: a framework's output, a
//! buffer updated in place) is guarded the same way: the kernel writes a guarded copy, which is
//! copied back only when the run succeeds, so a faulting kernel leaves the caller's memory as it
//! was and never writes outside it.
//! Out-of-bounds reads of inputs are detected only in checked mode (see `checked`), which
//! copies the inputs between guards too; an access that lands outside every mapping is a fault
//! in any mode (the kernel library's signal handler, `prelude/cpu`).

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use smallvec::SmallVec;

use super::abi::{CheckedLaunch, Guard, LaunchDesc};
use super::checked::{self, GuardedBuf};
use super::compile::Compiled;
use super::kernel_log::LaunchLog;
use super::stacks;
use super::threadgroup;
use crate::array::{Array, HostBuffer};
use crate::backend::{Binding, Dispatch, Launch};
use crate::dtype::f64_to_element_bytes;
use crate::error::{Error, Result};
use crate::program::{check_threadgroup, MAX_BUFFERS};

impl LaunchDesc {
    /// An unchecked launch of `grid` threads in groups of `tg` over the buffers at `buffers`.
    pub(super) fn new(
        buffers: *const *mut c_void,
        tg_sizes: &[u64],
        cancel: *const i32,
        n_buffers: u32,
        grid: [u32; 3],
        tg: [u32; 3],
        groups: [u32; 3],
    ) -> LaunchDesc {
        let n_tg = tg_sizes.len() as u32;
        LaunchDesc { buffers, tg_sizes: tg_sizes.as_ptr(), cancel, n_buffers, n_tg, grid, tg, groups, checked: 0 }
    }
}

/// Shares the descriptor with the worker threads.
struct Shared<'a>(&'a LaunchDesc);
// SAFETY: the descriptor and everything it points to outlive the parallel section (they are
// owned by `run` below); kernels write only to output buffers, which the host does not touch
// until every worker has finished.
unsafe impl Sync for Shared<'_> {}

/// The byte the slack before every output's data is filled with.
const CANARY: u8 = 0xA5;

/// Outputs from this size up are filled (poisoned, or set to their `init_value`) in parts of
/// `FILL_PART` bytes over the pool.
const PARALLEL_FILL: usize = 4 << 20;
const FILL_PART: usize = 1 << 20;

/// Storage of one binding for the duration of a launch.
enum Storage {
    /// The caller's input array, bound in place.
    InPlace,
    Host(HostBuffer),
    Guarded(GuardedBuf),
}

/// What a buffer is, for messages.
#[derive(Clone, Copy)]
enum Role {
    Input(usize),
    Output(usize),
    /// Constant data the kernel may write.
    Constant,
}

/// The canary bytes before and after an output's data.
fn output_parts(storage: &mut Storage, n: usize) -> Option<(&[u8], &[u8])> {
    let Storage::Guarded(buf) = storage else { return None };
    let off = buf.data_offset();
    let all = buf.between_guards();
    Some((&all[..off], &all[off + n..]))
}

/// A program loaded for launches: its library, the entry's index and the buffer slots the
/// entry may write (bit `n` for `[[buffer(n)]]`: a `device` pointer or reference, not `const`).
#[derive(Clone)]
pub struct Resolved {
    pub compiled: Arc<Compiled>,
    pub entry: usize,
    pub writable: u64,
}

impl Resolved {
    fn writes(&self, slot: usize) -> bool {
        slot < 64 && self.writable & (1 << slot) != 0
    }
}

pub fn run(resolved: &Resolved, launch: &Launch<'_>, checked: bool) -> Result<Vec<Array>> {
    let (compiled, entry) = (&*resolved.compiled, resolved.entry);
    let kernel = &launch.program.kernel;
    let (grid, tg, groups) = geometry(launch)?;
    // Inline up to eight bindings (and the kernel's buffer table): a small launch allocates none of
    // its bookkeeping.
    let mut storage: SmallVec<[Storage; 8]> = SmallVec::new();
    let mut roles: SmallVec<[Option<Role>; 8]> = SmallVec::new();
    let (mut n_in, mut n_out) = (0, 0);
    for binding in &launch.bindings {
        match binding {
            Binding::Array(a) => {
                let Some(host) = a.host_buffer() else {
                    return Err(Error::invalid(
                        kernel.clone(),
                        format!("input lives on {}; the CPU backend needs host arrays", a.device()),
                    ));
                };
                if checked {
                    let size = a.dtype().size();
                    let (lo, hi) = checked::reach(a.shape(), a.strides(), size);
                    let start = (a.offset() * size) as isize + lo;
                    let end = (a.offset() * size) as isize + hi;
                    let bytes = host.bytes();
                    if start < 0 || end as usize > bytes.len() {
                        return Err(Error::invalid(kernel.clone(), format!("input {n_in} reaches outside its buffer")));
                    }
                    let mut buf = GuardedBuf::new(kernel, (hi - lo) as usize)?;
                    let d0 = buf.data_offset();
                    buf.between_guards()[d0..d0 + (hi - lo) as usize]
                        .copy_from_slice(&bytes[start as usize..end as usize]);
                    storage.push(Storage::Guarded(buf));
                } else {
                    storage.push(Storage::InPlace);
                }
                roles.push(Some(Role::Input(n_in)));
                n_in += 1;
            }
            Binding::Bytes(bytes) if resolved.writes(storage.len()) => {
                // Constant data bound to a parameter the kernel may write (Metal allows it): a
                // guarded copy, so a write past it faults instead of reaching kiln's heap.
                let mut buf = GuardedBuf::filled(kernel, bytes.len(), CANARY)?;
                let off = buf.data_offset();
                buf.between_guards()[off..off + bytes.len()].copy_from_slice(bytes);
                storage.push(Storage::Guarded(buf));
                roles.push(Some(Role::Constant));
            }
            Binding::Bytes(bytes) => {
                storage.push(Storage::Host(HostBuffer::from_bytes(bytes)));
                roles.push(None);
            }
            Binding::OutputInto(a) => {
                // The caller's memory: the kernel writes a guarded copy of it, copied back after a
                // clean run (below).
                let Some(host) = a.host_buffer() else {
                    return Err(Error::invalid(
                        kernel.clone(),
                        format!("output {n_out} lives on {}; the CPU backend needs host arrays", a.device()),
                    ));
                };
                let (start, n) = (a.offset() * a.dtype().size(), a.nbytes());
                if !a.is_row_contiguous() || start + n > host.len() {
                    return Err(Error::invalid(
                        kernel.clone(),
                        format!("output {n_out} must be row-contiguous and inside its buffer"),
                    ));
                }
                let mut buf = GuardedBuf::filled(kernel, n, CANARY)?;
                let off = buf.data_offset();
                buf.between_guards()[off..off + n].copy_from_slice(&host.bytes()[start..start + n]);
                storage.push(Storage::Guarded(buf));
                roles.push(Some(Role::Output(n_out)));
                n_out += 1;
            }
            Binding::Output(spec) => {
                let n = crate::array::checked_byte_size(&spec.shape, spec.dtype)
                    .filter(|&n| super::fits_in_memory(n))
                    .ok_or_else(|| {
                        Error::invalid(
                            kernel.clone(),
                            format!(
                                "output {n_out} of shape {:?} ({}) needs more memory than this machine has available",
                                spec.shape, spec.dtype
                            ),
                        )
                    })?;
                // A small output of an unchecked launch comes from the pool whose guards stay
                // protected (no arming per launch).
                let kept = if checked { None } else { GuardedBuf::kept(n, CANARY) };
                let mut buf = match kept {
                    Some(buf) => buf,
                    None => GuardedBuf::output(kernel, n, CANARY)?,
                };
                let off = buf.data_offset();
                let body = &mut buf.between_guards()[off..off + n];
                let one = spec.init_value.map(|v| f64_to_element_bytes(v, spec.dtype));
                let fill = |part: &mut [u8]| match &one {
                    Some(one) => {
                        for c in part.chunks_exact_mut(one.len()) {
                            c.copy_from_slice(one);
                        }
                    }
                    None => part.fill(0xFF),
                };
                // A large output is filled by the pool's threads: its first touch of fresh
                // pages costs as much as the kernel's pass over it.
                if n >= PARALLEL_FILL && FILL_PART % spec.dtype.size() == 0 {
                    body.par_chunks_mut(FILL_PART).for_each(fill);
                } else {
                    fill(body);
                }
                storage.push(Storage::Guarded(buf));
                roles.push(Some(Role::Output(n_out)));
                n_out += 1;
            }
            Binding::InOut(a) => {
                if a.host_buffer().is_none() {
                    return Err(Error::invalid(
                        kernel.clone(),
                        format!("in/out buffer lives on {}; the CPU backend needs host arrays", a.device()),
                    ));
                }
                let bytes = a.to_contiguous_bytes()?;
                let mut buf = GuardedBuf::output(kernel, bytes.len(), CANARY)?;
                let off = buf.data_offset();
                buf.between_guards()[off..off + bytes.len()].copy_from_slice(&bytes);
                storage.push(Storage::Guarded(buf));
                roles.push(Some(Role::Output(n_out)));
                n_out += 1;
            }
        }
    }
    // Pointers are taken only now that `storage` no longer grows.
    let mut ptrs: SmallVec<[*mut c_void; MAX_BUFFERS]> = SmallVec::new();
    let mut guards: SmallVec<[Guard; 8]> = SmallVec::new();
    let mut guarded: SmallVec<[(usize, u64, usize); 8]> = SmallVec::new();
    for (slot, (binding, s)) in launch.bindings.iter().zip(&mut storage).enumerate() {
        let ptr = match (binding, s) {
            (Binding::Array(a), Storage::InPlace) => {
                let bytes = a.host_buffer().map(|b| b.bytes()).unwrap_or(&[]);
                // SAFETY: the offset is the array's element offset within its own buffer, so the
                // pointer stays inside (or one past) the allocation the array holds alive.
                unsafe { bytes.as_ptr().add(a.offset() * a.dtype().size()) as *mut c_void }
            }
            (Binding::Array(a), Storage::Guarded(buf)) => {
                let size = a.dtype().size();
                let (lo, _) = checked::reach(a.shape(), a.strides(), size);
                guards.extend(buf.guards());
                guarded.push((slot, buf.data_addr(), buf.len()));
                // SAFETY: the data holds the view's whole reach, which starts `-lo` bytes before
                // the view's first element.
                unsafe { buf.data_ptr().offset(-lo) as *mut c_void }
            }
            (_, Storage::Guarded(buf)) => {
                guards.extend(buf.guards());
                guarded.push((slot, buf.data_addr(), buf.len()));
                buf.data_ptr() as *mut c_void
            }
            (_, Storage::Host(buf)) => buf.bytes_mut().as_mut_ptr() as *mut c_void,
            (_, Storage::InPlace) => std::ptr::null_mut(),
        };
        ptrs.push(ptr);
    }
    // Every slot a kernel can name is readable: a parameter that exists only under a false
    // function constant reads a null pointer (and never dereferences it).
    let n_buffers = ptrs.len() as u32;
    ptrs.resize(ptrs.len().max(MAX_BUFFERS), std::ptr::null_mut());
    let tg_sizes: SmallVec<[u64; 4]> = launch.threadgroup_memory.iter().map(|&s| s as u64).collect();
    if tg_sizes.len() > 16 {
        return Err(Error::invalid(kernel.clone(), "more than 16 [[threadgroup(n)]] bindings"));
    }
    let cancel = AtomicI32::new(0);
    let desc = LaunchDesc {
        buffers: ptrs.as_ptr(),
        tg_sizes: tg_sizes.as_ptr(),
        cancel: cancel.as_ptr() as *const i32,
        n_buffers,
        n_tg: tg_sizes.len() as u32,
        grid,
        tg,
        groups,
        checked: u32::from(checked),
    };
    let mut watch = CheckedLaunch {
        guards: guards.as_ptr(),
        n_guards: guards.len() as u32,
        hit: -1,
        addr: 0,
        cancel: cancel.as_ptr(),
    };
    // Unchecked launches arm their outputs' guards where they can (the canaries stay).
    let armed = if checked {
        Some(Armed::new(compiled, kernel, &mut watch)?)
    } else if guards.is_empty() {
        None
    } else {
        Armed::new(compiled, kernel, &mut watch).ok()
    };
    let (fault, stopped) = execute(compiled, entry, &desc, &cancel, launch.timeout, launch.cancel.as_deref());
    if let Some(armed) = armed {
        armed.disarm()?;
    }
    if let Ok(hit) = usize::try_from(watch.hit) {
        // The handler opened the guards it caught accesses in: no pooled buffer of this launch
        // goes back to the pool.
        for s in &mut storage {
            if let Storage::Guarded(buf) = s {
                buf.spoil();
            }
        }
        let (slot, data, len) = guarded[hit / 2];
        let role = buffer_named(launch, slot, &roles[slot].map_or("buffer".to_string(), describe));
        let place = if hit % 2 == 0 {
            format!("{} bytes before the start", data.saturating_sub(watch.addr))
        } else {
            format!("byte {} past the end", watch.addr.saturating_sub(data + len as u64))
        };
        return Err(Error::KernelFault {
            kernel: kernel.clone(),
            msg: format!(
                "out-of-bounds access to {role} (buffer slot {slot}, {len} bytes): {place}{}",
                lent_note(launch)
            ),
        });
    }
    if let Some(msg) = fault {
        return Err(Error::KernelFault { kernel: kernel.clone(), msg: format!("{msg}{}", lent_note(launch)) });
    }
    match stopped {
        Stop::Finished => {}
        Stop::TimedOut => {
            return Err(Error::Timeout {
                kernel: kernel.clone(),
                seconds: launch.timeout.map_or(0.0, |t| t.as_secs_f64()),
            })
        }
        Stop::Cancelled => return Err(Error::Interrupted { kernel: kernel.clone() }),
    }
    // Every output's canaries are checked before any result is made, so that only a clean run
    // reaches the caller's memory.
    let mut bodies: SmallVec<[(usize, &Binding); 8]> = SmallVec::new();
    for (slot, (binding, s)) in launch.bindings.iter().zip(&mut storage).enumerate() {
        let n = match binding {
            Binding::Output(spec) => spec.shape.iter().product::<usize>() * spec.dtype.size(),
            Binding::InOut(a) | Binding::OutputInto(a) => a.nbytes(),
            Binding::Bytes(bytes) => bytes.len(),
            _ => continue,
        };
        let k = bodies.len();
        let Some((before, after)) = output_parts(s, n) else { continue };
        let before_hit = last_not(before, CANARY).map(|p| before.len() - p);
        let after_hit = first_not(after, CANARY).map(|p| p + 1);
        let side = match (before_hit, after_hit) {
            (Some(d), _) => Some(("before the start", d)),
            (None, Some(d)) => Some(("past the end", d)),
            (None, None) => None,
        };
        if let Some((side, dist)) = side {
            let role =
                if matches!(binding, Binding::Bytes(_)) { "constant data".to_string() } else { format!("output {k}") };
            let what = buffer_named(launch, slot, &role);
            return Err(Error::KernelFault {
                kernel: kernel.clone(),
                msg: format!(
                    "out-of-bounds write to {what} (buffer slot {slot}, {n} bytes): up to {dist} bytes {side}{}",
                    lent_note(launch)
                ),
            });
        }
        if !matches!(binding, Binding::Bytes(_)) {
            bodies.push((slot, binding));
        }
    }
    let mut result = Vec::with_capacity(bodies.len());
    for (slot, binding) in bodies {
        let Storage::Guarded(mut buf) = std::mem::replace(&mut storage[slot], Storage::InPlace) else { continue };
        let (off, n) = (buf.data_offset(), buf.len());
        let host = |buf: GuardedBuf| match buf.into_output() {
            Ok(host) => host,
            Err(mut buf) => HostBuffer::from_bytes(&buf.between_guards()[off..off + n]),
        };
        result.push(match binding {
            Binding::OutputInto(a) => {
                write_back(a, &buf.between_guards()[off..off + n]);
                a.clone()
            }
            Binding::InOut(a) => Array::from_host(host(buf), a.dtype(), a.shape()),
            Binding::Output(spec) => Array::from_host(host(buf), spec.dtype, &spec.shape),
            _ => continue,
        });
    }
    Ok(result)
}

/// What a fault message adds about the caller's memory (see the module's docs): nothing when
/// the launch writes only kiln's own buffers.
fn lent_note(launch: &Launch<'_>) -> &'static str {
    if launch.bindings.iter().any(|b| matches!(b, Binding::OutputInto(_))) {
        "; the arrays the kernel was to write in place are left as they were"
    } else {
        ""
    }
}

/// Copies a clean run's `body` into the caller's row-contiguous host array `a` (checked to lie
/// inside its buffer when the launch bound it).
fn write_back(a: &Array, body: &[u8]) {
    let Some(host) = a.host_buffer() else { return };
    let start = a.offset() * a.dtype().size();
    let Some(dest) = host.bytes().get(start..start + body.len()) else { return };
    // SAFETY: `dest` is the array's own span of the caller's buffer, which the caller lent for
    // this kernel to write (`Binding::OutputInto`) and does not touch during the launch; `body`
    // is kiln's guarded copy, a different allocation of the same length.
    unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), dest.as_ptr() as *mut u8, body.len()) };
}

/// `role` (`input 1`, `output 0`, `buffer`) with the name the kernel gives its `[[buffer(slot)]]`
/// parameter (`input `y``), for messages about a launch's buffers; `role` as it is when the
/// program names none. Reads the program's parse (kept in the launch's memo, else parsed again:
/// for faults, not for every launch).
fn buffer_named(launch: &Launch<'_>, slot: usize, role: &str) -> String {
    let program = launch.program;
    let fresh = crate::source::parse::ParseSlot::default();
    let parse = launch.memo.map_or(&fresh, crate::backend::ProgramMemo::parse).parse(program).ok();
    let name = parse.as_ref().and_then(|p| {
        let entry = p.entry(&program.function)?;
        entry.params.iter().find_map(|p| match p {
            crate::source::parse::EntryParam::Buffer { name, index, .. } if *index as usize == slot => {
                Some(name.clone())
            }
            _ => None,
        })
    });
    match name {
        Some(name) => format!("{} `{name}`", role.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end()),
        None => role.to_string(),
    }
}

/// Canary slack is compared a block at a time (a memcmp), then searched byte by byte only
/// in a block that differs: tens of kilobytes per output per launch.
const CANARY_BLOCK: usize = 512;

/// The position of the first byte of `bytes` that is not `value`.
fn first_not(bytes: &[u8], value: u8) -> Option<usize> {
    let pattern = [value; CANARY_BLOCK];
    let mut at = 0;
    for chunk in bytes.chunks(CANARY_BLOCK) {
        if chunk != &pattern[..chunk.len()] {
            return chunk.iter().position(|&b| b != value).map(|p| at + p);
        }
        at += chunk.len();
    }
    None
}

/// The position of the last byte of `bytes` that is not `value`.
fn last_not(bytes: &[u8], value: u8) -> Option<usize> {
    let pattern = [value; CANARY_BLOCK];
    let mut end = bytes.len();
    for chunk in bytes.rchunks(CANARY_BLOCK) {
        end -= chunk.len();
        if chunk != &pattern[..chunk.len()] {
            return chunk.iter().rposition(|&b| b != value).map(|p| end + p);
        }
    }
    None
}

fn describe(role: Role) -> String {
    match role {
        Role::Input(k) => format!("input {k}"),
        Role::Output(k) => format!("output {k}"),
        Role::Constant => "constant data".to_string(),
    }
}

/// The guards of a checked launch, protected from `new` until `disarm` (or drop).
struct Armed<'a> {
    compiled: &'a Compiled,
    kernel: &'a str,
    watch: *mut CheckedLaunch,
    live: bool,
}

impl<'a> Armed<'a> {
    fn new(compiled: &'a Compiled, kernel: &'a str, watch: &mut CheckedLaunch) -> Result<Armed<'a>> {
        let fault = |msg: String| Error::Driver { backend: "cpu", kernel: kernel.to_string(), msg };
        let (Some(begin), Some(_)) = (compiled.checked_begin, compiled.checked_end) else {
            return Err(fault("the kernel library has no checked mode".into()));
        };
        // SAFETY: `watch` and the guard ranges it lists outlive this value, which disarms them
        // before the buffers are dropped; the ranges are whole granules of our own allocations.
        let rc = unsafe { begin(watch) };
        if rc != 0 {
            return Err(fault(format!("cannot arm the guard pages of a checked launch (code {rc})")));
        }
        Ok(Armed { compiled, kernel, watch, live: true })
    }

    fn disarm(mut self) -> Result<()> {
        self.live = false;
        let rc = match self.compiled.checked_end {
            // SAFETY: `watch` is the record armed in `new`, still alive (see there).
            Some(end) => unsafe { end(self.watch) },
            None => 0,
        };
        if rc != 0 {
            return Err(Error::Driver {
                backend: "cpu",
                kernel: self.kernel.to_string(),
                msg: "cannot disarm guard pages".into(),
            });
        }
        Ok(())
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if let (true, Some(end)) = (self.live, self.compiled.checked_end) {
            // SAFETY: as in `disarm`; reached only when the launch unwinds before disarming.
            unsafe { end(self.watch) };
        }
    }
}

/// Why a kernel stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    Finished,
    TimedOut,
    Cancelled,
}

/// Grids of at least this many threads share their groups with the pool from the start.
const SHARE_AT_THREADS: u64 = 1 << 16;
/// The work left, estimated from the chunks the calling thread ran, past which the pool joins
/// in: about what waking its threads and waiting for them costs.
const SHARE_AFTER: Duration = Duration::from_micros(25);

/// Runs every group, on the calling thread and, for grids worth it, the rayon pool; returns the
/// first fault message and whether the timeout or the caller's cancel flag stopped the kernel.
fn execute(
    compiled: &Compiled,
    entry: usize,
    desc: &LaunchDesc,
    cancel: &AtomicI32,
    timeout: Option<Duration>,
    cancelled_by_caller: Option<&AtomicBool>,
) -> (Option<String>, Stop) {
    let total = desc.groups.iter().map(|&g| g as u64).product::<u64>();
    let group_threads = desc.tg.iter().map(|&t| t as usize).product::<usize>();
    let fault: Mutex<Option<String>> = Mutex::new(None);
    let timed_out = AtomicI32::new(0);
    let shared = Shared(desc);
    let log = LaunchLog::default();
    let work = || {
        let per_chunk = (total / (rayon::current_num_threads() as u64 * 8)).max(1);
        let chunks = total.div_ceil(per_chunk);
        let run_chunk = |c: u64| {
            let begin = c * per_chunk;
            let end = (begin + per_chunk).min(total);
            let mut msg = [0 as c_char; 512];
            let d = &shared;
            let mut lease = compiled.cooperative.then(|| stacks::pool().take(group_threads, compiled.release_stacks));
            let stacks = lease.as_mut().map_or(std::ptr::null_mut(), |l| l.as_ptr());
            let mut arena = threadgroup::take();
            // SAFETY: `kiln_run` reads the descriptor (valid for this scope), runs groups
            // [begin, end) on fibers whose stacks it takes from the lent set (for this call
            // only; non-cooperative kernels ignore it), lays out its threadgroup memory in the
            // lent arena (also for this call only) and writes at most `msg.len()` bytes of
            // NUL-terminated message.
            let rc = unsafe {
                (compiled.run)(
                    entry as i32,
                    d.0,
                    begin,
                    end,
                    stacks,
                    arena.as_ptr(),
                    msg.as_mut_ptr(),
                    msg.len() as i32,
                )
            };
            drop(lease);
            drop(arena);
            log.take(compiled.log_drain, begin);
            if rc == 2 {
                let text: String = msg.iter().take_while(|&&b| b != 0).map(|&b| b as u8 as char).collect();
                if let Ok(mut f) = fault.lock() {
                    f.get_or_insert(text);
                }
                cancel.store(2, Ordering::SeqCst);
            }
        };
        // The calling thread claims chunks in order and runs them; the pool's threads join in
        // only once what is left would take longer than waking them and waiting for them
        // (judged by the chunks run so far), so a small grid never leaves the caller. Grids
        // large enough to need the pool anyway, and cooperative kernels (tens of nanoseconds
        // per thread and barrier), share from the start.
        let next = AtomicU64::new(0);
        // Claims the next chunk and runs it; its index, or `None` once none is left.
        let run_next = || {
            let c = next.fetch_add(1, Ordering::Relaxed);
            if c >= chunks {
                return None;
            }
            run_chunk(c);
            Some(c)
        };
        let threads = total.saturating_mul(group_threads as u64);
        let mut share = chunks > 1 && (compiled.cooperative || threads >= SHARE_AT_THREADS);
        if !share {
            let start = Instant::now();
            while let Some(c) = run_next() {
                let (done, left) = (c + 1, chunks - c - 1);
                if left > 0 && start.elapsed().as_secs_f64() / done as f64 * left as f64 > SHARE_AFTER.as_secs_f64() {
                    share = true;
                    break;
                }
            }
        }
        if share {
            let helpers = rayon::current_num_threads().saturating_sub(1).max(1);
            let claim = || while run_next().is_some() {};
            rayon::in_place_scope(|s| {
                for _ in 0..helpers {
                    s.spawn(|_| claim());
                }
                claim();
            });
        }
    };
    if timeout.is_none() && cancelled_by_caller.is_none() {
        work();
    } else {
        // The process's watcher stops the kernel past its timeout or once the caller asks.
        match super::watcher::watch(timeout, cancelled_by_caller, cancel, &timed_out) {
            Ok(_watch) => work(),
            Err(why) => return (Some(why), Stop::Finished),
        }
    }
    log.finish();
    let fault = fault.lock().ok().and_then(|mut f| f.take());
    let stop = match timed_out.load(Ordering::SeqCst) {
        0 => Stop::Finished,
        super::watcher::TIMED_OUT => Stop::TimedOut,
        _ => Stop::Cancelled,
    };
    (fault, stop)
}

/// (threads per dimension, threads per group, groups per dimension) of a dispatch.
pub(super) fn geometry(launch: &Launch<'_>) -> Result<([u32; 3], [u32; 3], [u32; 3])> {
    let kernel = &launch.program.kernel;
    let tg = launch.effective_threadgroup();
    check_threadgroup(kernel, tg)?;
    Ok(match launch.dispatch {
        Dispatch::Threads(grid) => (grid, tg, [0, 1, 2].map(|d| grid[d].div_ceil(tg[d]))),
        Dispatch::Threadgroups(groups) => {
            let grid = [0, 1, 2].map(|d| groups[d].saturating_mul(tg[d]));
            (grid, tg, groups)
        }
    })
}

#[cfg(test)]
mod canary_tests {
    use super::{first_not, last_not, CANARY, CANARY_BLOCK};

    #[test]
    fn the_block_scan_finds_what_a_byte_scan_finds() {
        for len in [0, 1, 7, CANARY_BLOCK - 1, CANARY_BLOCK, CANARY_BLOCK + 1, 3 * CANARY_BLOCK + 5] {
            let clean = vec![CANARY; len];
            assert_eq!(first_not(&clean, CANARY), None);
            assert_eq!(last_not(&clean, CANARY), None);
            for hits in [vec![0], vec![len / 2], vec![len.saturating_sub(1)], vec![1, len.saturating_sub(2)]] {
                let mut bytes = clean.clone();
                for &h in hits.iter().filter(|&&h| h < len) {
                    bytes[h] = 0;
                }
                assert_eq!(first_not(&bytes, CANARY), bytes.iter().position(|&b| b != CANARY), "len {len} {hits:?}");
                assert_eq!(last_not(&bytes, CANARY), bytes.iter().rposition(|&b| b != CANARY), "len {len} {hits:?}");
            }
        }
    }
}
