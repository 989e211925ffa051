//! What the ops share: argument checks that name the op first, launch-size conversions, and the
//! 16-byte load helpers of the memory-bound kernels.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The float dtypes every op here accepts.
pub const FLOAT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Lanes in a simdgroup (Metal) or warp (CUDA).
pub(crate) const SIMD: usize = 32;

/// Checks that `a` holds one of the float dtypes.
pub(crate) fn check_float(op: &str, what: &str, a: &Array) -> Result<()> {
    if FLOAT_DTYPES.contains(&a.dtype()) {
        Ok(())
    } else {
        Err(Error::dtype(op, a.dtype(), format!("{what} must be float32, float16 or bfloat16")))
    }
}

/// Checks that `a` has the dtype `want` (the dtype of the op's main input).
pub(crate) fn check_same_dtype(op: &str, what: &str, a: &Array, want: DType) -> Result<()> {
    if a.dtype() == want {
        Ok(())
    } else {
        Err(Error::dtype(op, a.dtype(), format!("{what} must have the dtype of the input ({want})")))
    }
}

/// Checks that `a` has at least one element and at least `min_ndim` axes.
pub(crate) fn check_nonempty(op: &str, what: &str, a: &Array, min_ndim: usize) -> Result<()> {
    if a.ndim() < min_ndim {
        return Err(Error::shape(op, format!("{what} needs at least {min_ndim} axes, got shape {:?}", a.shape())));
    }
    if a.size() == 0 {
        return Err(Error::shape(op, format!("{what} is empty (shape {:?})", a.shape())));
    }
    Ok(())
}

/// The one device every array lives on; moving data between devices is the caller's choice.
pub(crate) fn common_device(op: &str, arrays: &[(&str, &Array)]) -> Result<Device> {
    let mut device = None;
    for &(what, a) in arrays {
        match device {
            None => device = Some((what, a.device())),
            Some((first, d)) if d != a.device() => {
                return Err(Error::invalid(
                    op,
                    format!("{what} lives on {} but {first} on {d}; move it with Array::to_device", a.device()),
                ))
            }
            Some(_) => {}
        }
    }
    device.map(|(_, d)| d).ok_or_else(|| Error::invalid(op, "no input arrays"))
}

/// A grid or threadgroup extent as the `u32` a dispatch takes.
pub(crate) fn grid_dim(op: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(op, format!("{n} threads exceed one dispatch (at most 2^32 - 1)")))
}

/// An element count or extent the kernels index with 32-bit integers.
pub(crate) fn index_i32(op: &str, what: &str, n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::invalid(op, format!("{what} = {n} exceeds the 32-bit index range")))
}

/// True when the kernel will see `a` row-contiguous and 16-byte aligned for `vec<T, 4>`
/// loads: either it is contiguous at an offset that is a multiple of 4 elements, or it will
/// be copied to a fresh buffer by `ensure_row_contiguous`.
pub(crate) fn vec4_aligned(a: &Array) -> bool {
    !a.is_row_contiguous() || a.offset() % 4 == 0
}

/// Rounds `n` up to a multiple of `m`.
pub(crate) fn round_up(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// `kiln_load16`: a 16-byte load marked evict-last for the L2 on CUDA, a plain load elsewhere
/// (the start of [`VEC4_HEADER`] and of the elementwise header).
macro_rules! load16_source {
    () => {
        r#"
// A 16-byte load of streamed data. On CUDA the line is marked for the L2 to evict last (as
// Triton's row kernels do), which measured faster on the H100. Elsewhere a plain load.
inline uint4 kiln_load16(const device uint4* p) {
#if defined(KILN_CUDA) && defined(__CUDA_ARCH__)
    uint4 r;
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "l"(policy));
    return r;
#else
    return *p;
#endif
}
"#
    };
}
pub(crate) use load16_source;

