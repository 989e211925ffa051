// kiln CPU prelude, checked libraries only, after check.h: the entry points the compiler's
// thread-sanitizer instrumentation calls, and the exports the host arms, finishes and reads a
// checked launch through (`kiln_check_*`).
#pragma once

// ---- the instrumentation's entry points ---------------------------------------------------------
// Hidden: each checked library's instrumentation must reach its own sanitizer, never another
// loaded library's.
#undef KILN_NOSAN
#define KILN_NOSAN __attribute__((no_sanitize_thread, noinline, visibility("hidden")))
extern "C" {
#define KILN_TSAN_ACCESS(N)                                                                              \
  KILN_NOSAN void __tsan_read##N(void* p) { kiln::chk::access(p, N, false, false, __builtin_return_address(0)); } \
  KILN_NOSAN void __tsan_write##N(void* p) { kiln::chk::access(p, N, true, false, __builtin_return_address(0)); } \
  KILN_NOSAN void __tsan_unaligned_read##N(void* p) { kiln::chk::access(p, N, false, false, __builtin_return_address(0)); } \
  KILN_NOSAN void __tsan_unaligned_write##N(void* p) { kiln::chk::access(p, N, true, false, __builtin_return_address(0)); } \
  KILN_NOSAN void __tsan_volatile_read##N(void* p) { kiln::chk::access(p, N, false, false, __builtin_return_address(0)); } \
  KILN_NOSAN void __tsan_volatile_write##N(void* p) { kiln::chk::access(p, N, true, false, __builtin_return_address(0)); }
KILN_TSAN_ACCESS(1) KILN_TSAN_ACCESS(2) KILN_TSAN_ACCESS(4) KILN_TSAN_ACCESS(8) KILN_TSAN_ACCESS(16)
#undef KILN_TSAN_ACCESS
KILN_NOSAN void __tsan_read_range(void* p, unsigned long n) { kiln::chk::access(p, n, false, false, __builtin_return_address(0)); }
KILN_NOSAN void __tsan_write_range(void* p, unsigned long n) { kiln::chk::access(p, n, true, false, __builtin_return_address(0)); }
KILN_NOSAN void __tsan_func_entry(void*) {}
KILN_NOSAN void __tsan_func_exit() {}
KILN_NOSAN void __tsan_init() {}
KILN_NOSAN void __tsan_vptr_update(void**, void*) {}
KILN_NOSAN void __tsan_vptr_read(void**) {}
KILN_NOSAN void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
KILN_NOSAN void __tsan_atomic_signal_fence(int) {}

// Atomics: performed here (the instrumentation replaced them) and recorded as atomic accesses.
#define KILN_TSAN_ATOMIC(N, T)                                                                        \
  KILN_NOSAN T __tsan_atomic##N##_load(const volatile T* p, int) {                                     \
    kiln::chk::access((const void*)p, sizeof(T), false, true, __builtin_return_address(0));            \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                      \
  }                                                                                                   \
  KILN_NOSAN void __tsan_atomic##N##_store(volatile T* p, T v, int) {                                  \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_exchange(volatile T* p, T v, int) {                                  \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_add(volatile T* p, T v, int) {                                 \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);                                                \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_sub(volatile T* p, T v, int) {                                 \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);                                                \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_and(volatile T* p, T v, int) {                                 \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);                                                \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_or(volatile T* p, T v, int) {                                  \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);                                                 \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_xor(volatile T* p, T v, int) {                                 \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);                                                \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_fetch_nand(volatile T* p, T v, int) {                                \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_fetch_nand(p, v, __ATOMIC_SEQ_CST);                                               \
  }                                                                                                   \
  KILN_NOSAN int __tsan_atomic##N##_compare_exchange_strong(volatile T* p, T* e, T v, int, int) {      \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_compare_exchange_n(p, e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);           \
  }                                                                                                   \
  KILN_NOSAN int __tsan_atomic##N##_compare_exchange_weak(volatile T* p, T* e, T v, int, int) {        \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    return __atomic_compare_exchange_n(p, e, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
  }                                                                                                   \
  KILN_NOSAN T __tsan_atomic##N##_compare_exchange_val(volatile T* p, T e, T v, int, int) {            \
    kiln::chk::access((const void*)p, sizeof(T), true, true, __builtin_return_address(0));             \
    __atomic_compare_exchange_n(p, &e, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                 \
    return e;                                                                                         \
  }
