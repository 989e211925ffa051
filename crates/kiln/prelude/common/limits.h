// kiln common prelude: <metal_limits> and the constants of <metal_math> and <metal_types>.
// `metal::numeric_limits<T>` derives from `_numeric_limits_impl<T>`, as Apple's header has it,
// so a program can specialise the implementation for its own types (candle's `indexed<T>`).
// The implementation template lives at the prelude's global scope and is named in `metal`
// too: a specialisation written after `using namespace metal;` outside any namespace
// specialises it there. The macros are Metal's: every float constant (M_PI_F, ...), its half
// form (M_PI_H, the value rounded to half), and the limits of the float, half and integer
// types (FLT_MAX, HALF_MAX, MAXHALF, INT_MAX, ...).
#pragma once

template <class T> struct _numeric_limits_impl {
  static constexpr bool is_specialized = false;
};
#define KILN_INT_LIMITS(T, LO, HI, SIGNED, DIGITS)                                              \
  template <> struct _numeric_limits_impl<T> {                                                  \
    static constexpr bool is_specialized = true;                                                \
    static constexpr bool is_integer = true;                                                    \
    static constexpr bool is_signed = SIGNED;                                                   \
    static constexpr bool is_exact = true;                                                      \
    static constexpr bool has_infinity = false;                                                 \
    static constexpr bool has_quiet_NaN = false;                                                \
    static constexpr int digits = DIGITS;                                                       \
    static constexpr int radix = 2;                                                             \
    KILN_HD static constexpr T min() { return LO; }                                             \
    KILN_HD static constexpr T lowest() { return LO; }                                          \
    KILN_HD static constexpr T max() { return HI; }                                             \
    KILN_HD static constexpr T epsilon() { return 0; }                                          \
  };
KILN_INT_LIMITS(bool, false, true, false, 1)
KILN_INT_LIMITS(signed char, -128, 127, true, 7) KILN_INT_LIMITS(unsigned char, 0, 255, false, 8)
KILN_INT_LIMITS(char, -128, 127, true, 7)
KILN_INT_LIMITS(short, -32768, 32767, true, 15) KILN_INT_LIMITS(unsigned short, 0, 65535, false, 16)
KILN_INT_LIMITS(int, -2147483647 - 1, 2147483647, true, 31) KILN_INT_LIMITS(unsigned int, 0u, 4294967295u, false, 32)
KILN_INT_LIMITS(long, -9223372036854775807L - 1, 9223372036854775807L, true, 63)
KILN_INT_LIMITS(unsigned long, 0ul, 18446744073709551615ul, false, 64)
KILN_INT_LIMITS(long long, -9223372036854775807LL - 1, 9223372036854775807LL, true, 63)
KILN_INT_LIMITS(unsigned long long, 0ull, 18446744073709551615ull, false, 64)
#undef KILN_INT_LIMITS
#define KILN_FLOAT_TRAITS(DIGITS, MIN_EXP, MAX_EXP)                                             \
  static constexpr bool is_specialized = true;                                                  \
  static constexpr bool is_integer = false;                                                     \
  static constexpr bool is_signed = true;                                                       \
  static constexpr bool is_exact = false;                                                       \
  static constexpr bool has_infinity = true;                                                    \
  static constexpr bool has_quiet_NaN = true;                                                   \
  static constexpr bool is_iec559 = true;                                                       \
  static constexpr int digits = DIGITS;                                                         \
  static constexpr int radix = 2;                                                               \
  static constexpr int min_exponent = MIN_EXP;                                                  \
  static constexpr int max_exponent = MAX_EXP;
template <> struct _numeric_limits_impl<float> {
  KILN_FLOAT_TRAITS(24, -125, 128)
  KILN_HD static constexpr float min() { return 1.17549435e-38f; }
  KILN_HD static constexpr float lowest() { return -3.40282347e38f; }
  KILN_HD static constexpr float max() { return 3.40282347e38f; }
  KILN_HD static constexpr float epsilon() { return 1.19209290e-7f; }
  KILN_HD static constexpr float round_error() { return 0.5f; }
  KILN_HD static constexpr float denorm_min() { return __builtin_bit_cast(float, 1u); }
  KILN_HD static constexpr float infinity() { return __builtin_bit_cast(float, 0x7f800000u); }
  KILN_HD static constexpr float quiet_NaN() { return __builtin_bit_cast(float, 0x7fc00000u); }
  KILN_HD static constexpr float signaling_NaN() { return __builtin_bit_cast(float, 0x7fa00000u); }
};
#define KILN_SMALL_LIMITS(T, DIGITS, MIN_EXP, MAX_EXP, MIN, MAX, EPS, HALF_, DEN, INF, NAN_)    \
  template <> struct _numeric_limits_impl<T> {                                                  \
    KILN_FLOAT_TRAITS(DIGITS, MIN_EXP, MAX_EXP)                                                 \
    KILN_HD static constexpr T min() { return T::from_bits(MIN); }                              \
    KILN_HD static constexpr T lowest() { return T::from_bits((ushort)(MAX | 0x8000u)); }       \
    KILN_HD static constexpr T max() { return T::from_bits(MAX); }                              \
    KILN_HD static constexpr T epsilon() { return T::from_bits(EPS); }                          \
    KILN_HD static constexpr T round_error() { return T::from_bits(HALF_); }                    \
    KILN_HD static constexpr T denorm_min() { return T::from_bits(DEN); }                       \
    KILN_HD static constexpr T infinity() { return T::from_bits(INF); }                         \
    KILN_HD static constexpr T quiet_NaN() { return T::from_bits(NAN_); }                       \
  };
