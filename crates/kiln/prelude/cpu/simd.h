// kiln CPU prelude, part 3: SIMD-group and quad-group collectives over the lanes active at the
// call (see runtime.h). Reductions run in lane order, so results are deterministic; reading
// a lane that did not take part (or lies outside the group) yields the caller's own value, which
// the sanitizer reports (undefined in Metal).
#pragma once

namespace metal {
// A shuffle read lane `src`, which did not take part: the caller's own value, or under the
// sanitizer's second run other bytes (so the host sees whether the value mattered).
template <class T> __attribute__((always_inline)) inline T kiln_inactive(T v, uint src, const void* site) {
#if KILN_CHECKED
  if (kiln::chk::inactive_lane(site, src)) {
    unsigned char b[sizeof(T)];
    __builtin_memcpy(b, &v, sizeof(T));
    for (unsigned i = 0; i < sizeof(T); ++i) b[i] ^= 0xA5;
    __builtin_memcpy(&v, b, sizeof(T));
  }
#else
  (void)src;
  (void)site;
#endif
  return v;
}

#define KILN_SIMD_FN template <class T> __attribute__((noinline)) inline
#define KILN_SITE __builtin_return_address(0)

// Folds `op` over the lanes of `w` in [from, to) that took part, in lane order, starting from the
// first of them (so idempotent and non-idempotent operations alike see each value once).
template <class T, class Op> __attribute__((always_inline)) inline T kiln_fold(const kiln::rt::View& w, uint from, uint to, T none, Op op) {
  bool have = false;
  T s = none;
  for (uint l = from; l < to; ++l) {
    if (!w.has(l)) continue;
    T x = w.at<T>(l);
    s = have ? T(op(s, x)) : x;
    have = true;
  }
  return s;
}
struct kiln_add { template <class T> T operator()(T a, T b) const { return a + b; } };
struct kiln_mul { template <class T> T operator()(T a, T b) const { return a * b; } };
struct kiln_max { template <class T> T operator()(T a, T b) const { return max(a, b); } };
struct kiln_min { template <class T> T operator()(T a, T b) const { return min(a, b); } };
struct kiln_and { template <class T> T operator()(T a, T b) const { return a & b; } };
struct kiln_or { template <class T> T operator()(T a, T b) const { return a | b; } };
struct kiln_xor { template <class T> T operator()(T a, T b) const { return a ^ b; } };

// A reduction over the whole SIMD-group: the same value for every lane of the call (the caller
// took part, so the fold never returns `v`), computed by the first of them to return and copied
// by the others. The key tells reductions apart.
template <class T, class Op> struct kiln_reduce_key { static const char id; };
template <class T, class Op> const char kiln_reduce_key<T, Op>::id = 0;
template <class T, class Op> __attribute__((always_inline)) inline T kiln_reduce(const kiln::rt::View& w, T v, Op op) {
  kiln::rt::Folded& f = *w.folded;
  const void* const key = &kiln_reduce_key<T, Op>::id;
  T s;
  if (f.key == key) {
    __builtin_memcpy(&s, f.value, sizeof(T));
    return s;
  }
  s = kiln_fold(w, 0, 32, v, op);
  __builtin_memcpy(f.value, &s, sizeof(T));
  f.key = key;
  return s;
}

// Reductions over the SIMD-group (lanes 0..31) and prefixes over the lanes below the caller;
// an empty prefix is the operation's identity.
#define KILN_SIMD_REDUCE(NAME, OP)                                                              \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                            \
    return kiln_reduce(w, v, OP());                                                             \
  }
KILN_SIMD_REDUCE(simd_sum, kiln_add) KILN_SIMD_REDUCE(simd_product, kiln_mul)
KILN_SIMD_REDUCE(simd_max, kiln_max) KILN_SIMD_REDUCE(simd_min, kiln_min)
KILN_SIMD_REDUCE(simd_and, kiln_and) KILN_SIMD_REDUCE(simd_or, kiln_or) KILN_SIMD_REDUCE(simd_xor, kiln_xor)
#undef KILN_SIMD_REDUCE
#define KILN_SIMD_PREFIX(NAME, OP, IDENTITY, INCLUSIVE)                                         \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                            \
    return kiln_fold(w, 0, w.lane + (INCLUSIVE), T(IDENTITY), OP());                            \
  }
