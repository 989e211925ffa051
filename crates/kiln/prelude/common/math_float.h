// kiln common prelude: the `metal::` float functions whose exact results need care, for float,
// half and bfloat, scalar and vector.
//   exp10                 float: exp(x * ln 10) in double on the host (CUDA: exp10f, 2 ulp).
//   sinpi, cospi, tanpi   x = n/2 + r with n = rint(2x) and |r| <= 1/4, both exact in float;
//                         sin(pi r) and cos(pi r) in double, then the quadrant n mod 4. Zeros:
//                         sinpi(n) = ±0 with the sign of x, cospi(n + 1/2) = +0,
//                         tanpi(n + 1/2) = +inf for even n and -inf for odd n.
//   fract                 min(x - floor(x), the largest value below 1 in x's own type); NaN
//                         stays NaN, fract(±inf) = ±0.
//   fma (half, bfloat)    correctly rounded: the product is exact in double, the sum exact or
//                         replaced by a value that rounds the same way (see small_fma).
//   frexp, ilogb          from the bits (ilogb(0) = FP_ILOGB0, ilogb(NaN) = FP_ILOGBNAN,
//                         ilogb(±inf) = INT_MAX); ldexp; modf (modf(±inf) = ±0, ip = ±inf).
//   nextafter             steps by one unit of x's own type.
//   fdim, fmin3, fmax3, fmedian3, sincos; isnormal, isordered, isunordered.
// NaN operands of fmin3/fmax3/fmedian3 are treated as fmin/fmax treat them (ignored).
#pragma once

#define FP_ILOGB0 (-2147483647 - 1)
#define FP_ILOGBNAN (-2147483647 - 1)

