// kiln CPU prelude, part 2: the threadgroup emulator. One call runs a range of threadgroups on
// the calling OS thread. A group's threads run either as a plain loop (kernels without barriers
// or collectives) or as cooperative fibers (one stack each) scheduled round-robin:
// a barrier releases when every live thread waits at one; a SIMD collective resolves, per
// simdgroup, once no thread can run, for the lanes that execute that call together
// (convergence.h; lanes that returned or took the other branch do not take part).
// Deterministic by construction.
#pragma once

namespace kiln { namespace rt {

struct Cancelled {};

// A suspended fiber: its saved stack pointer (what resuming it needs lies on its stack), or a
// ucontext where no hand-written switch exists.
#if KILN_FAST_FIBERS
struct FiberCtx { void* sp; };
#if defined(__x86_64__)
// Pushes the frame pointer and where to resume, stores the stack pointer to `from`, and jumps
// to the address saved on `to`'s stack. Inlined, so each place that suspends has a jump of its
// own: the fibers of a group pass the same places in turn and the branch predictor learns
// where each goes (a `ret` is predicted from the calls of the fiber switched away from). The
// other registers are declared clobbered: the compiler keeps what is live on the fiber's own
// stack. The red zone below the stack pointer is stepped over. MXCSR and the x87 control word
// are not saved: every fiber runs kernel code that never changes them.
// A compiler whose target has AVX-512 may keep values in xmm16-31 and the mask registers too.
#if defined(__AVX512F__)
#define KILN_AVX512_CLOBBERS                                                                              \
  , "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", \
      "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k1", "k2", "k3", "k4", "k5", "k6", "k7"
#else
#define KILN_AVX512_CLOBBERS
#endif
__attribute__((always_inline)) inline void fiber_switch(FiberCtx& from, FiberCtx& to) {
  void** save = &from.sp;
  void* next = to.sp;
  __asm__ volatile(
      "leaq -128(%%rsp), %%rsp\n\t"
      "pushq %%rbp\n\t"
      "leaq 1f(%%rip), %%rax\n\t"
      "pushq %%rax\n\t"
      "movq %%rsp, (%0)\n\t"
      "movq %1, %%rsp\n\t"
      "popq %%rax\n\t"
      "jmpq *%%rax\n"
      "1:\n\t"
      "popq %%rbp\n\t"
      "leaq 128(%%rsp), %%rsp"
      : "+D"(save), "+S"(next)
      :
      : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory", "cc",
        "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "st", "st(1)", "st(2)", "st(3)", "st(4)", "st(5)", "st(6)", "st(7)",
        "mm0", "mm1", "mm2", "mm3", "mm4", "mm5", "mm6", "mm7" KILN_AVX512_CLOBBERS);
}
#undef KILN_AVX512_CLOBBERS
#else
extern "C" void kiln_fiber_switch(void** save_sp, void* to_sp) __asm__("kiln_fiber_switch");
inline void fiber_switch(FiberCtx& from, FiberCtx& to) { kiln_fiber_switch(&from.sp, to.sp); }
#endif
#else
struct FiberCtx { ucontext_t uc; };
inline void fiber_switch(FiberCtx& from, FiberCtx& to) { swapcontext(&from.uc, &to.uc); }
#endif
struct Fault { const char* msg; };

enum State { RUNNABLE = 0, AT_BARRIER = 1, AT_COLLECTIVE = 2, DONE = 3 };
const int SLOT_BYTES = 32;
// The most loops and calls a SIMD-group function may be nested in (see convergence.h).
const uint32_t POSITION_DEPTH = 32;

// The builtin values of one emulated thread, under their Metal names (what an entry's wrapper
// passes to the kernel). A barrier-free kernel's direct loop (`run_direct`) computes them into a
// `Lane` kept in registers; a `Thread` record holds them beside its fiber's state.
struct Lane {
  uint3 thread_position_in_grid, threadgroup_position_in_grid, thread_position_in_threadgroup;
  uint3 threads_per_threadgroup, dispatch_threads_per_threadgroup, threadgroups_per_grid;
  uint3 threads_per_grid, grid_size, grid_origin;
  uint thread_index_in_threadgroup, simdgroup_index_in_threadgroup, thread_index_in_simdgroup;
  uint threads_per_simdgroup, thread_execution_width, simdgroups_per_threadgroup;
  uint dispatch_simdgroups_per_threadgroup, quadgroup_index_in_threadgroup, thread_index_in_quadgroup;
  uint quadgroups_per_threadgroup, dispatch_quadgroups_per_threadgroup;
};

// A thread's scheduling state, first in its record: a fiber switch and the scheduler's scans
// read one cache line of it.
struct FiberState {
  int state;
  bool started;
  // The enclosing loops and calls that lead to SIMD-group functions (`Thread::path`).
  uint32_t depth;
  FiberCtx ctx;
  void* stack;
  const void* site;
  // The source call site of the next collective, set by the lowering's site tags.
  const void* pending_site;
  // A thread run as a coroutine: its frame, and which pass of a SIMD-group function call it is
  // in (`CoPhase`).
  void* co_frame;
  int co_phase;
  // Bytes at `co_frame` the scheduler set aside before the frame was made (0: none).
  uint32_t co_room;
};

struct alignas(64) Thread : FiberState, Lane {
  alignas(16) unsigned char slot[SLOT_BYTES];
  // The enclosing loops and calls that lead to SIMD-group functions, outermost first.
  uint64_t path[POSITION_DEPTH];
};

typedef void (*Body)(Thread&, void* const* buffers, void* const* tg_mem);
// Resumes a coroutine thread's frame (null for kernels whose threads are fibers or a loop).
typedef void (*CoResume)(void* frame);
// A coroutine thread's SIMD-group function call runs twice: once to post its value (the thread
// then suspends until the call resolves), once to read the resolved lanes.
enum CoPhase { CO_NONE = 0, CO_POST = 1, CO_RESUME = 2 };

struct Alloc { const void* key; void* mem; };

struct TgArena;

// A SIMD-group reduction's result, shared by the lanes of one call (simd.h, `kiln_reduce`).
struct Folded {
  const void* key;
  alignas(16) unsigned char value[SLOT_BYTES];
};

struct Group {
  Thread* threads;
  int n;
  Body body;
  void* const* buffers;
  void* tg_mem[16];
  Alloc allocs[64];
  int nallocs;
  // Where the group's threadgroup arrays live (see threadgroup.h), and whether guards also
  // catch reads.
  TgArena* arena;
  bool checked;
  char tg_fault_text[256];
  FiberCtx sched;
  // The thread running (null in a direct loop), the launch's cancel flag and how many threads
  // wait at a SIMD-group function.
  Thread* running;
  const volatile int* cancel;
  int at_collective;
  int aborted;  // 0 running, 1 cancelled, 2 fault
  const char* fault;
  // Per simdgroup: which lanes took part in the last resolved collective and their values.
  unsigned active[32];
  alignas(16) unsigned char snap[32][32][SLOT_BYTES];
  // Per simdgroup: the value of a reduction over the last resolved collective's lanes, once a
  // lane has computed it (`key` names the reduction; null until then).
  Folded folded[32];
  // What a coroutine thread's posting pass folds into (its result is not used).
  Folded co_scratch;
  // While `run_direct` runs the group: its position in the grid and the position in the group
  // of the thread running (for fault messages and kernel logs; no `Thread` is written), or in a
  // chunked loop the first thread of the span running and the span's end in x (`[3]`, else 0).
  bool direct;
  uint3 direct_gid, direct_base;
  volatile uint direct_at[4];
};

// The group running on this OS thread (its running thread is `Group::running`). Code on the
// scheduler's side and cold paths read it; a kernel's own calls find their thread through their
// fiber's header instead (below): a TLS lookup in a dlopen'ed library is a call, repeated after
// every fiber switch. One definition per kernel library (in scheduler.h, which may come as a
// separate object linked in), hidden so that no other library's copy stands in for it.
struct Current {
  Group* group;
  const volatile int* cancel;
  Thread* thread() const { return group ? group->running : nullptr; }
};
extern __thread Current g_cur __attribute__((visibility("hidden"), tls_model("local-dynamic")));

// Whether this library's kernels run their threads as fibers: then every thread runs on a fiber
// stack, and its code may read the fiber's header. Set by `run_groups` from its `cooperative`
// argument, the same for every call of a library, before any of its threads runs.
extern bool g_cooperative_library __attribute__((visibility("hidden")));

// Each fiber stack fills a block of STACK_BYTES aligned to its size (scheduler.h maps them). Its
// frames start under a header naming the fiber's thread, found from the stack pointer alone;
// the header's place varies with the block's address so that the fibers' hot frames spread
// over the L1's sets.
const size_t STACK_BYTES = 256 * 1024;
struct FiberHeader {
  Thread* thread;
  Group* group;
  const volatile int* cancel;
};
inline FiberHeader* fiber_header_of(uintptr_t sp) {
  const uintptr_t block = sp & ~(uintptr_t)(STACK_BYTES - 1), k = block / STACK_BYTES;
  return (FiberHeader*)(block + STACK_BYTES - 64 * (1 + ((k ^ (k >> 1)) & 63)));
}
__attribute__((always_inline)) inline uintptr_t stack_pointer() {
  uintptr_t sp;
#if defined(__x86_64__)
  __asm__("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  __asm__("mov %0, sp" : "=r"(sp));
#else
  sp = (uintptr_t)__builtin_frame_address(0);
#endif
  return sp;
}

// The running thread, its group and the cancel flag, as the kernel's code sees them: from the
// fiber's header in a cooperative library, else (threads run on the OS thread's stack) from
// `g_cur`.
__attribute__((always_inline)) inline FiberHeader here() {
  if (__atomic_load_n(&g_cooperative_library, __ATOMIC_RELAXED)) return *fiber_header_of(stack_pointer());
  const Current& c = g_cur;
  return FiberHeader{c.thread(), c.group, c.cancel};
}

inline void poll(const volatile int* cancel) {
  if (__builtin_expect(*cancel != 0, 0)) throw Cancelled();
}
// Where this OS thread's launch keeps its cancel flag (`&g_cur.cancel`), out of line and
// declared `const`: the compiler may take one call's result for every call in a function (a
// group never leaves its OS thread), so a loop looks TLS up once, not again after every call it
// makes (a libm function's) as it would with `g_cur` inline. Defined with the scheduler.
__attribute__((noinline, const, visibility("hidden"))) const volatile int* const* cancel_slot() noexcept;

// The poll of every loop iteration, through `cancel_slot` (where `here()` would branch on the
// library's kind in the loop and look up TLS in it).
inline void poll() { poll(*cancel_slot()); }

// Starts loading what switching to `u` will read: its record and the top of its saved stack.
inline void prefetch_fiber(const Thread* u) {
  __builtin_prefetch(u);
#if KILN_FAST_FIBERS
  const char* sp = (const char*)u->ctx.sp;
  __builtin_prefetch(sp);
  __builtin_prefetch(sp + 64);
  __builtin_prefetch(sp + 128);
#endif
}

// Leaves the current fiber for the next runnable thread of the group in index order, or the
// scheduler when there is none: the same order a scheduler loop would give, with half the
// switches.
__attribute__((always_inline)) inline void switch_away(Group* g, Thread* t) {
  bool direct = !g->aborted;
#if KILN_CHECKED
  // The sanitizer's schedule that lets SIMD-groups run ahead picks the next thread itself.
  direct = direct && !kiln::chk::run_ahead();
#endif
  if (direct) {
    for (Thread *u = t + 1, *end = g->threads + g->n; u < end; ++u) {
      if (u->state != RUNNABLE) continue;
      // The thread after `u` most often runs after it.
      if (u + 1 < end) prefetch_fiber(u + 1);
      g->running = u;
      u->started = true;
      fiber_switch(t->ctx, u->ctx);
      return;
    }
  }
  fiber_switch(t->ctx, g->sched);
}

// Suspends the current fiber. A fiber resumed after the group aborted unwinds (its
// destructors run) instead of continuing.
__attribute__((always_inline)) inline void yield_to_scheduler(const FiberHeader& h) {
  switch_away(h.group, h.thread);
  if (__builtin_expect(h.group->aborted != 0, 0)) throw Cancelled();
  poll(h.cancel);
}

__attribute__((always_inline)) inline void barrier() {
  const FiberHeader h = here();
  if (!h.thread || !h.thread->stack) throw Fault{"a barrier ran in a kernel compiled without cooperative threads"};
  poll(h.cancel);
  h.thread->state = AT_BARRIER;
  yield_to_scheduler(h);
}

// What a lane sees after a collective resolves: the values of the active lanes of its
// simdgroup (lane-indexed), the mask of those lanes and their shared reduction result.
struct View {
  const unsigned char (*vals)[SLOT_BYTES];
  unsigned mask;
  uint lane;
  Folded* folded;
  template <class T> T at(uint l) const {
    T v;
    __builtin_memcpy(&v, vals[l], sizeof(T));
    return v;
  }
  bool has(uint l) const { return l < 32 && ((mask >> l) & 1u); }
};

// Posts `bytes` and blocks until the collective at `site` resolves. The lowering tags every
// collective call in the kernel's source with its call site (`pending_site`, see convergence.h),
// so lanes that reach one source call through code the optimiser duplicated still meet;
// untagged calls fall back to the out-of-line function's return address. Defined once per
// library, with the scheduler (scheduler.h), so kernels do not compile it again.
__attribute__((noinline, visibility("hidden"))) View post_bytes(const void* bytes, unsigned size, const void* site);

// Room for the frame (of `bytes`) of coroutine thread `t` of the running group, from the
// group's arena: the room the scheduler set aside for it when that fits, else (the group's first
// frame) the arena made for all; null when a frame would pass a fiber stack's size (the fault
// names the size). Defined with the scheduler.
__attribute__((visibility("hidden"))) void* co_frame_make(size_t bytes, Thread* t) noexcept;
inline void* co_frame_alloc(size_t bytes, Thread* t) noexcept {
  if (__builtin_expect(t != nullptr && bytes <= t->co_room, 1)) return t->co_frame;
  return co_frame_make(bytes, t);
}

template <class T> __attribute__((always_inline)) inline View post(const T& v, const void* site) {
  static_assert(sizeof(T) <= SLOT_BYTES, "SIMD collective on a value larger than 32 bytes");
  return post_bytes(&v, sizeof(T), site);
}

// The builtins every thread of a group of `size` (the dispatch's threadgroup `tg`, `groups`
// groups over `grid` threads) has alike, written into a `Thread` or a `Lane`.
inline void set_group_builtins(Lane& t, uint3 size, uint3 tg, uint3 groups, uint3 grid) {
  const uint n = size.x * size.y * size.z, nd = tg.x * tg.y * tg.z;
  t.threads_per_threadgroup = size;
  t.dispatch_threads_per_threadgroup = tg;
  t.threadgroups_per_grid = groups;
  t.threads_per_grid = grid;
  t.grid_size = grid;
  t.grid_origin = uint3(0u);
  t.threads_per_simdgroup = 32;
  t.thread_execution_width = 32;
  t.simdgroups_per_threadgroup = (n + 31) / 32;
  t.dispatch_simdgroups_per_threadgroup = (nd + 31) / 32;
  t.quadgroups_per_threadgroup = (n + 3) / 4;
  t.dispatch_quadgroups_per_threadgroup = (nd + 3) / 4;
}

// One group as the scheduler hands it to an entry's direct loop: its position, its (possibly
// partial) size, the dispatch's threadgroup and grid sizes and the group count.
struct GroupShape {
  uint3 gid, size, tg, grid, groups;
};
typedef void (*DirectFn)(Group& g, const GroupShape& s);

// The builtins of the group's `index`-th thread that follow from its index alone.
__attribute__((always_inline)) inline void set_index_builtins(Lane& t, uint index) {
  t.thread_index_in_threadgroup = index;
  t.simdgroup_index_in_threadgroup = index / 32;
  t.thread_index_in_simdgroup = index % 32;
  t.quadgroup_index_in_threadgroup = index / 4;
  t.thread_index_in_quadgroup = index % 4;
}

// The builtins of the thread at `local` in its group and `global` in the grid, the group's
// `index`-th, written into a direct loop's `Lane`.
__attribute__((always_inline)) inline void set_thread_builtins(Lane& t, uint3 local, uint3 global, uint index) {
  t.thread_position_in_threadgroup = local;
  t.thread_position_in_grid = global;
  set_index_builtins(t, index);
}

// Called in a handler: the exception being handled stops the group (unless it stopped already):
// a cancellation, a fault with its message, or any other exception of the kernel's.
inline void abort_for_current(Group& g) {
  try {
    throw;
  } catch (const Cancelled&) {
    if (!g.aborted) g.aborted = 1;
  } catch (const Fault& f) {
    if (!g.aborted) { g.aborted = 2; g.fault = f.msg; }
  } catch (...) {
    if (!g.aborted) { g.aborted = 2; g.fault = "the kernel threw an exception"; }
  }
}

// Runs every thread of a group of a barrier-free kernel in index order (x fastest), `body`
// inlined into the loop: the builtins are computed, not stored per thread. The cancel flag is
// polled every 32 threads of a row (the kernel's own loops poll too); a thrown fault or
// cancellation stops the group as `run_one` does. Always inlined: the entry's direct loop,
// compiled with other options than the prelude (see emit.rs), inlines `body` only then.
//
// `Chunked`: the group's position (`Group::direct_at`) is stored once per 32 threads of a row,
// naming the row's span of them (`direct_at[3]` its end), and the threads of a span run in a
// loop over the grid position itself, which cannot wrap (it stays below the span's end), so
// that the compiler may run consecutive threads as the lanes of vector instructions. A fault
// there names the span; the scheduler runs the group again thread by thread to name the thread
// (`run_groups_guarded`). Kernels that log or take atomics run unchunked (emit.rs).
template <bool Chunked, class F>
__attribute__((always_inline)) inline void run_direct(Group& g, const GroupShape& s, F body) {
  const volatile int* const cancel = g.cancel;
  Lane t;
  t.threadgroup_position_in_grid = s.gid;
  set_group_builtins(t, s.size, s.tg, s.groups, s.grid);
  const uint bx = s.gid.x * s.tg.x, by = s.gid.y * s.tg.y, bz = s.gid.z * s.tg.z;
  g.direct_gid = s.gid;
  g.direct_base = uint3(bx, by, bz);
  volatile uint* const at = g.direct_at;
  at[0] = at[1] = at[2] = at[3] = 0;
  // From here a fault names the thread at `at` (see abandon_group, a signal handler).
  g.direct = true;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  try {
    uint i = 0;
    for (uint z = 0; z < s.size.z; ++z) {
      for (uint y = 0; y < s.size.y; ++y) {
        at[1] = y;
        at[2] = z;
        for (uint x0 = 0; x0 < s.size.x; x0 += 32) {
          if (*cancel) return;
          const uint x1 = s.size.x - x0 < 32 ? s.size.x : x0 + 32;
          if (Chunked) {
            at[0] = x0;
            at[3] = x1;
            const uint i0 = i - x0, gy = by + y, gz = bz + z, end = bx + x1;
            for (uint gx = bx + x0; gx < end; ++gx) {
              const uint x = gx - bx;
              set_thread_builtins(t, uint3(x, y, z), uint3(gx, gy, gz), i0 + x);
              body(t);
            }
            i += x1 - x0;
            continue;
          }
          for (uint x = x0; x < x1; ++x, ++i) {
            at[0] = x;
            set_thread_builtins(t, uint3(x, y, z), uint3(bx + x, by + y, bz + z), i);
            body(t);
          }
        }
      }
    }
  } catch (...) {
    abort_for_current(g);
  }
}

// ---- region loops ----------------------------------------------------------------------------
// A kernel whose barriers all stand at the top level of its body also has a region form
// (lowering `regions`): `<kernel>_kiln_regions<R>` runs region R (the statements between two
// barriers) of one thread, and the entry's region driver (emit.rs) runs each region for every
// thread of the group in index order, through `run_direct`, before the next. Its setup call
// (R = -1) reports the size of the thread's record of variables kept across barriers and opens
// the group's threadgroup storage once; the records and each thread's "returned" flag live in
// the lent stack set's arena, kept between groups and calls.
struct RegionState {
  size_t record;
  void* uniform[64];
};
struct RegionArgs {
  Group* group;
  char* base;
  unsigned char* done;
  void* const* uniform;
  RegionState* setup;
  uint index;
  void finish() const { done[index] = 1; }
  bool finished() const { return done[index] != 0; }
  RegionArgs at(uint i) const {
    RegionArgs a = *this;
    a.index = i;
    return a;
  }
};

// Room for the records of `n` threads of `record` bytes each and their flags, from the lent
// stack set's arena: null, with `*fault` set, when a record would pass what a coroutine
// thread's frame may take or the room cannot be had. Defined with the scheduler.
__attribute__((visibility("hidden"))) char* region_room(size_t record, size_t n, const char** fault) noexcept;

// The group's setup: `setup` runs the region form's setup call; then the records and flags of
// the group's threads are set aside. False (the group stopped, its fault set) when that fails.
template <class F> inline bool region_setup(Group& g, const GroupShape& s, RegionState& st, RegionArgs& ra, F setup) {
  const size_t n = (size_t)s.size.x * s.size.y * s.size.z;
  try {
    Lane t{};
    set_group_builtins(t, s.size, s.tg, s.groups, s.grid);
    t.threadgroup_position_in_grid = s.gid;
    setup(t);
  } catch (...) {
    abort_for_current(g);
    return false;
  }
  const char* fault = nullptr;
  char* room = region_room(st.record, n, &fault);
  if (!room) {
    g.aborted = 2;
    g.fault = fault;
    return false;
  }
  ra.base = room;
  ra.done = (unsigned char*)room + st.record * n;
  __builtin_memset(ra.done, 0, n);
  for (size_t i = 0; i < n; ++i) g.threads[i].state = RUNNABLE;
  g.at_collective = 0;
  return true;
}

// A SIMD-group function call between two regions: each thread that reaches it posts its value
// at the end of the first (`region_post` runs the call as a coroutine thread's posting pass
// does), the driver resolves each SIMD-group over the lanes that posted (`region_resolve`), and
// the thread reads the result at the start of the next (`region_read`, the reading pass). The
// lanes are those the fibers would combine: the SIMD-group's live lanes that reached the call
// (the others wait at a later barrier or call, or returned). Reductions post and fold without
// the call (simd.h, `region_reduce`).
// `call()` with thread `t` in pass `phase` of a SIMD-group call (`CoPhase`), out of it after.
template <class F> inline auto in_phase(Thread& t, int phase, F call) {
  struct Reset {
    Thread& t;
    ~Reset() { t.co_phase = CO_NONE; }
  } reset{t};
  t.co_phase = phase;
  return call();
}
template <class F> inline void region_post(const RegionArgs& ra, F call) {
  Group& g = *ra.group;
  Thread& t = g.threads[ra.index];
  set_index_builtins(t, ra.index);
  g.running = &t;
  in_phase(t, CO_POST, call);
}
template <class F> inline auto region_read(const RegionArgs& ra, F call) {
  Group& g = *ra.group;
  Thread& t = g.threads[ra.index];
  g.running = &t;
  return in_phase(t, CO_RESUME, call);
}
inline void region_resolve(Group& g) {
  for (int base = 0; base < g.n; base += 32) {
    const int end = base + 32 < g.n ? base + 32 : g.n, sg = base / 32;
    unsigned mask = 0;
    for (int i = base; i < end; ++i) {
      Thread& t = g.threads[i];
      if (t.state != AT_COLLECTIVE) continue;
      mask |= 1u << (i - base);
      __builtin_memcpy(g.snap[sg][i - base], t.slot, SLOT_BYTES);
      t.state = RUNNABLE;
    }
    g.active[sg] = mask;
    g.folded[sg].key = nullptr;
  }
  g.at_collective = 0;
  g.running = nullptr;
}

// Builtin values convert to the declared parameter type (uint, uint2, uint3, ushort, ...).
struct BuiltinArg {
  uint3 v;
  template <class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type>
  operator U() const { return U(v.x); }
  template <class U> operator vec<U, 2>() const { return vec<U, 2>(U(v.x), U(v.y)); }
  template <class U> operator vec<U, 3>() const { return vec<U, 3>(U(v.x), U(v.y), U(v.z)); }
};
inline BuiltinArg builtin(uint3 v) { return BuiltinArg{v}; }
inline BuiltinArg builtin(uint v) { return BuiltinArg{uint3(v, 0u, 0u)}; }

// Buffer arguments convert to whatever pointer or reference type the kernel declares.
struct PtrArg {
  void* p;
  template <class P> operator P*() const { return (P*)p; }
};
struct RefArg {
  void* p;
  template <class R> operator R&() const { return *(R*)p; }
};

}  // namespace rt
}  // namespace kiln

// ---- barriers -------------------------------------------------------------------------------
namespace metal {
enum class mem_flags : uint {
  mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
  mem_threadgroup_imageblock = 8, mem_object_data = 16
};
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint(a) | uint(b)); }
// Every thread of the group runs on one OS thread, so any barrier also orders all memory; the
// sanitizer orders only the memory the flags name.
#if KILN_CHECKED
// Out of line, so its return address names the kernel's barrier.
__attribute__((noinline)) inline void threadgroup_barrier(mem_flags flags = mem_flags::mem_none) {
  kiln::chk::barrier_enter(__builtin_return_address(0), uint(flags));
  kiln::rt::barrier();
  kiln::chk::barrier_leave(uint(flags));
}
#else
// Inlined: the switch after each barrier of the kernel then has a jump (and a prediction) of
// its own, and no return follows it.
__attribute__((always_inline)) inline void threadgroup_barrier(mem_flags = mem_flags::mem_none) { kiln::rt::barrier(); }
#endif
__attribute__((noinline)) inline void simdgroup_barrier(mem_flags = mem_flags::mem_none) {
  char none = 0;
  kiln::rt::post(none, __builtin_return_address(0));
}
}  // namespace metal

