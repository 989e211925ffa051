// kiln CUDA prelude: the scalar part of Metal's `metal::` maths (float, half, bfloat and integer
// overloads). 16-bit floats compute in float and round once, as Apple GPUs do for transcendental
// functions. `fast::` maps to the approximate intrinsics, `precise::` to the IEEE ones.
#pragma once

namespace metal {

#define KILN_F1(name, expr)                                                                      \
  KILN_HD float name(float x) { return expr; }                                                   \
  KILN_HD half name(half h) { float x = static_cast<float>(h); return half(expr); }              \
  KILN_HD bfloat name(bfloat h) { float x = static_cast<float>(h); return bfloat(expr); }

#ifdef __FAST_MATH__
KILN_F1(exp, __expf(x))
KILN_F1(log, __logf(x))
KILN_F1(sin, __sinf(x))
KILN_F1(cos, __cosf(x))
KILN_F1(tan, __tanf(x))
KILN_F1(exp2, exp2f(x))
KILN_F1(log2, __log2f(x))
KILN_F1(log10, __log10f(x))
#else
KILN_F1(exp, expf(x))
KILN_F1(log, logf(x))
KILN_F1(sin, sinf(x))
KILN_F1(cos, cosf(x))
KILN_F1(tan, tanf(x))
KILN_F1(exp2, exp2f(x))
KILN_F1(log2, log2f(x))
KILN_F1(log10, log10f(x))
#endif
KILN_F1(exp10, exp10f(x))
KILN_F1(sqrt, sqrtf(x))
KILN_F1(rsqrt, rsqrtf(x))
KILN_F1(cbrt, cbrtf(x))
KILN_F1(tanh, tanhf(x))
KILN_F1(sinh, sinhf(x))
KILN_F1(cosh, coshf(x))
KILN_F1(asin, asinf(x))
KILN_F1(acos, acosf(x))
KILN_F1(atan, atanf(x))
KILN_F1(asinh, asinhf(x))
KILN_F1(acosh, acoshf(x))
KILN_F1(atanh, atanhf(x))
KILN_F1(erf, erff(x))
KILN_F1(erfc, erfcf(x))
KILN_F1(floor, floorf(x))
KILN_F1(ceil, ceilf(x))
KILN_F1(trunc, truncf(x))
KILN_F1(round, roundf(x))
KILN_F1(rint, rintf(x))
KILN_F1(fabs, fabsf(x))
KILN_F1(log1p, log1pf(x))
KILN_F1(expm1, expm1f(x))
KILN_F1(fract, fminf(x - floorf(x), 0x1.fffffep-1f))
KILN_F1(sign, (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : x))))
KILN_F1(saturate, fminf(fmaxf(x, 0.0f), 1.0f))
#undef KILN_F1

KILN_HD float abs(float x) { return fabsf(x); }
KILN_HD half abs(half x) { return half::from_bits(x.bits & 0x7fffu); }
KILN_HD bfloat abs(bfloat x) { return bfloat::from_bits(x.bits & 0x7fffu); }
KILN_HD int abs(int x) { return x < 0 ? -x : x; }
KILN_HD long abs(long x) { return x < 0 ? -x : x; }
KILN_HD short abs(short x) { return x < 0 ? -x : x; }
KILN_HD signed char abs(signed char x) { return x < 0 ? -x : x; }
KILN_HD char abs(char x) { return x < 0 ? -x : x; }
KILN_HD uint abs(uint x) { return x; }
KILN_HD ulong abs(ulong x) { return x; }
KILN_HD ushort abs(ushort x) { return x; }
KILN_HD uchar abs(uchar x) { return x; }

#define KILN_F2(name, expr)                                                                      \
  KILN_HD float name(float x, float y) { return expr; }                                          \
  KILN_HD half name(half hx, half hy) {                                                          \
    float x = static_cast<float>(hx), y = static_cast<float>(hy);                                \
    return half(expr);                                                                           \
  }                                                                                              \
  KILN_HD bfloat name(bfloat hx, bfloat hy) {                                                    \
    float x = static_cast<float>(hx), y = static_cast<float>(hy);                                \
    return bfloat(expr);                                                                         \
  }
#ifdef __FAST_MATH__
KILN_F2(pow, __powf(x, y))
#else
KILN_F2(pow, powf(x, y))
#endif
KILN_F2(powr, powf(x, y))
KILN_F2(atan2, atan2f(x, y))
KILN_F2(fmod, fmodf(x, y))
KILN_F2(copysign, copysignf(x, y))
KILN_F2(fdim, fdimf(x, y))
KILN_F2(step, (y < x ? 0.0f : 1.0f))
// Metal's fmax/fmin (and max/min on floats) return the other operand when one is NaN.
KILN_F2(fmax, fmaxf(x, y))
KILN_F2(fmin, fminf(x, y))
KILN_F2(max, fmaxf(x, y))
KILN_F2(min, fminf(x, y))
#undef KILN_F2

