// kiln common prelude: scalar types of the Metal standard library (integer aliases, `half`,
// `bfloat` with round-to-nearest-even conversions) and the small type traits the rest of the
// prelude needs. Usable from host C++17 and CUDA C++17: every function is KILN_HD, defined by
// the including target prelude; no standard headers are included.
//
// Every conversion to half or bfloat rounds once: from float directly; from an integer or a
// double through float rounded to odd (24 bits rounded to odd, then to 8 or 11 bits, is the
// correctly rounded result). Arithmetic follows C++'s usual conversions with half and bfloat
// ranked above the integers: `half op int` converts the integer to half and the result is
// half (computed in float, which is exact enough that rounding the float result once to half
// or bfloat is the correctly rounded result of + - * /).
#pragma once

// Metal's 64-bit integers are `long`; a target that includes <stdint.h> first defines
// KILN_HAVE_STDINT (the spellings agree on LP64 hosts and CUDA).
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
#ifndef KILN_HAVE_STDINT
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
#endif

namespace kiln {

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };

template <class T> struct is_integral_ { static constexpr bool value = false; };
#define KILN_INTEGRAL(T) template <> struct is_integral_<T> { static constexpr bool value = true; };
KILN_INTEGRAL(bool) KILN_INTEGRAL(char) KILN_INTEGRAL(signed char) KILN_INTEGRAL(unsigned char)
KILN_INTEGRAL(short) KILN_INTEGRAL(unsigned short) KILN_INTEGRAL(int) KILN_INTEGRAL(unsigned int)
KILN_INTEGRAL(long) KILN_INTEGRAL(unsigned long) KILN_INTEGRAL(long long) KILN_INTEGRAL(unsigned long long)
#undef KILN_INTEGRAL
template <class T> struct is_integral : is_integral_<typename remove_cv<T>::type> {};
template <class T> struct is_builtin_float { static constexpr bool value = false; };
template <> struct is_builtin_float<float> { static constexpr bool value = true; };
template <> struct is_builtin_float<double> { static constexpr bool value = true; };
template <class T> struct is_arith {
  static constexpr bool value = is_integral<T>::value || is_builtin_float<typename remove_cv<T>::type>::value;
};

// On CUDA devices the conversions are the hardware's round-to-nearest-even instructions
// (cvt.rn.f16.f32 and cvt.f32.f16 from sm_53, cvt.rn.bf16.f32 from sm_80; none flushes
// subnormals). For every number, infinity and signed zero they give the software path's bits; a
// NaN gives a NaN (the hardware's canonical one, where the software path keeps the sign, and for
// half the payload's top bits): Metal does not specify the bits of a converted NaN, and one
// instruction per element is what keeps 16-bit memory-bound kernels at bandwidth.
// KILN_HW_CVT_X2 marks the paired forms (cvt.rn.f16x2.f32, cvt.rn.bf16x2.f32, sm_80) that
// vector conversions use.
#if defined(KILN_CUDA) && defined(__CUDA_ARCH__)
#define KILN_HW_F16 1
#if __CUDA_ARCH__ >= 800
#define KILN_HW_BF16 1
#define KILN_HW_CVT_X2 1
#endif
#endif

union f32_bits { float f; uint u; };
KILN_HD inline uint f2u(float f) { f32_bits b; b.f = f; return b.u; }
KILN_HD inline float u2f(uint u) { f32_bits b; b.u = u; return b.f; }

// IEEE binary16 from the bits of a binary32, round to nearest even, with subnormals,
// infinities and NaN (the software conversion, also usable in constant evaluation).
KILN_HD constexpr ushort f32_bits_to_f16(uint x) {
  uint sign = (x >> 16) & 0x8000u;
  uint exp = (x >> 23) & 0xffu;
  uint man = x & 0x7fffffu;
  if (exp == 0xffu) return (ushort)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (ushort)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (ushort)sign;
    man |= 0x800000u;
    uint shift = (uint)(14 - e);
    uint half_man = man >> shift;
    uint rem = man & ((1u << shift) - 1u);
    uint halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) half_man++;
    return (ushort)(sign | half_man);
  }
  uint h = sign | ((uint)e << 10) | (man >> 13);
  uint rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (ushort)h;
}

