// kiln CUDA prelude: scalar types of the Metal Shading Language for NVRTC, with no CUDA toolkit
// headers. `half` and `bfloat` are 16-bit storage types whose conversions and arithmetic are
// inline PTX, rounded to nearest even as on Apple GPUs.
#pragma once

#define KILN_HD __device__ __forceinline__
#define KILN_CUDA 1

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long long ulong;

namespace kiln {
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };
template <class T, class U> struct is_same { static constexpr bool value = false; };
template <class T> struct is_same<T, T> { static constexpr bool value = true; };
template <class T> struct is_integral_ { static constexpr bool value = false; };
#define KILN_INTEGRAL(T) template <> struct is_integral_<T> { static constexpr bool value = true; };
KILN_INTEGRAL(bool) KILN_INTEGRAL(char) KILN_INTEGRAL(signed char) KILN_INTEGRAL(unsigned char)
KILN_INTEGRAL(short) KILN_INTEGRAL(unsigned short) KILN_INTEGRAL(int) KILN_INTEGRAL(unsigned int)
KILN_INTEGRAL(long) KILN_INTEGRAL(unsigned long) KILN_INTEGRAL(long long)
KILN_INTEGRAL(unsigned long long)
#undef KILN_INTEGRAL
template <class T> struct is_integral : is_integral_<typename remove_cv<T>::type> {};
template <class T> struct is_float_ { static constexpr bool value = false; };
template <> struct is_float_<float> { static constexpr bool value = true; };
template <> struct is_float_<double> { static constexpr bool value = true; };
template <class T> struct is_arith {
  static constexpr bool value = is_integral<T>::value || is_float_<typename remove_cv<T>::type>::value;
};
// Byte copy for bit casts (the optimiser turns it into register moves).
template <class T, class U> __device__ __forceinline__ void copy_bits(T* to, const U* from, unsigned n) {
  char* d = reinterpret_cast<char*>(to);
  const char* s = reinterpret_cast<const char*>(from);
  for (unsigned i = 0; i < n; ++i) d[i] = s[i];
}
}  // namespace kiln

struct bfloat;

// IEEE binary16.
struct half {
  unsigned short bits;
  half() = default;
  KILN_HD half(float f) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  }
  KILN_HD half(double d) {
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(bits) : "d"(d));
  }
  template <class T, typename kiln::enable_if<kiln::is_integral<T>::value, int>::type = 0>
  KILN_HD half(T v) : half(static_cast<float>(v)) {}
  KILN_HD half(bfloat b);
  KILN_HD operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  static KILN_HD half from_bits(unsigned short b) {
    half h;
    h.bits = b;
    return h;
  }
};

