//! The prelude headers (`crates/kiln/prelude/`) each target's translation unit starts with,
//! named once: the common Metal library both targets share, and each target's own parts around
//! it, in inclusion order.

/// A header: its name under `prelude/` and its text.
pub type Header = (&'static str, &'static str);

/// The header at `prelude/NAME`, its name written once.
macro_rules! header {
    ($name:literal) => {
        ($name, include_str!(concat!("../../prelude/", $name)))
    };
}

/// The common headers, in inclusion order (usable from host C++ and CUDA C++).
pub const COMMON: [Header; 15] = [
    header!("common/types.h"),
    header!("common/vec.h"),
    header!("common/vec_ops.h"),
    header!("common/packed.h"),
    header!("common/limits.h"),
    header!("common/math.h"),
    header!("common/math_float.h"),
    header!("common/math_int.h"),
    header!("common/matrix.h"),
    header!("common/geometric.h"),
    header!("common/array.h"),
    header!("common/type_traits.h"),
    header!("common/qualified_names.h"),
    header!("common/lowering.h"),
    header!("common/oslog.h"),
];

/// MLX's utils preamble, for body-only programs.
pub const MLX_UTILS: Header = header!("common/mlx_utils.h");

/// The CPU target's configuration, before the common headers.
pub const CPU_CONFIG: Header = header!("cpu/config.h");

/// What both targets declare after their runtime: the parts of Apple's headers that build on
/// the math and SIMD-group functions (`metal::fast`, the compiler's intrinsics).
pub const BUILTINS: Header = header!("common/builtins.h");

/// The CPU emulator's runtime, after the common headers: threads, threadgroup memory, SIMD-group
/// convergence and collectives, and where `os_log` lines go; then [`BUILTINS`].
pub const CPU_RUNTIME: [Header; 6] = [
    header!("cpu/runtime.h"),
    header!("cpu/threadgroup.h"),
    header!("cpu/convergence.h"),
    header!("cpu/simd.h"),
    header!("cpu/oslog.h"),
    BUILTINS,
];

/// `CPU_RUNTIME` of the sanitizer's libraries (`kiln check`): the sanitizer and the entry points
/// of its instrumentation after the threadgroup memory.
pub const CPU_CHECKED_RUNTIME: [Header; 8] = [
    header!("cpu/runtime.h"),
    header!("cpu/threadgroup.h"),
    header!("cpu/check.h"),
    header!("cpu/check_hooks.h"),
    header!("cpu/convergence.h"),
    header!("cpu/simd.h"),
    header!("cpu/oslog.h"),
    BUILTINS,
];

/// The CPU group scheduler, after the user's code and entry wrappers: the scheduling, then
/// faults and the C entries the host calls.
pub const CPU_SCHEDULER: [Header; 2] = [header!("cpu/scheduler.h"), header!("cpu/faults.h")];

/// In place of `CPU_SCHEDULER` when the scheduler comes as an object linked into the library:
/// the declaration of what the entries call.
pub const CPU_SCHEDULER_LINK: Header = header!("cpu/scheduler_link.h");

/// The CUDA target's configuration, before the common headers.
pub const CUDA_CONFIG: Header = header!("cuda/config.h");

/// The CUDA-specific `os_log` printing, SIMD, synchronisation and matrix parts, after the
/// common headers; then [`BUILTINS`].
pub const CUDA_RUNTIME: [Header; 5] =
    [header!("cuda/oslog.h"), header!("cuda/simd.h"), header!("cuda/sync.h"), header!("cuda/matrix.h"), BUILTINS];

/// Every header of `config`'s target in inclusion order: its configuration, the common
/// headers, then `runtime`.
pub fn headers(config: Header, runtime: &'static [Header]) -> impl Iterator<Item = Header> {
    std::iter::once(config).chain(COMMON).chain(runtime.iter().copied())
}