// IEEE binary16 from binary32, round to nearest even, with subnormals, infinities and NaN.
KILN_HD inline ushort f32_to_f16(float f) {
#ifdef KILN_HW_F16
  ushort r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#else
  return f32_bits_to_f16(f2u(f));
#endif
}

KILN_HD inline float f16_to_f32(ushort h) {
#ifdef KILN_HW_F16
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
  return r;
#else
  uint sign = ((uint)h & 0x8000u) << 16;
  uint exp = ((uint)h >> 10) & 0x1fu;
  uint man = (uint)h & 0x3ffu;
  if (exp == 0x1fu) return u2f(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return u2f(sign);
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return u2f(sign | ((exp + 112u) << 23) | (man << 13));
#endif
}

// bfloat16 from binary32, round to nearest even; NaN becomes the quiet NaN 0x7fc0 with its sign
// (the host's rule, and ml_dtypes').
KILN_HD inline ushort f32_to_bf16(float f) {
#ifdef KILN_HW_BF16
  ushort r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#else
  uint x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)(((x >> 16) & 0x8000u) | 0x7fc0u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (ushort)(x >> 16);
#endif
}
// Exact: bfloat16 is the upper half of binary32.
KILN_HD inline float bf16_to_f32(ushort b) { return u2f((uint)b << 16); }

// `d` rounded to float with round-to-odd: an inexact result gets its lowest mantissa bit set.
// Rounding that again to a format of at most 22 bits gives the correctly rounded result.
KILN_HD inline float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    uint b = f2u(f);
    if (!(b & 1u)) {
      // One step towards `d` in magnitude (the sign bit is untouched).
      double af = (double)f < 0.0 ? -(double)f : (double)f;
      double ad = d < 0.0 ? -d : d;
      f = u2f(af > ad ? b - 1u : b + 1u);
    }
  }
  return f;
}

// An integer rounded to float with round-to-odd (exact below 2^24).
template <class T> KILN_HD inline float int_to_f32_odd(T v) {
  bool neg = v < T(0);
  unsigned long long m = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
  if (m < (1ull << 24)) return neg ? -(float)m : (float)m;
  uint shift = 0;
  while ((m >> shift) >= (1ull << 24)) ++shift;
  unsigned long long top = m >> shift;
  if (m & ((1ull << shift) - 1ull)) top |= 1ull;
  float f = (float)top * u2f((127u + shift) << 23);  // exact: top < 2^24, shift <= 40
  return neg ? -f : f;
}

