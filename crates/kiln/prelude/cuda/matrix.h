// kiln CUDA prelude: Metal's 8x8 `simdgroup_matrix` with Apple's per-lane layout. Lane l holds
// row (l/4 & 4) + (l/2 % 4), columns (l/4 & 2)*2 + (l%2)*2 and the next one, so code reading
// `thread_elements()` sees the values it would see on an Apple GPU. Loads, stores and the
// multiply-accumulate exchange elements with warp shuffles; the whole warp takes part.
#pragma once

namespace metal {
namespace detail {
KILN_HD unsigned mat_row(unsigned l) { return ((l >> 2) & 4u) + ((l >> 1) & 3u); }
KILN_HD unsigned mat_col(unsigned l) { return ((l >> 2) & 2u) * 2u + (l & 1u) * 2u; }
// The lane holding element (r, c) (c even or odd: the pair containing it).
KILN_HD unsigned mat_lane(unsigned r, unsigned c) {
  return ((c >> 1) & 1u) | ((r & 1u) << 1) | (((r >> 1) & 1u) << 2) | (((c >> 2) & 1u) << 3) | (((r >> 2) & 1u) << 4);
}
}  // namespace detail

template <class T, int R, int C> struct simdgroup_matrix {
  static_assert(R == 8 && C == 8, "kiln supports 8x8 simdgroup matrices");
  struct elements {
    T v[2];
    KILN_HD T& operator[](int i) { return v[i]; }
    KILN_HD const T& operator[](int i) const { return v[i]; }
  };
  elements e;
  simdgroup_matrix() = default;
  // A diagonal matrix with `d` on the diagonal, as Metal's constructor from a scalar.
  KILN_HD explicit simdgroup_matrix(T d) {
    unsigned l = kiln::lane_id();
    unsigned r = detail::mat_row(l), c = detail::mat_col(l);
    e.v[0] = r == c ? d : T(0);
    e.v[1] = r == c + 1 ? d : T(0);
  }
  KILN_HD elements& thread_elements() { return e; }
  KILN_HD const elements& thread_elements() const { return e; }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, class U>
KILN_HD void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, const U* src, unsigned long elements_per_row = 8,
                            unsigned long = 0, bool transpose = false) {
  unsigned l = kiln::lane_id();
  unsigned r = detail::mat_row(l), c = detail::mat_col(l);
  for (int i = 0; i < 2; ++i) {
    unsigned rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    m.e.v[i] = T(src[rr * elements_per_row + cc]);
  }
}

template <class T, class U>
KILN_HD void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, U* dst, unsigned long elements_per_row = 8,
                             unsigned long = 0, bool transpose = false) {
  unsigned l = kiln::lane_id();
  unsigned r = detail::mat_row(l), c = detail::mat_col(l);
  for (int i = 0; i < 2; ++i) {
    unsigned rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    dst[rr * elements_per_row + cc] = U(m.e.v[i]);
  }
}

// d = a * b + c, accumulated in float.
template <class TD, class TA, class TB, class TC>
KILN_HD void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                           const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c) {
  unsigned l = kiln::lane_id();
  unsigned r = detail::mat_row(l), col = detail::mat_col(l);
  float acc0 = static_cast<float>(c.e.v[0]), acc1 = static_cast<float>(c.e.v[1]);
  for (unsigned k = 0; k < 8; k += 2) {
    TA a0 = kiln::shfl(0xffffffffu, a.e.v[0], static_cast<int>(detail::mat_lane(r, k)));
    TA a1 = kiln::shfl(0xffffffffu, a.e.v[1], static_cast<int>(detail::mat_lane(r, k)));
    TB b00 = kiln::shfl(0xffffffffu, b.e.v[0], static_cast<int>(detail::mat_lane(k, col)));
    TB b01 = kiln::shfl(0xffffffffu, b.e.v[1], static_cast<int>(detail::mat_lane(k, col)));
    TB b10 = kiln::shfl(0xffffffffu, b.e.v[0], static_cast<int>(detail::mat_lane(k + 1, col)));
    TB b11 = kiln::shfl(0xffffffffu, b.e.v[1], static_cast<int>(detail::mat_lane(k + 1, col)));
    float fa0 = static_cast<float>(a0), fa1 = static_cast<float>(a1);
    acc0 += fa0 * static_cast<float>(b00) + fa1 * static_cast<float>(b10);
    acc1 += fa0 * static_cast<float>(b01) + fa1 * static_cast<float>(b11);
  }
  d.e.v[0] = TD(acc0);
  d.e.v[1] = TD(acc1);
}

template <class TD, class TA, class TB>
KILN_HD void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                const simdgroup_matrix<TB, 8, 8>& b) {
  simdgroup_matrix<TD, 8, 8> zero(TD(0));
  zero.e.v[0] = TD(0);
  zero.e.v[1] = TD(0);
  simdgroup_multiply_accumulate(d, a, b, zero);
}
}  // namespace metal
