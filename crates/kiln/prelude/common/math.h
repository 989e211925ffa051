// kiln common prelude: the `metal::` math library for float, half, bfloat and vectors (also
// reachable as `metal::fast::` and `metal::precise::`): the elementary functions, min/max,
// clamp, mix, select, isnan/isinf, geometric functions and as_type. half and
// bfloat are computed in float and rounded once. The functions whose exact results need more
// care are in math_float.h, the integer functions in math_int.h. The target prelude declares
// the C math functions (expf, ...) and `kiln::fmax_f32` / `kiln::fmin_f32`.
#pragma once

namespace kiln {
template <class A, class B, bool Small = is_small_float<A>::value || is_small_float<B>::value>
struct common_type { typedef decltype(A() + B()) type; };
template <class A, class B> struct common_type<A, B, true> { typedef typename mixed_result<A, B>::type type; };
template <class A> struct common_type<A, A, false> { typedef A type; };
template <class A> struct common_type<A, A, true> { typedef A type; };
KILN_HD inline bool isnan_bits(float x) { return (f2u(x) & 0x7fffffffu) > 0x7f800000u; }
KILN_HD inline bool isinf_bits(float x) { return (f2u(x) & 0x7fffffffu) == 0x7f800000u; }
}  // namespace kiln

// bfloat's functions are templates that take exactly bfloat (Apple's headers leave bfloat maths
// to the program): a program's own overload for bfloat (MLX's bf16_math.h) is then no
// redefinition, and wins as the non-template.
#define KILN_BF template <class BF, typename kiln::enable_if<kiln::is_same<BF, bfloat>::value, int>::type = 0>

namespace metal {

#define KILN_VEC_MAP1(NAME)                                                                     \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& v) {                 \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(v[i]);                                              \
    return r;                                                                                   \
  }
#define KILN_UNARY(NAME, F)                                                                     \
  KILN_HD inline float NAME(float x) { return F(x); }                                           \
  KILN_HD inline half NAME(half x) { return half(F((float)x)); }                                \
  KILN_BF KILN_HD inline BF NAME(BF x) { return BF(F((float)x)); }                          \
  KILN_VEC_MAP1(NAME)

KILN_UNARY(exp, expf) KILN_UNARY(exp2, exp2f) KILN_UNARY(log, logf) KILN_UNARY(log2, log2f)
KILN_UNARY(log10, log10f) KILN_UNARY(sqrt, sqrtf) KILN_UNARY(sin, sinf) KILN_UNARY(cos, cosf)
KILN_UNARY(tan, tanf) KILN_UNARY(asin, asinf) KILN_UNARY(acos, acosf) KILN_UNARY(atan, atanf)
KILN_UNARY(sinh, sinhf) KILN_UNARY(cosh, coshf) KILN_UNARY(tanh, tanhf) KILN_UNARY(asinh, asinhf)
KILN_UNARY(acosh, acoshf) KILN_UNARY(atanh, atanhf) KILN_UNARY(floor, floorf) KILN_UNARY(ceil, ceilf)
KILN_UNARY(round, roundf) KILN_UNARY(trunc, truncf) KILN_UNARY(rint, rintf) KILN_UNARY(fabs, fabsf)
KILN_HD inline float kiln_rsqrt(float x) { return 1.0f / sqrtf(x); }
KILN_HD inline float kiln_sign(float x) { return kiln::isnan_bits(x) ? 0.0f : (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x)); }
KILN_HD inline float kiln_saturate(float x) { return kiln::fmin_f32(kiln::fmax_f32(x, 0.0f), 1.0f); }
KILN_UNARY(rsqrt, kiln_rsqrt) KILN_UNARY(sign, kiln_sign) KILN_UNARY(saturate, kiln_saturate)

// abs: floats clear the sign; integers negate.
KILN_HD inline float abs(float x) { return fabsf(x); }
KILN_HD inline half abs(half x) { return half::from_bits((ushort)(x.bits & 0x7fffu)); }
KILN_BF KILN_HD inline BF abs(BF x) { return bfloat::from_bits((ushort)(x.bits & 0x7fffu)); }
template <class T, class = typename kiln::enable_if<kiln::is_integral<T>::value>::type>
KILN_HD inline T abs(T x) { return x < 0 ? T(-x) : x; }
KILN_VEC_MAP1(abs)

