//! The C ABI between the host and a compiled kernel library (`prelude/cpu`): the entry points'
//! signatures and the `#[repr(C)]` structures they exchange, each mirroring its `kiln::rt`
//! counterpart field for field. Compiling, running, stack and guard code all import it here.

use std::ffi::{c_char, c_void};

/// `kiln_run(entry, desc, begin, end, stacks, arena, msg, cap)`: runs a range of groups
/// (cooperative kernels on fibers whose stacks come from `stacks`; others ignore it, may be
/// null), their threadgroup memory in `arena`; 0 ok, 1 cancelled, 2 fault (message in `msg`).
pub type RunFn = unsafe extern "C" fn(
    i32,
    *const LaunchDesc,
    u64,
    u64,
    *mut StackSet,
    *mut ThreadgroupArena,
    *mut c_char,
    i32,
) -> i32;

/// `kiln_release_stacks(set)`: unmaps every stack of a set.
pub type ReleaseFn = unsafe extern "C" fn(*mut StackSet);

/// `kiln_checked_begin` / `kiln_checked_end`: arm or disarm the guards of a checked launch.
pub type CheckedFn = unsafe extern "C" fn(*mut CheckedLaunch) -> i32;

/// The launch description the generated `kiln_run` reads (mirrors `kiln::rt::LaunchDesc`).
#[repr(C)]
pub struct LaunchDesc {
    pub(super) buffers: *const *mut c_void,
    pub(super) tg_sizes: *const u64,
    pub(super) cancel: *const i32,
    pub(super) n_buffers: u32,
    pub(super) n_tg: u32,
    pub(super) grid: [u32; 3],
    pub(super) tg: [u32; 3],
    pub(super) groups: [u32; 3],
    /// Nonzero on checked launches: threadgroup memory's guards also fault on reads.
    pub(super) checked: u32,
}

/// Stacks of one set (mirrors `kiln::rt::StackSet`); the library maps them on first use, and
/// the arena of its coroutine threads' frames too.
#[repr(C)]
pub struct StackSet {
    pub(super) stacks: [*mut c_void; MAX_STACKS],
    pub(super) count: u32,
    pub(super) frames: *mut c_void,
    pub(super) frames_room: u64,
}

impl StackSet {
    /// A set with nothing mapped yet.
    pub(super) fn empty() -> StackSet {
        StackSet { stacks: [std::ptr::null_mut(); MAX_STACKS], count: 0, frames: std::ptr::null_mut(), frames_room: 0 }
    }
}

/// Most stacks one call needs: the largest threadgroup.
pub const MAX_STACKS: usize = 1024;

/// Threadgroup arrays one group may have: 64 declarations and 16 `[[threadgroup(n)]]`
/// parameters.
pub(super) const ARENA_SLOTS: usize = 80;

/// The regions of one arena (mirrors `kiln::rt::TgArena`: 80 regions of 8 words); the kernel
/// library maps and lays them out on first use.
#[repr(C)]
pub struct ThreadgroupArena {
    pub(super) regions: [[u64; 8]; ARENA_SLOTS],
}

/// One protected range (mirrors `kiln::rt::Guard`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Guard {
    /// First byte of the range.
    pub begin: u64,
    /// One past its last byte.
    pub end: u64,
    /// Non-zero when the host keeps the range protected across launches (a pooled buffer's):
    /// arming and disarming the launch leave it as it is.
    pub kept: u64,
}

/// What the library's fault handler reads and writes (mirrors `kiln::rt::CheckedLaunch`).
#[repr(C)]
pub struct CheckedLaunch {
    /// The launch's guard ranges.
    pub guards: *const Guard,
    /// How many `guards` holds.
    pub n_guards: u32,
    /// Set by the handler: the index of the first guard touched, else -1.
    pub hit: i32,
    /// Set by the handler: the address of that access.
    pub addr: u64,
    /// The launch's cancel flag, set by the handler to stop the other threads.
    pub cancel: *mut i32,
}