namespace kiln {

#ifdef KILN_CUDA
KILN_HD inline double exp_f64(double x) { return ::exp(x); }
KILN_HD inline double sin_f64(double x) { return ::sin(x); }
KILN_HD inline double cos_f64(double x) { return ::cos(x); }
#else
inline double exp_f64(double x) { return libm::exp(x); }
inline double sin_f64(double x) { return libm::sin(x); }
inline double cos_f64(double x) { return libm::cos(x); }
#endif

union f64_bits { double d; unsigned long long u; };
KILN_HD inline bool isfinite_f64(double d) {
  f64_bits b;
  b.d = d;
  return ((b.u >> 52) & 0x7ffu) != 0x7ffu;
}
KILN_HD inline double fabs_f64(double d) { return d < 0.0 ? -d : d; }
KILN_HD inline float nan_f32() { return u2f(0x7fc00000u); }

// x = n/2 + r, |r| <= 1/4, exactly; returns n mod 4. |x| >= 2^24 is an even integer
// (r = ±0, n = 0); a NaN or infinite x gives a NaN r.
KILN_HD inline int reduce_half_turns(float x, float& r) {
  if (isnan_bits(x) || isinf_bits(x)) {
    r = nan_f32();
    return 0;
  }
  if (!((f2u(x) & 0x7fffffffu) < 0x4b800000u)) {  // |x| >= 2^24
    r = u2f(f2u(x) & 0x80000000u);
    return 0;
  }
  float n = rintf(2.0f * x);
  r = x - 0.5f * n;
  return (int)n & 3;
}
constexpr double pi_f64 = 3.141592653589793116;

KILN_HD inline double sinpi_f64(float x) {
  float r;
  int q = reduce_half_turns(x, r);
  double a = pi_f64 * (double)r;
  double v = (q == 0) ? sin_f64(a) : (q == 1) ? cos_f64(a) : (q == 2) ? -sin_f64(a) : -cos_f64(a);
  if (v == 0.0) v = (f2u(x) >> 31) ? -0.0 : 0.0;
  return v;
}
KILN_HD inline double cospi_f64(float x) {
  float r;
  int q = reduce_half_turns(x, r);
  double a = pi_f64 * (double)r;
  double v = (q == 0) ? cos_f64(a) : (q == 1) ? -sin_f64(a) : (q == 2) ? -cos_f64(a) : sin_f64(a);
  return v == 0.0 ? 0.0 : v;
}
KILN_HD inline double tanpi_f64(float x) {
  float r;
  int q = reduce_half_turns(x, r);
  if ((q & 1) && r == 0.0f) return (double)u2f(q == 1 ? 0x7f800000u : 0xff800000u);
  double a = pi_f64 * (double)r;
  double s = sin_f64(a), c = cos_f64(a);
  return (q & 1) ? -c / s : s / c;
}

KILN_HD inline float exp10_f32(float x) {
#ifdef KILN_CUDA
  return exp10f(x);
#else
  return (float)exp_f64((double)x * 2.302585092994045684);
#endif
}

// fract in float of a value of a format whose largest value below 1 is `below_one`.
KILN_HD inline float fract_f32(float x, float below_one) {
  if (isnan_bits(x)) return x;
  if (isinf_bits(x)) return u2f(f2u(x) & 0x80000000u);
  float f = x - floorf(x);
  return f < below_one ? f : below_one;
}

// A double whose rounding to half or bfloat (through float rounded to odd) is the correctly
// rounded a * b + c (a, b, c of half or bfloat). The product p is exact (at most 22 bits). If
// |c| <= 2^-24 |p|, c only decides the direction of rounding of p (p is at least 2^-23 |p| from
// any rounding boundary it is not on), so p nudged by 2^-24 |p| towards c (exact) stands for the
// sum; p + c rounded in double could land on a boundary. Otherwise p + c is exact, or p is so
// small against c (a value of the format) that any rounding of the sum returns c.
KILN_HD inline double small_fma(float a, float b, float c) {
  double p = (double)a * (double)b;
  double z = (double)c;
  if (!isfinite_f64(p) || !isfinite_f64(z) || p == 0.0 || z == 0.0) return p + z;
  double ap = fabs_f64(p), az = fabs_f64(z);
  if (az <= ap * 0x1p-24) return p + (z > 0.0 ? ap : -ap) * 0x1p-24;
  return p + z;
}

// The exponent of |x|, subnormals included; the special values as in the header.
KILN_HD inline int ilogb_f32(float x) {
  uint b = f2u(x) & 0x7fffffffu;
  if (b >= 0x7f800000u) return b == 0x7f800000u ? 2147483647 : FP_ILOGBNAN;
  if (b == 0) return FP_ILOGB0;
  if (b >= 0x00800000u) return (int)(b >> 23) - 127;
  int msb = 22;
  while (!((b >> msb) & 1u)) --msb;
  return msb - 149;
}

KILN_HD inline float frexp_f32(float x, int& e) {
  uint b = f2u(x);
  uint mag = b & 0x7fffffffu;
  if (mag == 0 || mag >= 0x7f800000u) {
    e = 0;
    return x;
  }
  e = ilogb_f32(x) + 1;
  if (mag >= 0x00800000u) return u2f((b & 0x807fffffu) | (126u << 23));
  // Subnormal: shift the mantissa up to a normal one.
  uint m = mag;
  while (!(m & 0x00800000u)) m <<= 1;
  return u2f((b & 0x80000000u) | (126u << 23) | (m & 0x007fffffu));
}

KILN_HD inline float modf_f32(float x, float& ip) {
  ip = truncf(x);
  if (isinf_bits(x)) return u2f(f2u(x) & 0x80000000u);
  float f = x - ip;
  return u2f((f2u(f) & 0x7fffffffu) | (f2u(x) & 0x80000000u));
}

// The bit pattern after `xb` towards `yb` in a 16- or 32-bit format whose sign bit is `sign`;
// `x` and `y` are their values (exact in float).
KILN_HD inline uint nextafter_bits(uint xb, float x, uint yb, float y, uint sign) {
  if (x != x || y != y) return x != x ? xb : yb;
  if (x == y) return yb;
  if (x == 0.0f) return (yb & sign) | 1u;
  return ((x < y) == !(xb & sign)) ? xb + 1u : xb - 1u;
}

}  // namespace kiln

namespace metal {

#define KILN_FVEC1(NAME)                                                                        \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& v) {                 \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(v[i]);                                              \
    return r;                                                                                   \
  }
#define KILN_FVEC2(NAME)                                                                        \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                        \
    return r;                                                                                   \
  }                                                                                             \
  KILN_BCAST2(NAME)
