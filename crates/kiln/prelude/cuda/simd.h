// kiln CUDA prelude: Metal SIMD-group and quad-group functions on warp shuffles. A Metal
// SIMD group is the warp (launches linearise threads x-fastest with the group's real size), and
// every collective acts on the lanes active at the call, as Metal's do in divergent code.
#pragma once

namespace kiln {
KILN_HD unsigned lane_id() {
  unsigned l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// Shuffles any trivially copyable value word by word.
template <class T> KILN_HD T shfl(unsigned mask, T v, int src) {
  constexpr int words = (sizeof(T) + 3) / 4;
  unsigned w[words] = {};
  kiln::copy_bits(w, &v, sizeof(T));
#pragma unroll
  for (int i = 0; i < words; ++i) w[i] = __shfl_sync(mask, w[i], src);
  T out;
  kiln::copy_bits(&out, w, sizeof(T));
  return out;
}

// Folds `op` over the active lanes in lane order; every active lane gets the result.
template <class T, class Op> KILN_HD T reduce(T v, Op op) {
  unsigned mask = __activemask();
  if (mask == 0xffffffffu) {
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) {
      T other = shfl(mask, v, static_cast<int>(lane_id() ^ d));
      v = op(v, other);
    }
    return v;
  }
  unsigned m = mask;
  int first = __ffs(m) - 1;
  m &= m - 1;
  T acc = shfl(mask, v, first);
  while (m) {
    int src = __ffs(m) - 1;
    m &= m - 1;
    acc = op(acc, shfl(mask, v, src));
  }
  return acc;
}

// Inclusive scan over the active lanes in lane order.
template <class T, class Op> KILN_HD T scan_inclusive(T v, Op op) {
  unsigned mask = __activemask();
  unsigned lane = lane_id();
  unsigned m = mask & ((lane == 31) ? 0xffffffffu : ((1u << (lane + 1)) - 1u));
  unsigned all = mask;
  T acc = v;
  bool have = false;
  while (all) {
    int src = __ffs(all) - 1;
    all &= all - 1;
    T x = shfl(mask, v, src);
    if (m & (1u << src)) {
      acc = have ? op(acc, x) : x;
      have = true;
    }
  }
  return acc;
}

struct Add { template <class T> KILN_HD T operator()(T a, T b) const { return a + b; } };
struct Mul { template <class T> KILN_HD T operator()(T a, T b) const { return a * b; } };
struct Max { template <class T> KILN_HD T operator()(T a, T b) const { return metal::max(a, b); } };
struct Min { template <class T> KILN_HD T operator()(T a, T b) const { return metal::min(a, b); } };
struct And { template <class T> KILN_HD T operator()(T a, T b) const { return a & b; } };
struct Or { template <class T> KILN_HD T operator()(T a, T b) const { return a | b; } };
struct Xor { template <class T> KILN_HD T operator()(T a, T b) const { return a ^ b; } };
}  // namespace kiln

