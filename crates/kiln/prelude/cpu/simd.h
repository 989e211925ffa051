// kiln CPU prelude, part 3: SIMD-group and quad-group collectives over the lanes active at the
// call (see runtime.h). Reductions run in lane order, so results are deterministic; reading
// a lane that did not take part (or lies outside the group) yields the caller's own value.
#pragma once

namespace metal {
#define KILN_SIMD_FN template <class T> __attribute__((noinline)) inline
#define KILN_SITE __builtin_return_address(0)

KILN_SIMD_FN T simd_sum(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(0);
  for (uint l = 0; l < 32; ++l) if (w.has(l)) s = T(s + w.at<T>(l));
  return s;
}
KILN_SIMD_FN T simd_product(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(1);
  for (uint l = 0; l < 32; ++l) if (w.has(l)) s = T(s * w.at<T>(l));
  return s;
}
#define KILN_SIMD_FOLD(NAME, EXPR)                                                              \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                                       \
    T s = v;                                                                                    \
    for (uint l = 0; l < 32; ++l) if (w.has(l)) { T a = s, b = w.at<T>(l); s = T(EXPR); }      \
    return s;                                                                                   \
  }
KILN_SIMD_FOLD(simd_max, max(a, b)) KILN_SIMD_FOLD(simd_min, min(a, b))
KILN_SIMD_FOLD(simd_and, a & b) KILN_SIMD_FOLD(simd_or, a | b) KILN_SIMD_FOLD(simd_xor, a ^ b)
#undef KILN_SIMD_FOLD

KILN_SIMD_FN T simd_prefix_inclusive_sum(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(0);
  for (uint l = 0; l <= w.lane; ++l) if (w.has(l)) s = T(s + w.at<T>(l));
  return s;
}
KILN_SIMD_FN T simd_prefix_exclusive_sum(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(0);
  for (uint l = 0; l < w.lane; ++l) if (w.has(l)) s = T(s + w.at<T>(l));
  return s;
}
KILN_SIMD_FN T simd_prefix_inclusive_product(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(1);
  for (uint l = 0; l <= w.lane; ++l) if (w.has(l)) s = T(s * w.at<T>(l));
  return s;
}
KILN_SIMD_FN T simd_prefix_exclusive_product(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  T s = T(1);
  for (uint l = 0; l < w.lane; ++l) if (w.has(l)) s = T(s * w.at<T>(l));
  return s;
}

