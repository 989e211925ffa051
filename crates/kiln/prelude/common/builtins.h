// kiln common prelude, after the target's runtime: the parts of Apple's headers that libraries
// reach behind the documented API.
// - `metal::fast` and `metal::precise` declare every math function themselves (using-
//   declarations, not a using-directive): a program that adds its own overload there (MLX's
//   bf16_math.h adds `fast::exp(bfloat16_t)`) still finds Metal's for other types.
// - The compiler's intrinsics `__metal_NAME(args..., math_mode)` that Apple's math and SIMD
//   functions wrap, and the `__METAL_*_MATH__` macros that pick the mode: kiln's fast and
//   precise functions are one, so the mode is accepted and the precise function is called.
// - `metal::__is_valid_simdgroup_type<T>`: whether the SIMD-group functions take `T` (a scalar
//   or vector of the arithmetic types).
#pragma once

namespace metal {
#define KILN_MATH_NAMES(X)                                                                      \
  X(abs) X(acos) X(acosh) X(asin) X(asinh) X(atan) X(atan2) X(atanh) X(ceil) X(clamp)           \
  X(copysign) X(cos) X(cosh) X(cospi) X(divide) X(exp) X(exp10) X(exp2) X(fabs) X(fdim)        \
  X(floor) X(fma) X(fmax) X(fmax3) X(fmedian3) X(fmin) X(fmin3) X(fmod) X(fract) X(frexp)      \
  X(ilogb) X(isfinite) X(isinf) X(isnan) X(isnormal) X(isordered) X(isunordered) X(ldexp)     \
  X(log) X(log10) X(log2) X(max) X(min) X(mix) X(modf) X(nextafter) X(pow) X(powr) X(rint)     \
  X(round) X(rsqrt) X(saturate) X(select) X(sign) X(signbit) X(sin) X(sincos) X(sinh)          \
  X(sinpi) X(smoothstep) X(sqrt) X(step) X(tan) X(tanh) X(tanpi) X(trunc) X(dot) X(length)     \
  X(normalize) X(distance) X(cross)
#define KILN_USING(NAME) using ::metal::NAME;
namespace fast { KILN_MATH_NAMES(KILN_USING) }
namespace precise { KILN_MATH_NAMES(KILN_USING) }
#undef KILN_USING

template <class T> struct __is_valid_simdgroup_type : bool_constant<is_arithmetic<T>::value> {};
template <class T, int N> struct __is_valid_simdgroup_type<vec<T, N>> : __is_valid_simdgroup_type<T> {};
template <class T> struct __is_valid_simdgroup_type<const T> : __is_valid_simdgroup_type<T> {};
}  // namespace metal

#define __METAL_FAST_MATH__ true
#define __METAL_PRECISE_MATH__ false
#ifdef __FAST_MATH__
#define __METAL_MAYBE_FAST_MATH__ __METAL_FAST_MATH__
#else
#define __METAL_MAYBE_FAST_MATH__ __METAL_PRECISE_MATH__
#endif

// `__metal_NAME(args..., mode)` and `__metal_NAME(args...)` are `metal::NAME(args...)`: each
// form is there for the calls it fits (the others drop out of overload resolution).
#define KILN_INTRINSIC(NAME)                                                                    \
  template <class... A> KILN_HD inline auto __metal_##NAME(A... a) -> decltype(::metal::NAME(a...)) { \
    return ::metal::NAME(a...);                                                                 \
  }                                                                                             \
  template <class A, class M> KILN_HD inline auto __metal_##NAME(A a, M) -> decltype(::metal::NAME(a)) { \
    return ::metal::NAME(a);                                                                    \
  }                                                                                             \
  template <class A, class B, class M>                                                          \
  KILN_HD inline auto __metal_##NAME(A a, B b, M) -> decltype(::metal::NAME(a, b)) {            \
    return ::metal::NAME(a, b);                                                                 \
  }                                                                                             \
  template <class A, class B, class C, class M>                                                 \
  KILN_HD inline auto __metal_##NAME(A a, B b, C c, M) -> decltype(::metal::NAME(a, b, c)) {    \
    return ::metal::NAME(a, b, c);                                                              \
  }