// Metal's math functions take a scalar wherever a vector argument is expected and broadcast it
// (`pow(c.rgb, gamma)`, `step(0.0, v)`, `fma(v, 0.5f, w)`): these forms make the vector and
// call the all-vector one.
#define KILN_BCAST2(NAME)                                                                       \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, U b) { return NAME(a, vec<T, N>(b)); }      \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<T, N> NAME(U a, const vec<T, N>& b) { return NAME(vec<T, N>(a), b); }
#define KILN_SCALARS(U, W) class = typename kiln::enable_if<kiln::is_scalar<U>::value && kiln::is_scalar<W>::value>::type
#define KILN_BCAST3(NAME)                                                                       \
  template <class T, int N, class U, class W, KILN_SCALARS(U, W)>                               \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, U b, W c) { return NAME(a, vec<T, N>(b), vec<T, N>(c)); } \
  template <class T, int N, class U, class W, KILN_SCALARS(U, W)>                               \
  KILN_HD inline vec<T, N> NAME(U a, const vec<T, N>& b, W c) { return NAME(vec<T, N>(a), b, vec<T, N>(c)); } \
  template <class T, int N, class U, class W, KILN_SCALARS(U, W)>                               \
  KILN_HD inline vec<T, N> NAME(U a, W b, const vec<T, N>& c) { return NAME(vec<T, N>(a), vec<T, N>(b), c); } \
  template <class T, int N, class U, KILN_SCALARS(U, U)>                                        \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b, U c) { return NAME(a, b, vec<T, N>(c)); } \
  template <class T, int N, class U, KILN_SCALARS(U, U)>                                        \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, U b, const vec<T, N>& c) { return NAME(a, vec<T, N>(b), c); } \
  template <class T, int N, class U, KILN_SCALARS(U, U)>                                        \
  KILN_HD inline vec<T, N> NAME(U a, const vec<T, N>& b, const vec<T, N>& c) { return NAME(vec<T, N>(a), b, c); }

#define KILN_BINARY(NAME, F)                                                                    \
  KILN_HD inline float NAME(float a, float b) { return F(a, b); }                               \
  KILN_HD inline half NAME(half a, half b) { return half(F((float)a, (float)b)); }              \
  KILN_BF KILN_HD inline BF NAME(BF a, BF b) { return BF(F((float)a, (float)b)); }      \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                        \
    return r;                                                                                   \
  }                                                                                             \
  KILN_BCAST2(NAME)
KILN_BINARY(pow, powf) KILN_BINARY(powr, powf) KILN_BINARY(atan2, atan2f) KILN_BINARY(fmod, fmodf)
KILN_BINARY(fmin, kiln::fmin_f32) KILN_BINARY(fmax, kiln::fmax_f32)
// copysign of half and bfloat on the bits (a NaN's sign included, which CUDA's conversion to
// float drops).
KILN_HD inline float copysign(float a, float b) { return copysignf(a, b); }
KILN_HD inline half copysign(half a, half b) { return half::from_bits((ushort)((a.bits & 0x7fffu) | (b.bits & 0x8000u))); }
KILN_BF KILN_HD inline BF copysign(BF a, BF b) {
  return bfloat::from_bits((ushort)((a.bits & 0x7fffu) | (b.bits & 0x8000u)));
}
template <class T, int N> KILN_HD inline vec<T, N> copysign(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = copysign(a[i], b[i]);
  return r;
}
KILN_BCAST2(copysign)
KILN_HD inline float kiln_divide(float a, float b) { return a / b; }
KILN_HD inline float kiln_step(float e, float x) { return x < e ? 0.0f : 1.0f; }
KILN_BINARY(divide, kiln_divide) KILN_BINARY(step, kiln_step)

// min/max: floats follow fmin/fmax (a NaN operand yields the other); mixed scalar types use
// the usual conversions so `min(uint, int)` works as in Metal.
template <class A, class B, class = typename kiln::enable_if<kiln::is_scalar<A>::value && kiln::is_scalar<B>::value>::type>
KILN_HD inline typename kiln::common_type<A, B>::type min(A a, B b) {
  typedef typename kiln::common_type<A, B>::type R;
  R x = R(a), y = R(b);
  if (!kiln::is_integral<R>::value) return R(kiln::fmin_f32((float)x, (float)y));
  return y < x ? y : x;
}
template <class A, class B, class = typename kiln::enable_if<kiln::is_scalar<A>::value && kiln::is_scalar<B>::value>::type>
KILN_HD inline typename kiln::common_type<A, B>::type max(A a, B b) {
  typedef typename kiln::common_type<A, B>::type R;
  R x = R(a), y = R(b);
  if (!kiln::is_integral<R>::value) return R(kiln::fmax_f32((float)x, (float)y));
  return x < y ? y : x;
}
KILN_HD inline long long min(long long a, long long b) { return b < a ? b : a; }
KILN_HD inline long long max(long long a, long long b) { return a < b ? b : a; }
KILN_HD inline unsigned long long min(unsigned long long a, unsigned long long b) { return b < a ? b : a; }
KILN_HD inline unsigned long long max(unsigned long long a, unsigned long long b) { return a < b ? b : a; }
template <class T, int N> KILN_HD inline vec<T, N> min(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = T(min(a[i], b[i]));
  return r;
}
template <class T, int N> KILN_HD inline vec<T, N> max(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = T(max(a[i], b[i]));
  return r;
}
KILN_BCAST2(min) KILN_BCAST2(max)