// Shuffles: one posted record per lane holding the value and the lane it wants to read.
template <class T> struct kiln_shuffle_rec { T v; int src; };
template <class T> __attribute__((always_inline)) inline T kiln_shuffle(T v, int src, const void* site) {
  kiln_shuffle_rec<T> r{v, src};
  kiln::rt::View w = kiln::rt::post(r, site);
  if (src < 0 || !w.has((uint)src)) return v;
  return w.at<kiln_shuffle_rec<T>>((uint)src).v;
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle(T v, I lane) {
  return kiln_shuffle(v, (int)lane, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_broadcast(T v, I lane) {
  return kiln_shuffle(v, (int)lane, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_up(T v, I delta) {
  return kiln_shuffle(v, (int)kiln::rt::g_cur.thread->thread_index_in_simdgroup - (int)delta, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_down(T v, I delta) {
  int src = (int)kiln::rt::g_cur.thread->thread_index_in_simdgroup + (int)delta;
  return kiln_shuffle(v, src >= 32 ? -1 : src, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_xor(T v, I mask) {
  return kiln_shuffle(v, (int)((kiln::rt::g_cur.thread->thread_index_in_simdgroup ^ (uint)mask) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_down(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln::rt::g_cur.thread->thread_index_in_simdgroup + (uint)delta) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_up(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln::rt::g_cur.thread->thread_index_in_simdgroup - (uint)delta) & 31u), KILN_SITE);
}
KILN_SIMD_FN T simd_broadcast_first(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  for (uint l = 0; l < 32; ++l) if (w.has(l)) return w.at<T>(l);
  return v;
}

struct simd_vote {
  typedef ulong vote_t;
  vote_t v;
  explicit operator vote_t() const { return v; }
  bool all() const { return v == 0xffffffffull; }
  bool any() const { return v != 0; }
};
__attribute__((noinline)) inline simd_vote simd_ballot(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  ulong m = 0;
  for (uint l = 0; l < 32; ++l) if (w.has(l) && w.at<bool>(l)) m |= 1ul << l;
  return simd_vote{m};
}
__attribute__((noinline)) inline simd_vote simd_active_threads_mask() {
  kiln::rt::View w = kiln::rt::post(true, KILN_SITE);
  return simd_vote{(ulong)w.mask};
}
__attribute__((noinline)) inline bool simd_all(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  for (uint l = 0; l < 32; ++l) if (w.has(l) && !w.at<bool>(l)) return false;
  return true;
}
__attribute__((noinline)) inline bool simd_any(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  for (uint l = 0; l < 32; ++l) if (w.has(l) && w.at<bool>(l)) return true;
  return false;
}
__attribute__((noinline)) inline bool simd_is_first() {
  kiln::rt::View w = kiln::rt::post(true, KILN_SITE);
  for (uint l = 0; l < 32; ++l) if (w.has(l)) return l == w.lane;
  return false;
}

// Quad-groups: runs of 4 lanes inside the simdgroup.
#define KILN_QUAD_FOLD(NAME, INIT, EXPR)                                                        \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                                       \
    T s = INIT;                                                                                 \
    uint q = w.lane & ~3u;                                                                      \
    for (uint l = q; l < q + 4; ++l) if (w.has(l)) { T a = s, b = w.at<T>(l); s = T(EXPR); }    \
    return s;                                                                                   \
  }
KILN_QUAD_FOLD(quad_sum, T(0), a + b) KILN_QUAD_FOLD(quad_product, T(1), a * b)
KILN_QUAD_FOLD(quad_max, v, max(a, b)) KILN_QUAD_FOLD(quad_min, v, min(a, b))
KILN_QUAD_FOLD(quad_and, v, a & b) KILN_QUAD_FOLD(quad_or, v, a | b) KILN_QUAD_FOLD(quad_xor, v, a ^ b)
#undef KILN_QUAD_FOLD
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle(T v, I lane) {
  return kiln_shuffle(v, (int)((kiln::rt::g_cur.thread->thread_index_in_simdgroup & ~3u) + ((uint)lane & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_broadcast(T v, I lane) {
  return kiln_shuffle(v, (int)((kiln::rt::g_cur.thread->thread_index_in_simdgroup & ~3u) + ((uint)lane & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_xor(T v, I mask) {
  uint me = kiln::rt::g_cur.thread->thread_index_in_simdgroup;
  return kiln_shuffle(v, (int)((me & ~3u) + ((me ^ (uint)mask) & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_down(T v, I delta) {
  uint me = kiln::rt::g_cur.thread->thread_index_in_simdgroup;
  uint src = (me & 3u) + (uint)delta;
  return kiln_shuffle(v, src >= 4 ? -1 : (int)((me & ~3u) + src), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_up(T v, I delta) {
  uint me = kiln::rt::g_cur.thread->thread_index_in_simdgroup;
  int src = (int)(me & 3u) - (int)delta;
  return kiln_shuffle(v, src < 0 ? -1 : (int)((me & ~3u) + (uint)src), KILN_SITE);
}
#undef KILN_SIMD_FN
#undef KILN_SITE
}  // namespace metal

// ---- simdgroup matrices -----------------------------------------------------------------------
// Metal's 8x8 `simdgroup_matrix` in Apple's per-lane layout (the one MLX's steel GEMM reads
// through `thread_elements()`): lane l holds row (l/4 & 4) + (l/2 % 4), columns
// (l/4 & 2)*2 + (l%2)*2 and the next one. Loads and stores touch only the lane's own elements;
// a multiply is a collective of all 32 lanes (the products accumulate in float in k order, as
// on CUDA). prelude/cuda/matrix.h is the same API with the same layout.
namespace metal {
namespace matrix_detail {
inline uint row(uint l) { return ((l >> 2) & 4u) + ((l >> 1) & 3u); }
inline uint col(uint l) { return ((l >> 2) & 2u) * 2u + (l & 1u) * 2u; }
// The lane holding element (r, c): the inverse of row/col.
inline uint lane(uint r, uint c) {
  return ((c >> 1) & 1u) | ((r & 1u) << 1) | (((r >> 1) & 1u) << 2) | (((c >> 2) & 1u) << 3) | (((r >> 2) & 1u) << 4);
}
inline uint me() { return kiln::rt::g_cur.thread->thread_index_in_simdgroup; }
}  // namespace matrix_detail

template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "kiln supports 8x8 simdgroup matrices");
  vec<T, 2> e;
  simdgroup_matrix() = default;
  // A diagonal matrix with `d` on the diagonal (Metal's constructor from a scalar).
  explicit simdgroup_matrix(T d) {
    uint l = matrix_detail::me(), r = matrix_detail::row(l), c = matrix_detail::col(l);
    e.x = r == c ? d : T(0);
    e.y = r == c + 1 ? d : T(0);
  }
  vec<T, 2>& thread_elements() { return e; }
  const vec<T, 2>& thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.e = vec<T, 2>(value, value);
  return m;
}

// `origin` is (column, row) of the matrix's first element in the source; with `transpose` the
// 8x8 block read there is transposed.
template <class T, class U>
inline void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, const U* src, ulong elements_per_row = 8,
                           vec<ulong, 2> origin = 0, bool transpose = false) {
  uint l = matrix_detail::me(), r = matrix_detail::row(l), c = matrix_detail::col(l);
  const U* base = src + origin.y * elements_per_row + origin.x;
  for (uint i = 0; i < 2; ++i) {
    uint rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    m.e[i] = T(base[rr * elements_per_row + cc]);
  }
}

template <class T, class U>
inline void simdgroup_store(const simdgroup_matrix<T, 8, 8>& m, U* dst, ulong elements_per_row = 8,
                            vec<ulong, 2> origin = 0, bool transpose = false) {
  uint l = matrix_detail::me(), r = matrix_detail::row(l), c = matrix_detail::col(l);
  U* base = dst + origin.y * elements_per_row + origin.x;
  for (uint i = 0; i < 2; ++i) {
    uint rr = transpose ? c + i : r, cc = transpose ? r : c + i;
    base[rr * elements_per_row + cc] = U(m.e[i]);
  }
}

namespace matrix_detail {
template <class TA, class TB, class TC> struct mma_rec { TA a[2]; TB b[2]; TC c[2]; };

// d = a * b + c as one collective at `site`: every lane posts its elements of a, b and c.
template <class TD, class TA, class TB, class TC>
inline void mma(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>* c, const void* site) {
  typedef mma_rec<TA, TB, TC> Rec;
  Rec mine = {{a.e.x, a.e.y}, {b.e.x, b.e.y}, {c ? c->e.x : TC(0), c ? c->e.y : TC(0)}};
  kiln::rt::View w = kiln::rt::post(mine, site);
  if (w.mask != 0xffffffffu) throw kiln::rt::Fault{"a simdgroup matrix multiply needs all 32 lanes of the simdgroup"};
  uint r = row(w.lane), c0 = col(w.lane);
  for (uint i = 0; i < 2; ++i) {
    uint cc = c0 + i;
    float acc = float(w.at<Rec>(lane(r, cc)).c[cc & 1u]);
    for (uint k = 0; k < 8; ++k)
      acc += float(w.at<Rec>(lane(r, k)).a[k & 1u]) * float(w.at<Rec>(lane(k, cc)).b[cc & 1u]);
    d.e[i] = TD(acc);
  }
}
}  // namespace matrix_detail

template <class TD, class TA, class TB, class TC>
__attribute__((noinline)) inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d,
                                                                    const simdgroup_matrix<TA, 8, 8>& a,
                                                                    const simdgroup_matrix<TB, 8, 8>& b,
                                                                    const simdgroup_matrix<TC, 8, 8>& c) {
  matrix_detail::mma(d, a, b, &c, __builtin_return_address(0));
}
template <class TD, class TA, class TB>
__attribute__((noinline)) inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                                         const simdgroup_matrix<TB, 8, 8>& b) {
  matrix_detail::mma(d, a, b, (const simdgroup_matrix<TD, 8, 8>*)nullptr, __builtin_return_address(0));
}
}  // namespace metal

// Source call sites: the lowering passes `kiln::site_tag<N>{}` as the first argument of every
// collective written in the kernel's source; the overloads below mark the thread's next post
// with a per-site address and call the collective itself.
namespace kiln {
template <int S> struct site_tag {};
template <int S> inline const char site_marker = 0;
template <int S> __attribute__((always_inline)) inline void at_site() { rt::g_cur.thread->pending_site = &site_marker<S>; }
}  // namespace kiln

namespace metal {
#define KILN_SITED(NAME)                                                                                 \
  template <int S, class... A>                                                                          \
  __attribute__((always_inline)) inline auto NAME(kiln::site_tag<S>, A&&... a)->decltype(NAME(static_cast<A&&>(a)...)) { \
    kiln::at_site<S>();                                                                                 \
    return NAME(static_cast<A&&>(a)...);                                                                \
  }
KILN_SITED(simd_sum) KILN_SITED(simd_product) KILN_SITED(simd_max) KILN_SITED(simd_min)
KILN_SITED(simd_and) KILN_SITED(simd_or) KILN_SITED(simd_xor)
KILN_SITED(simd_prefix_inclusive_sum) KILN_SITED(simd_prefix_exclusive_sum)
KILN_SITED(simd_prefix_inclusive_product) KILN_SITED(simd_prefix_exclusive_product)
KILN_SITED(simd_shuffle) KILN_SITED(simd_shuffle_down) KILN_SITED(simd_shuffle_up) KILN_SITED(simd_shuffle_xor)
KILN_SITED(simd_shuffle_rotate_down) KILN_SITED(simd_shuffle_rotate_up)
KILN_SITED(simd_broadcast) KILN_SITED(simd_broadcast_first)
KILN_SITED(simd_ballot) KILN_SITED(simd_all) KILN_SITED(simd_any) KILN_SITED(simd_is_first)
KILN_SITED(simd_active_threads_mask)
KILN_SITED(quad_sum) KILN_SITED(quad_product) KILN_SITED(quad_max) KILN_SITED(quad_min)
KILN_SITED(quad_and) KILN_SITED(quad_or) KILN_SITED(quad_xor)
KILN_SITED(quad_shuffle) KILN_SITED(quad_shuffle_down) KILN_SITED(quad_shuffle_up) KILN_SITED(quad_shuffle_xor)
KILN_SITED(quad_broadcast)
KILN_SITED(simdgroup_barrier) KILN_SITED(simdgroup_multiply) KILN_SITED(simdgroup_multiply_accumulate)
#undef KILN_SITED
}  // namespace metal
