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
template <class T, class I> KILN_HD T simd_shuffle_and_fill_down(T v, T fill, I delta) {
  unsigned src = kiln::lane_id() + static_cast<unsigned>(delta);
  T got = kiln::shfl(__activemask(), v, static_cast<int>(src & 31u));
  return src < 32u ? got : fill;
}
template <class T, class I> KILN_HD T simd_shuffle_and_fill_up(T v, T fill, I delta) {
  int src = static_cast<int>(kiln::lane_id()) - static_cast<int>(delta);
  T got = kiln::shfl(__activemask(), v, src & 31);
  return src >= 0 ? got : fill;
}

struct simd_vote {
  unsigned long long v;
  KILN_HD explicit operator unsigned long long() const { return v; }
  KILN_HD bool all() const { return static_cast<unsigned>(v) == __activemask(); }
  KILN_HD bool any() const { return v != 0; }
};
KILN_HD simd_vote simd_ballot(bool p) { return simd_vote{__ballot_sync(__activemask(), p)}; }
KILN_HD bool simd_all(bool p) { return __all_sync(__activemask(), p); }
KILN_HD bool simd_any(bool p) { return __any_sync(__activemask(), p); }
KILN_HD bool simd_is_first() { return static_cast<int>(kiln::lane_id()) == __ffs(__activemask()) - 1; }
KILN_HD bool simd_is_helper_thread() { return false; }

// Quad groups: 4 consecutive lanes.
template <class T> KILN_HD T quad_sum(T v) {
  unsigned mask = __activemask();
  unsigned base = kiln::lane_id() & ~3u;
  T acc = v;
  bool have = false;
  for (unsigned i = 0; i < 4; ++i) {
    if (!(mask & (1u << (base + i)))) continue;
    T x = kiln::shfl(mask, v, static_cast<int>(base + i));
    acc = have ? acc + x : x;
    have = true;
  }
  return acc;
}
template <class T> KILN_HD T quad_max(T v) {
  unsigned mask = __activemask();
  unsigned base = kiln::lane_id() & ~3u;
  T acc = v;
  for (unsigned i = 0; i < 4; ++i) {
    if (mask & (1u << (base + i))) acc = metal::max(acc, kiln::shfl(mask, v, static_cast<int>(base + i)));
  }
  return acc;
}
template <class T> KILN_HD T quad_min(T v) {
  unsigned mask = __activemask();
  unsigned base = kiln::lane_id() & ~3u;
  T acc = v;
  for (unsigned i = 0; i < 4; ++i) {
    if (mask & (1u << (base + i))) acc = metal::min(acc, kiln::shfl(mask, v, static_cast<int>(base + i)));
  }
  return acc;
}
template <class T, class I> KILN_HD T quad_shuffle(T v, I lane) {
  return kiln::shfl(__activemask(), v, static_cast<int>((kiln::lane_id() & ~3u) | (static_cast<unsigned>(lane) & 3u)));
}
template <class T, class I> KILN_HD T quad_broadcast(T v, I lane) { return quad_shuffle(v, lane); }
template <class T, class I> KILN_HD T quad_shuffle_xor(T v, I m) {
  return kiln::shfl(__activemask(), v, static_cast<int>(kiln::lane_id() ^ (static_cast<unsigned>(m) & 3u)));
}
template <class T, class I> KILN_HD T quad_shuffle_down(T v, I delta) {
  unsigned mask = __activemask();
  unsigned q = (kiln::lane_id() & 3u) + static_cast<unsigned>(delta);
  unsigned src = kiln::lane_id() + static_cast<unsigned>(delta);
  bool ok = q < 4u && ((mask >> src) & 1u);
  return kiln::shfl(mask, v, static_cast<int>(ok ? src : kiln::lane_id()));
}
template <class T, class I> KILN_HD T quad_shuffle_up(T v, I delta) {
  unsigned mask = __activemask();
  int q = static_cast<int>(kiln::lane_id() & 3u) - static_cast<int>(delta);
  int src = static_cast<int>(kiln::lane_id()) - static_cast<int>(delta);
  bool ok = q >= 0 && ((mask >> src) & 1u);
  return kiln::shfl(mask, v, ok ? src : static_cast<int>(kiln::lane_id()));
}
}  // namespace metal
