// kiln CUDA prelude: Metal's 8x8 `simdgroup_matrix` in Apple's per-lane layout (the one MLX's
// steel GEMM reads through `thread_elements()`): lane l holds row (l/4 & 4) + (l/2 % 4), columns
// (l/4 & 2)*2 + (l%2)*2 and the next one. Loads and stores touch only the lane's own elements;
// a multiply gathers the operands with warp shuffles (the whole warp takes part) and
// accumulates in float in k order. prelude/cpu/simd.h is the same API with the same layout.
#pragma once

namespace metal {
namespace matrix_detail {
KILN_HD unsigned row(unsigned l) { return ((l >> 2) & 4u) + ((l >> 1) & 3u); }
KILN_HD unsigned col(unsigned l) { return ((l >> 2) & 2u) * 2u + (l & 1u) * 2u; }
// The lane holding element (r, c): the inverse of row/col.
KILN_HD unsigned lane(unsigned r, unsigned c) {
  return ((c >> 1) & 1u) | ((r & 1u) << 1) | (((r >> 1) & 1u) << 2) | (((c >> 2) & 1u) << 3) | (((r >> 2) & 1u) << 4);
}
}  // namespace matrix_detail

template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "kiln supports 8x8 simdgroup matrices");
  vec<T, 2> e;
  simdgroup_matrix() = default;
  // A diagonal matrix with `d` on the diagonal (Metal's constructor from a scalar).
  KILN_HD explicit simdgroup_matrix(T d) {
    unsigned l = kiln::lane_id(), r = matrix_detail::row(l), c = matrix_detail::col(l);
    e.x = r == c ? d : T(0);
    e.y = r == c + 1 ? d : T(0);
  }
  KILN_HD vec<T, 2>& thread_elements() { return e; }
  KILN_HD const vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows = Cols>
KILN_HD simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.e = vec<T, 2>(value, value);
  return m;
}

// `origin` is (column, row) of the matrix's first element in the source; with `transpose` the
// 8x8 block read there is transposed.
template <class T, class U>
KILN_HD void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, const U* src, ulong elements_per_row = 8,
                            vec<ulong, 2> origin = 0, bool transpose = false) {
  unsigned l = kiln::lane_id(), r = matrix_detail::row(l), c = matrix_detail::col(l);
  const U* base = src + origin.y * elements_per_row + origin.x;
  for (unsigned i = 0; i < 2; ++i) {
    unsigned rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    m.e[i] = T(base[rr * elements_per_row + cc]);
  }
}

template <class T, class U>
KILN_HD void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, U* dst, ulong elements_per_row = 8,
                             vec<ulong, 2> origin = 0, bool transpose = false) {
  unsigned l = kiln::lane_id(), r = matrix_detail::row(l), c = matrix_detail::col(l);
  U* base = dst + origin.y * elements_per_row + origin.x;
  for (unsigned i = 0; i < 2; ++i) {
    unsigned rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    base[rr * elements_per_row + cc] = U(m.e[i]);
  }
}

// d = a * b + c: lane (r, c0) reads row r of a and columns c0, c0 + 1 of b from their lanes.
template <class TD, class TA, class TB, class TC>
KILN_HD void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                           const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  unsigned l = kiln::lane_id(), r = matrix_detail::row(l), c0 = matrix_detail::col(l);
  float acc[2] = {static_cast<float>(c.e.x), static_cast<float>(c.e.y)};
  for (unsigned k = 0; k < 8; ++k) {
    // Every lane shuffles in every step, so the full-warp mask is always honest.
    vec<TA, 2> ak = kiln::shfl(0xffffffffu, a.e, static_cast<int>(matrix_detail::lane(r, k)));
    vec<TB, 2> bk = kiln::shfl(0xffffffffu, b.e, static_cast<int>(matrix_detail::lane(k, c0)));
    float av = static_cast<float>(ak[k & 1u]);
    acc[0] += av * static_cast<float>(bk.x);
    acc[1] += av * static_cast<float>(bk.y);
  }
  d.e.x = TD(acc[0]);
  d.e.y = TD(acc[1]);
}

template <class TD, class TA, class TB>
KILN_HD void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}
// `a * b`: simdgroup_multiply into a fresh matrix (MLX's winograd transforms).
template <class T>
KILN_HD simdgroup_matrix<T, 8, 8> operator*(const simdgroup_matrix<T, 8, 8>& a, const simdgroup_matrix<T, 8, 8>& b) {
  simdgroup_matrix<T, 8, 8> d;
  simdgroup_multiply(d, a, b);
  return d;
}
}  // namespace metal