KILN_TSAN_ATOMIC(8, unsigned char) KILN_TSAN_ATOMIC(16, unsigned short) KILN_TSAN_ATOMIC(32, unsigned int)
KILN_TSAN_ATOMIC(64, unsigned long long)
#undef KILN_TSAN_ATOMIC
}

// Arms the sanitizer for one launch run on the calling thread; the shadow of every tracked buffer
// starts empty. 0 ok, 1 out of memory.
extern "C" __attribute__((no_sanitize_thread, noinline, visibility("default"))) int kiln_check_arm(kiln::chk::Launch* l) {
  using namespace kiln::chk;
  State& s = g_state;
  s.l = l;
  s.cur = nullptr;
  s.n_last = 0;
  __builtin_memset(s.outside, 0xFF, sizeof s.outside);
  s.over_size = 0;
  s.n_over = 0;
  s.n_pend_dev = 0;
  s.n_pend_tg = 0;
  for (int i = 0; i < TG_SLOTS; ++i) s.tg[i].data = nullptr;
  s.n_tg_active = 0;
  s.poison_inactive = l->poison_inactive;
  s.reverse = l->schedule;
  private_reset();
  for (uint32_t i = 0; i < 32; ++i) {
    s.last_write[i] = 0;
    free(s.cells[i]);
    s.cells[i] = nullptr;
    if (i < l->n_buffers && (l->buffers[i].flags & TRACKED)) {
      s.cells[i] = (Cell*)calloc(l->buffers[i].len / l->buffers[i].granule + 1, sizeof(Cell));
      if (!s.cells[i]) return 1;
    }
  }
  g_armed = 1;
  return 0;
}

// Ends the launch: reads of device memory nobody wrote become findings. Returns how many
// findings the launch has.
extern "C" __attribute__((no_sanitize_thread, noinline, visibility("default"))) uint32_t kiln_check_finish(kiln::chk::Launch* l) {
  using namespace kiln::chk;
  g_armed = 1;
  settle_overwrite();
  settle(g_state.pend_dev, &g_state.n_pend_dev);
  return l->n_findings;
}

// Per granule of buffer `slot`: 0 never written, 1 written by one thread (or atomically), 2
// written by several threads without atomics. Returns the offset of the last store to it.
extern "C" __attribute__((no_sanitize_thread, noinline, visibility("default"))) uint32_t kiln_check_written(uint32_t slot, unsigned char* out, uint64_t n) {
  using namespace kiln::chk;
  if (slot >= 32) return 0;
  Cell* cells = g_state.cells[slot];
  for (uint64_t k = 0; k < n; ++k)
    out[k] = !cells || !(cells[k].flags & WRITTEN) ? 0 : (cells[k].flags & MULTI) ? 2 : 1;
  return g_state.last_write[slot];
}

// The latest access that covers `addr` (after a fault: the access that faulted), its instruction
// and whether it wrote (the thread is the fault message's); 0 when none does.
extern "C" __attribute__((no_sanitize_thread, noinline, visibility("default"))) int kiln_check_last(uint64_t addr, uint32_t* pc, uint32_t* tid, uint32_t* write) {
  const kiln::chk::State& s = kiln::chk::g_state;
  for (uint32_t k = 0; k < 64 && k < s.n_last; ++k) {
    const auto& l = s.last[(s.n_last - 1 - k) % 64];
    if (addr >= l.addr && addr < l.addr + (l.size ? l.size : 1)) {
      *pc = l.pc;
      *tid = l.tid;
      *write = l.wrote;
      return 1;
    }
  }
  return 0;
}