#ifdef KILN_HW_CVT_X2
// Two floats rounded to nearest even and packed, `lo` in the low 16 bits (the instructions
// put their first source in the high half).
KILN_HD inline uint f32x2_to_f16x2(float lo, float hi) {
  uint r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
KILN_HD inline uint f32x2_to_bf16x2(float lo, float hi) {
  uint r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif

}  // namespace kiln

namespace kiln {
// Constant evaluation (`constexpr` values, `constant` data initialised at compile time) cannot
// run the conversions above (inline assembly, unions); the constructors then take these
// portable forms, which give the same bits as the software paths. Compilers without the two
// builtins keep the run-time conversions, so such initialisers are not constant there.
#if defined(__has_builtin)
#if __has_builtin(__builtin_is_constant_evaluated) && __has_builtin(__builtin_bit_cast)
#define KILN_CONST_CVT 1
#endif
#endif
#ifdef KILN_CONST_CVT
KILN_HD constexpr bool is_constant_evaluated() { return __builtin_is_constant_evaluated(); }
KILN_HD constexpr ushort f32_to_f16_const(float f) { return f32_bits_to_f16(__builtin_bit_cast(uint, f)); }
KILN_HD constexpr float f16_to_f32_const(ushort h) {
  uint sign = ((uint)h & 0x8000u) << 16;
  uint exp = ((uint)h >> 10) & 0x1fu;
  uint man = (uint)h & 0x3ffu;
  if (exp == 0x1fu) return __builtin_bit_cast(float, sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return __builtin_bit_cast(float, sign | ((exp + 112u) << 23) | (man << 13));
}
KILN_HD constexpr ushort f32_to_bf16_const(float f) {
  uint x = __builtin_bit_cast(uint, f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)(((x >> 16) & 0x8000u) | 0x7fc0u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (ushort)(x >> 16);
}
KILN_HD constexpr float bf16_to_f32_const(ushort b) { return __builtin_bit_cast(float, (uint)b << 16); }
// f64_to_f32_odd and int_to_f32_odd for constant evaluation. Past the float range the result
// is the largest float (rounding to odd never overflows), so no out-of-range cast is evaluated.
KILN_HD constexpr float f64_to_f32_odd_const(double d) {
  double ad = d < 0.0 ? -d : d;
  if (d != d || ad > 1.7976931348623157e308) return (float)d;  // NaN, infinities
  if (ad > 0x1.fffffep127) return d < 0.0 ? -0x1.fffffep127f : 0x1.fffffep127f;
  float f = (float)d;
  uint b = __builtin_bit_cast(uint, f);
  if ((double)f == d || (b & 1u)) return f;
  double af = (double)f < 0.0 ? -(double)f : (double)f;
  return __builtin_bit_cast(float, af > ad ? b - 1u : b + 1u);
}
template <class T> KILN_HD constexpr float int_to_f32_odd_const(T v) {
  bool neg = v < T(0);
  unsigned long long m = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
  uint shift = 0;
  while ((m >> shift) >= (1ull << 24)) ++shift;
  unsigned long long top = m >> shift;
  if (shift && (m & ((1ull << shift) - 1ull))) top |= 1ull;
  float f = (float)top * __builtin_bit_cast(float, (127u + shift) << 23);  // exact
  return neg ? -f : f;
}
#define KILN_CVT(F, X) (::kiln::is_constant_evaluated() ? ::kiln::F##_const(X) : ::kiln::F(X))
#define KILN_NARROW(F, X) (::kiln::is_constant_evaluated() ? ::kiln::F##_const(X) : ::kiln::F(X))
#else
KILN_HD constexpr bool is_constant_evaluated() { return false; }
#define KILN_CVT(F, X) ::kiln::F(X)
#define KILN_NARROW(F, X) ::kiln::F(X)
#endif
}  // namespace kiln

struct half;
struct bfloat;

namespace kiln {
template <class T> T&& declval_() noexcept;
template <class A, class B> struct same_ { static constexpr bool value = false; };
template <class A> struct same_<A, A> { static constexpr bool value = true; };
template <class T> struct unref_ { typedef T type; };
template <class T> struct unref_<T&> { typedef T type; };
template <class T> struct unref_<T&&> { typedef T type; };
// A class (not half or bfloat) with a conversion of its own to an arithmetic type, which
// converts on to float without another class (MLX's _NoMask with operator bool, fp8_e8m0 with
// operator float and operator bfloat16_t). Metal's half and bfloat are built-in types: such a
// class converts to them through its operator and a standard conversion, so `T(mask)` and
// `h = mask` work; kiln's are classes, which take it through this constructor.
template <class C, class = void> struct scalar_class { static constexpr bool value = false; };
template <class C> struct scalar_class<C, decltype(void(static_cast<float>(declval_<C&>())))> {
  typedef typename remove_cv<typename unref_<C>::type>::type plain;
  static constexpr bool value = __is_class(plain) && !same_<plain, half>::value && !same_<plain, bfloat>::value;
};
}  // namespace kiln

// Metal `half`: stored as binary16; arithmetic of two halves rounds to half.
struct half {
  ushort bits;
  struct bits_tag {};
  half() = default;
  KILN_HD constexpr half(ushort b, bits_tag) : bits(b) {}
  KILN_HD constexpr half(float f) : bits(KILN_CVT(f32_to_f16, f)) {}
  KILN_HD constexpr half(double f) : bits(KILN_CVT(f32_to_f16, KILN_NARROW(f64_to_f32_odd, f))) {}
  // |v| >= 2^24 overflows half, so the float conversion (exact below 2^24) rounds once.
  template <class T, class = typename kiln::enable_if<kiln::is_integral<T>::value>::type>
  KILN_HD constexpr half(T v) : bits(KILN_CVT(f32_to_f16, (float)v)) {}
  // Metal converts between half and bfloat only when asked (`half(b)`, `static_cast`).
  KILN_HD explicit constexpr inline half(bfloat b);
  template <class C, class = typename kiln::enable_if<kiln::scalar_class<C>::value>::type>
  KILN_HD constexpr half(C&& c) : half(static_cast<float>(c)) {}
  KILN_HD constexpr operator float() const { return KILN_CVT(f16_to_f32, bits); }
  KILN_HD static constexpr half from_bits(ushort b) { return half(b, bits_tag()); }
};

// Metal `bfloat`: stored as bfloat16; arithmetic of two bfloats rounds to bfloat.
struct bfloat {
  ushort bits;
  struct bits_tag {};
  bfloat() = default;
  KILN_HD constexpr bfloat(ushort b, bits_tag) : bits(b) {}
  KILN_HD constexpr bfloat(float f) : bits(KILN_CVT(f32_to_bf16, f)) {}
  KILN_HD constexpr bfloat(double f) : bits(KILN_CVT(f32_to_bf16, KILN_NARROW(f64_to_f32_odd, f))) {}
  template <class T, class = typename kiln::enable_if<kiln::is_integral<T>::value>::type>
  KILN_HD constexpr bfloat(T v) : bits(KILN_CVT(f32_to_bf16, KILN_NARROW(int_to_f32_odd, v))) {}
  KILN_HD explicit constexpr bfloat(half h) : bits(KILN_CVT(f32_to_bf16, (float)h)) {}
  template <class C, class = typename kiln::enable_if<kiln::scalar_class<C>::value>::type>
  KILN_HD constexpr bfloat(C&& c) : bfloat(static_cast<float>(c)) {}
  KILN_HD constexpr operator float() const { return KILN_CVT(bf16_to_f32, bits); }
  KILN_HD static constexpr bfloat from_bits(ushort b) { return bfloat(b, bits_tag()); }
};
KILN_HD constexpr half::half(bfloat b) : bits(KILN_CVT(f32_to_f16, (float)b)) {}
#undef KILN_CVT
#undef KILN_NARROW

typedef half float16_t;
typedef bfloat bfloat16_t;
typedef bfloat bfloat16;

namespace kiln {
template <class T> struct is_small_float { static constexpr bool value = false; };
template <> struct is_small_float<half> { static constexpr bool value = true; };
template <> struct is_small_float<bfloat> { static constexpr bool value = true; };
template <class T> struct is_scalar {
  static constexpr bool value = is_arith<T>::value || is_small_float<typename remove_cv<T>::type>::value;
};

// The type of `a OP b` when one side is half or bfloat: same small type, or an integer with it,
// stays small; anything with float (or the other small type) is float; double stays double.
template <class A, class B> struct small_result { typedef float type; };
template <class S> struct small_result<S, S> { typedef S type; };
template <class S, class I, bool Int> struct small_int_ { typedef float type; };
template <class S, class I> struct small_int_<S, I, true> { typedef S type; };
template <class A, class B, bool AS = is_small_float<A>::value, bool BS = is_small_float<B>::value>
struct mixed_result { typedef typename small_result<A, B>::type type; };
template <class A, class B> struct mixed_result<A, B, true, false> {
  typedef typename small_int_<A, B, is_integral<B>::value>::type type;
};
template <class A, class B> struct mixed_result<A, B, false, true> {
  typedef typename small_int_<B, A, is_integral<A>::value>::type type;
};
template <class A> struct mixed_result<A, double, true, false> { typedef double type; };
template <class B> struct mixed_result<double, B, false, true> { typedef double type; };
template <class A, class B> struct small_op {
  static constexpr bool value = (is_small_float<A>::value && is_scalar<B>::value) ||
                                (is_small_float<B>::value && is_scalar<A>::value);
};
}  // namespace kiln

// Both operands are first converted to the result type (an integer to half or bfloat, a half
// to float), then the operation is done in float and rounded once to the result type.
#define KILN_SMALL_BINOP(OP)                                                                   \
  template <class A, class B, class = typename kiln::enable_if<kiln::small_op<A, B>::value>::type> \
  KILN_HD constexpr typename kiln::mixed_result<A, B>::type operator OP(A a, B b) {           \
    typedef typename kiln::mixed_result<A, B>::type R;                                        \
    return R((float)R(a) OP (float)R(b));                                                     \
  }
KILN_SMALL_BINOP(+) KILN_SMALL_BINOP(-) KILN_SMALL_BINOP(*) KILN_SMALL_BINOP(/)
#undef KILN_SMALL_BINOP
#define KILN_SMALL_CMP(OP)                                                                     \
  template <class A, class B, class = typename kiln::enable_if<kiln::small_op<A, B>::value>::type> \
  KILN_HD constexpr bool operator OP(A a, B b) {                                               \
    typedef typename kiln::mixed_result<A, B>::type R;                                        \
    return (float)R(a) OP (float)R(b);                                                        \
  }
KILN_SMALL_CMP(<) KILN_SMALL_CMP(>) KILN_SMALL_CMP(<=) KILN_SMALL_CMP(>=) KILN_SMALL_CMP(==) KILN_SMALL_CMP(!=)
#undef KILN_SMALL_CMP
// `a op= b` is `a = S(a op b)`: `h *= n` multiplies by half(n) in half.
#define KILN_SMALL_ASSIGN(S, OP)                                                               \
  template <class B, class = typename kiln::enable_if<kiln::is_scalar<B>::value>::type>      \
  KILN_HD inline S& operator OP##=(S& a, B b) {                                                \
    typedef typename kiln::mixed_result<S, B>::type R;                                        \
    a = S((float)R(a) OP (float)R(b));                                                        \
    return a;                                                                                 \
  }
KILN_SMALL_ASSIGN(half, +) KILN_SMALL_ASSIGN(half, -) KILN_SMALL_ASSIGN(half, *) KILN_SMALL_ASSIGN(half, /)
KILN_SMALL_ASSIGN(bfloat, +) KILN_SMALL_ASSIGN(bfloat, -) KILN_SMALL_ASSIGN(bfloat, *) KILN_SMALL_ASSIGN(bfloat, /)
#undef KILN_SMALL_ASSIGN
KILN_HD constexpr half operator-(half a) { return half::from_bits((ushort)(a.bits ^ 0x8000u)); }
KILN_HD constexpr bfloat operator-(bfloat a) { return bfloat::from_bits((ushort)(a.bits ^ 0x8000u)); }
KILN_HD constexpr half operator+(half a) { return a; }
KILN_HD constexpr bfloat operator+(bfloat a) { return a; }
KILN_HD inline half& operator++(half& a) { a = half((float)a + 1.0f); return a; }
KILN_HD inline half& operator--(half& a) { a = half((float)a - 1.0f); return a; }
KILN_HD inline bfloat& operator++(bfloat& a) { a = bfloat((float)a + 1.0f); return a; }
KILN_HD inline bfloat& operator--(bfloat& a) { a = bfloat((float)a - 1.0f); return a; }