KILN_SMALL_LIMITS(half, 11, -13, 16, 0x0400u, 0x7bffu, 0x1400u, 0x3800u, 0x0001u, 0x7c00u, 0x7e00u)
KILN_SMALL_LIMITS(bfloat, 8, -125, 128, 0x0080u, 0x7f7fu, 0x3c00u, 0x3f00u, 0x0001u, 0x7f80u, 0x7fc0u)
#undef KILN_SMALL_LIMITS
#undef KILN_FLOAT_TRAITS

namespace metal {
using KILN_GLOBAL_SCOPE::_numeric_limits_impl;
template <class T> struct numeric_limits : _numeric_limits_impl<T> {};
template <class T> struct numeric_limits<const T> : numeric_limits<T> {};
template <class T> struct numeric_limits<volatile T> : numeric_limits<T> {};
template <class T> struct numeric_limits<const volatile T> : numeric_limits<T> {};
}  // namespace metal

// <metal_math>'s constants (float, then half rounded to nearest).
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H (half::from_bits(0x4170u))
#define M_LOG2E_H (half::from_bits(0x3dc5u))
#define M_LOG10E_H (half::from_bits(0x36f3u))
#define M_LN2_H (half::from_bits(0x398cu))
#define M_LN10_H (half::from_bits(0x409bu))
#define M_PI_H (half::from_bits(0x4248u))
#define M_PI_2_H (half::from_bits(0x3e48u))
#define M_PI_4_H (half::from_bits(0x3a48u))
#define M_1_PI_H (half::from_bits(0x3518u))
#define M_2_PI_H (half::from_bits(0x3918u))
#define M_2_SQRTPI_H (half::from_bits(0x3c83u))
#define M_SQRT2_H (half::from_bits(0x3da8u))
#define M_SQRT1_2_H (half::from_bits(0x39a8u))

// The float and half limits.
#define MAXFLOAT 3.40282347e38f
#define HUGE_VALF (metal::numeric_limits<float>::infinity())
#define INFINITY (metal::numeric_limits<float>::infinity())
#define NAN (metal::numeric_limits<float>::quiet_NaN())
#define FLT_DIG 6
#define FLT_MANT_DIG 24
#define FLT_MAX_10_EXP 38
#define FLT_MAX_EXP 128
#define FLT_MIN_10_EXP (-37)
#define FLT_MIN_EXP (-125)
#define FLT_RADIX 2
#define FLT_MAX 3.40282347e38f
#define FLT_MIN 1.17549435e-38f
#define FLT_EPSILON 1.19209290e-7f
#define MAXHALF (metal::numeric_limits<half>::max())
#define HUGE_VALH (metal::numeric_limits<half>::infinity())
#define HALF_DIG 2
#define HALF_MANT_DIG 11
#define HALF_MAX_10_EXP 4
#define HALF_MAX_EXP 16
#define HALF_MIN_10_EXP (-4)
#define HALF_MIN_EXP (-13)
#define HALF_RADIX 2
#define HALF_MAX (metal::numeric_limits<half>::max())
#define HALF_MIN (metal::numeric_limits<half>::min())
#define HALF_EPSILON (metal::numeric_limits<half>::epsilon())

// The integer limits (a host's <limits.h> may have defined them already, with the same values).
#ifndef CHAR_BIT
#define CHAR_BIT 8
#endif
#ifndef SCHAR_MAX
#define SCHAR_MAX 127
#endif
#ifndef SCHAR_MIN
#define SCHAR_MIN (-128)
#endif
#ifndef UCHAR_MAX
#define UCHAR_MAX 255
#endif
#ifndef CHAR_MAX
#define CHAR_MAX SCHAR_MAX
#endif
#ifndef CHAR_MIN
#define CHAR_MIN SCHAR_MIN
#endif
#ifndef USHRT_MAX
#define USHRT_MAX 65535
#endif
#ifndef SHRT_MAX
#define SHRT_MAX 32767
#endif
#ifndef SHRT_MIN
#define SHRT_MIN (-32768)
#endif
#ifndef UINT_MAX
#define UINT_MAX 0xffffffffu
#endif
#ifndef INT_MAX
#define INT_MAX 2147483647
#endif
#ifndef INT_MIN
#define INT_MIN (-2147483647 - 1)
#endif
#ifndef ULONG_MAX
#define ULONG_MAX 0xfffffffffffffffful
#endif
#ifndef LONG_MAX
#define LONG_MAX 0x7fffffffffffffffl
#endif
#ifndef LONG_MIN
#define LONG_MIN (-0x7fffffffffffffffl - 1)
#endif
