// kiln CPU prelude, part 4: the group scheduler and the C entries the host calls. Included once,
// after the lowered kernel and its entry wrappers, or compiled once on its own into an object
// linked into every kernel library (`scheduler_link.h` then declares what the kernel calls):
// there `KILN_SCHEDULER_LINKAGE` makes `run_groups` an out-of-line function of the library.
#pragma once

#ifndef KILN_SCHEDULER_LINKAGE
#define KILN_SCHEDULER_LINKAGE inline
#endif

namespace kiln { namespace rt {

__thread Current g_cur;
bool g_cooperative_library;

// Declared in runtime.h (SIMD collectives) and threadgroup.h (threadgroup memory).
View post_bytes(const void* bytes, unsigned size, const void* site) {
  const FiberHeader h = here();
  Thread* t = h.thread;
  if (!t || !t->stack) throw Fault{"a SIMD collective ran in a kernel compiled without cooperative threads"};
  poll(h.cancel);
  __builtin_memcpy(t->slot, bytes, size);
  // The out-of-line SIMD-group function's return address: the user's call (its line).
  KILN_CHECK(kiln::chk::collective_enter(site));
  if (t->pending_site) {
    site = t->pending_site;
    t->pending_site = nullptr;
  }
  t->site = site;
  t->state = AT_COLLECTIVE;
  ++h.group->at_collective;
  yield_to_scheduler(h);
  KILN_CHECK(kiln::chk::collective_leave());
  uint sg = t->simdgroup_index_in_threadgroup;
  return View{h.group->snap[sg], h.group->active[sg], t->thread_index_in_simdgroup, &h.group->folded[sg]};
}

char* tg_open(TgArena* a, int s, uint64_t size, const char* name, bool checked, const char** fault_text, char* text,
              int cap) {
  TgRegion& r = a->regions[s];
  const uint64_t aligned = (size + 15) & ~(uint64_t)15;
  const uint64_t page = tg_page();
  const uint64_t need = aligned ? (aligned + page - 1) / page * page : page;
  const int prot = checked ? PROT_NONE : PROT_READ;
  if (r.map && r.state == 1 && (r.size != size || r.name != name)) {
    const TgMiss m = tg_canaries(r);
    if (m.before || m.past) {
      int at = 0;
      tg_describe(r, s, "out-of-bounds write", text, cap, &at);
      tg_where(m.before, m.past, false, text, cap, &at);
      *fault_text = text;
      r.state = 2;
      return nullptr;
    }
  }
  if (!r.map || r.room < need) {
    if (r.map) munmap(r.map, r.map_bytes);
    r.map = nullptr;
    const uint64_t bytes = need + 2 * TG_GUARD_BYTES;
    void* m = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    r.map = (char*)m;
    r.map_bytes = bytes;
    r.room = need;
    r.open = 0;
    r.guard_prot = PROT_NONE;
    r.state = 2;
  }
  char* room_end = r.map + TG_GUARD_BYTES + r.room;
  if (r.open != need || r.guard_prot != prot) {
    if (mprotect(r.map, r.map_bytes, prot) != 0 || mprotect(room_end - need, need, PROT_READ | PROT_WRITE) != 0) {
      munmap(r.map, r.map_bytes);
      r.map = nullptr;
      return nullptr;
    }
    r.open = need;
    r.guard_prot = prot;
    r.state = 2;
  }
  char* data = room_end - aligned;
  // The canaries cover what lies outside this size's data.
  if (r.data != data || r.size != size) r.state = 2;
  r.data = data;
  r.size = size;
  r.name = name;
  if (r.state == 2) __builtin_memset(room_end - r.open, TG_CANARY, r.open);
  r.state = 1;
  __builtin_memset(data, 0, size);
  return data;
}

// Below each stack, as large as the stack itself (address space only, never committed): frames
// probed page by page (-fstack-clash-protection, where the compiler has it) fault in its first
// page; without probes a private array up to this size past the stack still lands in it rather
// than in the next fiber's stack.
const size_t GUARD_BYTES = STACK_BYTES;
const size_t ALT_STACK_BYTES = 64 * 1024;

// Fiber stacks, lent by the host for one `kiln_run` call (one set per concurrently running call,
// shared by every kernel library of the process: the stacks and their guards are two memory
// mappings each, and the process has a limited number). Stacks are mapped on first use (their
// pages committed only once touched), each above a guard so a runaway recursion faults instead
// of overwriting a neighbour. Each stack is aligned to its size (see `fiber_header_of`).
struct StackSet {
  void* stacks[1024];
  uint32_t count;
};

inline void* stack_at(StackSet* set, uint32_t i) {
  if (!set || i >= 1024) return nullptr;
  while (set->count <= i) {
    // Mapped with a stack's size to spare, then trimmed to the aligned guard and stack.
    const size_t span = GUARD_BYTES + 2 * STACK_BYTES;
    void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    const uintptr_t lo = (uintptr_t)m, hi = lo + span;
    const uintptr_t stack = (lo + GUARD_BYTES + STACK_BYTES - 1) & ~(uintptr_t)(STACK_BYTES - 1);
    const uintptr_t guard = stack - GUARD_BYTES, end = stack + STACK_BYTES;
    if ((guard > lo && munmap(m, guard - lo) != 0) || (hi > end && munmap((void*)end, hi - end) != 0) ||
        mprotect((void*)guard, GUARD_BYTES, PROT_NONE) != 0) {
      munmap((void*)guard, end - guard);
      return nullptr;
    }
    set->stacks[set->count++] = (void*)stack;
  }
  return set->stacks[i];
}

// Per SIMD-group, what the scheduler has resolved without some live lanes: the largest such
// position and the lanes left out. A left-out lane that later waits at a position up to that
// one meets a call the others already completed without it: the order of positions did not
// hold (goto, a barrier in divergent code, or calls in one expression evaluated in another
// order than the source's), and the result is refused rather than guessed.
struct Divergence {
  unsigned left_out;
  Position furthest;
};

// Per OS thread: the emulated threads' state.
struct Worker {
  Thread threads[1024];
  // The group being run (here rather than on the stack: a fault's recovery frees its memory
  // after leaving the frames that ran it).
  Group group;
  // The group shape the shape-dependent fields of threads[0, shaped) were written for.
  uint32_t shape[12];
  uint32_t shaped;
  // Per SIMD-group of the running group (see resolve_collectives), and the text of a fault that
  // names a line.
  Divergence divergence[32];
  char fault_text[512];
  // A fault on a fiber's guard is handled on an alternate signal stack (the fiber's own has no
  // room left). Threads that have none (those not started by Rust's runtime) get this one.
  void* alt_stack;
  bool alt_checked;
  ~Worker() {
    if (alt_stack) {
      stack_t off;
      __builtin_memset(&off, 0, sizeof off);
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
      munmap(alt_stack, ALT_STACK_BYTES);
    }
  }
  void ensure_alt_stack() {
    if (alt_checked) return;
    alt_checked = true;
    stack_t cur;
    if (sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
    void* m = mmap(nullptr, ALT_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    stack_t ss;
    __builtin_memset(&ss, 0, sizeof ss);
    ss.ss_sp = m;
    ss.ss_size = ALT_STACK_BYTES;
    if (sigaltstack(&ss, nullptr) == 0) alt_stack = m;
    else munmap(m, ALT_STACK_BYTES);
  }
};
static thread_local Worker g_worker;

inline void run_one(Thread& t, Group* g) {
  try {
    g->body(t, g->buffers, g->tg_mem);
  } catch (const Cancelled&) {
    if (!g->aborted) g->aborted = 1;
  } catch (const Fault& f) {
    if (!g->aborted) { g->aborted = 2; g->fault = f.msg; }
  } catch (...) {
    if (!g->aborted) { g->aborted = 2; g->fault = "the kernel threw an exception"; }
  }
  t.state = DONE;
}

#if KILN_FAST_FIBERS
#if defined(__x86_64__)
// A fiber not yet started: `fiber_switch` pops the entry and jumps to it, which then finds a
// null return address (ends backtraces) where a call would have left one.
const int FRAME_WORDS = 2, ENTRY_WORD = 0;
#else
// Saves the callee-saved registers on the current stack, stores the stack pointer to *save_sp,
// switches to to_sp and restores the registers saved there. MXCSR and the FP control register
// are not saved: every fiber runs kernel code that never changes them.
#if defined(__APPLE__)
#define KILN_ASM_FN(name) ".private_extern " #name "\n" #name ":\n"
#define KILN_ASM_END(name)
#else
#define KILN_ASM_FN(name) ".globl " #name "\n.hidden " #name "\n.type " #name ",%function\n" #name ":\n"
#define KILN_ASM_END(name) ".size " #name ", .-" #name "\n"
#endif
__asm__(".text\n.p2align 4\n" KILN_ASM_FN(kiln_fiber_switch)
        "sub sp, sp, #160\n"
        "stp x19, x20, [sp, #0]\n stp x21, x22, [sp, #16]\n stp x23, x24, [sp, #32]\n"
        "stp x25, x26, [sp, #48]\n stp x27, x28, [sp, #64]\n stp x29, x30, [sp, #80]\n"
        "stp d8, d9, [sp, #96]\n stp d10, d11, [sp, #112]\n stp d12, d13, [sp, #128]\n"
        "stp d14, d15, [sp, #144]\n"
        "mov x9, sp\n str x9, [x0]\n mov sp, x1\n"
        "ldp x19, x20, [sp, #0]\n ldp x21, x22, [sp, #16]\n ldp x23, x24, [sp, #32]\n"
        "ldp x25, x26, [sp, #48]\n ldp x27, x28, [sp, #64]\n ldp x29, x30, [sp, #80]\n"
        "ldp d8, d9, [sp, #96]\n ldp d10, d11, [sp, #112]\n ldp d12, d13, [sp, #128]\n"
        "ldp d14, d15, [sp, #144]\n"
        "add sp, sp, #160\n ret\n"
        KILN_ASM_END(kiln_fiber_switch));
// The first switch restores 20 words: x19..x28, x29 (null frame pointer), x30 = the entry, d8..d15.
const int FRAME_WORDS = 20, ENTRY_WORD = 11;
#endif
#undef KILN_ASM_FN
#undef KILN_ASM_END

// Where a fiber starts: runs its thread, then hands control back for good.
__attribute__((noinline, noreturn)) inline void fiber_entry() {
  const FiberHeader h = *fiber_header_of(stack_pointer());
  run_one(*h.thread, h.group);
  switch_away(h.group, h.thread);
  __builtin_trap();
}

// Writes the fiber's header (see `fiber_header_of`); its frames start below it.
inline FiberHeader* fiber_header_write(Thread& t, Group& g) {
  FiberHeader* h = fiber_header_of((uintptr_t)t.stack);
  h->thread = &t;
  h->group = &g;
  h->cancel = g.cancel;
  return h;
}

inline void fiber_prepare(Thread& t, Group& g) {
  void** frame = (void**)fiber_header_write(t, g) - FRAME_WORDS;
  for (int i = 0; i < FRAME_WORDS; ++i) frame[i] = nullptr;
  frame[ENTRY_WORD] = (void*)&fiber_entry;
  t.ctx.sp = frame;
}
#else
// uc_link returns to the scheduler.
inline void fiber_entry() {
  const FiberHeader h = *fiber_header_of(stack_pointer());
  run_one(*h.thread, h.group);
}

inline void fiber_prepare(Thread& t, Group& g) {
  FiberHeader* h = fiber_header_write(t, g);
  getcontext(&t.ctx.uc);
  t.ctx.uc.uc_stack.ss_sp = t.stack;
  t.ctx.uc.uc_stack.ss_size = (size_t)((char*)h - (char*)t.stack);
  t.ctx.uc.uc_link = &g.sched.uc;
  makecontext(&t.ctx.uc, (void (*)())fiber_entry, 0);
}
#endif

const char* const OUT_OF_ORDER =
    "lanes of a SIMD-group reached a SIMD-group function call that the rest of the SIMD-group had already "
    "executed without them, so the CPU emulator cannot tell which lanes Metal would combine (control flow it "
    "does not follow, such as goto, a barrier inside divergent code, or SIMD-group function calls in one "
    "expression whose evaluation order the C++ compiler chooses)";

// Resolves, per SIMD-group, the collective at the smallest position its waiting lanes hold, for
// the lanes at that position (see convergence.h). Returns 1 when lanes were released, 0 when
// none waited, 2 after a fault (in `g.fault`, text in `text`). Called when no thread can run, or
// (the sanitizer's schedule that lets SIMD-groups run ahead) after any thread ran: a SIMD-group
// with a lane that can still run is left for later.
inline int resolve_collectives(Group& g, Divergence* div, char* text, int text_cap) {
  int any = 0;
  for (int base = 0; base < g.n; base += 32) {
    const int end = base + 32 < g.n ? base + 32 : g.n;
    Thread* first = nullptr;
    unsigned mask = 0, live = 0;
    bool running = false;
    for (int i = base; i < end; ++i) {
      Thread& t = g.threads[i];
      if (t.state != DONE) live |= 1u << (i - base);
      running |= t.state == RUNNABLE;
      if (t.state != AT_COLLECTIVE) continue;
      const int c = first ? compare(t, *first) : -1;
      if (c < 0) {
        first = &t;
        mask = 1u << (i - base);
      } else if (c == 0) {
        mask |= 1u << (i - base);
      }
    }
    if (!mask || running) continue;
    const int sg = base / 32;
    Divergence& d = div[sg];
    Position here;
    here.set(*first);
    d.left_out &= live;
    if ((mask & d.left_out) && compare(*first, d.furthest) <= 0) {
      g.fault = OUT_OF_ORDER;
      return 2;
    }
    const unsigned out = live & ~mask;
    if (out) {
      if (const uint32_t line = here.unknown_call_line()) {
        int at = 0;
        msg_put(text, text_cap, &at, "a SIMD-group function ran on part of a SIMD-group inside the function defined on line ");
        msg_put(text, text_cap, &at, (uint64_t)line, false);
        msg_put(text, text_cap, &at, ", whose calls the CPU emulator cannot tell apart by source position (an operator or "
                                     "constructor, a lambda passed as an argument, a parameter pack, a definition outside "
                                     "its class or after a separate declaration, or a name the prelude also declares), so it "
                                     "cannot tell which lanes Metal would combine; call a named function or a lambda bound "
                                     "to an `auto` variable instead");
        g.fault = text;
        return 2;
      }
      if (!d.left_out || compare(*first, d.furthest) > 0) d.furthest = here;
      d.left_out |= out;
    } else if (d.left_out && compare(*first, d.furthest) > 0) {
      d.left_out = 0;
    }
    g.active[sg] = mask;
    g.folded[sg].key = nullptr;
    for (int i = base; i < end; ++i) {
      if (!((mask >> (i - base)) & 1u)) continue;
      __builtin_memcpy(g.snap[sg][i - base], g.threads[i].slot, SLOT_BYTES);
      g.threads[i].state = RUNNABLE;
      --g.at_collective;
    }
    any = 1;
  }
  return any;
}

inline void resume(Group& g, Thread& t) {
  g.running = &t;
  t.started = true;
  fiber_switch(g.sched, t.ctx);
}

// After a fault or cancellation, every suspended fiber is resumed once so that it unwinds
// (yield_to_scheduler throws), leaving no half-run frames on the reused stacks.
inline void unwind_all(Group& g) {
  for (int i = 0; i < g.n; ++i) {
    Thread& t = g.threads[i];
    if (t.state == DONE) continue;
    if (t.started) resume(g, t);
    t.state = DONE;
  }
}

inline void run_cooperative(Group& g, StackSet* stacks, Worker& w) {
  for (int i = 0; i < g.n; ++i) {
    Thread& t = g.threads[i];
    t.stack = stack_at(stacks, (uint32_t)i);
    if (!t.stack) { g.aborted = 2; g.fault = "cannot allocate fiber stacks"; return; }
    fiber_prepare(t, g);
  }
  for (;;) {
#if KILN_CHECKED
    bool ran = false;
    for (int i = 0; i < g.n; ++i) {
      Thread& t = g.threads[kiln::chk::thread_order(i, g.n)];
      if (t.state != RUNNABLE) continue;
      resume(g, t);
      ran = true;
      if (g.aborted) { unwind_all(g); return; }
      // SIMD-groups run ahead: a SIMD-group whose lanes all wait is released at once, and the
      // lowest thread that can run goes next.
      if (kiln::chk::run_ahead()) {
        const int early = resolve_collectives(g, w.divergence, w.fault_text, (int)sizeof w.fault_text);
        if (early == 2) {
          g.aborted = 2;
          unwind_all(g);
          return;
        }
        if (early == 1) i = -1;
      }
    }
    if (ran) continue;
    const int resolved = resolve_collectives(g, w.divergence, w.fault_text, (int)sizeof w.fault_text);
#else
    // Resuming the first runnable thread runs them all: each fiber switches on to the next
    // runnable one (switch_away), and none makes another runnable, so none is left after it.
    for (int i = 0; i < g.n; ++i) {
      if (g.threads[i].state != RUNNABLE) continue;
      resume(g, g.threads[i]);
      if (g.aborted) { unwind_all(g); return; }
      break;
    }
    // With no lane at a collective, resolving finds nothing.
    const int resolved = g.at_collective ? resolve_collectives(g, w.divergence, w.fault_text, (int)sizeof w.fault_text) : 0;
#endif
    if (resolved == 2) {
      g.aborted = 2;
      unwind_all(g);
      return;
    }
    if (resolved) continue;
    KILN_CHECK(kiln::chk::barrier_release(g));
    bool waiting = false;
    for (int i = 0; i < g.n; ++i)
      if (g.threads[i].state == AT_BARRIER) { g.threads[i].state = RUNNABLE; waiting = true; }
    if (!waiting) return;
  }
}

struct LaunchDesc {
  void* const* buffers;
  const uint64_t* tg_sizes;
  const volatile int* cancel;
  uint32_t n_buffers;
  uint32_t n_tg;
  uint32_t grid[3];
  uint32_t tg[3];
  uint32_t groups[3];
  uint32_t checked;
};

// Runs groups [begin, end) of the linearised group grid. Returns 0, 1 (cancelled) or 2 (fault,
// message in `msg`). A barrier-free kernel's groups go through its `direct` loop (see
// `run_direct`) on unchecked launches; checked launches and the sanitizer's libraries run each
// thread through `body`, polling between threads.
inline int run_groups_unprotected(Body body, DirectFn direct, bool cooperative, const LaunchDesc* d, uint64_t begin,
                                  uint64_t end, StackSet* stacks, TgArena* arena, const char* const* tg_names,
                                  char* msg, int msg_cap) {
  g_cur.cancel = d->cancel;
  Worker& w = g_worker;
  Thread* threads = w.threads;
  const uint32_t gx = d->groups[0], gy = d->groups[1];
  // (The sanitizer's libraries have no direct loops: their entries pass none.)
  if (cooperative || d->checked) direct = nullptr;
  for (uint64_t lin = begin; lin < end; ++lin) {
    if (*d->cancel) return 1;
    uint3 gid = uint3(uint(lin % gx), uint((lin / gx) % gy), uint(lin / ((uint64_t)gx * gy)));
    uint3 tg = uint3(d->tg[0], d->tg[1], d->tg[2]);
    uint3 grid = uint3(d->grid[0], d->grid[1], d->grid[2]);
    uint3 size;
    for (int k = 0; k < 3; ++k) {
      uint rest = grid[k] - gid[k] * tg[k];
      size[k] = rest < tg[k] ? rest : tg[k];
    }
    const uint n = size.x * size.y * size.z;
    Group& g = w.group;
    g.threads = threads;
    g.n = (int)n;
    g.body = body;
    g.buffers = d->buffers;
    g.nallocs = 0;
    g.aborted = 0;
    g.fault = nullptr;
    g.arena = arena;
    g.checked = d->checked != 0;
    g.direct = false;
    g.running = nullptr;
    g.cancel = d->cancel;
    g.at_collective = 0;
    for (uint32_t i = 0; i < 16; ++i) g.tg_mem[i] = nullptr;
    for (uint32_t i = 0; i < d->n_tg && i < 16; ++i) {
      const char* fault = "out of memory for threadgroup memory";
      g.tg_mem[i] = arena ? tg_open(arena, TG_DECLARED + (int)i, d->tg_sizes[i], tg_names[i], g.checked, &fault,
                                    g.tg_fault_text, (int)sizeof g.tg_fault_text)
                          : nullptr;
      if (!g.tg_mem[i]) { copy_msg(msg, msg_cap, fault); return 2; }
    }
    if (direct) {
      g_cur.group = &g;
      direct(g, GroupShape{gid, size, tg, grid, uint3(d->groups[0], d->groups[1], d->groups[2])});
      g.direct = false;
      g_cur.group = nullptr;
      if (g.aborted == 1) return 1;
      if (g.aborted == 2) { copy_msg(msg, msg_cap, g.fault); return 2; }
      continue;
    }
    // Fields shared by every group of the same shape are written only when the shape changes
    // (consecutive groups mostly share it); the position advances x fastest without divisions.
    const uint32_t shape[12] = {size.x, size.y, size.z, tg.x, tg.y, tg.z, grid.x, grid.y, grid.z,
                                d->groups[0], d->groups[1], d->groups[2]};
    const bool same_shape = w.shaped >= n && __builtin_memcmp(w.shape, shape, sizeof shape) == 0;
    if (!same_shape) {
      __builtin_memcpy(w.shape, shape, sizeof shape);
      w.shaped = n;
    }
    uint3 local = uint3(0u);
    const uint base_x = gid.x * tg.x, base_y = gid.y * tg.y, base_z = gid.z * tg.z;
    for (uint i = 0; i < n; ++i) {
      Thread& t = threads[i];
      if (!same_shape) {
        set_group_builtins(t, size, tg, uint3(d->groups[0], d->groups[1], d->groups[2]), grid);
        t.thread_position_in_threadgroup = local;
        t.thread_index_in_threadgroup = i;
        t.simdgroup_index_in_threadgroup = i / 32;
        t.thread_index_in_simdgroup = i % 32;
        t.quadgroup_index_in_threadgroup = i / 4;
        t.thread_index_in_quadgroup = i % 4;
        if (++local.x == size.x) {
          local.x = 0;
          if (++local.y == size.y) { local.y = 0; ++local.z; }
        }
      }
      // Component by component: whole-vector temporaries here cost store-forwarding stalls.
      t.threadgroup_position_in_grid.x = gid.x;
      t.threadgroup_position_in_grid.y = gid.y;
      t.threadgroup_position_in_grid.z = gid.z;
      t.thread_position_in_grid.x = base_x + t.thread_position_in_threadgroup.x;
      t.thread_position_in_grid.y = base_y + t.thread_position_in_threadgroup.y;
      t.thread_position_in_grid.z = base_z + t.thread_position_in_threadgroup.z;
      t.state = RUNNABLE;
      t.site = nullptr;
      t.pending_site = nullptr;
      t.depth = 0;
      t.stack = nullptr;
      t.started = false;
    }
    g_cur.group = &g;
    KILN_CHECK(kiln::chk::group_begin(lin));
    KILN_CHECK(for (uint32_t i = 0; i < d->n_tg && i < 16; ++i) kiln::chk::tg_opened(
        TG_DECLARED + (int)i, (const char*)g.tg_mem[i], d->tg_sizes[i], tg_names[i], 1, false));
    if (cooperative) {
      for (uint i = 0; i < (n + 31) / 32; ++i) w.divergence[i].left_out = 0;
      run_cooperative(g, stacks, w);
    } else {
      // Polled per thread: after a checked launch opened a guard, later threads must not keep
      // writing through it.
      for (uint i = 0; i < n && !g.aborted && !*d->cancel; ++i) {
#if KILN_CHECKED
        Thread& t = threads[kiln::chk::thread_order((int)i, (int)n)];
#else
        Thread& t = threads[i];
#endif
        g.running = &t;
        run_one(t, &g);
      }
    }
    KILN_CHECK(kiln::chk::group_end());
    g_cur.group = nullptr;
    g.running = nullptr;
    if (g.aborted == 1) return 1;
    if (g.aborted == 2) { copy_msg(msg, msg_cap, g.fault); return 2; }
  }
  return 0;
}

// ---- faults -----------------------------------------------------------------------------------
// One handler serves two purposes. Checked mode: the host surrounds every buffer of a checked
// launch with PROT_NONE guard ranges; a fault in a guard is recorded (first one wins), the guard
// is opened so the access completes, and the launch is cancelled: the kernel stops at its next
// poll and the host reports the buffer. Any launch: while an OS thread runs groups it holds an
// escape point, and a SIGSEGV / SIGBUS (an access outside every mapping), SIGFPE (integer
// division by zero) or SIGILL (a trap the compiler put where the kernel's behaviour is
// undefined) raised on that thread jumps back to it: the group is abandoned (its fibers' stacks
// are simply reused) and the launch reports the fault instead of the process dying. Every
// library installs its handler once and passes faults it does not own to the previous one.

struct Guard {
  uint64_t begin, end;  // page aligned
  uint64_t kept;        // protected by the host across launches: arming and disarming leave it
};
struct CheckedLaunch {
  const Guard* guards;
  uint32_t n_guards;
  int32_t hit;  // index of the first guard touched, -1 while none
  uint64_t addr;
  volatile int* cancel;
};

const int CHECKED_SLOTS = 64;
static CheckedLaunch* g_checked[CHECKED_SLOTS];

// An OS thread running groups: where its faults jump to. Found by the thread's id, so the
// handler reads no thread-local storage (whose first use in a dlopen'ed library may allocate).
struct Escape {
  int used;   // claimed (compare-and-swap)
  int armed;  // the handler may jump to `env`
  pthread_t owner;
  sigjmp_buf* env;
  int sig;
  uint64_t addr;
};
const int ESCAPE_SLOTS = 256;
static Escape g_escapes[ESCAPE_SLOTS];

const int FAULT_SIGNALS[4] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
static struct sigaction g_prev[4];
// Internal linkage throughout: a function-local static of an inline function would be one
// object shared by every kernel library in the process.
static int g_handler_state;  // 0 not installed, 1 installing, 2 installed

static bool claim_fault(uintptr_t a) {
  for (int s = 0; s < CHECKED_SLOTS; ++s) {
    CheckedLaunch* l = __atomic_load_n(&g_checked[s], __ATOMIC_ACQUIRE);
    if (!l) continue;
    for (uint32_t i = 0; i < l->n_guards; ++i) {
      const Guard& gd = l->guards[i];
      if (a < gd.begin || a >= gd.end) continue;
      int32_t none = -1;
      if (__atomic_compare_exchange_n(&l->hit, &none, (int32_t)i, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        __atomic_store_n(&l->addr, (uint64_t)a, __ATOMIC_SEQ_CST);
      __atomic_store_n(l->cancel, 2, __ATOMIC_SEQ_CST);
      return mprotect((void*)gd.begin, gd.end - gd.begin, PROT_READ | PROT_WRITE) == 0;
    }
  }
  return false;
}

static void on_fault(int sig, siginfo_t* info, void* uc) {
  KILN_CHECK(kiln::chk::g_armed = 0);
  const uintptr_t a = (uintptr_t)info->si_addr;
  if ((sig == SIGSEGV || sig == SIGBUS) && claim_fault(a)) return;
  const pthread_t self = pthread_self();
  for (int s = 0; s < ESCAPE_SLOTS; ++s) {
    Escape& e = g_escapes[s];
    if (!__atomic_load_n(&e.armed, __ATOMIC_ACQUIRE) || !pthread_equal(e.owner, self)) continue;
    __atomic_store_n(&e.armed, 0, __ATOMIC_RELAXED);
    e.sig = sig;
    e.addr = a;
    siglongjmp(*e.env, 1);
  }
  int k = 0;
  while (k < 3 && FAULT_SIGNALS[k] != sig) ++k;
  // The kernel installs this handler before `sigaction` writes back the one it replaces: a fault
  // on another thread in between must wait for it rather than read an empty `g_prev`.
  while (__atomic_load_n(&g_handler_state, __ATOMIC_ACQUIRE) == 1) {
  }
  struct sigaction* prev = &g_prev[k];
  if (prev->sa_flags & SA_SIGINFO) {
    if (prev->sa_sigaction) { prev->sa_sigaction(sig, info, uc); return; }
  } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
    prev->sa_handler(sig);
    return;
  }
  // Not ours and no handler before us: the default action, once the instruction repeats.
  signal(sig, SIG_DFL);
}

static int install_fault_handler() {
  if (__atomic_load_n(&g_handler_state, __ATOMIC_ACQUIRE) == 2) return 0;
  int zero = 0;
  if (__atomic_compare_exchange_n(&g_handler_state, &zero, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    struct sigaction sa;
    __builtin_memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < 4; ++k) {
      if (sigaction(FAULT_SIGNALS[k], &sa, &g_prev[k]) != 0) {
        for (int j = 0; j < k; ++j) sigaction(FAULT_SIGNALS[j], &g_prev[j], nullptr);
        __atomic_store_n(&g_handler_state, 0, __ATOMIC_SEQ_CST);
        return 1;
      }
    }
    __atomic_store_n(&g_handler_state, 2, __ATOMIC_SEQ_CST);
  }
  for (;;) {
    int st = __atomic_load_n(&g_handler_state, __ATOMIC_SEQ_CST);
    if (st == 2) return 0;
    if (st == 0) return 1;  // the installing thread failed
  }
}

// Whether `addr` lies in the guard below the calling OS thread's stack or up to 64 MiB under
// it (where an unprobed frame's first access lands); `size` is the stack's size.
inline bool below_os_stack(uint64_t addr, uint64_t* size) {
  uint64_t lo = 0;
#if defined(__APPLE__)
  pthread_t self = pthread_self();
  *size = pthread_get_stacksize_np(self);
  lo = (uint64_t)(uintptr_t)pthread_get_stackaddr_np(self) - *size;
  const uint64_t guard = 16384;
#else
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  void* base = nullptr;
  size_t bytes = 0, guard_bytes = 0;
  const bool known = pthread_attr_getstack(&attr, &base, &bytes) == 0;
  pthread_attr_getguardsize(&attr, &guard_bytes);
  pthread_attr_destroy(&attr);
  if (!known) return false;
  lo = (uint64_t)(uintptr_t)base;
  *size = bytes;
  const uint64_t guard = guard_bytes < 4096 ? 4096 : guard_bytes;
#endif
  return addr < lo + guard && lo - addr <= ((uint64_t)64 << 20);
}

// After a jump out of a faulting kernel: unblocks the fault signals (the handler was left
// without returning), frees the group's memory, forgets the group and describes the fault.
inline int abandon_group(int sig, uint64_t addr, char* msg, int cap) {
  sigset_t set;
  sigemptyset(&set);
  for (int k = 0; k < 4; ++k) sigaddset(&set, FAULT_SIGNALS[k]);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  Current& c = g_cur;
  Group* g = c.group;
  Thread* t = c.thread();
  int at = 0;
  uint64_t os_stack = 0;
  if (t || (g && g->direct)) {
    // A barrier-free kernel's direct loop keeps no `Thread`: the group has the position.
    const uint3 p = t ? t->thread_position_in_grid
                      : uint3(g->direct_base.x + g->direct_at[0], g->direct_base.y + g->direct_at[1],
                              g->direct_base.z + g->direct_at[2]);
    const uint pos[3] = {p.x, p.y, p.z};
    msg_put(msg, cap, &at, "thread (");
    for (int k = 0; k < 3; ++k) {
      msg_put(msg, cap, &at, pos[k], false);
      msg_put(msg, cap, &at, k < 2 ? ", " : ") ");
    }
  } else {
    msg_put(msg, cap, &at, "the kernel ");
  }
  const int tg_slot = (sig == SIGSEGV || sig == SIGBUS) && g ? tg_region_of(g->arena, addr) : -1;
  if (tg_slot >= 0) {
    // An access to a threadgroup array's guards: a write, or on a checked launch any access.
    const TgRegion& r = g->arena->regions[tg_slot];
    const uint64_t data = (uint64_t)(uintptr_t)r.data;
    tg_describe(r, tg_slot, g->checked ? "made an out-of-bounds access" : "made an out-of-bounds write", msg, cap, &at);
    if (addr < data) tg_where(data - addr, 0, true, msg, cap, &at);
    else tg_where(0, addr - (data + r.size), true, msg, cap, &at);
  } else if (sig == SIGFPE) {
    msg_put(msg, cap, &at, "raised an arithmetic exception (integer division or remainder by zero, or of the "
                           "most negative value by -1)");
  } else if (sig == SIGILL) {
    msg_put(msg, cap, &at, "reached a trap (behaviour the C++ compiler found undefined, such as a division by "
                           "a constant zero)");
  } else if (t && t->stack && addr < (uint64_t)(uintptr_t)t->stack &&
             (uint64_t)(uintptr_t)t->stack - addr <= (uint64_t)64 << 20) {
    // Just below the running fiber's stack: its frames outgrew it.
    msg_put(msg, cap, &at, "overflowed its fiber stack (");
    msg_put(msg, cap, &at, (uint64_t)(STACK_BYTES >> 10), false);
    msg_put(msg, cap, &at, " KiB; the access lies ");
    msg_put(msg, cap, &at, (uint64_t)(uintptr_t)t->stack - addr, false);
    msg_put(msg, cap, &at, " bytes below it): threads of kernels with barriers or SIMD collectives run on "
                           "stacks of that size, so their private arrays must stay well under it");
  } else if (below_os_stack(addr, &os_stack)) {
    // A kernel without barriers runs on the worker's own stack.
    msg_put(msg, cap, &at, "overflowed its worker thread's stack (");
    msg_put(msg, cap, &at, os_stack >> 10, false);
    msg_put(msg, cap, &at, " KiB; threads of kernels without barriers or SIMD collectives run on it), so its "
                           "private arrays must stay well under that size");
  } else {
    msg_put(msg, cap, &at, "accessed address 0x");
    msg_put(msg, cap, &at, addr, true);
    msg_put(msg, cap, &at, ", outside every buffer of the launch (checked mode, `kiln run --checked` or "
                           "`CheckedScope`, names the buffer when an access lands just outside one)");
  }
  if (g) {
    g->nallocs = 0;
    g->direct = false;
    g->running = nullptr;
    tg_forget_call(g->arena);
  }
  c.group = nullptr;
  return 2;
}

// `run_groups_unprotected` with an escape point for faults (see above); without a free slot or
// a handler, the groups run unprotected.
inline int run_groups_guarded(Body body, DirectFn direct, bool cooperative, const LaunchDesc* d, uint64_t begin,
                              uint64_t end, StackSet* stacks, TgArena* arena, const char* const* tg_names, char* msg,
                              int msg_cap) {
  int slot = -1;
  if (install_fault_handler() == 0) {
    for (int s = 0; s < ESCAPE_SLOTS && slot < 0; ++s) {
      int zero = 0;
      if (__atomic_compare_exchange_n(&g_escapes[s].used, &zero, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) slot = s;
    }
  }
  if (slot < 0)
    return run_groups_unprotected(body, direct, cooperative, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
  g_worker.ensure_alt_stack();
  Escape& e = g_escapes[slot];
  sigjmp_buf env;
  e.owner = pthread_self();
  e.env = &env;
  int rc;
  if (sigsetjmp(env, 0) == 0) {
    __atomic_store_n(&e.armed, 1, __ATOMIC_RELEASE);
    rc = run_groups_unprotected(body, direct, cooperative, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
    __atomic_store_n(&e.armed, 0, __ATOMIC_RELEASE);
  } else {
    rc = abandon_group(e.sig, e.addr, msg, msg_cap);
  }
  __atomic_store_n(&e.used, 0, __ATOMIC_RELEASE);
  return rc;
}

// `run_groups_guarded`, then the canaries of the threadgroup arrays the call used: a write that
// stayed next to an array's data (inside its canaries) is reported here.
KILN_SCHEDULER_LINKAGE int run_groups(Body body, DirectFn direct, bool cooperative, const LaunchDesc* d,
                                      uint64_t begin, uint64_t end, StackSet* stacks, TgArena* arena,
                                      const char* const* tg_names, char* msg, int msg_cap) {
  if (__atomic_load_n(&g_cooperative_library, __ATOMIC_RELAXED) != cooperative)
    __atomic_store_n(&g_cooperative_library, cooperative, __ATOMIC_RELAXED);
  int rc = run_groups_guarded(body, direct, cooperative, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
  if (rc == 2) {
    tg_forget_call(arena);
    return 2;
  }
  return tg_check_call(arena, msg, msg_cap) ? 2 : rc;
}

}  // namespace rt
}  // namespace kiln

// Unmaps every stack of a set the host no longer needs.
extern "C" void kiln_release_stacks(kiln::rt::StackSet* set) {
  using namespace kiln::rt;
  for (uint32_t i = 0; i < set->count; ++i) munmap((char*)set->stacks[i] - GUARD_BYTES, STACK_BYTES + GUARD_BYTES);
  set->count = 0;
}

// Arms the guards of a launch (those the host keeps protected are already): 0 ok, 1 no handler,
// 2 no free slot, 3 mprotect failed.
extern "C" int kiln_checked_begin(kiln::rt::CheckedLaunch* l) {
  using namespace kiln::rt;
  if (install_fault_handler()) return 1;
  int slot = -1;
  for (int s = 0; s < CHECKED_SLOTS && slot < 0; ++s) {
    if (__atomic_load_n(&g_checked[s], __ATOMIC_RELAXED)) continue;
    CheckedLaunch* none = nullptr;
    if (__atomic_compare_exchange_n(&g_checked[s], &none, l, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) slot = s;
  }
  if (slot < 0) return 2;
  for (uint32_t i = 0; i < l->n_guards; ++i) {
    if (l->guards[i].kept) continue;
    if (mprotect((void*)l->guards[i].begin, l->guards[i].end - l->guards[i].begin, PROT_NONE) != 0) {
      for (uint32_t j = 0; j < i; ++j)
        if (!l->guards[j].kept)
          mprotect((void*)l->guards[j].begin, l->guards[j].end - l->guards[j].begin, PROT_READ | PROT_WRITE);
      __atomic_store_n(&g_checked[slot], (CheckedLaunch*)nullptr, __ATOMIC_SEQ_CST);
      return 3;
    }
  }
  return 0;
}

// Disarms the guards (they become ordinary memory again; those the host keeps stay protected)
// and frees the slot.
extern "C" int kiln_checked_end(kiln::rt::CheckedLaunch* l) {
  using namespace kiln::rt;
  int rc = 0;
  for (uint32_t i = 0; i < l->n_guards; ++i)
    if (!l->guards[i].kept &&
        mprotect((void*)l->guards[i].begin, l->guards[i].end - l->guards[i].begin, PROT_READ | PROT_WRITE) != 0)
      rc = 3;
  // The launch holds one slot: read them all, and compare-and-swap only that one (a locked
  // instruction per slot would cost more than the rest of a tiny launch).
  for (int s = 0; s < CHECKED_SLOTS; ++s) {
    if (__atomic_load_n(&g_checked[s], __ATOMIC_ACQUIRE) != l) continue;
    CheckedLaunch* mine = l;
    __atomic_compare_exchange_n(&g_checked[s], &mine, (CheckedLaunch*)nullptr, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    break;
  }
  return rc;
}
