// kiln common prelude: Metal matrices. metal::matrix<T, C, R> (`floatCxR`, `halfCxR`) has C columns of
// vec<T, R>, stored column after column (float3x3 is 48 bytes, float2x2 is 8-aligned); `m[i]`
// is column i, a vector. Constructors: a scalar on the diagonal (zeros elsewhere), C columns,
// C * R scalars in column order, and element-wise conversion from another element type.
// Operators: m * v (v a column vector), v * m (v a row vector: (v * m)[c] = dot(v, m[c])),
// m * m, m + m, m - m, -m, m * s, s * m; transpose(m) and determinant(m) for square matrices.
// Every sum and product rounds to T (half matrices compute in half).
#pragma once

namespace kiln {
template <int... I> struct index_seq {};
template <int N, int... I> struct make_index_seq_ : make_index_seq_<N - 1, N - 1, I...> {};
template <int... I> struct make_index_seq_<0, I...> { typedef index_seq<I...> type; };
template <int N> using make_index_seq = typename make_index_seq_<N>::type;

// Columns from scalars: the unit column `d` at row `i`, and R consecutive values of a flat list.
template <class T, int N> struct flat_values { T v[N]; };
template <class T, int R> struct mat_column;
template <class T> struct mat_column<T, 2> {
  KILN_HD static constexpr vec<T, 2> unit(int i, T d) { return vec<T, 2>(i == 0 ? d : T(0), i == 1 ? d : T(0)); }
  KILN_HD static constexpr vec<T, 2> take(const T* v) { return vec<T, 2>(v[0], v[1]); }
};
template <class T> struct mat_column<T, 3> {
  KILN_HD static constexpr vec<T, 3> unit(int i, T d) {
    return vec<T, 3>(i == 0 ? d : T(0), i == 1 ? d : T(0), i == 2 ? d : T(0));
  }
  KILN_HD static constexpr vec<T, 3> take(const T* v) { return vec<T, 3>(v[0], v[1], v[2]); }
};
template <class T> struct mat_column<T, 4> {
  KILN_HD static constexpr vec<T, 4> unit(int i, T d) {
    return vec<T, 4>(i == 0 ? d : T(0), i == 1 ? d : T(0), i == 2 ? d : T(0), i == 3 ? d : T(0));
  }
  KILN_HD static constexpr vec<T, 4> take(const T* v) { return vec<T, 4>(v[0], v[1], v[2], v[3]); }
};
template <class... S> struct all_scalar { static constexpr bool value = true; };
template <class S, class... Rest> struct all_scalar<S, Rest...> {
  static constexpr bool value = is_scalar<S>::value && all_scalar<Rest...>::value;
};
}  // namespace kiln

namespace metal {
template <class T, int C, int R> struct matrix {
  static_assert(C >= 2 && C <= 4 && R >= 2 && R <= 4, "Metal matrices have 2 to 4 columns and rows");
  vec<T, R> columns[C];

  matrix() = default;
  KILN_HD constexpr explicit matrix(T d) : matrix(kiln::make_index_seq<C>(), d) {}
  template <int C_ = C, class = typename kiln::enable_if<C_ == 2>::type>
  KILN_HD constexpr matrix(const vec<T, R>& c0, const vec<T, R>& c1) : columns{c0, c1} {}
  template <int C_ = C, class = typename kiln::enable_if<C_ == 3>::type>
  KILN_HD constexpr matrix(const vec<T, R>& c0, const vec<T, R>& c1, const vec<T, R>& c2) : columns{c0, c1, c2} {}
  template <int C_ = C, class = typename kiln::enable_if<C_ == 4>::type>
  KILN_HD constexpr matrix(const vec<T, R>& c0, const vec<T, R>& c1, const vec<T, R>& c2, const vec<T, R>& c3)
      : columns{c0, c1, c2, c3} {}
  template <class... S, class = typename kiln::enable_if<sizeof...(S) == C * R && kiln::all_scalar<S...>::value>::type>
  KILN_HD constexpr matrix(S... s) : matrix(kiln::make_index_seq<C>(), kiln::flat_values<T, C * R>{{T(s)...}}) {}
  template <class U>
  KILN_HD constexpr explicit matrix(const matrix<U, C, R>& o) : matrix(kiln::make_index_seq<C>(), o) {}

  KILN_HD vec<T, R>& operator[](int i) { return columns[i]; }
  KILN_HD constexpr const vec<T, R>& operator[](int i) const { return columns[i]; }

 private:
  template <int... I>
  KILN_HD constexpr matrix(kiln::index_seq<I...>, T d) : columns{kiln::mat_column<T, R>::unit(I, d)...} {}
  template <int... I>
  KILN_HD constexpr matrix(kiln::index_seq<I...>, const kiln::flat_values<T, C * R>& f)
      : columns{kiln::mat_column<T, R>::take(f.v + I * R)...} {}
  template <class U, int... I>
  KILN_HD constexpr matrix(kiln::index_seq<I...>, const matrix<U, C, R>& o) : columns{vec<T, R>(o.columns[I])...} {}
};

// m * v: the columns weighted by the components of v.
template <class T, int C, int R>
KILN_HD inline vec<T, R> operator*(const matrix<T, C, R>& m, const vec<T, C>& v) {
  vec<T, R> r = m.columns[0] * v[0];
  for (int c = 1; c < C; ++c) r = r + m.columns[c] * v[c];
  return r;
}
// v * m: one dot product per column.
template <class T, int C, int R>
KILN_HD inline vec<T, C> operator*(const vec<T, R>& v, const matrix<T, C, R>& m) {
  vec<T, C> r;
  for (int c = 0; c < C; ++c) {
    T s = T(v[0] * m.columns[c][0]);
    for (int k = 1; k < R; ++k) s = T(s + v[k] * m.columns[c][k]);
    r[c] = s;
  }
  return r;
}
// (a * b)[k] = a * b[k]: a has C columns, b has C rows.
template <class T, int C, int R, int K>
KILN_HD inline matrix<T, K, R> operator*(const matrix<T, C, R>& a, const matrix<T, K, C>& b) {
  matrix<T, K, R> r;
  for (int k = 0; k < K; ++k) r.columns[k] = a * b.columns[k];
  return r;
}
#define KILN_MAT_ELEMENTWISE(OP)                                                                \
  template <class T, int C, int R>                                                              \
  KILN_HD inline matrix<T, C, R> operator OP(const matrix<T, C, R>& a, const matrix<T, C, R>& b) { \
    matrix<T, C, R> r;                                                                          \
    for (int c = 0; c < C; ++c) r.columns[c] = a.columns[c] OP b.columns[c];                    \
    return r;                                                                                   \
  }                                                                                             \
  template <class T, int C, int R>                                                              \
  KILN_HD inline matrix<T, C, R>& operator OP##=(matrix<T, C, R>& a, const matrix<T, C, R>& b) { \
    a = a OP b;                                                                                 \
    return a;                                                                                   \
  }
