// kiln CPU prelude, part 4: the group scheduler — fibers, SIMD-group collectives, the groups'
// loop — then `faults.h` (fault escapes, guards and the C entries the host calls). Included once,
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

const volatile int* const* cancel_slot() noexcept { return &g_cur.cancel; }

// Declared in runtime.h (SIMD collectives) and threadgroup.h (threadgroup memory).
View post_bytes(const void* bytes, unsigned size, const void* site) {
  const FiberHeader h = here();
  Thread* t = h.thread;
  // A coroutine thread's reading pass: the call has resolved.
  if (t && t->co_phase == CO_RESUME) {
    t->pending_site = nullptr;
    const uint sg = t->simdgroup_index_in_threadgroup;
    return View{h.group->snap[sg], h.group->active[sg], t->thread_index_in_simdgroup, &h.group->folded[sg]};
  }
  const bool posting = t && t->co_phase == CO_POST;
  if (!t || (!t->stack && !posting)) throw Fault{"a SIMD collective ran in a kernel compiled without cooperative threads"};
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
  // A coroutine thread's posting pass: it suspends when this returns (no lane is read).
  if (posting) return View{h.group->snap[0], 0u, t->thread_index_in_simdgroup, &h.group->co_scratch};
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
  // The frames of coroutine threads (see co_frame_make): one mapping, kept with the set between
  // calls and unmapped with its stacks.
  char* frames;
  uint64_t frames_room;
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
  // Where the running call keeps its coroutine threads' frames (the lent stack set), the size
  // of this library's last frames, and the text of the fault when they do not fit.
  StackSet* co_frames;
  size_t co_each;
  char co_fault[192];
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

// The most a coroutine thread's frame may take: a fiber's stack.
const size_t CO_FRAME_LIMIT = STACK_BYTES;

// The fault of a thread whose private memory (`each` bytes) passes `CO_FRAME_LIMIT`.
inline const char* private_memory_fault(Worker& w, size_t each) {
  int at = 0;
  msg_put(w.co_fault, (int)sizeof w.co_fault, &at, "needs ");
  msg_put(w.co_fault, (int)sizeof w.co_fault, &at, (uint64_t)(each >> 10), false);
  msg_put(w.co_fault, (int)sizeof w.co_fault, &at, " KiB of private memory per thread, over the ");
  msg_put(w.co_fault, (int)sizeof w.co_fault, &at, (uint64_t)(CO_FRAME_LIMIT >> 10), false);
  msg_put(w.co_fault, (int)sizeof w.co_fault, &at, " KiB a thread of a kernel with barriers or SIMD collectives has: its "
                                                   "private arrays must stay well under it");
  return w.co_fault;
}

char* region_room(size_t record, size_t n, const char** fault) noexcept {
  Worker& w = g_worker;
  if (record > CO_FRAME_LIMIT) {
    *fault = private_memory_fault(w, record);
    return nullptr;
  }
  StackSet* set = w.co_frames;
  const size_t bytes = record * n + n;
  if (set && set->frames_room < bytes) {
    if (set->frames) munmap(set->frames, set->frames_room);
    set->frames_room = 0;
    // The coroutine frames' layout (one size per thread) no longer holds.
    w.co_each = 0;
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    set->frames = m == MAP_FAILED ? nullptr : (char*)m;
    if (set->frames) set->frames_room = bytes;
  }
  if (!set || !set->frames) {
    *fault = "cannot allocate its threads' variables kept across barriers";
    return nullptr;
  }
  return set->frames;
}

void* co_frame_make(size_t bytes, Thread* t) noexcept {
  Worker& w = g_worker;
  const size_t each = (bytes + 63) & ~(size_t)63;
  w.co_each = 0;
  if (each > CO_FRAME_LIMIT) {
    private_memory_fault(w, each);
    return nullptr;
  }
  // Room for every thread of the group (each thread's frame has one size) in the lent set's
  // arena, kept for the next groups and calls: the scheduler then sets each thread's room aside
  // before its frame is made. Made by the group's first thread, before any frame of the group
  // lives in the arena.
  StackSet* set = w.co_frames;
  const size_t n = (size_t)(w.group.n > 0 ? w.group.n : 1), need = each * n;
  const size_t i = t ? (size_t)(t - w.group.threads) : n;
  if (set && set->frames_room < need && i == 0) {
    if (set->frames) munmap(set->frames, set->frames_room);
    set->frames_room = 0;
    void* m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    set->frames = m == MAP_FAILED ? nullptr : (char*)m;
    if (set->frames) set->frames_room = need;
  }
  if (!set || !set->frames || i >= n || set->frames_room < need) {
    copy_msg(w.co_fault, (int)sizeof w.co_fault, "cannot allocate its threads' coroutine frames");
    return nullptr;
  }
  w.co_each = each;
  return set->frames + i * each;
}

inline void run_one(Thread& t, Group* g) {
  try {
    g->body(t, g->buffers, g->tg_mem);
  } catch (...) {
    abort_for_current(*g);
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

// Runs a group whose threads are coroutines (see runtime.h): each thread's frame is made, then
// every runnable thread is resumed in index order until all wait (at a barrier or a SIMD-group
// call) or are done, collectives resolve and barriers release as for fibers.
inline void run_coroutines(Group& g, CoResume resume, Worker& w, StackSet* frames) {
  w.co_frames = frames;
  // Frames of an earlier group's size that do not all fit this set's arena are made anew from
  // the first.
  const size_t room = frames ? frames->frames_room : 0;
  if (w.co_each * (size_t)g.n > room) w.co_each = 0;
  try {
    for (int i = 0; i < g.n; ++i) {
      Thread& t = g.threads[i];
      g.running = &t;
      // The frame's room, where the frames of an earlier group had one size that fits here.
      const size_t each = w.co_each;
      const bool fits = each != 0;
      t.co_frame = fits ? frames->frames + (size_t)i * each : nullptr;
      t.co_room = fits ? (uint32_t)each : 0;
      g.body(t, g.buffers, g.tg_mem);
      if (!t.co_frame) {
        g.aborted = 2;
        g.fault = w.co_fault;
        return;
      }
    }
    for (;;) {
      for (int i = 0; i < g.n; ++i) {
        Thread& t = g.threads[i];
        if (t.state != RUNNABLE) continue;
        if (__builtin_expect(*g.cancel != 0, 0)) throw Cancelled();
        g.running = &t;
        resume(t.co_frame);
      }
      const int resolved = g.at_collective ? resolve_collectives(g, w.divergence, w.fault_text, (int)sizeof w.fault_text) : 0;
      if (resolved == 2) {
        g.aborted = 2;
        return;
      }
      if (resolved) continue;
      bool waiting = false;
      for (int i = 0; i < g.n; ++i)
        if (g.threads[i].state == AT_BARRIER) { g.threads[i].state = RUNNABLE; waiting = true; }
      if (!waiting) return;
    }
  } catch (...) {
    abort_for_current(g);
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
inline int run_groups_unprotected(Body body, DirectFn direct, bool cooperative, CoResume co_resume, const LaunchDesc* d, uint64_t begin,
                                  uint64_t end, StackSet* stacks, TgArena* arena, const char* const* tg_names,
                                  char* msg, int msg_cap) {
  g_cur.cancel = d->cancel;
  Worker& w = g_worker;
  Thread* threads = w.threads;
  const uint32_t gx = d->groups[0], gy = d->groups[1];
  // (The sanitizer's libraries have no direct loops: their entries pass none.)
  // A cooperative kernel's direct function is its region driver, where it has one.
  if (d->checked) direct = nullptr;
  w.co_frames = stacks;
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
        set_index_builtins(t, i);
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
      t.co_frame = nullptr;
      t.co_phase = CO_NONE;
    }
    g_cur.group = &g;
    KILN_CHECK(kiln::chk::group_begin(lin));
    KILN_CHECK(for (uint32_t i = 0; i < d->n_tg && i < 16; ++i) kiln::chk::tg_opened(
        TG_DECLARED + (int)i, (const char*)g.tg_mem[i], d->tg_sizes[i], tg_names[i], 1, false));
    if (cooperative) {
      for (uint i = 0; i < (n + 31) / 32; ++i) w.divergence[i].left_out = 0;
      if (co_resume) run_coroutines(g, co_resume, w, stacks);
      else run_cooperative(g, stacks, w);
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

}  // namespace rt
}  // namespace kiln