// ---- threads as stackless coroutines ---------------------------------------------------------
// A kernel whose barriers and SIMD-group function calls all lie in the kernel function itself
// (not in a function it calls or a lambda) may run its threads as C++ coroutines instead of
// fibers: the lowering makes the function return `CoThread`, its `return`s `co_return`, and
// each barrier and SIMD-group call a `co_await` (the KILN_CO_ macros, defined by the unit).
// The scheduler resumes each runnable thread in index order, as it switches fibers, so results
// are the fibers' bit for bit; a suspension is a return to the scheduler, not a stack switch,
// and only what lives across it is kept, in the thread's frame.
#if KILN_COROUTINES
namespace kiln { namespace rt {
// The last parameter of a coroutine kernel: the thread it runs (for its frame and promise).
struct CoArgs {
  Thread* thread;
};
inline Thread* co_pick(const CoArgs& a, Thread*) { return a.thread; }
template <class T> inline Thread* co_pick(const T&, Thread* t) { return t; }
template <class... A> inline Thread* co_thread_of(const A&... a) {
  Thread* t = nullptr;
  ((t = co_pick(a, t)), ...);
  return t;
}
struct CoThread {
  struct promise_type {
    Thread* thread;
    template <class... A> explicit promise_type(const A&... a) : thread(co_thread_of(a...)) {}
    CoThread get_return_object() noexcept {
      return CoThread{std::coroutine_handle<promise_type>::from_promise(*this).address()};
    }
    static CoThread get_return_object_on_allocation_failure() noexcept { return CoThread{nullptr}; }
    template <class... A> static void* operator new(size_t bytes, const A&... a) noexcept {
      return co_frame_alloc(bytes, co_thread_of(a...));
    }
    static void operator delete(void*) noexcept {}
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct Final {
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) const noexcept { h.promise().thread->state = DONE; }
      void await_resume() const noexcept {}
    };
    Final final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // Faults and cancellation leave the frame for the scheduler, which abandons the group.
    void unhandled_exception() { throw; }
  };
  void* frame;
};
typedef std::coroutine_handle<CoThread::promise_type> CoHandle;
inline void co_resume(void* frame) { CoHandle::from_address(frame).resume(); }

// A barrier: the thread waits until every live thread of the group waits at one.
struct CoBarrier {
  bool await_ready() const noexcept { return false; }
  void await_suspend(CoHandle h) const noexcept { h.promise().thread->state = AT_BARRIER; }
  void await_resume() const noexcept {}
};
template <class... A> inline CoBarrier co_barrier(A&&...) { return CoBarrier{}; }

// A SIMD-group function call `f()` (its arguments bound): the posting pass runs it to post the
// thread's value (`post_bytes` then returns without waiting), the thread suspends until the
// call resolves, and the reading pass runs it again on the resolved lanes.
template <class F> struct CoStep {
  F f;
  Thread* t;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(CoHandle h) {
    t = h.promise().thread;
    t->co_phase = CO_POST;
    f();
    t->co_phase = CO_NONE;
    return t->state != RUNNABLE;
  }
  auto await_resume() { return in_phase(*t, CO_RESUME, f); }
};
// `co_call(f)(args...)`: the arguments are evaluated once, before the thread suspends.
template <class F> struct CoCall {
  F f;
  template <class... A> auto operator()(A... a) const {
    auto bound = [f = f, a...]() { return f(a...); };
    return CoStep<decltype(bound)>{bound, nullptr};
  }
};
template <class F> inline CoCall<F> co_call(F f) { return CoCall<F>{f}; }
}  // namespace rt
}  // namespace kiln
#endif