namespace metal {
template <class T> KILN_HD T simd_sum(T v) { return kiln::reduce(v, kiln::Add()); }
template <class T> KILN_HD T simd_product(T v) { return kiln::reduce(v, kiln::Mul()); }
template <class T> KILN_HD T simd_max(T v) { return kiln::reduce(v, kiln::Max()); }
template <class T> KILN_HD T simd_min(T v) { return kiln::reduce(v, kiln::Min()); }
template <class T> KILN_HD T simd_and(T v) { return kiln::reduce(v, kiln::And()); }
template <class T> KILN_HD T simd_or(T v) { return kiln::reduce(v, kiln::Or()); }
template <class T> KILN_HD T simd_xor(T v) { return kiln::reduce(v, kiln::Xor()); }

template <class T> KILN_HD T simd_prefix_inclusive_sum(T v) { return kiln::scan_inclusive(v, kiln::Add()); }
template <class T> KILN_HD T simd_prefix_inclusive_product(T v) { return kiln::scan_inclusive(v, kiln::Mul()); }
template <class T> KILN_HD T simd_prefix_exclusive_sum(T v) {
  unsigned mask = __activemask();
  T inc = kiln::scan_inclusive(v, kiln::Add());
  unsigned lane = kiln::lane_id();
  unsigned below = mask & ((1u << lane) - 1u);
  T prev = kiln::shfl(mask, inc, below ? 31 - __clz(static_cast<int>(below)) : static_cast<int>(lane));
  return below ? prev : T(0);
}
template <class T> KILN_HD T simd_prefix_exclusive_product(T v) {
  unsigned mask = __activemask();
  T inc = kiln::scan_inclusive(v, kiln::Mul());
  unsigned lane = kiln::lane_id();
  unsigned below = mask & ((1u << lane) - 1u);
  T prev = kiln::shfl(mask, inc, below ? 31 - __clz(static_cast<int>(below)) : static_cast<int>(lane));
  return below ? prev : T(1);
}

template <class T, class I> KILN_HD T simd_shuffle(T v, I lane) {
  return kiln::shfl(__activemask(), v, static_cast<int>(lane));
}
template <class T, class I> KILN_HD T simd_broadcast(T v, I lane) {
  return kiln::shfl(__activemask(), v, static_cast<int>(lane));
}
template <class T> KILN_HD T simd_broadcast_first(T v) {
  unsigned mask = __activemask();
  return kiln::shfl(mask, v, __ffs(mask) - 1);
}
// Lanes whose source falls outside the SIMD group, or on a lane that is not active (past the
// end of a partial group, or in the other branch), keep their own value.
template <class T, class I> KILN_HD T simd_shuffle_down(T v, I delta) {
  unsigned mask = __activemask();
  unsigned src = kiln::lane_id() + static_cast<unsigned>(delta);
  bool ok = src < 32u && ((mask >> src) & 1u);
  return kiln::shfl(mask, v, static_cast<int>(ok ? src : kiln::lane_id()));
}
template <class T, class I> KILN_HD T simd_shuffle_up(T v, I delta) {
  unsigned mask = __activemask();
  int src = static_cast<int>(kiln::lane_id()) - static_cast<int>(delta);
  bool ok = src >= 0 && ((mask >> src) & 1u);
  return kiln::shfl(mask, v, ok ? src : static_cast<int>(kiln::lane_id()));
}
template <class T, class I> KILN_HD T simd_shuffle_xor(T v, I m) {
  return kiln::shfl(__activemask(), v, static_cast<int>((kiln::lane_id() ^ static_cast<unsigned>(m)) & 31u));
}
template <class T, class I> KILN_HD T simd_shuffle_rotate_down(T v, I delta) {
  return kiln::shfl(__activemask(), v, static_cast<int>((kiln::lane_id() + static_cast<unsigned>(delta)) & 31u));
}
template <class T, class I> KILN_HD T simd_shuffle_rotate_up(T v, I delta) {
  return kiln::shfl(__activemask(), v, static_cast<int>((kiln::lane_id() - static_cast<unsigned>(delta)) & 31u));
}
}  // namespace metal

// Shuffle and fill (MSL 6.9.2): the group splits into vectors of `modulo` lanes; lane j of a
// vector reads `data` from lane j - delta (up) or j + delta (down) of its vector, and where that
// falls outside the vector, `filling_data` from the lane it wraps around to. A modulo that is
// not 2, 4, 8, 16 or 32 (quads: 2 or 4) is undefined in Metal; here it is the whole group.
namespace kiln {
template <class T> struct same { typedef T type; };
KILN_HD unsigned fill_modulo(unsigned m, unsigned width) {
  return m == 2u || m == 4u || m == 8u || m == 16u || m == 32u ? (m > width ? width : m) : width;
}
template <class T> KILN_HD T shuffle_fill(T data, T fill, int delta, unsigned modulo) {
  unsigned mask = __activemask();
  const int m = static_cast<int>(modulo);
  const int lane = static_cast<int>(lane_id());
  const int base = lane - lane % m, j = lane % m + delta;
  const int src = base + ((j % m) + m) % m;
  const bool ok = (mask >> src) & 1u;
  T got_data = shfl(mask, data, ok ? src : lane);
  T got_fill = shfl(mask, fill, ok ? src : lane);
  if (!ok) return data;
  return j >= 0 && j < m ? got_data : got_fill;
}
}  // namespace kiln

