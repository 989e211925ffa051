// kiln CPU prelude, part 4 continued (after scheduler.h): faults of a running kernel, the
// guarded run of groups and the C entries the host calls (stacks, guards).
#pragma once

namespace kiln { namespace rt {

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
    // A barrier-free kernel's direct loop keeps no `Thread`: the group has the position (of a
    // span of threads in a chunked loop, whose end is `direct_at[3]`).
    const uint3 p = t ? t->thread_position_in_grid
                      : uint3(g->direct_base.x + g->direct_at[0], g->direct_base.y + g->direct_at[1],
                              g->direct_base.z + g->direct_at[2]);
    const uint pos[3] = {p.x, p.y, p.z};
    const uint span_end = t ? 0 : g->direct_at[3];
    msg_put(msg, cap, &at, span_end ? "one of threads (" : "thread (");
    for (int k = 0; k < 3; ++k) {
      msg_put(msg, cap, &at, pos[k], false);
      if (k == 0 && span_end) {
        msg_put(msg, cap, &at, "..");
        msg_put(msg, cap, &at, (uint64_t)(g->direct_base.x + span_end - 1), false);
      }
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
    // A kernel without barriers runs on the worker's own stack, a coroutine thread between its
    // suspensions too.
    msg_put(msg, cap, &at, "overflowed its worker thread's stack (");
    msg_put(msg, cap, &at, os_stack >> 10, false);
    msg_put(msg, cap, &at, " KiB; threads of kernels without barriers or SIMD collectives run on it, and threads "
                           "run as coroutines between their barriers), so its private arrays must stay well "
                           "under that size");
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
inline int run_groups_guarded(Body body, DirectFn direct, bool cooperative, CoResume co_resume, const LaunchDesc* d, uint64_t begin,
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
    return run_groups_unprotected(body, direct, cooperative, co_resume, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
  g_worker.ensure_alt_stack();
  Escape& e = g_escapes[slot];
  sigjmp_buf env;
  e.owner = pthread_self();
  e.env = &env;
  volatile int rc;
  if (sigsetjmp(env, 0) == 0) {
    __atomic_store_n(&e.armed, 1, __ATOMIC_RELEASE);
    rc = run_groups_unprotected(body, direct, cooperative, co_resume, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
    __atomic_store_n(&e.armed, 0, __ATOMIC_RELEASE);
  } else {
    // A fault in a chunked direct loop names a span of threads: the group runs again thread by
    // thread (the threads before the one that faulted write what they wrote before), and a
    // fault then names its thread. Should it not fault again, the span's message stands.
    const Group* g = g_cur.group;
    const bool span = g && g->direct && g->direct_at[3] != 0;
    const uint3 gid = span ? g->direct_gid : uint3(0u);
    rc = abandon_group(e.sig, e.addr, msg, msg_cap);
    if (span) {
      const uint64_t lin = gid.x + (uint64_t)d->groups[0] * (gid.y + (uint64_t)d->groups[1] * gid.z);
      char scratch[256];
      if (sigsetjmp(env, 0) == 0) {
        __atomic_store_n(&e.armed, 1, __ATOMIC_RELEASE);
        run_groups_unprotected(body, nullptr, cooperative, co_resume, d, lin, lin + 1, stacks, arena, tg_names, scratch,
                               (int)sizeof scratch);
        __atomic_store_n(&e.armed, 0, __ATOMIC_RELEASE);
      } else {
        abandon_group(e.sig, e.addr, msg, msg_cap);
      }
    }
  }
  __atomic_store_n(&e.used, 0, __ATOMIC_RELEASE);
  return rc;
}

// `run_groups_guarded`, then the canaries of the threadgroup arrays the call used: a write that
// stayed next to an array's data (inside its canaries) is reported here.
KILN_SCHEDULER_LINKAGE int run_groups(Body body, DirectFn direct, bool cooperative, CoResume co_resume, const LaunchDesc* d,
                                      uint64_t begin, uint64_t end, StackSet* stacks, TgArena* arena,
                                      const char* const* tg_names, char* msg, int msg_cap) {
  // Coroutine threads run on the worker's own stack, with no fiber header to read.
  const bool fibers = cooperative && !co_resume;
  if (__atomic_load_n(&g_cooperative_library, __ATOMIC_RELAXED) != fibers)
    __atomic_store_n(&g_cooperative_library, fibers, __ATOMIC_RELAXED);
  int rc = run_groups_guarded(body, direct, cooperative, co_resume, d, begin, end, stacks, arena, tg_names, msg, msg_cap);
  if (rc == 2) {
    tg_forget_call(arena);
    return 2;
  }
  return tg_check_call(arena, msg, msg_cap) ? 2 : rc;
}

}  // namespace rt
}  // namespace kiln

// Unmaps every stack of a set the host no longer needs, and its coroutine frames.
extern "C" void kiln_release_stacks(kiln::rt::StackSet* set) {
  using namespace kiln::rt;
  for (uint32_t i = 0; i < set->count; ++i) munmap((char*)set->stacks[i] - GUARD_BYTES, STACK_BYTES + GUARD_BYTES);
  set->count = 0;
  if (set->frames) munmap(set->frames, set->frames_room);
  set->frames = nullptr;
  set->frames_room = 0;
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
