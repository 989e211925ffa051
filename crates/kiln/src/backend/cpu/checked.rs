//! Guarded buffers: every output of a launch, and in checked mode every input too (copied), lives
//! in its own allocation between two guard ranges that the kernel library protects
//! (`kiln_checked_begin`) for the duration of the run, so a read or write beyond the buffer
//! faults; the library's signal handler records the first such access and cancels the launch,
//! and the host reports it as `Error::KernelFault` naming the buffer.
//!
//! Layout of one allocation (64 KiB guards, so it works for any page size up to 64 KiB):
//! `[guard][slack][data][guard]`, the slack and data together a whole number of pages
//! (`SLACK_PAGE`). The data ends at the trailing guard (rounded down to 16 bytes, so vector loads
//! stay aligned): an access past the end faults unless it lands in those alignment bytes. Before
//! the start, accesses within the slack (less than a page) are caught only for outputs, whose
//! slack is filled with canaries checked after the run; further before, the leading guard
//! faults.
//!
//! An output of `HOST_APRON_FROM` bytes or more is laid out inside the host buffer it becomes
//! (`GuardedBuf::output`): the guards and the slack lie in that buffer's aprons, so a clean run
//! hands the buffer out without a copy once the slack is zeroed again.
//!
//! An output of an unchecked launch of up to 16 pages (`KEPT_MAX`) comes from a pool of such
//! allocations whose guards stay protected between launches (`GuardedBuf::kept`; one pool per
//! power-of-two number of pages between the guards): arming a guard splits the process's
//! mappings and flushes every core's TLB, the larger part of a small launch's cost. The launch lists them as kept (`Guard::kept`), so its arming and disarming
//! leave them; a buffer one of whose guards a fault opened is freed, not pooled again.

use std::alloc::{alloc, dealloc, Layout};
use std::sync::Mutex;

use super::abi::Guard;
use crate::array::{HostBuffer, HOST_APRON_FROM};
use crate::error::{Error, Result};

/// Guard size and alignment.
pub const GRANULE: usize = 64 * 1024;
/// Alignment of the data start (what any vector type of the prelude needs).
const DATA_ALIGN: usize = 16;
/// What the slack and data of a buffer of `filled` are rounded up to: the page, where its size
/// is known to be 4 KiB (x86-64), else a granule. A small output's slack is then filled and
/// checked over less than a page, not over 64 KiB.
const SLACK_PAGE: usize = if cfg!(target_arch = "x86_64") { 4096 } else { GRANULE };
/// The leading guard of a buffer of `filled`: two granules, so that with the slack an access up
/// to 128 KiB before the data is caught, as when the slack was a granule.
const LEAD_GUARD: usize = 2 * GRANULE;

/// A guarded allocation holding `len` bytes of data: `size` bytes from `base`, guards included
/// (`lead` bytes of leading guard, a granule of trailing guard).
pub struct GuardedBuf {
    base: *mut u8,
    size: usize,
    lead: usize,
    data: usize,
    len: usize,
    owner: Owner,
}

/// Whose memory a guarded buffer is.
enum Owner {
    /// An allocation of its own, freed on drop.
    Alloc(Layout),
    /// Part of a host buffer's allocation (`GuardedBuf::output`), given out by `into_output`.
    Host(Option<HostBuffer>),
    /// A slot of the pool of small outputs of `2^class` pages (`GuardedBuf::kept`), its guards
    /// protected; back to the pool on drop unless `spoiled` (a guard opened by the fault handler).
    Pooled { class: usize, spoiled: bool },
}

/// Pooled buffers hold 1, 2, 4, 8 or 16 pages between their guards.
const KEPT_CLASSES: usize = 5;
/// The most data bytes a pooled buffer holds: 16 pages less the alignment (x86-64, where the page
/// size is known; elsewhere nothing is pooled). Larger outputs lie in their host buffers' aprons.
pub const KEPT_MAX: usize =
    if cfg!(target_arch = "x86_64") { (SLACK_PAGE << (KEPT_CLASSES - 1)) - DATA_ALIGN } else { 0 };
/// Free pooled buffers kept at most per class (about 256 KiB of pages per class); more are freed.
const fn pool_cap(class: usize) -> usize {
    64 >> class
}
/// The bytes between a pooled buffer's guards.
const fn kept_middle(class: usize) -> usize {
    SLACK_PAGE << class
}
/// A pooled buffer's whole size: the leading guard, its pages, the trailing guard.
const fn kept_size(class: usize) -> usize {
    LEAD_GUARD + kept_middle(class) + GRANULE
}
/// Free pooled buffers of each class, by address (their guards protected).
static POOLS: [Mutex<Vec<usize>>; KEPT_CLASSES] = [const { Mutex::new(Vec::new()) }; KEPT_CLASSES];

