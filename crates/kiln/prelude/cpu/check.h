// kiln CPU prelude, checked libraries only (`kiln check`): the sanitizer. The library is compiled
// with the compiler's thread-sanitizer instrumentation (`-fsanitize=thread`, without its runtime),
// so every load and store of the kernel calls one of the `__tsan_*` functions below with its
// address. An access that falls in a buffer of the launch or a threadgroup array of the running
// group (or in the padding around one) is recorded in a shadow cell per granule of that memory:
// the last writer and up to two readers since, each with its thread, the thread's counts of
// barriers, of barriers whose flags name that memory and of SIMD-group functions, and the
// instruction's offset in the library (the host maps it to the user's line). Two accesses of
// different threads, at least one a write and not both atomic, conflict unless a barrier whose
// flags name the memory (mem_threadgroup for threadgroup memory, mem_device for device memory,
// within one group) lies between them; between lanes of one SIMD-group any barrier or SIMD-group
// function orders them (the lanes run in lockstep). A barrier that names other memory orders
// execution only: accesses of different SIMD-groups across it are reported apart (`UNFENCED`).
// Private arrays the lowering registers (`KILN_PRIVATE_ARRAY`) are tracked per thread for reads
// of elements the thread never wrote, and shuffles that read an inactive lane are reported
// (reductions and scans over the active lanes are defined). Findings are merged by kind, buffer
// and the two instructions, and counted. The host runs a checked launch on one OS thread and one
// launch at a time, so the state here is plain globals.
//
// Most instrumented accesses are the emulator's own (its scheduler, the fibers' frames): a page
// found to lie outside every buffer and threadgroup window is remembered in a small direct-mapped
// table, so that the next access to it costs one compare.
#pragma once

extern "C" const char __ehdr_start __attribute__((visibility("hidden")));
extern "C" void* calloc(size_t, size_t) noexcept;
extern "C" void free(void*) noexcept;