namespace metal {
template <class T, class I> KILN_HD T simd_shuffle_and_fill_up(T data, typename kiln::same<T>::type fill, I delta) {
  return kiln::shuffle_fill(data, fill, -static_cast<int>(static_cast<unsigned>(delta)), 32u);
}
template <class T, class I, class M>
KILN_HD T simd_shuffle_and_fill_up(T data, typename kiln::same<T>::type fill, I delta, M modulo) {
  return kiln::shuffle_fill(data, fill, -static_cast<int>(static_cast<unsigned>(delta)),
                            kiln::fill_modulo(static_cast<unsigned>(modulo), 32u));
}
template <class T, class I> KILN_HD T simd_shuffle_and_fill_down(T data, typename kiln::same<T>::type fill, I delta) {
  return kiln::shuffle_fill(data, fill, static_cast<int>(static_cast<unsigned>(delta)), 32u);
}
template <class T, class I, class M>
KILN_HD T simd_shuffle_and_fill_down(T data, typename kiln::same<T>::type fill, I delta, M modulo) {
  return kiln::shuffle_fill(data, fill, static_cast<int>(static_cast<unsigned>(delta)),
                            kiln::fill_modulo(static_cast<unsigned>(modulo), 32u));
}

// Votes (MSL 6.9.2): bit i is lane i. all() and any() read the bits of the SIMD-group's 32 lanes,
// whichever lanes are active: simd_ballot(e).all() is true only when every lane was active and
// voted true.
struct simd_vote {
  typedef ulong vote_t;
  explicit constexpr KILN_HD simd_vote(vote_t bits = 0) : v(bits) {}
  explicit constexpr KILN_HD operator vote_t() const { return v; }
  constexpr KILN_HD bool all() const { return (v & 0xfffffffful) == 0xfffffffful; }
  constexpr KILN_HD bool any() const { return (v & 0xfffffffful) != 0; }
 private:
  vote_t v;
};
KILN_HD simd_vote simd_ballot(bool p) { return simd_vote(__ballot_sync(__activemask(), p)); }
KILN_HD simd_vote simd_active_threads_mask() { return simd_vote(__activemask()); }
KILN_HD bool simd_all(bool p) { return __all_sync(__activemask(), p); }
KILN_HD bool simd_any(bool p) { return __any_sync(__activemask(), p); }
KILN_HD bool simd_is_first() { return static_cast<int>(kiln::lane_id()) == __ffs(__activemask()) - 1; }
KILN_HD bool simd_is_helper_thread() { return false; }
}  // namespace metal

// Quad groups: 4 consecutive lanes (quad lane = lane % 4), with the same active-lane rules.
namespace kiln {
KILN_HD unsigned quad_base() { return lane_id() & ~3u; }
// The active lanes of the caller's quad, as bits of the SIMD-group.
KILN_HD unsigned quad_active(unsigned mask) { return mask & (0xfu << quad_base()); }
// Folds `op` over the active lanes of the caller's quad below SIMD lane `end`, in lane order;
// `none` when there are none.
template <class T, class Op> KILN_HD T quad_fold(T v, T none, unsigned end, Op op) {
  unsigned mask = __activemask();
  unsigned below = end >= 32u ? 0xffffffffu : ((1u << end) - 1u);
  T acc = none;
  bool have = false;
  for (unsigned l = quad_base(); l < quad_base() + 4u; ++l) {
    bool active = (mask >> l) & 1u;
    T x = shfl(mask, v, static_cast<int>(active ? l : lane_id()));
    if (!active || !((below >> l) & 1u)) continue;
    acc = have ? op(acc, x) : x;
    have = true;
  }
  return acc;
}
// Reads `v` from SIMD lane `src`, or keeps the caller's own value where `src` is not active.
template <class T> KILN_HD T quad_read(T v, int src) {
  unsigned mask = __activemask();
  bool ok = src >= 0 && ((mask >> src) & 1u);
  return shfl(mask, v, ok ? src : static_cast<int>(lane_id()));
}
}  // namespace kiln