fn kept_layout(class: usize) -> Layout {
    // A non-zero size and a power-of-two alignment.
    Layout::from_size_align(kept_size(class), GRANULE).unwrap_or(Layout::new::<u8>())
}

#[cfg(unix)]
fn protect(at: *mut u8, len: usize, none: bool) -> bool {
    extern "C" {
        fn mprotect(addr: *mut std::ffi::c_void, len: usize, prot: i32) -> i32;
    }
    const PROT_READ_WRITE: i32 = 1 | 2;
    // SAFETY: callers pass whole pages of a pooled allocation of ours, never handed to anything
    // else while protected.
    unsafe { mprotect(at as *mut std::ffi::c_void, len, if none { 0 } else { PROT_READ_WRITE }) == 0 }
}

#[cfg(not(unix))]
fn protect(_: *mut u8, _: usize, _: bool) -> bool {
    false
}

/// Protects or opens both guards of the pooled allocation of `class` at `base`.
fn protect_guards(base: *mut u8, class: usize, none: bool) -> bool {
    // SAFETY: both ranges lie inside the allocation of `kept_size(class)` bytes at `base`.
    let trailing = unsafe { base.add(LEAD_GUARD + kept_middle(class)) };
    protect(base, LEAD_GUARD, none) & protect(trailing, GRANULE, none)
}

/// A new pooled allocation of `class` with its guards protected, or `None` where that fails.
fn new_kept(class: usize) -> Option<*mut u8> {
    let layout = kept_layout(class);
    // SAFETY: the layout has a non-zero size.
    let base = unsafe { alloc(layout) };
    if base.is_null() {
        return None;
    }
    if protect_guards(base, class, true) {
        return Some(base);
    }
    if protect_guards(base, class, false) {
        // SAFETY: allocated above with this layout, its guards open again.
        unsafe { dealloc(base, layout) };
    }
    None
}

// SAFETY: the allocation is owned exclusively by this value; moving it between threads moves
// that ownership. Kernels write to it only while the launch that owns it runs.
unsafe impl Send for GuardedBuf {}

impl GuardedBuf {
    /// A zeroed allocation with `len` data bytes placed against the trailing guard.
    pub fn new(kernel: &str, len: usize) -> Result<GuardedBuf> {
        Self::filled(kernel, len, 0)
    }

    /// An allocation with `len` data bytes placed against the trailing guard, every byte between
    /// the guards set to `fill` (the guards themselves are never read: the kernel library
    /// protects them while a launch runs).
    pub fn filled(kernel: &str, len: usize, fill: u8) -> Result<GuardedBuf> {
        let too_large =
            || Error::invalid(kernel.to_string(), format!("cannot allocate a guarded buffer of {len} bytes"));
        let middle = len.checked_add(DATA_ALIGN).ok_or_else(too_large)?.div_ceil(SLACK_PAGE) * SLACK_PAGE;
        let size = middle.checked_add(LEAD_GUARD + GRANULE).ok_or_else(too_large)?;
        let layout = Layout::from_size_align(size, GRANULE).map_err(|_| too_large())?;
        // SAFETY: the layout has a non-zero size (three granules and a page at least).
        let base = unsafe { alloc(layout) };
        if base.is_null() {
            return Err(too_large());
        }
        // SAFETY: the middle part, [LEAD_GUARD, LEAD_GUARD + middle), lies inside the allocation.
        unsafe { std::ptr::write_bytes(base.add(LEAD_GUARD), fill, middle) };
        let data = (LEAD_GUARD + middle - len) & !(DATA_ALIGN - 1);
        Ok(GuardedBuf { base, size, lead: LEAD_GUARD, data, len, owner: Owner::Alloc(layout) })
    }

    /// As `filled`, for an output of `len` bytes up to `KEPT_MAX` of an unchecked launch, from
    /// the pool of allocations whose guards stay protected between launches (see the module's
    /// docs); `None` for a larger `len` or where no guard can be protected (then `filled`).
    pub fn kept(len: usize, fill: u8) -> Option<GuardedBuf> {
        if len > KEPT_MAX {
            return None;
        }
        let pages = (len + DATA_ALIGN).div_ceil(SLACK_PAGE);
        let class = pages.next_power_of_two().trailing_zeros() as usize;
        let pooled = POOLS[class].lock().ok().and_then(|mut pool| pool.pop());
        let base = match pooled {
            Some(at) => at as *mut u8,
            None => new_kept(class)?,
        };
        let middle = kept_middle(class);
        // SAFETY: the pages between the guards lie inside the allocation and are not protected.
        unsafe { std::ptr::write_bytes(base.add(LEAD_GUARD), fill, middle) };
        let data = (LEAD_GUARD + middle - len) & !(DATA_ALIGN - 1);
        let owner = Owner::Pooled { class, spoiled: false };
        Some(GuardedBuf { base, size: kept_size(class), lead: LEAD_GUARD, data, len, owner })
    }

