// kiln CPU prelude, part 3a: which lanes of a SIMD-group execute one call of a SIMD-group
// function together.
//
// Metal runs the lanes of a SIMD-group together: lanes that take different sides of a branch run
// one side after the other and meet again where the branch ends, and a SIMD-group function
// combines the lanes active at that call (MSL 6.9.2). The emulator runs every lane on its own, so
// each lane carries a position: one element per enclosing loop (the loop and its iteration) and
// per enclosing call of a function that reaches SIMD-group functions (the call site), outermost
// first, and last the site of the SIMD-group function it waits at. Lanes at equal positions
// execute one call together. Keys are source positions and iterations count up, so positions
// order as the program runs: once no lane of the group can run, the scheduler resolves the
// smallest position its lanes wait at, which no other lane can still reach.
//
// The lowering (source/lower/convergence.rs) writes `LoopScope`s around loops, `CallScope`s at
// the top of functions that reach SIMD-group functions, a `CallSite` argument at their calls and
// a site tag at every SIMD-group function call. Calls it cannot tag are told apart by return
// address and have no order (the two special keys below); the scheduler refuses to combine part
// of a SIMD-group inside a function called that way, and any lane that arrives at a call its
// SIMD-group already executed without it (scheduler.h).
#pragma once

namespace kiln { namespace rt {

// An element: key << 32 | iteration (0 for calls and sites). Keys are token positions in the
// lowered source, below 2^31.
typedef uint64_t Element;
// A function whose calls the lowering cannot tag (an operator, a constructor, a lambda passed
// on, a parameter pack, ...): its key is UNKNOWN_CALL | the line of its definition, its low half
// low bits of the address its out-of-line body returns to.
const uint32_t UNKNOWN_CALL = 0x80000000u;
// A SIMD-group function called from code the lowering does not see (a macro's expansion); the
// low half holds low bits of its return address.
const uint32_t UNTAGGED_SITE = 0xffffffffu;
// A tagged site travels in `Thread::pending_site` with the top bit set, which no code address
// of a user-space process has.
const uintptr_t TAGGED_SITE = (uintptr_t)1 << 63;

inline constexpr Element element(uint32_t key, uint32_t low) { return (Element)key << 32 | low; }

// The position of the SIMD-group function a lane waits at (after `post`).
inline Element site_element(const void* site) {
  uintptr_t s = (uintptr_t)site;
  return s & TAGGED_SITE ? element((uint32_t)(s & ~TAGGED_SITE), 0) : element(UNTAGGED_SITE, (uint32_t)s);
}

inline Element* enter(Thread* t, Element e) {
  if (t->depth >= POSITION_DEPTH)
    throw Fault{"SIMD-group functions nested in more than 32 loops and function calls"};
  t->path[t->depth] = e;
  return &t->path[t->depth++];
}

// The call of a function that reaches SIMD-group functions: the call's key, or (the default
// argument, for calls the lowering could not tag) unknown.
struct CallSite {
  Element e;
  explicit constexpr CallSite(uint32_t key) : e(element(key, 0)) {}
  static CallSite unknown(uint32_t line, const void* return_address) {
    CallSite s(0);
    s.e = element(UNKNOWN_CALL | line, (uint32_t)(uintptr_t)return_address);
    return s;
  }
};

// Lives for one execution of a function body.
struct CallScope {
  Thread* t;
  explicit CallScope(CallSite site) : t(here().thread) { enter(t, site.e); }
  ~CallScope() { --t->depth; }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
};

// Lives for one execution of a loop statement (the lowering wraps the loop in a `for` that runs
// once); `step()` counts the iterations.
struct LoopScope {
  Thread* t;
  Element* at;
  bool first;
  explicit LoopScope(uint32_t key) : t(here().thread), at(enter(t, element(key, 0))), first(true) {}
  ~LoopScope() { --t->depth; }
  LoopScope(const LoopScope&) = delete;
  LoopScope& operator=(const LoopScope&) = delete;
  bool once() {
    bool f = first;
    first = false;
    return f;
  }
  void step() { *at = (*at & ~(Element)0xffffffffu) | (uint32_t)(*at + 1); }
};

// A copy of a waiting lane's position: its path, then its site.
struct Position {
  uint32_t len;
  Element e[POSITION_DEPTH + 1];
  void set(const Thread& t) {
    len = t.depth + 1;
    for (uint32_t i = 0; i < t.depth; ++i) e[i] = t.path[i];
    e[t.depth] = site_element(t.site);
  }
  // The line (from 1) of the innermost function whose call the lowering could not tag, or 0.
  uint32_t unknown_call_line() const {
    for (uint32_t i = len - 1; i-- > 0;)
      if ((uint32_t)(e[i] >> 32) != UNTAGGED_SITE && (e[i] >> 32) & UNKNOWN_CALL)
        return (uint32_t)(e[i] >> 32) & ~UNKNOWN_CALL;
    return 0;
  }
};

// -1, 0 or 1 as the position of waiting lane `a` comes before, equals or follows `b`.
inline int compare(const Thread& a, const Position& b) {
  const uint32_t la = a.depth + 1, n = la < b.len ? la : b.len;
  for (uint32_t i = 0; i < n; ++i) {
    Element x = i < a.depth ? a.path[i] : site_element(a.site), y = b.e[i];
    if (x != y) return x < y ? -1 : 1;
  }
  return la == b.len ? 0 : (la < b.len ? -1 : 1);
}
inline int compare(const Thread& a, const Thread& b) {
  const uint32_t n = (a.depth < b.depth ? a.depth : b.depth) + 1;
  for (uint32_t i = 0; i < n; ++i) {
    Element x = i < a.depth ? a.path[i] : site_element(a.site), y = i < b.depth ? b.path[i] : site_element(b.site);
    if (x != y) return x < y ? -1 : 1;
  }
  return a.depth == b.depth ? 0 : (a.depth < b.depth ? -1 : 1);
}

}  // namespace rt
}  // namespace kiln
