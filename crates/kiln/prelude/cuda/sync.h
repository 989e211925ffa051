// kiln CUDA prelude: Metal barriers and atomics. `threadgroup_barrier` is a block barrier (it
// orders shared and global memory for the block, a superset of every Metal fence);
// `simdgroup_barrier` synchronises the active lanes of the warp. `atomic<T>` has the layout of
// `T`, so pointer casts such as `(device atomic_float*)out` keep working, and the generic-address
// atomics serve device and threadgroup memory alike.
#pragma once

namespace metal {
enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
KILN_HD constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return static_cast<mem_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

KILN_HD void threadgroup_barrier(mem_flags = mem_flags::mem_none) { __syncthreads(); }
}  // namespace metal
namespace kiln {
// A `threadgroup` array declared `= {0}`: the group's threads zero it together, then meet, so
// every thread reads zeros where nobody stored (the declaration stands where all threads run).
template <class T> KILN_HD void tg_zero(T& storage) {
  unsigned char* bytes = reinterpret_cast<unsigned char*>(&storage);
  const unsigned me = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned all = blockDim.x * blockDim.y * blockDim.z;
  for (unsigned i = me; i < sizeof(T); i += all) bytes[i] = 0;
  __syncthreads();
}
}  // namespace kiln
namespace metal {
KILN_HD void simdgroup_barrier(mem_flags flags = mem_flags::mem_none) {
  if (static_cast<unsigned>(flags) & static_cast<unsigned>(mem_flags::mem_device)) __threadfence();
  __syncwarp(__activemask());
}
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release, memory_order_acq_rel, memory_order_seq_cst };
// Metal 3.2's scopes. 3 is the system scope, which Apple's header leaves to programs (MLX's
// fence.metal casts __METAL_MEMORY_SCOPE_SYSTEM__ to it); the numbers are kiln's own.
enum thread_scope : int { thread_scope_threadgroup = 1, thread_scope_device = 2, thread_scope_simdgroup = 4, thread_scope_thread = 5 };

// A device-memory fence at system scope is also ordered against the host (mapped memory).
KILN_HD void atomic_thread_fence(mem_flags flags, memory_order = memory_order_seq_cst, thread_scope scope = thread_scope_device) {
  if (!(static_cast<unsigned>(flags) & static_cast<unsigned>(mem_flags::mem_device))) __threadfence_block();
  else if (static_cast<int>(scope) == 3) __threadfence_system();
  else __threadfence();
}

template <class T> struct atomic { T value; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

namespace detail {
template <class T> struct word;
template <> struct word<int> { typedef int type; };
template <> struct word<uint> { typedef unsigned type; };
template <> struct word<float> { typedef unsigned type; };
template <> struct word<ulong> { typedef unsigned long long type; };
template <> struct word<long> { typedef unsigned long long type; };

template <class T> KILN_HD T load(const volatile T* p) { return *p; }
}  // namespace detail

template <class T, class U>
KILN_HD void atomic_store_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  atomicExch(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T>
KILN_HD T atomic_load_explicit(const volatile atomic<T>* a, memory_order = memory_order_relaxed) {
  return detail::load(&a->value);
}
template <class T, class U>
KILN_HD T atomic_exchange_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicExch(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_add_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicAdd(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_sub_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicAdd(const_cast<T*>(&a->value), static_cast<T>(-static_cast<T>(v)));
}
template <class T, class U>
KILN_HD T atomic_fetch_and_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicAnd(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_or_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicOr(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_xor_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicXor(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_max_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicMax(const_cast<T*>(&a->value), static_cast<T>(v));
}
template <class T, class U>
KILN_HD T atomic_fetch_min_explicit(volatile atomic<T>* a, U v, memory_order = memory_order_relaxed) {
  return atomicMin(const_cast<T*>(&a->value), static_cast<T>(v));
}
// Float min/max through compare-and-swap on the bits.
template <class U>
KILN_HD float atomic_fetch_max_explicit(volatile atomic<float>* a, U v, memory_order = memory_order_relaxed) {
  unsigned* p = reinterpret_cast<unsigned*>(const_cast<float*>(&a->value));
  unsigned old = *p;
  while (__uint_as_float(old) < static_cast<float>(v) || __uint_as_float(old) != __uint_as_float(old)) {
    unsigned seen = atomicCAS(p, old, __float_as_uint(static_cast<float>(v)));
    if (seen == old) break;
    old = seen;
  }
  return __uint_as_float(old);
}
template <class U>
KILN_HD float atomic_fetch_min_explicit(volatile atomic<float>* a, U v, memory_order = memory_order_relaxed) {
  unsigned* p = reinterpret_cast<unsigned*>(const_cast<float*>(&a->value));
  unsigned old = *p;
  while (__uint_as_float(old) > static_cast<float>(v) || __uint_as_float(old) != __uint_as_float(old)) {
    unsigned seen = atomicCAS(p, old, __float_as_uint(static_cast<float>(v)));
    if (seen == old) break;
    old = seen;
  }
  return __uint_as_float(old);
}
template <class T, class U>
KILN_HD bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* a, T* expected, U desired,
                                                   memory_order = memory_order_relaxed,
                                                   memory_order = memory_order_relaxed) {
  typedef typename detail::word<T>::type W;
  W want, next;
  T d = static_cast<T>(desired);
  kiln::copy_bits(&want, expected, sizeof(W));
  kiln::copy_bits(&next, &d, sizeof(W));
  W seen = atomicCAS(reinterpret_cast<W*>(const_cast<T*>(&a->value)), want, next);
  if (seen == want) return true;
  kiln::copy_bits(expected, &seen, sizeof(W));
  return false;
}
template <class T, class U>
KILN_HD bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* a, T* expected, U desired,
                                                     memory_order s = memory_order_relaxed,
                                                     memory_order f = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, s, f);
}
}  // namespace metal
