//! The prelude headers (`crates/kiln/prelude/`) each target's translation unit starts with,
//! named once: the common Metal library both targets share, and each target's own parts around
//! it, in inclusion order.

/// A header: its name under `prelude/` and its text.
pub type Header = (&'static str, &'static str);

/// The common headers, in inclusion order (usable from host C++ and CUDA C++).
pub const COMMON: [Header; 13] = [
    ("common/types.h", include_str!("../../prelude/common/types.h")),
    ("common/vec.h", include_str!("../../prelude/common/vec.h")),
    ("common/vec_ops.h", include_str!("../../prelude/common/vec_ops.h")),
    ("common/packed.h", include_str!("../../prelude/common/packed.h")),
    ("common/math.h", include_str!("../../prelude/common/math.h")),
    ("common/math_float.h", include_str!("../../prelude/common/math_float.h")),
    ("common/math_int.h", include_str!("../../prelude/common/math_int.h")),
    ("common/matrix.h", include_str!("../../prelude/common/matrix.h")),
    ("common/geometric.h", include_str!("../../prelude/common/geometric.h")),
    ("common/array.h", include_str!("../../prelude/common/array.h")),
    ("common/type_traits.h", include_str!("../../prelude/common/type_traits.h")),
    ("common/qualified_names.h", include_str!("../../prelude/common/qualified_names.h")),
    ("common/lowering.h", include_str!("../../prelude/common/lowering.h")),
];

/// MLX's utils preamble, for body-only programs.
pub const MLX_UTILS: Header = ("common/mlx_utils.h", include_str!("../../prelude/common/mlx_utils.h"));

/// The CPU target's configuration, before the common headers.
pub const CPU_CONFIG: Header = ("cpu/config.h", include_str!("../../prelude/cpu/config.h"));

/// The CPU emulator's runtime, after the common headers: threads, threadgroup memory, SIMD-group
/// convergence and collectives.
pub const CPU_RUNTIME: [Header; 4] = [
    ("cpu/runtime.h", include_str!("../../prelude/cpu/runtime.h")),
    ("cpu/threadgroup.h", include_str!("../../prelude/cpu/threadgroup.h")),
    ("cpu/convergence.h", include_str!("../../prelude/cpu/convergence.h")),
    ("cpu/simd.h", include_str!("../../prelude/cpu/simd.h")),
];

/// The CPU group scheduler, after the user's code and entry wrappers.
pub const CPU_SCHEDULER: Header = ("cpu/scheduler.h", include_str!("../../prelude/cpu/scheduler.h"));

/// The CUDA target's configuration, before the common headers.
pub const CUDA_CONFIG: Header = ("cuda/config.h", include_str!("../../prelude/cuda/config.h"));

/// The CUDA-specific SIMD, synchronisation and matrix parts, after the common headers.
pub const CUDA_RUNTIME: [Header; 3] = [
    ("cuda/simd.h", include_str!("../../prelude/cuda/simd.h")),
    ("cuda/sync.h", include_str!("../../prelude/cuda/sync.h")),
    ("cuda/matrix.h", include_str!("../../prelude/cuda/matrix.h")),
];

/// Every header of `target_config`'s target in inclusion order: its configuration, the common
/// headers, then `runtime`.
pub fn headers(config: Header, runtime: &'static [Header]) -> impl Iterator<Item = Header> {
    std::iter::once(config).chain(COMMON).chain(runtime.iter().copied())
}