template <class T, typename kiln::enable_if<kiln::is_integral<T>::value, int>::type = 0>
KILN_HD T max(T a, T b) { return a > b ? a : b; }
template <class T, typename kiln::enable_if<kiln::is_integral<T>::value, int>::type = 0>
KILN_HD T min(T a, T b) { return a < b ? a : b; }
template <class T, typename kiln::enable_if<kiln::is_integral<T>::value, int>::type = 0>
KILN_HD T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
KILN_HD float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
KILN_HD half clamp(half x, half lo, half hi) { return min(max(x, lo), hi); }
KILN_HD bfloat clamp(bfloat x, bfloat lo, bfloat hi) { return min(max(x, lo), hi); }

KILN_HD float fma(float a, float b, float c) { return fmaf(a, b, c); }
KILN_HD half fma(half a, half b, half c) { return kiln::hfma(a, b, c); }
KILN_HD bfloat fma(bfloat a, bfloat b, bfloat c) { return kiln::hfma(a, b, c); }
KILN_HD float mix(float x, float y, float a) { return x + (y - x) * a; }
KILN_HD half mix(half x, half y, half a) { return x + (y - x) * a; }
KILN_HD bfloat mix(bfloat x, bfloat y, bfloat a) { return x + (y - x) * a; }
KILN_HD float smoothstep(float e0, float e1, float x) {
  float t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
  return t * t * (3.0f - 2.0f * t);
}

template <class T> KILN_HD T select(T a, T b, bool c) { return c ? b : a; }

KILN_HD bool isnan(float x) { return x != x; }
KILN_HD bool isnan(half x) { return (x.bits & 0x7fffu) > 0x7c00u; }
KILN_HD bool isnan(bfloat x) { return (x.bits & 0x7fffu) > 0x7f80u; }
KILN_HD bool isinf(float x) { return fabsf(x) == __int_as_float(0x7f800000); }
KILN_HD bool isinf(half x) { return (x.bits & 0x7fffu) == 0x7c00u; }
KILN_HD bool isinf(bfloat x) { return (x.bits & 0x7fffu) == 0x7f80u; }
KILN_HD bool isfinite(float x) { return !isnan(x) && !isinf(x); }
KILN_HD bool isfinite(half x) { return (x.bits & 0x7c00u) != 0x7c00u; }
KILN_HD bool isfinite(bfloat x) { return (x.bits & 0x7f80u) != 0x7f80u; }
KILN_HD bool signbit(float x) { return (__float_as_uint(x) >> 31) != 0; }

// Integer bit operations.
KILN_HD uint popcount(uint x) { return __popc(x); }
KILN_HD int popcount(int x) { return __popc(static_cast<uint>(x)); }
KILN_HD ulong popcount(ulong x) { return __popcll(x); }
KILN_HD uint clz(uint x) { return __clz(static_cast<int>(x)); }
KILN_HD int clz(int x) { return __clz(x); }
KILN_HD uint ctz(uint x) { return x == 0 ? 32u : static_cast<uint>(__ffs(static_cast<int>(x)) - 1); }
KILN_HD int ctz(int x) { return static_cast<int>(ctz(static_cast<uint>(x))); }
KILN_HD uint reverse_bits(uint x) { return __brev(x); }
KILN_HD uint mulhi(uint a, uint b) { return __umulhi(a, b); }
KILN_HD int mulhi(int a, int b) { return __mulhi(a, b); }

// `as_type<T>(x)`: reinterpret the bits of a value of the same size.
template <class To, class From> KILN_HD To as_type(From from) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of the same size");
  To to;
  kiln::copy_bits(&to, &from, sizeof(To));
  return to;
}

namespace precise {
using metal::exp; using metal::log; using metal::sin; using metal::cos; using metal::tan;
using metal::exp2; using metal::log2; using metal::log10; using metal::pow; using metal::sqrt;
using metal::rsqrt; using metal::tanh; using metal::fmax; using metal::fmin; using metal::abs;
using metal::fabs; using metal::max; using metal::min; using metal::clamp; using metal::fma;
using metal::floor; using metal::ceil; using metal::round; using metal::trunc; using metal::sinh;
using metal::cosh; using metal::atan; using metal::atan2; using metal::asin; using metal::acos;
using metal::erf; using metal::fmod; using metal::exp10;
}  // namespace precise

namespace fast {
KILN_HD float exp(float x) { return __expf(x); }
KILN_HD float exp2(float x) { return exp2f(x); }
KILN_HD float log(float x) { return __logf(x); }
KILN_HD float log2(float x) { return __log2f(x); }
KILN_HD float sin(float x) { return __sinf(x); }
KILN_HD float cos(float x) { return __cosf(x); }
KILN_HD float tan(float x) { return __tanf(x); }
KILN_HD float pow(float x, float y) { return __powf(x, y); }
KILN_HD float divide(float x, float y) { return __fdividef(x, y); }
using metal::sqrt; using metal::rsqrt; using metal::tanh; using metal::fmax; using metal::fmin;
using metal::abs; using metal::fabs; using metal::max; using metal::min; using metal::clamp;
using metal::fma; using metal::floor; using metal::ceil; using metal::round; using metal::trunc;
using metal::exp10; using metal::log10; using metal::sinh; using metal::cosh; using metal::atan;
using metal::erf;
}  // namespace fast

KILN_HD float divide(float x, float y) { return x / y; }

}  // namespace metal
