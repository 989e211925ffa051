// kiln common prelude: element-wise operators on vec<T,N> (vector-vector, vector-scalar,
// scalar-vector), comparisons giving bool vectors, compound assignment, and the CUDA paired
// conversions of float vectors to half and bfloat vectors.
#pragma once

namespace kiln {
template <class T> struct is_vec { static constexpr bool value = false; };
template <class T, int N> struct is_vec<vec<T, N>> { static constexpr bool value = true; };
}  // namespace kiln

#define KILN_VEC_BINOP(OP)                                                                      \
  template <class T, int N>                                                                     \
  KILN_HD inline vec<T, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) {                \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = T(a[i] OP b[i]);                                         \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<T, N> operator OP(const vec<T, N>& a, U b) {                               \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = T(a[i] OP T(b));                                         \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<T, N> operator OP(U a, const vec<T, N>& b) {                               \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = T(T(a) OP b[i]);                                         \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class U>                                                            \
  KILN_HD inline vec<T, N>& operator OP##=(vec<T, N>& a, const U& b) {                          \
    a = a OP b;                                                                                 \
    return a;                                                                                   \
  }
KILN_VEC_BINOP(+) KILN_VEC_BINOP(-) KILN_VEC_BINOP(*) KILN_VEC_BINOP(/) KILN_VEC_BINOP(%)
KILN_VEC_BINOP(&) KILN_VEC_BINOP(|) KILN_VEC_BINOP(^) KILN_VEC_BINOP(<<) KILN_VEC_BINOP(>>)
#undef KILN_VEC_BINOP

#define KILN_VEC_CMP(OP)                                                                        \
  template <class T, int N>                                                                     \
  KILN_HD inline vec<bool, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) {             \
    vec<bool, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = a[i] OP b[i];                                            \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<bool, N> operator OP(const vec<T, N>& a, U b) {                            \
    vec<bool, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = a[i] OP T(b);                                            \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int N, class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type> \
  KILN_HD inline vec<bool, N> operator OP(U a, const vec<T, N>& b) {                            \
    vec<bool, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = T(a) OP b[i];                                            \
    return r;                                                                                   \
  }
KILN_VEC_CMP(<) KILN_VEC_CMP(>) KILN_VEC_CMP(<=) KILN_VEC_CMP(>=) KILN_VEC_CMP(==) KILN_VEC_CMP(!=)
KILN_VEC_CMP(&&) KILN_VEC_CMP(||)
#undef KILN_VEC_CMP

template <class T, int N>
KILN_HD inline vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = T(-a[i]);
  return r;
}
template <class T, int N>
KILN_HD inline vec<T, N> operator+(const vec<T, N>& a) { return a; }
template <class T, int N>
KILN_HD inline vec<T, N> operator~(const vec<T, N>& a) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = T(~a[i]);
  return r;
}
template <class T, int N>
KILN_HD inline vec<bool, N> operator!(const vec<T, N>& a) {
  vec<bool, N> r;
  for (int i = 0; i < N; ++i) r[i] = !a[i];
  return r;
}
template <class T, int N>
KILN_HD inline vec<T, N>& operator++(vec<T, N>& a) { a = a + T(1); return a; }
template <class T, int N>
KILN_HD inline vec<T, N>& operator--(vec<T, N>& a) { a = a - T(1); return a; }

#ifdef KILN_HW_CVT_X2
// CUDA (sm_80 and later): half2/half4 and bfloat2/bfloat4 from float vectors convert pairs with
// one instruction each (the same round-to-nearest-even bits as the scalar conversions).
namespace kiln {
#define KILN_VEC_CVT_X2(S, CVT)                                                                 \
  template <> struct vec_convert<S, float, 2> {                                                 \
    KILN_HD static void run(vec<S, 2>& r, const vec<float, 2>& o) {                             \
      uint p = CVT(o.x, o.y);                                                                   \
      r.x = S::from_bits((ushort)(p & 0xffffu));                                                \
      r.y = S::from_bits((ushort)(p >> 16));                                                    \
    }                                                                                           \
  };                                                                                            \
  template <> struct vec_convert<S, float, 4> {                                                 \
    KILN_HD static void run(vec<S, 4>& r, const vec<float, 4>& o) {                             \
      uint p = CVT(o.x, o.y), q = CVT(o.z, o.w);                                                \
      r.x = S::from_bits((ushort)(p & 0xffffu));                                                \
      r.y = S::from_bits((ushort)(p >> 16));                                                    \
      r.z = S::from_bits((ushort)(q & 0xffffu));                                                \
      r.w = S::from_bits((ushort)(q >> 16));                                                    \
    }                                                                                           \
  };
KILN_VEC_CVT_X2(half, f32x2_to_f16x2)
KILN_VEC_CVT_X2(bfloat, f32x2_to_bf16x2)
#undef KILN_VEC_CVT_X2
}  // namespace kiln
#endif
