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
  return kiln_shuffle(v, (int)kiln::rt::g_thread->thread_index_in_simdgroup - (int)delta, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_down(T v, I delta) {
  int src = (int)kiln::rt::g_thread->thread_index_in_simdgroup + (int)delta;
  return kiln_shuffle(v, src >= 32 ? -1 : src, KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_xor(T v, I mask) {
  return kiln_shuffle(v, (int)((kiln::rt::g_thread->thread_index_in_simdgroup ^ (uint)mask) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_down(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln::rt::g_thread->thread_index_in_simdgroup + (uint)delta) & 31u), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T simd_shuffle_rotate_up(T v, I delta) {
  return kiln_shuffle(v, (int)((kiln::rt::g_thread->thread_index_in_simdgroup - (uint)delta) & 31u), KILN_SITE);
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
  return kiln_shuffle(v, (int)((kiln::rt::g_thread->thread_index_in_simdgroup & ~3u) + ((uint)lane & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_broadcast(T v, I lane) {
  return kiln_shuffle(v, (int)((kiln::rt::g_thread->thread_index_in_simdgroup & ~3u) + ((uint)lane & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_xor(T v, I mask) {
  uint me = kiln::rt::g_thread->thread_index_in_simdgroup;
  return kiln_shuffle(v, (int)((me & ~3u) + ((me ^ (uint)mask) & 3u)), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_down(T v, I delta) {
  uint me = kiln::rt::g_thread->thread_index_in_simdgroup;
  uint src = (me & 3u) + (uint)delta;
  return kiln_shuffle(v, src >= 4 ? -1 : (int)((me & ~3u) + src), KILN_SITE);
}
template <class T, class I> __attribute__((noinline)) inline T quad_shuffle_up(T v, I delta) {
  uint me = kiln::rt::g_thread->thread_index_in_simdgroup;
  int src = (int)(me & 3u) - (int)delta;
  return kiln_shuffle(v, src < 0 ? -1 : (int)((me & ~3u) + (uint)src), KILN_SITE);
}
#undef KILN_SIMD_FN
#undef KILN_SITE
}  // namespace metal