    /// Marks a pooled buffer as having had a guard opened by the fault handler: it is freed on
    /// drop, not pooled again. Other buffers are unaffected.
    pub fn spoil(&mut self) {
        if let Owner::Pooled { spoiled, .. } = &mut self.owner {
            *spoiled = true;
        }
    }

    /// As `filled`, for an output whose data the caller writes in full before the run: from
    /// `HOST_APRON_FROM` bytes up the layout lies inside the host buffer the output becomes (see
    /// the module's docs), its data left as the host buffer has it (zeros, or an earlier
    /// output's values in a reused allocation) rather than filled, and the memory asked to be
    /// backed by huge pages where the system has them, as NumPy asks for its large arrays.
    pub fn output(kernel: &str, len: usize, fill: u8) -> Result<GuardedBuf> {
        if len < HOST_APRON_FROM {
            return Self::filled(kernel, len, fill);
        }
        let too_large =
            || Error::invalid(kernel.to_string(), format!("cannot allocate a guarded buffer of {len} bytes"));
        let middle = len.checked_add(DATA_ALIGN).ok_or_else(too_large)?.div_ceil(GRANULE) * GRANULE;
        let size = middle + 2 * GRANULE;
        let data = (GRANULE + middle - len) & !(DATA_ALIGN - 1);
        let (host, start, total, at) =
            HostBuffer::placed_for_output(len, GRANULE, data % GRANULE).ok_or_else(too_large)?;
        // The aprons (HOST_APRON_BYTES each side) hold the guards and the slack: `data` is at
        // most two granules and 16 bytes, the tail after the data one granule and 16 bytes.
        let offset = at - data;
        debug_assert!((start as usize + offset) % GRANULE == 0 && offset + size <= total);
        // SAFETY: [offset, offset + size) lies inside the host buffer's allocation of `total`
        // bytes (above), which `owner` keeps alive and never reallocates.
        let base = unsafe { start.add(offset) };
        advise_huge_pages(base, size);
        let mut buf = GuardedBuf { base, size, lead: GRANULE, data, len, owner: Owner::Host(Some(host)) };
        let middle = buf.between_guards();
        middle[..data - GRANULE].fill(fill);
        middle[data - GRANULE + len..].fill(fill);
        Ok(buf)
    }

    /// The host buffer of a clean run's output made by `output`, its slack zeroed again (the
    /// aprons it lies in are zeros); the buffer itself when it has an allocation of its own.
    pub fn into_output(mut self) -> std::result::Result<HostBuffer, GuardedBuf> {
        if !matches!(self.owner, Owner::Host(Some(_))) {
            return Err(self);
        }
        let (off, len) = (self.data - self.lead, self.len);
        let middle = self.between_guards();
        middle[..off].fill(0);
        middle[off + len..].fill(0);
        let host = match &mut self.owner {
            Owner::Host(host) => host.take(),
            Owner::Alloc(_) | Owner::Pooled { .. } => None,
        };
        host.ok_or(self)
    }

    /// Where the kernel's pointer to the data starts.
    pub fn data_ptr(&mut self) -> *mut u8 {
        // SAFETY: `data + len` lies within the allocation's middle part (see `new`).
        unsafe { self.base.add(self.data) }
    }