// ---- atomics ----------------------------------------------------------------------------------
namespace metal {
enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED, memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE, memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST
};
// Metal 3.2's scopes. 3 is the system scope, which Apple's header leaves to programs (MLX's
// fence.metal casts __METAL_MEMORY_SCOPE_SYSTEM__ to it); the numbers are kiln's own.
enum thread_scope : int { thread_scope_threadgroup = 1, thread_scope_device = 2, thread_scope_simdgroup = 4, thread_scope_thread = 5 };
// Every thread of a CPU dispatch shares the host's memory: one fence orders them at any scope.
inline void atomic_thread_fence(mem_flags, memory_order order = memory_order_seq_cst, thread_scope = thread_scope_device) {
  __atomic_thread_fence(order);
}
template <class T> struct atomic { T v; };
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

namespace atomic_detail {
template <int S> struct bits_of;
template <> struct bits_of<1> { typedef unsigned char type; };
template <> struct bits_of<2> { typedef unsigned short type; };
template <> struct bits_of<4> { typedef unsigned int type; };
template <> struct bits_of<8> { typedef unsigned long type; };
// Read-modify-write through a compare-exchange loop on the bit pattern (covers float).
template <class T, class F> inline T rmw(volatile atomic<T>* o, F f) {
  typedef typename bits_of<sizeof(T)>::type B;
  B* p = (B*)&o->v;
  B old = __atomic_load_n(p, __ATOMIC_RELAXED);
  for (;;) {
    T cur = as_type<T>(old);
    B next = as_type<B>(T(f(cur)));
    if (__atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return cur;
  }
}
}  // namespace atomic_detail

template <class T> inline T atomic_load_explicit(const volatile atomic<T>* o, memory_order = memory_order_relaxed) {
  typedef typename atomic_detail::bits_of<sizeof(T)>::type B;
  return as_type<T>(__atomic_load_n((const volatile B*)&o->v, __ATOMIC_SEQ_CST));
}
template <class T, class U> inline void atomic_store_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  typedef typename atomic_detail::bits_of<sizeof(T)>::type B;
  __atomic_store_n((volatile B*)&o->v, as_type<B>(T(v)), __ATOMIC_SEQ_CST);
}
template <class T, class U> inline T atomic_exchange_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) {
  T nv = T(v);
  return atomic_detail::rmw(o, [nv](T) { return nv; });
}
template <class T, class U>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* o, T* expected, U desired,
                                                  memory_order = memory_order_relaxed, memory_order = memory_order_relaxed) {
  typedef typename atomic_detail::bits_of<sizeof(T)>::type B;
  B exp = as_type<B>(*expected);
  bool ok = __atomic_compare_exchange_n((volatile B*)&o->v, &exp, as_type<B>(T(desired)), false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (!ok) *expected = as_type<T>(exp);
  return ok;
}
template <class T, class U>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* o, T* expected, U desired,
                                                    memory_order a = memory_order_relaxed, memory_order b = memory_order_relaxed) {
  return atomic_compare_exchange_weak_explicit(o, expected, desired, a, b);
}
#define KILN_ATOMIC_RMW(NAME, EXPR)                                                              \
  template <class T, class U> inline T atomic_fetch_##NAME##_explicit(volatile atomic<T>* o, U v, memory_order = memory_order_relaxed) { \
    T x = T(v);                                                                                  \
    return atomic_detail::rmw(o, [x](T a) { return EXPR; });                                     \
  }
KILN_ATOMIC_RMW(add, a + x) KILN_ATOMIC_RMW(sub, a - x) KILN_ATOMIC_RMW(and, a & x)
KILN_ATOMIC_RMW(or, a | x) KILN_ATOMIC_RMW(xor, a ^ x)
KILN_ATOMIC_RMW(min, x < a ? x : a) KILN_ATOMIC_RMW(max, a < x ? x : a)
#undef KILN_ATOMIC_RMW
}  // namespace metal