KILN_SIMD_PREFIX(simd_prefix_inclusive_sum, kiln_add, 0, 1)
KILN_SIMD_PREFIX(simd_prefix_exclusive_sum, kiln_add, 0, 0)
KILN_SIMD_PREFIX(simd_prefix_inclusive_product, kiln_mul, 1, 1)
KILN_SIMD_PREFIX(simd_prefix_exclusive_product, kiln_mul, 1, 0)
#undef KILN_SIMD_PREFIX

// Shuffles: one posted record per lane holding the value and the lane it wants to read.
template <class T> struct kiln_shuffle_rec { T v; int src; };
template <class T> __attribute__((always_inline)) inline T kiln_shuffle(T v, int src, const void* site) {
  kiln_shuffle_rec<T> r{v, src};
  kiln::rt::View w = kiln::rt::post(r, site);
  if (src < 0) return v;
  if (!w.has((uint)src)) return kiln_inactive(v, (uint)src, site);
  return w.at<kiln_shuffle_rec<T>>((uint)src).v;
}
inline uint kiln_lane() { return kiln::rt::here().thread->thread_index_in_simdgroup; }
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle(T v, I lane) {
  return kiln_shuffle(v, (int)lane, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_broadcast(T v, I lane) {
  return kiln_shuffle(v, (int)lane, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_up(T v, I delta) {
  return kiln_shuffle(v, (int)kiln_lane() - (int)delta, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_down(T v, I delta) {
  int src = (int)kiln_lane() + (int)delta;
  return kiln_shuffle(v, src >= 32 ? -1 : src, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_xor(T v, I mask) {
  return kiln_shuffle(v, (int)((kiln_lane() ^ (uint)mask) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_down(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln_lane() + (uint)delta) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_up(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln_lane() - (uint)delta) & 31u), KILN_SITE);
}
KILN_SIMD_FN T simd_broadcast_first(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  for (uint l = 0; l < 32; ++l) if (w.has(l)) return w.at<T>(l);
  return v;
}

// Shuffle and fill (MSL 6.9.2): the group splits into vectors of `modulo` lanes; lane j of a
// vector reads `data` from lane j - delta (up) or j + delta (down) of its vector, and where that
// falls outside the vector, `filling_data` from the lane it wraps around to.
template <class T> struct kiln_fill_rec { T data, fill; };
template <class T> __attribute__((always_inline)) inline T kiln_shuffle_fill(T data, T fill, uint lane, int delta, uint modulo,
                                                                           const void* site) {
  kiln_fill_rec<T> r{data, fill};
  kiln::rt::View w = kiln::rt::post(r, site);
  const int m = (int)modulo;
  const int base = (int)lane - (int)lane % m, j = (int)lane % m + delta;
  const uint src = (uint)(base + ((j % m) + m) % m);
  if (!w.has(src)) return kiln_inactive(data, src, site);
  const kiln_fill_rec<T> got = w.at<kiln_fill_rec<T>>(src);
  return j >= 0 && j < m ? got.data : got.fill;
}
// A modulo that is not 2, 4, 8, 16 or 32 (quads: 2 or 4) is undefined in Metal; here it is the
// whole group.
inline uint kiln_modulo(uint m, uint width) { return m == 2 || m == 4 || m == 8 || m == 16 || m == 32 ? (m > width ? width : m) : width; }
template <class T> struct kiln_same { typedef T type; };
template <class T, class I>
__attribute__((noinline)) inline T simd_shuffle_and_fill_up(T data, typename kiln_same<T>::type fill, I delta) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), -(int)(uint)delta, 32, KILN_SITE);
}
template <class T, class I, class M>
__attribute__((noinline)) inline T simd_shuffle_and_fill_up(T data, typename kiln_same<T>::type fill, I delta, M modulo) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), -(int)(uint)delta, kiln_modulo((uint)modulo, 32), KILN_SITE);
}
template <class T, class I>
__attribute__((noinline)) inline T simd_shuffle_and_fill_down(T data, typename kiln_same<T>::type fill, I delta) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), (int)(uint)delta, 32, KILN_SITE);
}
template <class T, class I, class M>
__attribute__((noinline)) inline T simd_shuffle_and_fill_down(T data, typename kiln_same<T>::type fill, I delta, M modulo) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), (int)(uint)delta, kiln_modulo((uint)modulo, 32), KILN_SITE);
}