#define KILN_FVEC3(NAME)                                                                        \
  template <class T, int N>                                                                     \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c) {   \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i], c[i]);                                  \
    return r;                                                                                   \
  }                                                                                             \
  KILN_BCAST3(NAME)

// The half and bfloat forms round the double (or float) result once.
KILN_HD inline float exp10(float x) { return kiln::exp10_f32(x); }
KILN_HD inline half exp10(half x) { return half(kiln::exp10_f32((float)x)); }
KILN_BF KILN_HD inline BF exp10(BF x) { return bfloat(kiln::exp10_f32((float)x)); }
KILN_FVEC1(exp10)
#define KILN_PI_FUNC(NAME)                                                                      \
  KILN_HD inline float NAME(float x) { return (float)kiln::NAME##_f64(x); }                     \
  KILN_HD inline half NAME(half x) { return half(kiln::NAME##_f64((float)x)); }                 \
  KILN_BF KILN_HD inline BF NAME(BF x) { return BF(kiln::NAME##_f64((float)x)); }           \
  KILN_FVEC1(NAME)
KILN_PI_FUNC(sinpi) KILN_PI_FUNC(cospi) KILN_PI_FUNC(tanpi)
#undef KILN_PI_FUNC

KILN_HD inline float fract(float x) { return kiln::fract_f32(x, 0x1.fffffep-1f); }
KILN_HD inline half fract(half x) {
  half f = half(kiln::fract_f32((float)x, 1.0f));
  return (float)f < 0x1.ffcp-1f || f != f ? f : half::from_bits(0x3bffu);
}
KILN_BF KILN_HD inline BF fract(BF x) {
  bfloat f = bfloat(kiln::fract_f32((float)x, 1.0f));
  return (float)f < 0x1.fep-1f || f != f ? f : bfloat::from_bits(0x3f7fu);
}
KILN_FVEC1(fract)

KILN_HD inline float fma(float a, float b, float c) { return fmaf(a, b, c); }
KILN_HD inline half fma(half a, half b, half c) { return half(kiln::small_fma(a, b, c)); }
KILN_BF KILN_HD inline BF fma(BF a, BF b, BF c) { return bfloat(kiln::small_fma(a, b, c)); }
KILN_FVEC3(fma)

// x - y if x > y, +0 if not, NaN if either is NaN.
template <class T, class = typename kiln::enable_if<kiln::is_small_float<T>::value || kiln::is_same<T, float>::value>::type>
KILN_HD inline T fdim(T x, T y) {
  float a = (float)x, b = (float)y;
  return T(a > b ? a - b : (a != a || b != b) ? a + b : 0.0f);
}
KILN_FVEC2(fdim)

template <class T, class = typename kiln::enable_if<kiln::is_small_float<T>::value || kiln::is_same<T, float>::value>::type>
KILN_HD inline T fmin3(T x, T y, T z) { return fmin(fmin(x, y), z); }
template <class T, class = typename kiln::enable_if<kiln::is_small_float<T>::value || kiln::is_same<T, float>::value>::type>
KILN_HD inline T fmax3(T x, T y, T z) { return fmax(fmax(x, y), z); }
template <class T, class = typename kiln::enable_if<kiln::is_small_float<T>::value || kiln::is_same<T, float>::value>::type>
KILN_HD inline T fmedian3(T x, T y, T z) { return fmax(fmin(x, y), fmin(fmax(x, y), z)); }
KILN_FVEC3(fmin3) KILN_FVEC3(fmax3) KILN_FVEC3(fmedian3)

KILN_HD inline int ilogb(float x) { return kiln::ilogb_f32(x); }
KILN_HD inline int ilogb(half x) { return kiln::ilogb_f32((float)x); }
KILN_BF KILN_HD inline int ilogb(BF x) { return kiln::ilogb_f32((float)x); }
template <class T, int N> KILN_HD inline vec<int, N> ilogb(const vec<T, N>& v) {
  vec<int, N> r;
  for (int i = 0; i < N; ++i) r[i] = ilogb(v[i]);
  return r;
}

KILN_HD inline float frexp(float x, int& e) { return kiln::frexp_f32(x, e); }
KILN_HD inline half frexp(half x, int& e) { return half(kiln::frexp_f32((float)x, e)); }
KILN_BF KILN_HD inline BF frexp(BF x, int& e) { return bfloat(kiln::frexp_f32((float)x, e)); }
template <class T, int N> KILN_HD inline vec<T, N> frexp(const vec<T, N>& v, vec<int, N>& e) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = frexp(v[i], e[i]);
  return r;
}

// The float result is exact wherever the half or bfloat one is not zero or infinite.
KILN_HD inline float ldexp(float x, int k) { return ldexpf(x, k); }
KILN_HD inline half ldexp(half x, int k) { return half(ldexpf((float)x, k)); }
KILN_BF KILN_HD inline BF ldexp(BF x, int k) { return bfloat(ldexpf((float)x, k)); }
template <class T, int N> KILN_HD inline vec<T, N> ldexp(const vec<T, N>& v, const vec<int, N>& k) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = ldexp(v[i], k[i]);
  return r;
}

KILN_HD inline float modf(float x, float& ip) { return kiln::modf_f32(x, ip); }
#define KILN_SMALL_MODF(T)                                                                      \
  KILN_HD inline T modf(T x, T& ip) {                                                           \
    float i;                                                                                    \
    T f = T(kiln::modf_f32((float)x, i));                                                       \
    ip = T(i);                                                                                  \
    return f;                                                                                   \
  }
KILN_SMALL_MODF(half) KILN_SMALL_MODF(bfloat)
#undef KILN_SMALL_MODF
template <class T, int N> KILN_HD inline vec<T, N> modf(const vec<T, N>& v, vec<T, N>& ip) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = modf(v[i], ip[i]);
  return r;
}

KILN_HD inline float nextafter(float x, float y) {
  return kiln::u2f(kiln::nextafter_bits(kiln::f2u(x), x, kiln::f2u(y), y, 0x80000000u));
}
KILN_HD inline half nextafter(half x, half y) {
  return half::from_bits((ushort)kiln::nextafter_bits(x.bits, (float)x, y.bits, (float)y, 0x8000u));
}
KILN_BF KILN_HD inline BF nextafter(BF x, BF y) {
  return bfloat::from_bits((ushort)kiln::nextafter_bits(x.bits, (float)x, y.bits, (float)y, 0x8000u));
}
KILN_FVEC2(nextafter)

template <class T, class = typename kiln::enable_if<kiln::is_small_float<T>::value || kiln::is_same<T, float>::value>::type>
KILN_HD inline T sincos(T x, T& c) {
  c = cos(x);
  return sin(x);
}
template <class T, int N> KILN_HD inline vec<T, N> sincos(const vec<T, N>& v, vec<T, N>& c) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = sincos(v[i], c[i]);
  return r;
}

// Classification in the argument's own format (a half subnormal is not normal).
KILN_HD inline bool isnormal(float x) {
  uint e = (kiln::f2u(x) >> 23) & 0xffu;
  return e != 0u && e != 0xffu;
}
KILN_HD inline bool isnormal(half x) {
  uint e = ((uint)x.bits >> 10) & 0x1fu;
  return e != 0u && e != 0x1fu;
}
KILN_BF KILN_HD inline bool isnormal(BF x) {
  uint e = ((uint)x.bits >> 7) & 0xffu;
  return e != 0u && e != 0xffu;
}
template <class T, int N> KILN_HD inline vec<bool, N> isnormal(const vec<T, N>& v) {
  vec<bool, N> r;
  for (int i = 0; i < N; ++i) r[i] = isnormal(v[i]);
  return r;
}
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline bool isunordered(T x, T y) { return isnan(x) || isnan(y); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline bool isordered(T x, T y) { return !isnan(x) && !isnan(y); }
#define KILN_VEC_PRED2(NAME)                                                                    \
  template <class T, int N> KILN_HD inline vec<bool, N> NAME(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<bool, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                        \
    return r;                                                                                   \
  }
KILN_VEC_PRED2(isunordered) KILN_VEC_PRED2(isordered)
#undef KILN_VEC_PRED2

#undef KILN_FVEC1
#undef KILN_FVEC2
#undef KILN_FVEC3
}  // namespace metal
