// kiln CPU prelude: where the lines of `os_log` calls go. Each worker OS thread appends the
// lines of the groups it runs to its own buffer, in the order the emulator runs them; after a
// `kiln_run` call the host takes that buffer (`kiln_log_drain`) and prints the launch's lines
// in group order, so the output is the same on every run.
#pragma once

namespace kiln { namespace oslog {

// The C library's functions, declared here rather than through <stdlib.h> and <stdio.h>, which
// put `abs`, `div` and the like in the global namespace beside Metal's (`using namespace
// metal; abs(x)` would be ambiguous).
extern "C" {
void* realloc(void*, size_t) noexcept;
void free(void*) noexcept;
int snprintf(char*, size_t, const char*, ...) noexcept;
}

struct Sink {
  char* data;
  size_t len, cap;
  size_t dropped;
};
static thread_local Sink g_sink;
// Past this many bytes per `kiln_run` call lines are counted, not kept.
const size_t SINK_LIMIT = size_t(64) << 20;

inline char* reserve(Sink& s, size_t n) {
  if (s.len + n > SINK_LIMIT) return nullptr;
  if (s.len + n > s.cap) {
    size_t cap = s.cap ? s.cap : 4096;
    while (cap < s.len + n) cap *= 2;
    char* grown = (char*)realloc(s.data, cap);
    if (!grown) return nullptr;
    s.data = grown;
    s.cap = cap;
  }
  return s.data + s.len;
}

template <class... A> void print(const metal::os_log& log, int type, const char* fmt, A... args) {
  const rt::Thread* t = rt::g_cur.thread();
  const rt::Group* d = t ? nullptr : rt::g_cur.group;
  uint3 g = uint3(0u), l = uint3(0u);
  if (t) {
    g = t->threadgroup_position_in_grid;
    l = t->thread_position_in_threadgroup;
  } else if (d && d->direct) {
    g = d->direct_gid;
    l = uint3(d->direct_at[0], d->direct_at[1], d->direct_at[2]);
  }
  char line[512];
  int n = snprintf(line, sizeof line, fmt, g.x, g.y, g.z, l.x, l.y, l.z, level_name(type), log_part(log.subsystem),
                   log_slash(log), log_part(log.category), log_colon(log), args...);
  if (n < 0) return;
  Sink& s = g_sink;
  char* at = reserve(s, (size_t)n + 1);
  if (!at) { ++s.dropped; return; }
  if ((size_t)n < sizeof line) {
    __builtin_memcpy(at, line, (size_t)n);
  } else {
    snprintf(at, (size_t)n + 1, fmt, g.x, g.y, g.z, l.x, l.y, l.z, level_name(type), log_part(log.subsystem),
             log_slash(log), log_part(log.category), log_colon(log), args...);
  }
  s.len += (size_t)n;
}

// Hands this thread's lines to `sink` and empties the buffer.
inline void drain(void (*sink)(void*, const char*, size_t), void* ctx) {
  Sink& s = g_sink;
  if (s.dropped) {
    char note[96];
    int n = snprintf(note, sizeof note, "[kiln: %zu kernel log lines dropped past %zu MiB]\n", s.dropped,
                     SINK_LIMIT >> 20);
    if (s.len) sink(ctx, s.data, s.len);
    if (n > 0) sink(ctx, note, (size_t)n);
  } else if (s.len) {
    sink(ctx, s.data, s.len);
  }
  s.len = 0;
  s.dropped = 0;
  // A worker keeps a small buffer for the next launch, not the largest it ever needed.
  if (s.cap > (size_t(1) << 20)) {
    free(s.data);
    s.data = nullptr;
    s.cap = 0;
  }
}

}}  // namespace kiln::oslog