KILN_INTRINSIC(fabs) KILN_INTRINSIC(abs) KILN_INTRINSIC(acos) KILN_INTRINSIC(acosh) KILN_INTRINSIC(asin)
KILN_INTRINSIC(asinh) KILN_INTRINSIC(atan) KILN_INTRINSIC(atanh) KILN_INTRINSIC(ceil) KILN_INTRINSIC(cos)
KILN_INTRINSIC(cosh) KILN_INTRINSIC(cospi) KILN_INTRINSIC(exp) KILN_INTRINSIC(exp10) KILN_INTRINSIC(exp2)
KILN_INTRINSIC(floor) KILN_INTRINSIC(fract) KILN_INTRINSIC(log) KILN_INTRINSIC(log10) KILN_INTRINSIC(log2)
KILN_INTRINSIC(rint) KILN_INTRINSIC(round) KILN_INTRINSIC(rsqrt) KILN_INTRINSIC(sin) KILN_INTRINSIC(sinh)
KILN_INTRINSIC(sinpi) KILN_INTRINSIC(sqrt) KILN_INTRINSIC(tan) KILN_INTRINSIC(tanh) KILN_INTRINSIC(tanpi)
KILN_INTRINSIC(trunc) KILN_INTRINSIC(saturate) KILN_INTRINSIC(atan2) KILN_INTRINSIC(divide)
KILN_INTRINSIC(fdim) KILN_INTRINSIC(fmax) KILN_INTRINSIC(fmin) KILN_INTRINSIC(fmod) KILN_INTRINSIC(ldexp)
KILN_INTRINSIC(nextafter) KILN_INTRINSIC(pow) KILN_INTRINSIC(powr) KILN_INTRINSIC(copysign) KILN_INTRINSIC(fma)
KILN_INTRINSIC(fmax3) KILN_INTRINSIC(fmin3) KILN_INTRINSIC(fmedian3)
#undef KILN_INTRINSIC
// The SIMD-group intrinsics take no mode (and some take an optional last argument).
#define KILN_SIMD_INTRINSIC(NAME)                                                               \
  template <class... A> KILN_HD inline auto __metal_##NAME(A... a) -> decltype(::metal::NAME(a...)) { \
    return ::metal::NAME(a...);                                                                 \
  }
KILN_SIMD_INTRINSIC(simd_broadcast) KILN_SIMD_INTRINSIC(simd_shuffle) KILN_SIMD_INTRINSIC(simd_shuffle_down)
KILN_SIMD_INTRINSIC(simd_shuffle_up) KILN_SIMD_INTRINSIC(simd_shuffle_xor) KILN_SIMD_INTRINSIC(simd_shuffle_rotate_down)
KILN_SIMD_INTRINSIC(simd_shuffle_rotate_up) KILN_SIMD_INTRINSIC(simd_shuffle_and_fill_down)
KILN_SIMD_INTRINSIC(simd_shuffle_and_fill_up) KILN_SIMD_INTRINSIC(simd_max) KILN_SIMD_INTRINSIC(simd_min)
KILN_SIMD_INTRINSIC(simd_sum) KILN_SIMD_INTRINSIC(simd_product) KILN_SIMD_INTRINSIC(simd_prefix_exclusive_product) KILN_SIMD_INTRINSIC(simd_prefix_exclusive_sum)
KILN_SIMD_INTRINSIC(simd_prefix_inclusive_product) KILN_SIMD_INTRINSIC(simd_prefix_inclusive_sum)
#undef KILN_SIMD_INTRINSIC
// The bitwise reductions take a float's bits too (MLX instantiates them for bfloat through float).
namespace kiln {
template <class T> struct bits_of { typedef T type; };
template <> struct bits_of<float> { typedef uint type; };
template <> struct bits_of<half> { typedef ushort type; };
template <> struct bits_of<bfloat> { typedef ushort type; };
}  // namespace kiln
#define KILN_SIMD_BITWISE(NAME)                                                                 \
  template <class T> KILN_HD inline T __metal_##NAME(T x) {                                     \
    typedef typename ::kiln::bits_of<T>::type B;                                                \
    return ::metal::as_type<T>(B(::metal::NAME(::metal::as_type<B>(x))));                       \
  }
KILN_SIMD_BITWISE(simd_and) KILN_SIMD_BITWISE(simd_or) KILN_SIMD_BITWISE(simd_xor)
#undef KILN_SIMD_BITWISE
// The exponent and integral part come back through a pointer.
template <class A, class E> KILN_HD inline auto __metal_frexp(A a, E* e) -> decltype(::metal::frexp(a, *e)) {
  return ::metal::frexp(a, *e);
}
template <class A, class I> KILN_HD inline auto __metal_modf(A a, I* i) -> decltype(::metal::modf(a, *i)) {
  return ::metal::modf(a, *i);
}
template <class T> KILN_HD inline T __metal_get_simdgroup_size(T) { return T(32); }

// <metal_uniform>: uniform<T> says a value is the same in every thread of the dispatch, a hint
// for Apple's compiler; the value is all there is, so the type is T itself.
namespace metal {
template <class T> using uniform = T;
template <class T> KILN_HD constexpr T make_uniform(T v) { return v; }
}  // namespace metal