    pub fn data_addr(&self) -> u64 {
        self.base as u64 + self.data as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The two guard ranges: before the data and after it.
    pub fn guards(&self) -> [Guard; 2] {
        let b = self.base as u64;
        let size = self.size as u64;
        let lead = self.lead as u64;
        let kept = u64::from(matches!(self.owner, Owner::Pooled { .. }));
        [Guard { begin: b, end: b + lead, kept }, Guard { begin: b + size - GRANULE as u64, end: b + size, kept }]
    }

    /// Everything between the guards: slack before, data, and alignment bytes after.
    pub fn between_guards(&mut self) -> &mut [u8] {
        let n = self.size - self.lead - GRANULE;
        // SAFETY: the middle part is inside the allocation, initialised (see `filled`) and not
        // protected while the host holds `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(self.lead), n) }
    }

    /// Offset of the data within `between_guards()`.
    pub fn data_offset(&self) -> usize {
        self.data - self.lead
    }
}

impl Drop for GuardedBuf {
    fn drop(&mut self) {
        match self.owner {
            Owner::Alloc(layout) => {
                // SAFETY: `base` came from `alloc` with this layout and is freed once; the guards
                // were unprotected by `kiln_checked_end` before any buffer is dropped.
                unsafe { dealloc(self.base, layout) }
            }
            Owner::Host(_) => {}
            Owner::Pooled { class, spoiled } => {
                if !spoiled {
                    if let Ok(mut pool) = POOLS[class].lock() {
                        if pool.len() < pool_cap(class) {
                            pool.push(self.base as usize);
                            return;
                        }
                    }
                }
                // A range that cannot be opened again is never handed back to the allocator.
                if protect_guards(self.base, class, false) {
                    // SAFETY: allocated by `new_kept` with this layout, its guards open again.
                    unsafe { dealloc(self.base, kept_layout(class)) }
                }
            }
        }
    }
}

/// Asks Linux to back `[base, base + len)` with transparent huge pages where it can (a fresh
/// output then takes a page fault per 2 MiB, not per 4 KiB); a refusal changes nothing.
#[cfg(target_os = "linux")]
fn advise_huge_pages(base: *mut u8, len: usize) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    const HUGE: usize = 2 << 20;
    let (start, end) = ((base as usize).div_ceil(HUGE) * HUGE, (base as usize + len) / HUGE * HUGE);
    if end > start {
        // SAFETY: the range lies inside an allocation of ours; the advice changes how its pages
        // are backed, never their contents.
        unsafe { madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_: *mut u8, _: usize) {}

/// The byte range `[lo, hi)` a strided view can reach relative to its first element.
pub fn reach(shape: &[usize], strides: &[isize], elem: usize) -> (isize, isize) {
    if shape.contains(&0) {
        return (0, 0);
    }
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&n, &s) in shape.iter().zip(strides) {
        let span = (n as isize - 1) * s;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    (lo * elem as isize, (hi + 1) * elem as isize)
}

#[cfg(test)]
mod tests {
    use super::GuardedBuf;

    #[test]
    fn a_new_allocation_is_filled_and_keeps_its_layout() {
        let mut bufs = Vec::new();
        for _ in 0..4 {
            let mut b = GuardedBuf::filled("layout", 100, 0x22).unwrap();
            assert!(b.between_guards().iter().all(|&x| x == 0x22));
            assert_eq!(b.data_addr() % 16, 0);
            let [before, after] = b.guards();
            assert_eq!((before.end - before.begin, after.end - after.begin), (2 * 65536, 65536));
            assert!(b.data_addr() + 100 <= after.begin && after.begin - (b.data_addr() + 100) < 16);
            // Slack and guard together reach at least 128 KiB before the data; the slack is
            // under a page where pages are 4 KiB.
            assert!(b.data_addr() - before.begin >= 2 * 65536);
            if cfg!(target_arch = "x86_64") {
                assert!(b.data_addr() - before.end < 4096, "the slack is more than a page");
            }
            bufs.push(b);
        }
        // Outputs of up to 16 pages come from the pools, their guards listed as kept, the slack
        // at most half of the pages between the guards (under a page for the smallest).
        if super::KEPT_MAX > 0 {
            for (len, slack_under) in [(100, 4096), (4096, 4097), (5000, 4096), (20_000, 16_384), (super::KEPT_MAX, 17)]
            {
                let mut k = GuardedBuf::kept(len, 0x33).expect("a pooled buffer");
                assert!(k.between_guards().iter().all(|&x| x == 0x33));
                let [before, after] = k.guards();
                assert_eq!((before.kept, after.kept), (1, 1));
                assert_eq!(before.end - before.begin, 2 * 65536);
                assert!(k.data_addr() + len as u64 <= after.begin && after.begin - (k.data_addr() + len as u64) < 16);
                assert!(k.data_addr() - before.end < slack_under, "{len} bytes: slack past {slack_under}");
            }
            assert!(GuardedBuf::kept(super::KEPT_MAX + 1, 0).is_none(), "larger outputs are not pooled");
        }
        assert_eq!(bufs[0].guards().map(|g| g.kept), [0, 0], "a buffer of its own arms with its launch");
        // Held at once, the four are four allocations.
        let mut bases: Vec<u64> = bufs.iter().map(|b| b.data_addr()).collect();
        bases.sort_unstable();
        bases.dedup();
        assert_eq!(bases.len(), 4);
    }
}