namespace metal {
template <class T> KILN_HD T quad_sum(T v) { return kiln::quad_fold(v, v, 32u, kiln::Add()); }
template <class T> KILN_HD T quad_product(T v) { return kiln::quad_fold(v, v, 32u, kiln::Mul()); }
template <class T> KILN_HD T quad_max(T v) { return kiln::quad_fold(v, v, 32u, kiln::Max()); }
template <class T> KILN_HD T quad_min(T v) { return kiln::quad_fold(v, v, 32u, kiln::Min()); }
template <class T> KILN_HD T quad_and(T v) { return kiln::quad_fold(v, v, 32u, kiln::And()); }
template <class T> KILN_HD T quad_or(T v) { return kiln::quad_fold(v, v, 32u, kiln::Or()); }
template <class T> KILN_HD T quad_xor(T v) { return kiln::quad_fold(v, v, 32u, kiln::Xor()); }
template <class T> KILN_HD T quad_prefix_inclusive_sum(T v) { return kiln::quad_fold(v, T(0), kiln::lane_id() + 1u, kiln::Add()); }
template <class T> KILN_HD T quad_prefix_exclusive_sum(T v) { return kiln::quad_fold(v, T(0), kiln::lane_id(), kiln::Add()); }
template <class T> KILN_HD T quad_prefix_inclusive_product(T v) {
  return kiln::quad_fold(v, T(1), kiln::lane_id() + 1u, kiln::Mul());
}
template <class T> KILN_HD T quad_prefix_exclusive_product(T v) { return kiln::quad_fold(v, T(1), kiln::lane_id(), kiln::Mul()); }

template <class T, class I> KILN_HD T quad_shuffle(T v, I lane) {
  return kiln::quad_read(v, static_cast<int>(kiln::quad_base() | (static_cast<unsigned>(lane) & 3u)));
}
template <class T, class I> KILN_HD T quad_broadcast(T v, I lane) { return quad_shuffle(v, lane); }
template <class T, class I> KILN_HD T quad_shuffle_xor(T v, I m) {
  return kiln::quad_read(v, static_cast<int>(kiln::lane_id() ^ (static_cast<unsigned>(m) & 3u)));
}
template <class T, class I> KILN_HD T quad_shuffle_down(T v, I delta) {
  unsigned q = (kiln::lane_id() & 3u) + static_cast<unsigned>(delta);
  return kiln::quad_read(v, q < 4u ? static_cast<int>(kiln::quad_base() + q) : -1);
}
template <class T, class I> KILN_HD T quad_shuffle_up(T v, I delta) {
  int q = static_cast<int>(kiln::lane_id() & 3u) - static_cast<int>(delta);
  return kiln::quad_read(v, q >= 0 ? static_cast<int>(kiln::quad_base()) + q : -1);
}
template <class T, class I> KILN_HD T quad_shuffle_rotate_down(T v, I delta) {
  return kiln::quad_read(v, static_cast<int>(kiln::quad_base() + ((kiln::lane_id() + static_cast<unsigned>(delta)) & 3u)));
}
template <class T, class I> KILN_HD T quad_shuffle_rotate_up(T v, I delta) {
  return kiln::quad_read(v, static_cast<int>(kiln::quad_base() + ((kiln::lane_id() - static_cast<unsigned>(delta)) & 3u)));
}
template <class T> KILN_HD T quad_broadcast_first(T v) {
  unsigned mask = __activemask();
  return kiln::shfl(mask, v, __ffs(kiln::quad_active(mask)) - 1);
}
template <class T, class I> KILN_HD T quad_shuffle_and_fill_up(T data, typename kiln::same<T>::type fill, I delta) {
  return kiln::shuffle_fill(data, fill, -static_cast<int>(static_cast<unsigned>(delta)), 4u);
}
template <class T, class I, class M>
KILN_HD T quad_shuffle_and_fill_up(T data, typename kiln::same<T>::type fill, I delta, M modulo) {
  return kiln::shuffle_fill(data, fill, -static_cast<int>(static_cast<unsigned>(delta)),
                            kiln::fill_modulo(static_cast<unsigned>(modulo), 4u));
}
template <class T, class I> KILN_HD T quad_shuffle_and_fill_down(T data, typename kiln::same<T>::type fill, I delta) {
  return kiln::shuffle_fill(data, fill, static_cast<int>(static_cast<unsigned>(delta)), 4u);
}
template <class T, class I, class M>
KILN_HD T quad_shuffle_and_fill_down(T data, typename kiln::same<T>::type fill, I delta, M modulo) {
  return kiln::shuffle_fill(data, fill, static_cast<int>(static_cast<unsigned>(delta)),
                            kiln::fill_modulo(static_cast<unsigned>(modulo), 4u));
}

// Bit i is quad lane i; the constructor keeps the four bottom bits (MSL 6.9.3).
struct quad_vote {
  typedef unsigned vote_t;
  explicit constexpr KILN_HD quad_vote(vote_t bits = 0) : v(bits & 0xfu) {}
  explicit constexpr KILN_HD operator vote_t() const { return v; }
  constexpr KILN_HD bool all() const { return v == 0xfu; }
  constexpr KILN_HD bool any() const { return v != 0; }
 private:
  vote_t v;
};
KILN_HD quad_vote quad_ballot(bool p) { return quad_vote((__ballot_sync(__activemask(), p) >> kiln::quad_base()) & 0xfu); }
KILN_HD quad_vote quad_active_threads_mask() { return quad_vote((__activemask() >> kiln::quad_base()) & 0xfu); }
KILN_HD bool quad_all(bool p) {
  unsigned mask = __activemask();
  return (~__ballot_sync(mask, p) & kiln::quad_active(mask)) == 0u;
}
KILN_HD bool quad_any(bool p) {
  unsigned mask = __activemask();
  return (__ballot_sync(mask, p) & kiln::quad_active(mask)) != 0u;
}
KILN_HD bool quad_is_first() { return static_cast<int>(kiln::lane_id()) == __ffs(kiln::quad_active(__activemask())) - 1; }
KILN_HD bool quad_is_helper_thread() { return false; }
}  // namespace metal
