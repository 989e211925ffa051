// kiln CPU prelude, part 4: the group scheduler and the C entry the host calls. Included once,
// after the lowered kernel and its entry wrappers.
#pragma once

namespace kiln { namespace rt {

thread_local Group* g_group;
thread_local Thread* g_thread;
thread_local const volatile int* g_cancel;

const size_t STACK_BYTES = 256 * 1024;
const size_t GUARD_BYTES = 4096;

// Fiber stacks are kept per OS thread and reused across groups; the lowest page of each is a
// guard so a runaway recursion faults instead of overwriting a neighbour.
struct StackPool {
  void* stacks[1024];
  int count;
  ~StackPool() {
    for (int i = 0; i < count; ++i) munmap((char*)stacks[i] - GUARD_BYTES, STACK_BYTES + GUARD_BYTES);
  }
  void* get(int i) {
    while (count <= i) {
      void* m = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return nullptr;
      mprotect(m, GUARD_BYTES, PROT_NONE);
      stacks[count++] = (char*)m + GUARD_BYTES;
    }
    return stacks[i];
  }
};
thread_local StackPool g_stacks;
thread_local Thread g_threads[1024];

inline void run_one(Thread& t) {
  Group* g = g_group;
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

inline void fiber_main() {
  run_one(*g_thread);
  // Returning ends the fiber; uc_link brings control back to the scheduler.
}

// Resolves, per simdgroup, the collective of the lowest waiting lane for all lanes waiting at
// the same site. Returns true when any lane was released.
inline bool resolve_collectives(Group& g) {
  bool any = false;
  for (int base = 0; base < g.n; base += 32) {
    const void* site = nullptr;
    unsigned mask = 0;
    int end = base + 32 < g.n ? base + 32 : g.n;
    for (int i = base; i < end; ++i) {
      Thread& t = g.threads[i];
      if (t.state != AT_COLLECTIVE) continue;
      if (!site) site = t.site;
      if (t.site == site) mask |= 1u << (i - base);
    }
    if (!mask) continue;
    int sg = base / 32;
    g.active[sg] = mask;
    for (int i = base; i < end; ++i) {
      if (!((mask >> (i - base)) & 1u)) continue;
      __builtin_memcpy(g.snap[sg][i - base], g.threads[i].slot, SLOT_BYTES);
      g.threads[i].state = RUNNABLE;
    }
    any = true;
  }
  return any;
}

inline void run_cooperative(Group& g) {
  for (int i = 0; i < g.n; ++i) {
    Thread& t = g.threads[i];
    t.stack = g_stacks.get(i);
    if (!t.stack) { g.aborted = 2; g.fault = "cannot allocate fiber stacks"; return; }
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = t.stack;
    t.ctx.uc_stack.ss_size = STACK_BYTES;
    t.ctx.uc_link = &g.sched;
    makecontext(&t.ctx, (void (*)())fiber_main, 0);
  }
  for (;;) {
    bool ran = false;
    for (int i = 0; i < g.n; ++i) {
      Thread& t = g.threads[i];
      if (t.state != RUNNABLE) continue;
      g_thread = &t;
      swapcontext(&g.sched, &t.ctx);
      ran = true;
      if (g.aborted) return;
    }
    if (ran) continue;
    if (resolve_collectives(g)) continue;
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
};

inline void copy_msg(char* dst, int cap, const char* src) {
  int i = 0;
  for (; src && src[i] && i + 1 < cap; ++i) dst[i] = src[i];
  if (cap > 0) dst[i] = 0;
}

// Runs groups [begin, end) of the linearised group grid. Returns 0, 1 (cancelled) or 2 (fault,
// message in `msg`).
inline int run_groups(Body body, bool cooperative, const LaunchDesc* d, uint64_t begin, uint64_t end,
                      char* msg, int msg_cap) {
  g_cancel = d->cancel;
  const uint32_t gx = d->groups[0], gy = d->groups[1];
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
    const uint nd = tg.x * tg.y * tg.z;
    Group g;
    g.threads = g_threads;
    g.n = (int)n;
    g.body = body;
    g.buffers = d->buffers;
    g.nallocs = 0;
    g.aborted = 0;
    g.fault = nullptr;
    for (uint32_t i = 0; i < 16; ++i) g.tg_mem[i] = nullptr;
    for (uint32_t i = 0; i < d->n_tg && i < 16; ++i) {
      g.tg_mem[i] = calloc(1, d->tg_sizes[i] + 16);
      if (!g.tg_mem[i]) { copy_msg(msg, msg_cap, "out of memory for threadgroup memory"); return 2; }
    }
    for (uint i = 0; i < n; ++i) {
      Thread& t = g_threads[i];
      uint3 local = uint3(i % size.x, (i / size.x) % size.y, i / (size.x * size.y));
      t.thread_position_in_threadgroup = local;
      t.thread_position_in_grid = gid * tg + local;
      t.threadgroup_position_in_grid = gid;
      t.threads_per_threadgroup = size;
      t.dispatch_threads_per_threadgroup = tg;
      t.threadgroups_per_grid = uint3(d->groups[0], d->groups[1], d->groups[2]);
      t.threads_per_grid = grid;
      t.grid_size = grid;
      t.grid_origin = uint3(0u);
      t.thread_index_in_threadgroup = i;
      t.simdgroup_index_in_threadgroup = i / 32;
      t.thread_index_in_simdgroup = i % 32;
      t.threads_per_simdgroup = 32;
      t.thread_execution_width = 32;
      t.simdgroups_per_threadgroup = (n + 31) / 32;
      t.dispatch_simdgroups_per_threadgroup = (nd + 31) / 32;
      t.quadgroup_index_in_threadgroup = i / 4;
      t.thread_index_in_quadgroup = i % 4;
      t.quadgroups_per_threadgroup = (n + 3) / 4;
      t.dispatch_quadgroups_per_threadgroup = (nd + 3) / 4;
      t.state = RUNNABLE;
      t.site = nullptr;
      t.stack = nullptr;
    }
    g_group = &g;
    if (cooperative) {
      run_cooperative(g);
    } else {
      for (uint i = 0; i < n && !g.aborted; ++i) {
        g_thread = &g_threads[i];
        run_one(g_threads[i]);
      }
    }
    g_group = nullptr;
    g_thread = nullptr;
    for (int i = 0; i < g.nallocs; ++i) free(g.allocs[i].mem);
    for (uint32_t i = 0; i < 16; ++i) free(g.tg_mem[i]);
    if (g.aborted == 1) return 1;
    if (g.aborted == 2) { copy_msg(msg, msg_cap, g.fault); return 2; }
  }
  return 0;
}

}  // namespace rt
}  // namespace kiln
