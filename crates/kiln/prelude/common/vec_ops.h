// kiln common prelude: element-wise operators on vec<T,N> (vector-vector, vector-scalar,
// scalar-vector), comparisons giving bool vectors, and compound assignment.
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