// bfloat16: the top half of an IEEE binary32.
struct bfloat {
  unsigned short bits;
  bfloat() = default;
  KILN_HD bfloat(float f) {
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  }
  KILN_HD bfloat(double d) : bfloat(static_cast<float>(d)) {}
  template <class T, typename kiln::enable_if<kiln::is_integral<T>::value, int>::type = 0>
  KILN_HD bfloat(T v) : bfloat(static_cast<float>(v)) {}
  KILN_HD bfloat(half h) : bfloat(static_cast<float>(h)) {}
  KILN_HD operator float() const {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
  static KILN_HD bfloat from_bits(unsigned short b) {
    bfloat h;
    h.bits = b;
    return h;
  }
};

KILN_HD half::half(bfloat b) : half(static_cast<float>(b)) {}

typedef half float16_t;
typedef bfloat bfloat16_t;
typedef half __half;
typedef bfloat __nv_bfloat16;

namespace kiln {
template <> struct is_float_<half> { static constexpr bool value = true; };
template <> struct is_float_<bfloat> { static constexpr bool value = true; };

// Hardware half arithmetic (sm_53+) and bfloat arithmetic (sm_90; float fallback before).
KILN_HD half hadd(half a, half b) {
  half r;
  asm("add.rn.f16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
KILN_HD half hsub(half a, half b) {
  half r;
  asm("sub.rn.f16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
KILN_HD half hmul(half a, half b) {
  half r;
  asm("mul.rn.f16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
KILN_HD half hdiv(half a, half b) { return half(static_cast<float>(a) / static_cast<float>(b)); }
KILN_HD half hfma(half a, half b, half c) {
  half r;
  asm("fma.rn.f16 %0, %1, %2, %3;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits), "h"(c.bits));
  return r;
}
KILN_HD half hneg(half a) { return half::from_bits(a.bits ^ 0x8000u); }

#if __CUDA_ARCH__ >= 900
KILN_HD bfloat hadd(bfloat a, bfloat b) {
  bfloat r;
  asm("add.rn.bf16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
KILN_HD bfloat hsub(bfloat a, bfloat b) {
  bfloat r;
  asm("sub.rn.bf16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
KILN_HD bfloat hmul(bfloat a, bfloat b) {
  bfloat r;
  asm("mul.rn.bf16 %0, %1, %2;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits));
  return r;
}
#else
KILN_HD bfloat hadd(bfloat a, bfloat b) { return bfloat(static_cast<float>(a) + static_cast<float>(b)); }
KILN_HD bfloat hsub(bfloat a, bfloat b) { return bfloat(static_cast<float>(a) - static_cast<float>(b)); }
KILN_HD bfloat hmul(bfloat a, bfloat b) { return bfloat(static_cast<float>(a) * static_cast<float>(b)); }
#endif
KILN_HD bfloat hdiv(bfloat a, bfloat b) { return bfloat(static_cast<float>(a) / static_cast<float>(b)); }
KILN_HD bfloat hfma(bfloat a, bfloat b, bfloat c) {
  bfloat r;
  asm("fma.rn.bf16 %0, %1, %2, %3;" : "=h"(r.bits) : "h"(a.bits), "h"(b.bits), "h"(c.bits));
  return r;
}
KILN_HD bfloat hneg(bfloat a) { return bfloat::from_bits(a.bits ^ 0x8000u); }
}  // namespace kiln

// Metal's promotion rules: a 16-bit float with itself or an integer stays 16-bit; with float
// (or double) it widens to float. Mixed half/bfloat widens to float.
#define KILN_HALF_OPS(H)                                                                         \
  KILN_HD H operator+(H a, H b) { return kiln::hadd(a, b); }                                     \
  KILN_HD H operator-(H a, H b) { return kiln::hsub(a, b); }                                     \
  KILN_HD H operator*(H a, H b) { return kiln::hmul(a, b); }                                     \
  KILN_HD H operator/(H a, H b) { return kiln::hdiv(a, b); }                                     \
  KILN_HD H operator-(H a) { return kiln::hneg(a); }                                             \
  KILN_HD H operator+(H a) { return a; }                                                         \
  KILN_HD bool operator==(H a, H b) { return static_cast<float>(a) == static_cast<float>(b); }   \
  KILN_HD bool operator!=(H a, H b) { return static_cast<float>(a) != static_cast<float>(b); }   \
  KILN_HD bool operator<(H a, H b) { return static_cast<float>(a) < static_cast<float>(b); }     \
  KILN_HD bool operator>(H a, H b) { return static_cast<float>(a) > static_cast<float>(b); }     \
  KILN_HD bool operator<=(H a, H b) { return static_cast<float>(a) <= static_cast<float>(b); }   \
  KILN_HD bool operator>=(H a, H b) { return static_cast<float>(a) >= static_cast<float>(b); }   \
  KILN_HALF_MIXED(H, float, float)                                                               \
  KILN_HALF_MIXED(H, double, float)                                                              \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator+(H a, I b) { return a + H(b); }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator+(I a, H b) { return H(a) + b; }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator-(H a, I b) { return a - H(b); }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator-(I a, H b) { return H(a) - b; }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator*(H a, I b) { return a * H(b); }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator*(I a, H b) { return H(a) * b; }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator/(H a, I b) { return a / H(b); }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD H operator/(I a, H b) { return H(a) / b; }                                             \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator==(H a, I b) { return a == H(b); }                                        \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator!=(H a, I b) { return a != H(b); }                                        \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator<(H a, I b) { return a < H(b); }                                          \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator>(H a, I b) { return a > H(b); }                                          \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator<=(H a, I b) { return a <= H(b); }                                        \
  template <class I, typename kiln::enable_if<kiln::is_integral<I>::value, int>::type = 0>      \
  KILN_HD bool operator>=(H a, I b) { return a >= H(b); }                                        \
  template <class T>                                                                             \
  KILN_HD H& operator+=(H& a, T b) { return a = H(a + b); }                                      \
  template <class T>                                                                             \
  KILN_HD H& operator-=(H& a, T b) { return a = H(a - b); }                                      \
  template <class T>                                                                             \
  KILN_HD H& operator*=(H& a, T b) { return a = H(a * b); }                                      \
  template <class T>                                                                             \
  KILN_HD H& operator/=(H& a, T b) { return a = H(a / b); }                                      \
  KILN_HD H& operator++(H& a) { return a = a + H(1.0f); }                                        \
  KILN_HD H& operator--(H& a) { return a = a - H(1.0f); }                                        \
  KILN_HD H operator++(H& a, int) { H o = a; a = a + H(1.0f); return o; }                        \
  KILN_HD H operator--(H& a, int) { H o = a; a = a - H(1.0f); return o; }

#define KILN_HALF_MIXED(H, F, R)                                                                 \
  KILN_HD R operator+(H a, F b) { return static_cast<R>(static_cast<float>(a) + b); }            \
  KILN_HD R operator+(F a, H b) { return static_cast<R>(a + static_cast<float>(b)); }            \
  KILN_HD R operator-(H a, F b) { return static_cast<R>(static_cast<float>(a) - b); }            \
  KILN_HD R operator-(F a, H b) { return static_cast<R>(a - static_cast<float>(b)); }            \
  KILN_HD R operator*(H a, F b) { return static_cast<R>(static_cast<float>(a) * b); }            \
  KILN_HD R operator*(F a, H b) { return static_cast<R>(a * static_cast<float>(b)); }            \
  KILN_HD R operator/(H a, F b) { return static_cast<R>(static_cast<float>(a) / b); }            \
  KILN_HD R operator/(F a, H b) { return static_cast<R>(a / static_cast<float>(b)); }            \
  KILN_HD bool operator==(H a, F b) { return static_cast<float>(a) == b; }                       \
  KILN_HD bool operator==(F a, H b) { return a == static_cast<float>(b); }                       \
  KILN_HD bool operator!=(H a, F b) { return static_cast<float>(a) != b; }                       \
  KILN_HD bool operator!=(F a, H b) { return a != static_cast<float>(b); }                       \
  KILN_HD bool operator<(H a, F b) { return static_cast<float>(a) < b; }                         \
  KILN_HD bool operator<(F a, H b) { return a < static_cast<float>(b); }                         \
  KILN_HD bool operator>(H a, F b) { return static_cast<float>(a) > b; }                         \
  KILN_HD bool operator>(F a, H b) { return a > static_cast<float>(b); }                         \
  KILN_HD bool operator<=(H a, F b) { return static_cast<float>(a) <= b; }                       \
  KILN_HD bool operator<=(F a, H b) { return a <= static_cast<float>(b); }                       \
  KILN_HD bool operator>=(H a, F b) { return static_cast<float>(a) >= b; }                       \
  KILN_HD bool operator>=(F a, H b) { return a >= static_cast<float>(b); }

#define KILN_FLOAT_ASSIGN(H)                                                                     \
  KILN_HD float& operator+=(float& a, H b) { return a += static_cast<float>(b); }                \
  KILN_HD float& operator-=(float& a, H b) { return a -= static_cast<float>(b); }                \
  KILN_HD float& operator*=(float& a, H b) { return a *= static_cast<float>(b); }                \
  KILN_HD float& operator/=(float& a, H b) { return a /= static_cast<float>(b); }

KILN_HALF_OPS(half)
KILN_HALF_OPS(bfloat)
KILN_HALF_MIXED(half, bfloat, float)
KILN_FLOAT_ASSIGN(half)
KILN_FLOAT_ASSIGN(bfloat)
#undef KILN_FLOAT_ASSIGN
#undef KILN_HALF_OPS
#undef KILN_HALF_MIXED