namespace kiln { namespace chk {

#define KILN_NOSAN __attribute__((no_sanitize_thread, noinline))

// The running thread (what `Current::thread` reads), read without instrumentation: the hooks
// that every instrumented access calls use it.
__attribute__((no_sanitize_thread, always_inline)) inline kiln::rt::Thread* running_thread(const kiln::rt::Current* c) {
  return c && c->group ? c->group->running : nullptr;
}

// Finding kinds (mirrored by the host's `RawKind`).
enum Kind : uint32_t {
  RACE = 1, LOCKSTEP = 2, UNINIT = 3, DOUBLE_WRITE = 4, BARRIER_EXIT = 5, BARRIER_SITES = 6, OOB_READ = 7,
  OOB_WRITE = 8, INACTIVE_LANE = 9, UNFENCED = 10
};
// Bits of a barrier's `mem_flags` (runtime.h).
enum { FLAG_DEVICE = 1, FLAG_THREADGROUP = 2 };

// One buffer of the launch as the host binds it (mirrors the host's `CheckBuffer`).
struct Buffer {
  uint64_t data, len, pad;
  uint32_t granule;
  uint32_t flags;  // INITIALISED | TRACKED
};
enum { INITIALISED = 1, TRACKED = 2 };

// One finding (mirrors the host's `CFinding`). `space` 0: a buffer slot; 1: a threadgroup
// array of slot `slot` (declarations 0..63, [[threadgroup(n)]] 64 + n); 2: a private array.
struct Finding {
  uint32_t kind, pc_a, pc_b, count;
  int32_t space, slot;
  uint32_t tid_a, tid_b;
  int64_t offset;  // byte offset of the first occurrence from the start of the memory
  uint64_t size;   // bytes of that memory
  const char* name;
  // Races: 1 the first access wrote, 2 the second did (bits), and for `UNFENCED` the barrier's
  // flags from bit 8. Barriers: the threads apart. Inactive lanes: the lane read.
  uint32_t elem, threads;
  uint64_t serial;  // the access that last counted
  uint32_t pc_c;    // `UNFENCED`: the barrier between the two accesses
  uint32_t pad;
};

// What the host lends a checked launch (mirrors the host's `CheckLaunch`).
struct Launch {
  const Buffer* buffers;
  uint32_t n_buffers, group_threads;
  Finding* findings;
  uint32_t cap, n_findings;
  // Second runs: shuffles that read an inactive lane get other bytes than the caller's value.
  uint32_t poison_inactive;
  // The order threads of a group run in and groups are taken: 0 as numbered, 1 reversed, 2 as
  // numbered with each SIMD-group running on to a barrier before the next starts.
  uint32_t schedule, pad0, pad1;
};

// `epoch` counts the thread's barriers, `mem` those whose flags name the memory accessed, `sep`
// its SIMD-group functions and simdgroup_barriers.
struct Acc {
  uint32_t tid;
  uint16_t epoch, sep, mem, pad;
  uint32_t pc, atomic;
};
struct Cell {
  uint32_t gen, flags;
  Acc w, r0, r1;
};
enum { WRITTEN = 1, MULTI = 2 };

struct Tg {
  const char* data;
  uint64_t size;
  const char* name;
  uint32_t elem;
  // Declared with a zero initialiser (`threadgroup float s[32] = {0};`): read before any store,
  // it holds zeros.
  bool zeroed;
  Cell* cells;
  uint64_t cap;
};

// Bytes per shadow cell of a threadgroup array: its element when scalar-sized (threads writing
// different fields of one larger element stay apart, a byte each).
__attribute__((no_sanitize_thread, always_inline)) inline uint64_t cell_bytes(const Tg& g) {
  return g.elem == 2 || g.elem == 4 || g.elem == 8 ? g.elem : 1;
}

// A read of memory nobody had written yet: an uninitialised read unless a thread writes it later
// in the same group (threadgroup memory) or launch (device memory).
struct Pending {
  int32_t space, slot;
  uint64_t offset;
  uint32_t pc, tid;
};

const int MAX_PENDING = 256;
const int TG_SLOTS = 80;
// Private arrays open at once per thread that are tracked (deeper ones are not).
const int PRIVATE_SLOTS = 8;
const int MAX_THREADS = 1024;

// A private array of one thread: which of its elements the thread wrote.
struct Private {
  uint64_t data, size;
  const char* name;
  uint32_t elem;
  unsigned char* written;
};
// Bytes either side of a threadgroup array in which an access counts as out of bounds of it.
const uint64_t TG_WINDOW = 65536;
const int PAGE_SHIFT = 12;
const int OUTSIDE_BITS = 12;

struct State {
  Launch* l;
  // Pages known to hold no tracked memory, by `outside_slot` (~0: none).
  uint64_t outside[1u << OUTSIDE_BITS];
  // The running OS thread's emulator state (its address is fixed for the launch: read once, not
  // through thread-local storage on every access).
  kiln::rt::Current* cur;
  Cell* cells[32];
  Tg tg[TG_SLOTS];
  // The slots of `tg` the running group opened, so an access scans only those.
  int tg_active[TG_SLOTS];
  int n_tg_active;
  uint32_t group_base, tg_gen;
  uint16_t epoch[MAX_THREADS], sep[MAX_THREADS], mem_tg[MAX_THREADS], mem_dev[MAX_THREADS];
  uint32_t barrier_pc[MAX_THREADS];     // the barrier each thread waits at or last passed
  uint32_t barrier_flags[MAX_THREADS];  // and its flags
  uint32_t collective_pc[MAX_THREADS];
  uint32_t last_pc[MAX_THREADS];  // each thread's latest access to the launch's memory
  Private priv[MAX_THREADS][PRIVATE_SLOTS];
  uint8_t priv_depth[MAX_THREADS];  // private arrays open, tracked or not
  // Second runs: shuffles from inactive lanes return other bytes (did the value matter?), and
  // another schedule (`Launch::schedule`: does the result depend on it?).
  uint32_t poison_inactive, reverse;
  uint32_t last_write[32];
  uint64_t serial;  // counts accesses, so one access counts once per finding
  // The latest accesses to pages not known to be untracked: a fault outside every buffer is one
  // of them (the compiler may move a load past the hooks of the next few accesses; an access to
  // a page remembered as untracked met mapped memory before).
  struct Last { uint64_t addr, size; uint32_t pc, tid, wrote, pad; } last[64];
  uint32_t n_last;
  Pending pend_dev[MAX_PENDING], pend_tg[MAX_PENDING];
  int n_pend_dev, n_pend_tg;
  // A store over another thread's store waits here until it has happened (the next access, or
  // the launch's end): storing the value the memory already holds is no conflict (every thread
  // writing the same flag or size), so the write-write findings stand only when the bytes changed.
  struct Overwrite {
    Cell* cell;
    uint32_t kind;
    Acc a, me;
    int32_t space, slot;
    int64_t offset;
  } over[4];
  int n_over;
  uint64_t over_addr, over_size, cur_addr, cur_size;
  unsigned char over_old[16];
};
static State g_state;
static volatile int g_armed;

KILN_NOSAN inline uint32_t pc_of(const void* ret) {
  return (uint32_t)((const char*)ret - &__ehdr_start);
}

// Returns the new finding, or null when it merged into an earlier one (or there is no room).
KILN_NOSAN inline Finding* report(uint32_t kind, uint32_t pc_a, uint32_t pc_b, int32_t space, int32_t slot,
                                  uint32_t tid_a, uint32_t tid_b, int64_t offset, uint32_t threads = 0,
                                  uint32_t pc_c = 0) {
  Launch* l = g_state.l;
  for (uint32_t i = l->n_findings; i-- > 0;) {
    Finding& f = l->findings[i];
    if (f.kind == kind && f.pc_a == pc_a && f.pc_b == pc_b && f.space == space && f.slot == slot) {
      if (f.serial != g_state.serial) ++f.count;
      f.serial = g_state.serial;
      return nullptr;
    }
  }
  if (l->n_findings >= l->cap) return nullptr;
  Finding& f = l->findings[l->n_findings++];
  f.kind = kind;
  f.pc_a = pc_a;
  f.pc_b = pc_b;
  f.count = 1;
  f.space = space;
  f.slot = slot;
  f.tid_a = tid_a;
  f.tid_b = tid_b;
  f.offset = offset;
  f.threads = threads;
  f.serial = g_state.serial;
  f.pc_c = pc_c;
  f.pad = 0;
  if (space == 0) {
    f.size = slot >= 0 ? l->buffers[slot].len : 0;
    f.name = nullptr;
    f.elem = slot >= 0 ? l->buffers[slot].granule : 1;
  } else if (space == 1) {
    const Tg& t = g_state.tg[slot];
    f.size = t.size;
    f.name = t.name;
    f.elem = t.elem;
  } else {
    f.size = 0;
    f.name = nullptr;
    f.elem = 1;
  }
  return &f;
}

// 0: ordered; LOCKSTEP: lanes of one SIMD group with no collective between; UNFENCED: threads of
// different SIMD-groups with only barriers that name other memory between; RACE: unordered.
KILN_NOSAN inline uint32_t conflict(const Acc& a, const Acc& b) {
  if (!a.pc || a.tid == b.tid || (a.atomic && b.atomic)) return 0;
  const uint32_t g = g_state.l->group_threads;
  if (a.tid / g != b.tid / g) return RACE;
  if (a.mem != b.mem) return 0;
  const bool one_simdgroup = (a.tid % g) / 32 == (b.tid % g) / 32;
  if (a.epoch != b.epoch) return one_simdgroup ? 0 : UNFENCED;
  if (!one_simdgroup) return RACE;
  return a.sep != b.sep ? 0 : LOCKSTEP;
}

// Reports a conflict `k` between the earlier access `a` and the running thread's `me`.
KILN_NOSAN inline void report_conflict(uint32_t k, const Acc& a, const Acc& me, int32_t space, int32_t slot,
                                       uint64_t offset, uint32_t wrote) {
  const uint32_t local = me.tid - g_state.group_base;
  const bool unfenced = k == UNFENCED && local < (uint32_t)MAX_THREADS;
  const uint32_t flags = unfenced ? g_state.barrier_flags[local] << 8 : 0;
  report(k, a.pc, me.pc, space, slot, a.tid, me.tid, (int64_t)offset, wrote | flags,
         unfenced ? g_state.barrier_pc[local] : 0);
}

KILN_NOSAN inline void pend(Pending* list, int* n, int32_t space, int32_t slot, uint64_t offset, const Acc& me) {
  for (int i = 0; i < *n; ++i)
    if (list[i].pc == me.pc && list[i].slot == slot) return;
  if (*n < MAX_PENDING) list[(*n)++] = Pending{space, slot, offset, me.pc, me.tid};
}

KILN_NOSAN inline void touch(Cell& c, uint32_t gen, const Acc& me, bool write, bool initialised, int32_t space,
                             int32_t slot, uint64_t offset) {
  if (c.gen != gen) {
    __builtin_memset(&c, 0, sizeof c);
    c.gen = gen;
  }
  if (write) {
    if (space == 0) g_state.last_write[slot] = me.pc;
    if (c.flags & WRITTEN) {
      uint32_t k = conflict(c.w, me);
      // Lanes storing to one address in the same instruction: one store wins, lockstep or not.
      if (k == LOCKSTEP && c.w.pc == me.pc) k = RACE;
      // A store ordered after the other by a barrier is no conflict: the later one stays.
      if (k) {
        State& s = g_state;
        if (s.cur_size && s.n_over < 4) {
          if (!s.over_size) {
            s.over_addr = s.cur_addr;
            s.over_size = s.cur_size;
            __builtin_memcpy(s.over_old, (const void*)(uintptr_t)s.cur_addr, s.cur_size);
          }
          s.over[s.n_over++] = State::Overwrite{&c, k, c.w, me, space, slot, (int64_t)offset};
        } else {
          report_conflict(k, c.w, me, space, slot, offset, 3);
          if (k == RACE) c.flags |= MULTI;
        }
      }
    }
    if (uint32_t k = conflict(c.r0, me)) report_conflict(k, c.r0, me, space, slot, offset, 2);
    if (uint32_t k = conflict(c.r1, me)) report_conflict(k, c.r1, me, space, slot, offset, 2);
    c.w = me;
    c.flags |= WRITTEN;
    c.r0.pc = 0;
    c.r1.pc = 0;
    return;
  }
  if (c.flags & WRITTEN) {
    if (uint32_t k = conflict(c.w, me)) report_conflict(k, c.w, me, space, slot, offset, 1);
  } else if (!initialised) {
    if (space == 0) pend(g_state.pend_dev, &g_state.n_pend_dev, space, slot, offset, me);
    else pend(g_state.pend_tg, &g_state.n_pend_tg, space, slot, offset, me);
  }
  if (!c.r0.pc || c.r0.tid == me.tid) c.r0 = me;
  else if (!c.r1.pc || c.r1.tid == me.tid || conflict(c.r0, me) == 0) c.r1 = me;
  else c.r0 = me;
}

// The store that waited in `over` has happened: its findings stand if it changed the bytes.
KILN_NOSAN inline void settle_overwrite() {
  State& s = g_state;
  if (!s.over_size) return;
  const bool changed = __builtin_memcmp((const void*)(uintptr_t)s.over_addr, s.over_old, s.over_size) != 0;
  for (int i = 0; changed && i < s.n_over; ++i) {
    const State::Overwrite& o = s.over[i];
    report_conflict(o.kind, o.a, o.me, o.space, o.slot, (uint64_t)o.offset, 3);
    if (o.kind == RACE) o.cell->flags |= MULTI;
  }
  s.over_size = 0;
  s.n_over = 0;
}

__attribute__((no_sanitize_thread, always_inline)) inline uint64_t outside_slot(uint64_t page) {
  return (page * 0x9E3779B97F4A7C15ull) >> (64 - OUTSIDE_BITS);
}

// Whether the page at `page` meets a buffer of the launch (with its padding), the window of a
// threadgroup array the running group opened or a private array of the running thread (only a
// thread reaches its own stack).
KILN_NOSAN inline bool page_tracked(uint64_t page, uint32_t local) {
  const State& s = g_state;
  const uint64_t lo = page << PAGE_SHIFT, hi = lo + (1ull << PAGE_SHIFT);
  for (int j = 0; local < (uint32_t)MAX_THREADS && j < s.priv_depth[local] && j < PRIVATE_SLOTS; ++j) {
    const Private& p = s.priv[local][j];
    if (lo < p.data + p.size && hi > p.data) return true;
  }
  for (uint32_t i = 0; i < s.l->n_buffers; ++i) {
    const Buffer& b = s.l->buffers[i];
    if (lo < b.data + b.len + b.pad && hi > b.data - b.pad) return true;
  }
  for (int j = 0; j < s.n_tg_active; ++j) {
    const Tg& g = s.tg[s.tg_active[j]];
    const uint64_t d = (uint64_t)(uintptr_t)g.data;
    if (lo < d + g.size + TG_WINDOW && hi > d - TG_WINDOW) return true;
  }
  return false;
}

// An access to memory of a page not known to be untracked.
KILN_NOSAN inline void record(uint64_t a, uint64_t size, bool write, bool atomic, const void* ret) {
  settle_overwrite();
  State& s = g_state;
  kiln::rt::Thread* t = running_thread(s.cur);
  if (!t) return;
  ++s.serial;
  // A plain store of up to 16 bytes may wait in `over` (see `touch`).
  s.cur_addr = a;
  s.cur_size = write && !atomic && size <= 16 ? size : 0;
  const uint32_t local = t->thread_index_in_threadgroup;
  if (local >= (uint32_t)MAX_THREADS) return;
  Acc me{s.group_base + local, s.epoch[local], s.sep[local], s.mem_dev[local], 0, pc_of(ret), atomic ? 1u : 0u};
  s.last[s.n_last++ % 64] = State::Last{a, size, me.pc, me.tid, write, 0};
  for (int j = 0; j < s.priv_depth[local] && j < PRIVATE_SLOTS; ++j) {
    Private& p = s.priv[local][j];
    if (a + size <= p.data || a >= p.data + p.size) continue;
    if (!p.written) return;
    const uint64_t first = (a < p.data ? 0 : a - p.data) / p.elem;
    const uint64_t end = a + size > p.data + p.size ? p.size : a + size - p.data;
    for (uint64_t k = first; k * p.elem < end; ++k) {
      if (write) {
        p.written[k] = 1;
      } else if (!p.written[k]) {
        Finding* f = report(UNINIT, 0, me.pc, 2, 0, me.tid, me.tid, (int64_t)(k * p.elem));
        if (f) {
          f->name = p.name;
          f->size = p.size;
          f->elem = p.elem;
        }
        // Reported once per element: the read's value stays whatever it was.
        p.written[k] = 1;
      }
    }
    return;
  }
  Launch* l = s.l;
  for (uint32_t i = 0; i < l->n_buffers; ++i) {
    const Buffer& b = l->buffers[i];
    if (a + size <= b.data - b.pad || a >= b.data + b.len + b.pad) continue;
    s.last_pc[local] = me.pc;
    if (a < b.data || a + size > b.data + b.len) {
      report(write ? OOB_WRITE : OOB_READ, me.pc, 0, 0, (int32_t)i, me.tid, 0, (int64_t)(a - b.data));
      return;
    }
    if (!(b.flags & TRACKED)) {
      if (!write) return;
      if (!s.cells[i]) s.cells[i] = (Cell*)calloc(b.len / b.granule + 1, sizeof(Cell));
      if (!s.cells[i]) return;
    }
    if (!s.cells[i]) return;
    const uint64_t first = (a - b.data) / b.granule, last = (a + size - 1 - b.data) / b.granule;
    for (uint64_t k = first; k <= last; ++k)
      touch(s.cells[i][k], 1, me, write, b.flags & INITIALISED, 0, (int32_t)i, k * b.granule);
    return;
  }
  for (int j = 0; j < s.n_tg_active; ++j) {
    const int i = s.tg_active[j];
    Tg& g = s.tg[i];
    const uint64_t lo = (uint64_t)(uintptr_t)g.data;
    if (a + size <= lo - TG_WINDOW || a >= lo + g.size + TG_WINDOW) continue;
    s.last_pc[local] = me.pc;
    if (a < lo || a + size > lo + g.size) {
      report(write ? OOB_WRITE : OOB_READ, me.pc, 0, 1, i, me.tid, 0, (int64_t)(a - lo));
      return;
    }
    // One cell per element of the array's declared type (a float access updates one cell).
    const uint64_t e = cell_bytes(g), first = (a - lo) / e, last = (a - lo + size - 1) / e;
    me.mem = s.mem_tg[local];
    for (uint64_t k = first; k <= last; ++k) touch(g.cells[k], s.tg_gen, me, write, g.zeroed, 1, i, k * e);
    return;
  }
  const uint64_t page = a >> PAGE_SHIFT;
  if (((a + size - 1) >> PAGE_SHIFT) == page && !page_tracked(page, local)) s.outside[outside_slot(page)] = page;
}

__attribute__((no_sanitize_thread, always_inline)) inline void access(const void* p, uint64_t size, bool write,
                                                                      bool atomic, const void* ret) {
  if (!g_armed) return;
  State& s = g_state;
  const uint64_t a = (uint64_t)(uintptr_t)p;
  const uint64_t page = a >> PAGE_SHIFT;
  if (s.outside[outside_slot(page)] == page && ((a + size - 1) >> PAGE_SHIFT) == page) return;
  record(a, size, write, atomic, ret);
}

// Pages of [lo, hi) remembered as untracked are looked at again.
KILN_NOSAN inline void track_pages(uint64_t lo, uint64_t hi) {
  for (uint64_t p = lo >> PAGE_SHIFT; p <= hi >> PAGE_SHIFT; ++p)
    if (g_state.outside[outside_slot(p)] == p) g_state.outside[outside_slot(p)] = ~0ull;
}

// A private array of the running thread comes into scope: none of its elements is written
// (arrays of types with a constructor are not registered; see config.h).
KILN_NOSAN inline void private_open(const void* data, uint64_t size, const char* name, uint32_t elem) {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (!t || t->thread_index_in_threadgroup >= (uint32_t)MAX_THREADS) return;
  State& s = g_state;
  const uint32_t local = t->thread_index_in_threadgroup;
  const int depth = s.priv_depth[local];
  if (depth == 255) return;
  s.priv_depth[local] = (uint8_t)(depth + 1);
  if (depth >= PRIVATE_SLOTS) return;
  Private& p = s.priv[local][depth];
  p.data = (uint64_t)(uintptr_t)data;
  p.elem = elem ? elem : 1;
  p.size = size;
  p.name = name;
  p.written = (unsigned char*)calloc(size / p.elem + 1, 1);
  track_pages(p.data, p.data + size);
}

// The innermost private array of the running thread goes out of scope.
KILN_NOSAN inline void private_close() {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (!t || t->thread_index_in_threadgroup >= (uint32_t)MAX_THREADS) return;
  State& s = g_state;
  const uint32_t local = t->thread_index_in_threadgroup;
  if (!s.priv_depth[local]) return;
  const int depth = --s.priv_depth[local];
  if (depth >= PRIVATE_SLOTS) return;
  free(s.priv[local][depth].written);
  s.priv[local][depth].written = nullptr;
}

KILN_NOSAN inline void private_reset() {
  State& s = g_state;
  for (int i = 0; i < MAX_THREADS; ++i) {
    for (int j = 0; j < s.priv_depth[i] && j < PRIVATE_SLOTS; ++j) {
      free(s.priv[i][j].written);
      s.priv[i][j].written = nullptr;
    }
    s.priv_depth[i] = 0;
  }
}

KILN_NOSAN inline void tg_opened(int slot, const char* data, uint64_t size, const char* name, uint32_t elem,
                                 bool zeroed) {
  if (!g_armed || slot < 0 || slot >= TG_SLOTS) return;
  Tg& g = g_state.tg[slot];
  if (g.cap < size) {
    free(g.cells);
    g.cells = (Cell*)calloc(size, sizeof(Cell));
    g.cap = g.cells ? size : 0;
  }
  if (!g.cells) return;
  // Pages of its window remembered as untracked (the emulator's own accesses there before the
  // array opened) are tracked from now on.
  const uint64_t lo = (uint64_t)(uintptr_t)data;
  track_pages(lo - TG_WINDOW, lo + size + TG_WINDOW);
  if (!g.data) g_state.tg_active[g_state.n_tg_active++] = slot;
  g.data = data;
  g.size = size;
  g.name = name;
  g.elem = elem ? elem : 1;
  g.zeroed = zeroed;
}

KILN_NOSAN inline void group_begin(uint64_t lin) {
  if (!g_armed) return;
  State& s = g_state;
  s.cur = &kiln::rt::g_cur;
  s.group_base = (uint32_t)(lin * s.l->group_threads);
  ++s.tg_gen;
  for (int j = 0; j < s.n_tg_active; ++j) s.tg[s.tg_active[j]].data = nullptr;
  s.n_tg_active = 0;
  __builtin_memset(s.epoch, 0, sizeof s.epoch);
  __builtin_memset(s.sep, 0, sizeof s.sep);
  __builtin_memset(s.mem_tg, 0, sizeof s.mem_tg);
  __builtin_memset(s.mem_dev, 0, sizeof s.mem_dev);
  __builtin_memset(s.last_pc, 0, sizeof s.last_pc);
  private_reset();
  s.n_pend_tg = 0;
}

// Pending reads of cells still unwritten at the end of their scope are uninitialised reads.
KILN_NOSAN inline void settle(Pending* list, int* n) {
  State& s = g_state;
  for (int i = 0; i < *n; ++i) {
    const Pending& p = list[i];
    const Cell* c = nullptr;
    if (p.space == 0) {
      const Buffer& b = s.l->buffers[p.slot];
      if (s.cells[p.slot]) c = &s.cells[p.slot][p.offset / b.granule];
    } else if (s.tg[p.slot].cells) {
      c = &s.tg[p.slot].cells[p.offset / cell_bytes(s.tg[p.slot])];
    }
    // Written later by another thread: a race, reported as such; by the reader itself or
    // nobody: the read saw memory nobody had written.
    const bool written = c && (p.space == 0 || c->gen == s.tg_gen) && (c->flags & WRITTEN) && c->w.tid != p.tid;
    if (!written) report(UNINIT, 0, p.pc, p.space, p.slot, p.tid, p.tid, (int64_t)p.offset);
  }
  *n = 0;
}

KILN_NOSAN inline void group_end() {
  if (!g_armed) return;
  settle_overwrite();
  settle(g_state.pend_tg, &g_state.n_pend_tg);
}

KILN_NOSAN inline void barrier_enter(const void* site, uint32_t flags) {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (!t || t->thread_index_in_threadgroup >= (uint32_t)MAX_THREADS) return;
  g_state.barrier_pc[t->thread_index_in_threadgroup] = pc_of(site);
  g_state.barrier_flags[t->thread_index_in_threadgroup] = flags;
}

// Past a barrier: execution is ordered, and the memory its flags name.
KILN_NOSAN inline void barrier_leave(uint32_t flags) {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (!t || t->thread_index_in_threadgroup >= (uint32_t)MAX_THREADS) return;
  const uint32_t local = t->thread_index_in_threadgroup;
  ++g_state.epoch[local];
  if (flags & FLAG_THREADGROUP) ++g_state.mem_tg[local];
  if (flags & FLAG_DEVICE) ++g_state.mem_dev[local];
}

KILN_NOSAN inline void collective_enter(const void* site) {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (t) g_state.collective_pc[t->thread_index_in_threadgroup] = pc_of(site);
}

// A shuffle of the running lane read lane `src` of its SIMD-group, which did not take part in the
// call (another branch, a barrier, returned, or no lane of the group): undefined in Metal. Returns
// whether the caller should hand back other bytes than its own value (second runs).
KILN_NOSAN inline bool inactive_lane(const void* site, uint32_t src) {
  if (!g_armed) return false;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  const kiln::rt::Group* g = kiln::rt::g_cur.group;
  if (!t || !g) return false;
  State& s = g_state;
  const int local = (int)t->thread_index_in_threadgroup;
  const int away = local - (int)t->thread_index_in_simdgroup + (int)src;
  // 0 at another SIMD-group function, 1 returned, 2 at a barrier, 3 no such lane.
  int where = 3;
  uint32_t pc = 0;
  if (src < 32 && away < g->n && away < MAX_THREADS) {
    const int st = g->threads[away].state;
    where = st == kiln::rt::AT_COLLECTIVE ? 0 : st == kiln::rt::DONE ? 1 : st == kiln::rt::AT_BARRIER ? 2 : 0;
    pc = where == 0 ? s.collective_pc[away] : where == 2 ? s.barrier_pc[away] : 0;
  }
  ++s.serial;
  report(INACTIVE_LANE, pc_of(site), pc, 0, -1, s.group_base + local, s.group_base + (uint32_t)away, where, src);
  return s.poison_inactive != 0;
}

// The thread a group's scheduler runs `i`-th of `n` (schedule 1: reverse order).
__attribute__((no_sanitize_thread, always_inline)) inline int thread_order(int i, int n) {
  return g_armed && g_state.reverse == 1 ? n - 1 - i : i;
}

// Schedule 2: each SIMD-group runs on to its next barrier before the next SIMD-group starts.
__attribute__((no_sanitize_thread, always_inline)) inline bool run_ahead() {
  return g_armed && g_state.reverse == 2;
}

KILN_NOSAN inline void collective_leave() {
  if (!g_armed) return;
  kiln::rt::Thread* t = running_thread(&kiln::rt::g_cur);
  if (t) ++g_state.sep[t->thread_index_in_threadgroup];
}

// Before the threads waiting at barriers are released: every live thread must wait at the same
// barrier, and none may have finished. Barriers are told apart by the instruction that called
// them; the optimiser may copy one source barrier into several paths, so each instruction apart
// from the one most threads wait at is reported and the host drops pairs on one source line.
KILN_NOSAN inline void barrier_release(const kiln::rt::Group& g) {
  if (!g_armed) return;
  State& s = g_state;
  const int MOST = 16;
  uint32_t pcs[MOST], counts[MOST];
  int n = 0, waiting = 0, done = 0;
  for (int i = 0; i < g.n && i < MAX_THREADS; ++i) {
    const int st = g.threads[i].state;
    if (st == kiln::rt::DONE) { ++done; continue; }
    if (st != kiln::rt::AT_BARRIER) continue;
    ++waiting;
    const uint32_t pc = s.barrier_pc[i];
    int j = 0;
    while (j < n && pcs[j] != pc) ++j;
    if (j == n) {
      if (n == MOST) continue;
      pcs[n] = pc;
      counts[n++] = 0;
    }
    ++counts[j];
  }
  if (!waiting) return;
  int most = 0;
  for (int j = 1; j < n; ++j)
    if (counts[j] > counts[most]) most = j;
  const uint32_t base = s.group_base;
  if (done) report(BARRIER_EXIT, 0, pcs[most], 0, -1, base, base, 0, (uint32_t)done);
  for (int j = 0; j < n; ++j)
    if (j != most) report(BARRIER_SITES, pcs[j], pcs[most], 0, -1, base, base, 0, counts[j]);
}

}  // namespace chk
}  // namespace kiln