// Votes (MSL 6.9.2): bit i is lane i. all() and any() read the bits of the SIMD-group's 32 lanes,
// whichever lanes are active: simd_ballot(e).all() is true only when every lane was active and
// voted true.
struct simd_vote {
  typedef ulong vote_t;
  explicit constexpr simd_vote(vote_t bits = 0) : v(bits) {}
  explicit constexpr operator vote_t() const { return v; }
  constexpr bool all() const { return (v & 0xffffffffull) == 0xffffffffull; }
  constexpr bool any() const { return (v & 0xffffffffull) != 0; }
 private:
  vote_t v;
};
__attribute__((noinline)) inline simd_vote simd_ballot(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  ulong m = 0;
  for (uint l = 0; l < 32; ++l) if (w.has(l) && w.at<bool>(l)) m |= 1ul << l;
  return simd_vote(m);
}
__attribute__((noinline)) inline simd_vote simd_active_threads_mask() {
  kiln::rt::View w = kiln::rt::post(true, KILN_SITE);
  return simd_vote((ulong)w.mask);
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
  return (w.mask & ((2u << w.lane) - 1u)) == (1u << w.lane);
}
inline bool simd_is_helper_thread() { return false; }

// Quad-groups: runs of 4 lanes inside the SIMD-group (quad lane = lane % 4), with the same
// active-lane rules.
#define KILN_QUAD_REDUCE(NAME, OP)                                                              \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                            \
    return kiln_fold(w, w.lane & ~3u, (w.lane & ~3u) + 4, v, OP());                             \
  }
KILN_QUAD_REDUCE(quad_sum, kiln_add) KILN_QUAD_REDUCE(quad_product, kiln_mul)
KILN_QUAD_REDUCE(quad_max, kiln_max) KILN_QUAD_REDUCE(quad_min, kiln_min)
KILN_QUAD_REDUCE(quad_and, kiln_and) KILN_QUAD_REDUCE(quad_or, kiln_or) KILN_QUAD_REDUCE(quad_xor, kiln_xor)
#undef KILN_QUAD_REDUCE
#define KILN_QUAD_PREFIX(NAME, OP, IDENTITY, INCLUSIVE)                                         \
  KILN_SIMD_FN T NAME(T v) {                                                                    \
    kiln::rt::View w = kiln::rt::post(v, KILN_SITE);                                            \
    return kiln_fold(w, w.lane & ~3u, w.lane + (INCLUSIVE), T(IDENTITY), OP());                 \
  }