/// Helpers for 16-byte (f32) or 8-byte (f16/bf16) loads and stores of 4 elements, widened to
/// f32 (`c` counts 4-element chunks from `p`, which must be 4-element aligned), and for units of
/// P such chunks (16-byte accesses of 8 16-bit elements when P = 2).
pub(crate) const VEC4_HEADER: &str = concat!(
    load16_source!(),
    r#"
template <typename T>
inline float4 kiln_load4(const device T* p, uint c) {
    vec<T, 4> v = ((const device vec<T, 4>*)p)[c];
    return float4(static_cast<float>(v.x), static_cast<float>(v.y), static_cast<float>(v.z), static_cast<float>(v.w));
}
template <typename T>
inline float4 kiln_round4(float4 f) {
    return float4(static_cast<float>(static_cast<T>(f.x)), static_cast<float>(static_cast<T>(f.y)),
                  static_cast<float>(static_cast<T>(f.z)), static_cast<float>(static_cast<T>(f.w)));
}
template <typename T>
inline void kiln_store4(device T* p, uint c, float4 f) {
    ((device vec<T, 4>*)p)[c] = vec<T, 4>(static_cast<T>(f.x), static_cast<T>(f.y), static_cast<T>(f.z), static_cast<T>(f.w));
}
// The two 16-bit elements of a 32-bit word (low half first) widened, and two floats rounded and
// packed; the `float` overloads only let `P = 1` instantiations compile.
inline float2 kiln_widen2(uint u, half) {
    return float2(static_cast<float>(as_type<half>(ushort(u & 0xffffu))), static_cast<float>(as_type<half>(ushort(u >> 16))));
}
inline float2 kiln_widen2(uint u, bfloat16_t) {
    return float2(static_cast<float>(as_type<bfloat16_t>(ushort(u & 0xffffu))),
                  static_cast<float>(as_type<bfloat16_t>(ushort(u >> 16))));
}
inline float2 kiln_widen2(uint u, float) {
    return float2(0.0f);
}
inline uint kiln_pack2(float a, float b, half) {
    return uint(as_type<ushort>(static_cast<half>(a))) | (uint(as_type<ushort>(static_cast<half>(b))) << 16);
}
inline uint kiln_pack2(float a, float b, bfloat16_t) {
    return uint(as_type<ushort>(static_cast<bfloat16_t>(a))) | (uint(as_type<ushort>(static_cast<bfloat16_t>(b))) << 16);
}
inline uint kiln_pack2(float a, float b, float) {
    return 0u;
}
// The 8 16-bit elements of a 16-byte unit, widened into v[0..2).
template <typename T>
inline void kiln_widen_unit(uint4 q, thread float4* v) {
    float2 a = kiln_widen2(q.x, T()), b = kiln_widen2(q.y, T());
    float2 c = kiln_widen2(q.z, T()), d = kiln_widen2(q.w, T());
    v[0] = float4(a.x, a.y, b.x, b.y);
    v[1] = float4(c.x, c.y, d.x, d.y);
}
// Unit `u` of P adjacent 4-element chunks (P = 2 only for 16-bit T: one 16-byte access, which
// needs 8-element alignment) into v[0..P), `fill` where the unit lies past the row's D4 chunks.
// 16-byte units go through `kiln_load16` unless KEEP16 is false (a plain load).
template <typename T, int P, bool KEEP16 = true>
inline void kiln_load_unit(const device T* p, uint u, uint D4, thread float4* v, float fill) {
    if (P == 2) {
        if (2 * u < D4) {
            kiln_widen_unit<T>(KEEP16 ? kiln_load16((const device uint4*)p + u) : ((const device uint4*)p)[u], v);
        } else {
            v[0] = float4(fill);
            v[1] = float4(fill);
        }
    } else if (sizeof(T) == 4) {
        v[0] = u < D4 ? as_type<float4>(kiln_load16((const device uint4*)p + u)) : float4(fill);
    } else {
        v[0] = u < D4 ? kiln_load4(p, u) : float4(fill);
    }
}
// Stores unit `u` (in range) from v[0..P).
template <typename T, int P>
inline void kiln_store_unit(device T* p, uint u, thread const float4* v) {
    if (P == 2) {
        ((device uint4*)p)[u] = uint4(kiln_pack2(v[0].x, v[0].y, T()), kiln_pack2(v[0].z, v[0].w, T()),
                                      kiln_pack2(v[1].x, v[1].y, T()), kiln_pack2(v[1].z, v[1].w, T()));
    } else {
        kiln_store4(p, u, v[0]);
    }
}
"#
);

/// True when 16-byte units of 8 elements of `a` are aligned (see [`vec4_aligned`]).
pub(crate) fn vec8_aligned(a: &Array) -> bool {
    !a.is_row_contiguous() || a.offset() % 8 == 0
}