template <class T, class L, class H, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline T clamp(T x, L lo, H hi) { return T(min(max(x, T(lo)), T(hi))); }
template <class T, int N> KILN_HD inline vec<T, N> clamp(const vec<T, N>& x, const vec<T, N>& lo, const vec<T, N>& hi) {
  return min(max(x, lo), hi);
}
KILN_BCAST3(clamp)

template <class T, class U> KILN_HD inline T mix(T a, T b, U t) { return a + (b - a) * t; }
template <class T> KILN_HD inline T smoothstep(T e0, T e1, T x) {
  T t = clamp((x - e0) / (e1 - e0), 0.0f, 1.0f);
  return t * t * (T(3) - T(2) * t);
}
KILN_BCAST3(smoothstep)

template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline T select(T a, T b, bool c) { return c ? b : a; }
template <class T, int N> KILN_HD inline vec<T, N> select(const vec<T, N>& a, const vec<T, N>& b, const vec<bool, N>& c) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = c[i] ? b[i] : a[i];
  return r;
}
template <class T, int N> KILN_HD inline vec<T, N> select(const vec<T, N>& a, const vec<T, N>& b, bool c) { return c ? b : a; }

template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline bool isnan(T x) { return kiln::isnan_bits((float)x); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline bool isinf(T x) { return kiln::isinf_bits((float)x); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline bool isfinite(T x) { return !isnan(x) && !isinf(x); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value && !kiln::is_same<T, bfloat>::value>::type>
KILN_HD inline bool signbit(T x) { return (kiln::f2u((float)x) >> 31) != 0; }
// From the bits: CUDA's conversion of a half NaN to float drops its sign.
KILN_HD inline bool signbit(half x) { return (x.bits >> 15) != 0; }
KILN_BF KILN_HD inline bool signbit(BF x) { return (x.bits >> 15) != 0; }
#define KILN_VEC_PRED(NAME)                                                                     \
  template <class T, int N> KILN_HD inline vec<bool, N> NAME(const vec<T, N>& v) {              \
    vec<bool, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = NAME(v[i]);                                              \
    return r;                                                                                   \
  }
KILN_VEC_PRED(isnan) KILN_VEC_PRED(isinf) KILN_VEC_PRED(isfinite) KILN_VEC_PRED(signbit)
#undef KILN_VEC_PRED

template <int N> KILN_HD inline bool all(const vec<bool, N>& v) {
  for (int i = 0; i < N; ++i) if (!v[i]) return false;
  return true;
}
template <int N> KILN_HD inline bool any(const vec<bool, N>& v) {
  for (int i = 0; i < N; ++i) if (v[i]) return true;
  return false;
}
KILN_HD inline bool all(bool b) { return b; }
KILN_HD inline bool any(bool b) { return b; }

template <class T, int N> KILN_HD inline T dot(const vec<T, N>& a, const vec<T, N>& b) {
  T s = a[0] * b[0];
  for (int i = 1; i < N; ++i) s = T(s + a[i] * b[i]);
  return s;
}
template <class T, int N> KILN_HD inline T length(const vec<T, N>& a) { return sqrt(dot(a, a)); }
template <class T, int N> KILN_HD inline T length_squared(const vec<T, N>& a) { return dot(a, a); }
template <class T, int N> KILN_HD inline T distance(const vec<T, N>& a, const vec<T, N>& b) { return length(a - b); }
template <class T, int N> KILN_HD inline vec<T, N> normalize(const vec<T, N>& a) { return a * rsqrt(dot(a, a)); }
template <class T> KILN_HD inline vec<T, 3> cross(const vec<T, 3>& a, const vec<T, 3>& b) {
  return vec<T, 3>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// Reinterprets the bits of `u` as `T` (same size).
template <class T, class U> KILN_HD inline T as_type(const U& u) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs types of the same size");
  T t;
  const char* s = (const char*)&u;
  char* d = (char*)&t;
  for (unsigned i = 0; i < sizeof(T); ++i) d[i] = s[i];
  return t;
}

#undef KILN_UNARY
#undef KILN_BINARY
#undef KILN_VEC_MAP1

}  // namespace metal