KILN_MAT_ELEMENTWISE(+) KILN_MAT_ELEMENTWISE(-)
#undef KILN_MAT_ELEMENTWISE
template <class T, int C, int R, class S, class = typename kiln::enable_if<kiln::is_scalar<S>::value>::type>
KILN_HD inline matrix<T, C, R> operator*(const matrix<T, C, R>& m, S s) {
  matrix<T, C, R> r;
  for (int c = 0; c < C; ++c) r.columns[c] = m.columns[c] * T(s);
  return r;
}
template <class T, int C, int R, class S, class = typename kiln::enable_if<kiln::is_scalar<S>::value>::type>
KILN_HD inline matrix<T, C, R> operator*(S s, const matrix<T, C, R>& m) {
  matrix<T, C, R> r;
  for (int c = 0; c < C; ++c) r.columns[c] = T(s) * m.columns[c];
  return r;
}
template <class T, int C, int R, class S, class = typename kiln::enable_if<kiln::is_scalar<S>::value>::type>
KILN_HD inline matrix<T, C, R>& operator*=(matrix<T, C, R>& m, S s) {
  m = m * s;
  return m;
}
template <class T, int N>
KILN_HD inline matrix<T, N, N>& operator*=(matrix<T, N, N>& a, const matrix<T, N, N>& b) {
  a = a * b;
  return a;
}
template <class T, int C, int R> KILN_HD inline matrix<T, C, R> operator-(const matrix<T, C, R>& m) {
  matrix<T, C, R> r;
  for (int c = 0; c < C; ++c) r.columns[c] = -m.columns[c];
  return r;
}
template <class T, int C, int R> KILN_HD inline matrix<T, C, R> operator+(const matrix<T, C, R>& m) { return m; }

template <class T, int C, int R> KILN_HD inline matrix<T, R, C> transpose(const matrix<T, C, R>& m) {
  matrix<T, R, C> r;
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < R; ++k) r.columns[k][c] = m.columns[c][k];
  return r;
}
template <class T> KILN_HD inline T determinant(const matrix<T, 2, 2>& m) {
  return T(T(m[0][0] * m[1][1]) - T(m[1][0] * m[0][1]));
}
// Expansion along the first column; each minor is a 2x2 determinant of the other columns.
template <class T> KILN_HD inline T determinant(const matrix<T, 3, 3>& m) {
  T a = T(T(m[1][1] * m[2][2]) - T(m[2][1] * m[1][2]));
  T b = T(T(m[1][0] * m[2][2]) - T(m[2][0] * m[1][2]));
  T c = T(T(m[1][0] * m[2][1]) - T(m[2][0] * m[1][1]));
  return T(T(T(m[0][0] * a) - T(m[0][1] * b)) + T(m[0][2] * c));
}
// Expansion along the first column (rows of column 0); the minors are 3x3 determinants.
template <class T> KILN_HD inline T determinant(const matrix<T, 4, 4>& m) {
  T r = T(0);
  for (int k = 0; k < 4; ++k) {
    matrix<T, 3, 3> minor;
    for (int c = 1; c < 4; ++c)
      for (int j = 0, row = 0; j < 4; ++j)
        if (j != k) minor.columns[c - 1][row++] = m.columns[c][j];
    T term = T(m.columns[0][k] * determinant(minor));
    r = (k & 1) ? T(r - term) : T(r + term);
  }
  return r;
}
}  // namespace metal

typedef metal::matrix<float, 2, 2> float2x2;
typedef metal::matrix<float, 2, 3> float2x3;
typedef metal::matrix<float, 2, 4> float2x4;
typedef metal::matrix<float, 3, 2> float3x2;
typedef metal::matrix<float, 3, 3> float3x3;
typedef metal::matrix<float, 3, 4> float3x4;
typedef metal::matrix<float, 4, 2> float4x2;
typedef metal::matrix<float, 4, 3> float4x3;
typedef metal::matrix<float, 4, 4> float4x4;
typedef metal::matrix<half, 2, 2> half2x2;
typedef metal::matrix<half, 2, 3> half2x3;
typedef metal::matrix<half, 2, 4> half2x4;
typedef metal::matrix<half, 3, 2> half3x2;
typedef metal::matrix<half, 3, 3> half3x3;
typedef metal::matrix<half, 3, 4> half3x4;
typedef metal::matrix<half, 4, 2> half4x2;
typedef metal::matrix<half, 4, 3> half4x3;
typedef metal::matrix<half, 4, 4> half4x4;