KILN_QUAD_PREFIX(quad_prefix_inclusive_sum, kiln_add, 0, 1)
KILN_QUAD_PREFIX(quad_prefix_exclusive_sum, kiln_add, 0, 0)
KILN_QUAD_PREFIX(quad_prefix_inclusive_product, kiln_mul, 1, 1)
KILN_QUAD_PREFIX(quad_prefix_exclusive_product, kiln_mul, 1, 0)
#undef KILN_QUAD_PREFIX
// The SIMD lane of quad lane `q` (taken modulo 4) of the caller's quad.
inline int kiln_quad_lane(uint q) { return (int)((kiln_lane() & ~3u) + (q & 3u)); }
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle(T v, I lane) {
  return kiln_shuffle(v, kiln_quad_lane((uint)lane), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_broadcast(T v, I lane) {
  return kiln_shuffle(v, kiln_quad_lane((uint)lane), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_xor(T v, I mask) {
  return kiln_shuffle(v, kiln_quad_lane((kiln_lane() ^ (uint)mask) & 3u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_down(T v, I delta) {
  uint src = (kiln_lane() & 3u) + (uint)delta;
  return kiln_shuffle(v, src >= 4 ? -1 : kiln_quad_lane(src), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_up(T v, I delta) {
  int src = (int)(kiln_lane() & 3u) - (int)delta;
  return kiln_shuffle(v, src < 0 ? -1 : kiln_quad_lane((uint)src), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_rotate_down(T v, I delta) {
  return kiln_shuffle(v, kiln_quad_lane(kiln_lane() + (uint)delta), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_rotate_up(T v, I delta) {
  return kiln_shuffle(v, kiln_quad_lane(kiln_lane() - (uint)delta), KILN_SITE);
}
KILN_SIMD_FN T quad_broadcast_first(T v) {
  kiln::rt::View w = kiln::rt::post(v, KILN_SITE);
  for (uint l = w.lane & ~3u; l < (w.lane & ~3u) + 4; ++l) if (w.has(l)) return w.at<T>(l);
  return v;
}
template <class T, class I>
__attribute__((noinline)) inline T quad_shuffle_and_fill_up(T data, typename kiln_same<T>::type fill, I delta) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), -(int)(uint)delta, 4, KILN_SITE);
}
template <class T, class I, class M>
__attribute__((noinline)) inline T quad_shuffle_and_fill_up(T data, typename kiln_same<T>::type fill, I delta, M modulo) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), -(int)(uint)delta, kiln_modulo((uint)modulo, 4), KILN_SITE);
}
template <class T, class I>
__attribute__((noinline)) inline T quad_shuffle_and_fill_down(T data, typename kiln_same<T>::type fill, I delta) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), (int)(uint)delta, 4, KILN_SITE);
}
template <class T, class I, class M>
__attribute__((noinline)) inline T quad_shuffle_and_fill_down(T data, typename kiln_same<T>::type fill, I delta, M modulo) {
  return kiln_shuffle_fill(data, fill, kiln_lane(), (int)(uint)delta, kiln_modulo((uint)modulo, 4), KILN_SITE);
}
// Bit i is quad lane i; the constructor keeps the four bottom bits (MSL 6.9.3).
struct quad_vote {
  typedef unsigned vote_t;
  explicit constexpr quad_vote(vote_t bits = 0) : v(bits & 0xfu) {}
  explicit constexpr operator vote_t() const { return v; }
  constexpr bool all() const { return v == 0xfu; }
  constexpr bool any() const { return v != 0; }
 private:
  vote_t v;
};
inline unsigned kiln_quad_bits(unsigned simd_bits, uint lane) { return (simd_bits >> (lane & ~3u)) & 0xfu; }
__attribute__((noinline)) inline quad_vote quad_ballot(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  unsigned m = 0;
  for (uint l = 0; l < 32; ++l) if (w.has(l) && w.at<bool>(l)) m |= 1u << l;
  return quad_vote(kiln_quad_bits(m, w.lane));
}
__attribute__((noinline)) inline quad_vote quad_active_threads_mask() {
  kiln::rt::View w = kiln::rt::post(true, KILN_SITE);
  return quad_vote(kiln_quad_bits(w.mask, w.lane));
}
__attribute__((noinline)) inline bool quad_all(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  for (uint l = w.lane & ~3u; l < (w.lane & ~3u) + 4; ++l) if (w.has(l) && !w.at<bool>(l)) return false;
  return true;
}
__attribute__((noinline)) inline bool quad_any(bool b) {
  kiln::rt::View w = kiln::rt::post(b, KILN_SITE);
  for (uint l = w.lane & ~3u; l < (w.lane & ~3u) + 4; ++l) if (w.has(l) && w.at<bool>(l)) return true;
  return false;
}
__attribute__((noinline)) inline bool quad_is_first() {
  kiln::rt::View w = kiln::rt::post(true, KILN_SITE);
  return (kiln_quad_bits(w.mask, w.lane) & ((2u << (w.lane & 3u)) - 1u)) == (1u << (w.lane & 3u));
}
inline bool quad_is_helper_thread() { return false; }
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
inline uint me() { return kiln::rt::here().thread->thread_index_in_simdgroup; }
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

template <class T, int Cols, int Rows = Cols> inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
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
// `a * b`: simdgroup_multiply into a fresh matrix (MLX's winograd transforms).
template <class T>
__attribute__((noinline)) inline simdgroup_matrix<T, 8, 8> operator*(const simdgroup_matrix<T, 8, 8>& a,
                                                                     const simdgroup_matrix<T, 8, 8>& b) {
  simdgroup_matrix<T, 8, 8> d;
  matrix_detail::mma(d, a, b, (const simdgroup_matrix<T, 8, 8>*)nullptr, __builtin_return_address(0));
  return d;
}
}  // namespace metal

// Source call sites: the lowering passes `kiln::site_tag<N>{}` as the first argument of every
// SIMD-group function called in the kernel's source, N the position of the call (see
// convergence.h); the overloads below mark the thread's next post with it and call the function
// itself. Code the optimiser duplicates keeps the tag, so its lanes still meet.
namespace kiln {
template <int S> struct site_tag {};
template <int S> __attribute__((always_inline)) inline void at_site() {
  rt::here().thread->pending_site = (const void*)(rt::TAGGED_SITE | (uintptr_t)S);
}
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
KILN_SITED(simd_shuffle_and_fill_down) KILN_SITED(simd_shuffle_and_fill_up)
KILN_SITED(simd_broadcast) KILN_SITED(simd_broadcast_first)
KILN_SITED(simd_ballot) KILN_SITED(simd_all) KILN_SITED(simd_any) KILN_SITED(simd_is_first)
KILN_SITED(simd_active_threads_mask)
KILN_SITED(quad_sum) KILN_SITED(quad_product) KILN_SITED(quad_max) KILN_SITED(quad_min)
KILN_SITED(quad_and) KILN_SITED(quad_or) KILN_SITED(quad_xor)
KILN_SITED(quad_prefix_inclusive_sum) KILN_SITED(quad_prefix_exclusive_sum)
KILN_SITED(quad_prefix_inclusive_product) KILN_SITED(quad_prefix_exclusive_product)
KILN_SITED(quad_shuffle) KILN_SITED(quad_shuffle_down) KILN_SITED(quad_shuffle_up) KILN_SITED(quad_shuffle_xor)
KILN_SITED(quad_shuffle_rotate_down) KILN_SITED(quad_shuffle_rotate_up)
KILN_SITED(quad_shuffle_and_fill_down) KILN_SITED(quad_shuffle_and_fill_up)
KILN_SITED(quad_broadcast) KILN_SITED(quad_broadcast_first)
KILN_SITED(quad_ballot) KILN_SITED(quad_all) KILN_SITED(quad_any) KILN_SITED(quad_is_first)
KILN_SITED(quad_active_threads_mask)
KILN_SITED(simdgroup_barrier) KILN_SITED(simdgroup_multiply) KILN_SITED(simdgroup_multiply_accumulate)
#undef KILN_SITED
}  // namespace metal

// A region form's SIMD-group reductions (runtime.h, "region loops"): the thread's value is
// posted as a collective's is, and the result folded by the same code over the lanes the
// driver resolved, so results are the collective's own bit for bit.
namespace kiln { namespace rt {
template <class T> __attribute__((always_inline)) inline void region_post_value(const RegionArgs& ra, const T& v) {
  static_assert(sizeof(T) <= SLOT_BYTES, "SIMD collective on a value larger than 32 bytes");
  Thread& t = ra.group->threads[ra.index];
  __builtin_memcpy(t.slot, &v, sizeof(T));
  t.state = AT_COLLECTIVE;
}
template <class T, class Op> __attribute__((always_inline)) inline T region_reduce(const RegionArgs& ra, const T& v, Op op) {
  Group& g = *ra.group;
  const uint sg = ra.index / 32;
  const View w{g.snap[sg], g.active[sg], ra.index % 32, &g.folded[sg]};
  return ::metal::kiln_reduce(w, T(v), op);
}
}  // namespace rt
}  // namespace kiln
