// kiln CPU prelude, part 2b (after runtime.h): threadgroup memory. Each threadgroup array of a
// group (a `threadgroup` declaration or a `[[threadgroup(n)]]` parameter) lives in a region of
// its own: a mapping whose data ends, 16-byte aligned, against a large trailing guard and
// starts shortly after a leading one. The guards are read-only on ordinary launches (a write
// faults, a read past the end sees zeros, as reading past an array on a GPU goes unnoticed)
// and inaccessible on checked launches (reads fault too). The bytes between the guards and the
// data (the alignment tail, the slack before the data) hold canaries, checked when a region
// changes hands and after each call. Regions are lent by the host with the call (`TgArena`)
// and reused across groups and launches, so a group costs a zeroing of its arrays and no
// system call.
#pragma once

extern "C" int getpagesize(void) noexcept;

namespace kiln { namespace rt {

// Address space on each side of a region's data that faults on a write.
const uint64_t TG_GUARD_BYTES = 4ull << 20;
const unsigned char TG_CANARY = 0xA5;
// Declarations (up to 64) first, then the `[[threadgroup(n)]]` parameters (up to 16).
const int TG_DECLARED = 64, TG_SLOTS = 80;

struct TgRegion {
  char* map;           // the mapping: guard, room, guard
  uint64_t map_bytes;
  uint64_t room;       // bytes between the guards (whole pages)
  uint64_t open;       // bytes at the end of the room that are readable and writable
  char* data;
  uint64_t size;
  const char* name;    // the array's name in the kernel (valid while the call runs)
  int32_t guard_prot;  // protection of everything but the open bytes
  int32_t state;       // 0 canaries intact, 1 in use by this call, 2 canaries to refill
};
static_assert(sizeof(TgRegion) == 64, "TgRegion mirrors the host's 8 words");

// Lent by the host to one `kiln_run` call at a time (mirrors `ThreadgroupArena` in the backend).
struct TgArena {
  TgRegion regions[TG_SLOTS];
};
static_assert(sizeof(TgArena) == 80 * 64, "TgArena mirrors the host's 80 regions of 8 words");

inline uint64_t tg_page() {
  const int p = getpagesize();
  return p > 4096 ? (uint64_t)p : 4096;
}

// Where an out-of-bounds access to a region was found: `before` bytes before the data's start
// or byte `past` past its end (0 when not that side).
struct TgMiss {
  uint64_t before, past;
};

// Finds changed canaries around `r`'s data.
inline TgMiss tg_canaries(const TgRegion& r) {
  TgMiss m = {0, 0};
  const char* room_end = r.map + r.map_bytes - TG_GUARD_BYTES;
  for (const char* p = room_end - r.open; p < r.data; ++p)
    if ((unsigned char)*p != TG_CANARY) { m.before = (uint64_t)(r.data - p); break; }
  for (const char* p = r.data + r.size; p < room_end; ++p)
    if ((unsigned char)*p != TG_CANARY) { m.past = (uint64_t)(p - (r.data + r.size)) + 1; }
  return m;
}

// Appends `text` (may be null) to the message at `*at`, keeping it NUL-terminated within `cap`.
inline void msg_put(char* dst, int cap, int* at, const char* text) {
  for (; text && *text && *at + 1 < cap; ++text) dst[(*at)++] = *text;
  if (cap > 0) dst[*at < cap ? *at : cap - 1] = 0;
}

inline void copy_msg(char* dst, int cap, const char* src) {
  int at = 0;
  msg_put(dst, cap, &at, src);
}

// Appends `v` in decimal or hexadecimal (no stdio: its names would share the kernel's global
// namespace).
inline void msg_put(char* dst, int cap, int* at, uint64_t v, bool hex) {
  char text[24];
  int i = 23;
  text[i] = 0;
  const unsigned base = hex ? 16 : 10;
  do {
    text[--i] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  msg_put(dst, cap, at, text + i);
}

// Starts the message for an out-of-bounds access to slot `s`'s array; `what` says which ("an
// out-of-bounds write").
inline void tg_describe(const TgRegion& r, int s, const char* what, char* msg, int cap, int* at) {
  const bool dynamic = s >= TG_DECLARED;
  msg_put(msg, cap, at, what);
  msg_put(msg, cap, at, dynamic ? " to threadgroup memory `" : " to threadgroup array `");
  msg_put(msg, cap, at, r.name ? r.name : "?");
  msg_put(msg, cap, at, "` (");
  if (dynamic) {
    msg_put(msg, cap, at, "[[threadgroup(");
    msg_put(msg, cap, at, (uint64_t)(s - TG_DECLARED), false);
    msg_put(msg, cap, at, ")]], ");
  }
  msg_put(msg, cap, at, r.size, false);
  msg_put(msg, cap, at, " bytes): ");
}

// Appends where: `before` bytes before the start, else `past` past the end; `exact` for one
// address (byte `past`, counted from 0), else the furthest of several changed bytes.
inline void tg_where(uint64_t before, uint64_t past, bool exact, char* msg, int cap, int* at) {
  if (!exact) msg_put(msg, cap, at, "up to ");
  if (before) {
    msg_put(msg, cap, at, before, false);
    msg_put(msg, cap, at, " bytes before the start");
  } else {
    if (exact) msg_put(msg, cap, at, "byte ");
    msg_put(msg, cap, at, past, false);
    msg_put(msg, cap, at, exact ? " past the end" : " bytes past the end");
  }
}

// Checks the canaries of every region the call used; on a change writes the message and
// returns 2 (the region's canaries are refilled when next used), else 0.
inline int tg_check_call(TgArena* a, char* msg, int cap) {
  if (!a) return 0;
  int rc = 0;
  for (int s = 0; s < TG_SLOTS; ++s) {
    TgRegion& r = a->regions[s];
    if (r.state != 1) continue;
    const TgMiss m = tg_canaries(r);
    r.state = (m.before || m.past) ? 2 : 0;
    if (rc || r.state == 0) continue;
    int at = 0;
    tg_describe(r, s, "out-of-bounds write", msg, cap, &at);
    tg_where(m.before, m.past, false, msg, cap, &at);
    rc = 2;
  }
  return rc;
}

// After a fault the canaries of every region may hold anything: refill them at next use.
inline void tg_forget_call(TgArena* a) {
  if (!a) return;
  for (int s = 0; s < TG_SLOTS; ++s)
    if (a->regions[s].map) a->regions[s].state = 2;
}

// The data of slot `s`, `size` bytes zeroed, for the running group; null when no memory could
// be had. A slot that changes array (another size or name) has its canaries checked first; a
// change found there is a fault (message in `*fault_text`). Defined once per library, with the
// scheduler (scheduler.h), so kernels do not compile it again.
__attribute__((visibility("hidden"))) char* tg_open(TgArena* a, int s, uint64_t size, const char* name, bool checked,
                                                 const char** fault_text, char* text, int cap);

// Which region the running call uses holds `addr` (its data, open bytes or guards), or -1.
inline int tg_region_of(const TgArena* a, uint64_t addr) {
  if (!a) return -1;
  for (int s = 0; s < TG_SLOTS; ++s) {
    const TgRegion& r = a->regions[s];
    if (r.map && r.state == 1 && addr >= (uint64_t)(uintptr_t)r.map && addr < (uint64_t)(uintptr_t)r.map + r.map_bytes)
      return s;
  }
  return -1;
}

// Per-group storage for a `threadgroup` declaration, keyed by declaration site and type.
// The group's storage of the `threadgroup` declaration at `Site`, opened by the first of its
// threads to reach it; `Zeroed` (declared `= {0}` or `= {}`) fills it with zeros then, once for
// the group, so a later thread's declaration never clears what others stored.
template <class T, int Site, bool Zeroed = false> inline T* tg_alloc(const char* name) {
  static char key;
  Group* g = here().group;
  for (int i = 0; i < g->nallocs; ++i)
    if (g->allocs[i].key == &key) return (T*)g->allocs[i].mem;
  if (g->nallocs == TG_DECLARED) throw Fault{"more than 64 threadgroup declarations in one kernel"};
  const char* fault = "out of memory for threadgroup storage";
  void* mem = tg_open(g->arena, g->nallocs, sizeof(T), name, g->checked, &fault, g->tg_fault_text,
                      (int)sizeof g->tg_fault_text);
  if (!mem) throw Fault{fault};
  if (Zeroed) __builtin_memset(mem, 0, sizeof(T));
  KILN_CHECK(kiln::chk::tg_opened(g->nallocs, (const char*)mem, sizeof(T), name, kiln::chk::elem_size<T>::value, Zeroed));
  g->allocs[g->nallocs++] = Alloc{&key, mem};
  return (T*)mem;
}

}  // namespace rt
}  // namespace kiln
