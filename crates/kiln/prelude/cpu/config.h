// kiln CPU prelude, part 1 (before the common headers): host system headers, the KILN_HD
// macro (empty on the host), the C math functions the common math headers call, and the macros
// the lowering emits (KILN_CONSTANT for file-scope `constant` data, KILN_POLL for loop
// conditions, which lets a cancelled kernel stop).
#pragma once
// The macros Metal's compiler predefines (kernel::PREDEFINED_MACROS; a test keeps these in step).
#define __METAL_VERSION__ 310
#define __HAVE_BFLOAT__ 1
// The scheduler leaves a faulting kernel with siglongjmp from the signal handler, which may run
// on another stack: the fortified longjmp would take that for a corrupt stack.
#undef _FORTIFY_SOURCE
#include <stdint.h>
#include <stddef.h>
#include <sys/mman.h>
#include <signal.h>
#include <setjmp.h>
#include <pthread.h>
// Fibers switch with a few instructions on x86-64 (System V) and aarch64; elsewhere ucontext.
#if (defined(__x86_64__) && !defined(_WIN32)) || defined(__aarch64__)
#define KILN_FAST_FIBERS 1
#else
#include <ucontext.h>
#endif
// Threads of kernels whose barriers and SIMD-group functions all lie in the kernel function
// itself run as stackless coroutines where the compiler has them (runtime.h); the sanitizer's
// libraries keep fibers.
#if defined(__cpp_impl_coroutine) && !KILN_CHECKED
#define KILN_COROUTINES 1
#include <coroutine>
#else
#define KILN_COROUTINES 0
#endif
#define KILN_HAVE_STDINT 1
#define KILN_HD
// The scope of the prelude's global names (`KILN_GLOBAL_SCOPE::float2`).
#define KILN_GLOBAL_SCOPE
#define KILN_CONSTANT static const

extern "C" {
#define KILN_LIBM1(f) float f(float) noexcept;
#define KILN_LIBM2(f) float f(float, float) noexcept;
KILN_LIBM1(expf) KILN_LIBM1(exp2f) KILN_LIBM1(logf) KILN_LIBM1(log2f) KILN_LIBM1(log10f)
KILN_LIBM1(sqrtf) KILN_LIBM1(sinf) KILN_LIBM1(cosf) KILN_LIBM1(tanf) KILN_LIBM1(asinf)
KILN_LIBM1(acosf) KILN_LIBM1(atanf) KILN_LIBM1(sinhf) KILN_LIBM1(coshf) KILN_LIBM1(tanhf)
KILN_LIBM1(asinhf) KILN_LIBM1(acoshf) KILN_LIBM1(atanhf) KILN_LIBM1(floorf) KILN_LIBM1(ceilf)
KILN_LIBM1(roundf) KILN_LIBM1(truncf) KILN_LIBM1(rintf) KILN_LIBM1(fabsf) KILN_LIBM1(erff)
KILN_LIBM2(powf) KILN_LIBM2(atan2f) KILN_LIBM2(fmodf) KILN_LIBM2(fminf) KILN_LIBM2(fmaxf)
KILN_LIBM2(copysignf)
float fmaf(float, float, float) noexcept;
float ldexpf(float, int) noexcept;
#undef KILN_LIBM1
#undef KILN_LIBM2
}
// Double functions for the float functions computed in double; out of the global namespace so
// that they add no overloads to the user's unqualified calls.
namespace kiln { namespace libm {
extern "C" {
double exp(double) noexcept;
double sin(double) noexcept;
double cos(double) noexcept;
}
}  // namespace libm

// fmax and fmin as glibc computes them on x86-64 (the calls they stand for, whose results they
// keep bit for bit), inline so that loops over them vectorize. Ordered operands: x if x >= y
// (fmin: x <= y), else y, so equal ones (+0 and -0) give x. Unordered: with a signaling NaN,
// y quieted if y is a NaN, else x quieted; otherwise the operand that is not a NaN, or y when
// both are. Elsewhere libm's (aarch64's is one instruction).
#if defined(__x86_64__)
inline unsigned f32_bits_of(float x) {
  unsigned u;
  __builtin_memcpy(&u, &x, 4);
  return u;
}
inline float f32_of_bits(unsigned u) {
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
inline float unordered_f32(unsigned xb, unsigned yb, bool xn, bool yn) {
  const bool signaling = (xn && !(xb & 0x00400000u)) || (yn && !(yb & 0x00400000u));
  return f32_of_bits(signaling ? ((yn ? yb : xb) | 0x00400000u) : (yn && !xn ? xb : yb));
}
inline float fmax_f32(float x, float y) {
  const unsigned xb = f32_bits_of(x), yb = f32_bits_of(y);
  const bool xn = (xb & 0x7fffffffu) > 0x7f800000u, yn = (yb & 0x7fffffffu) > 0x7f800000u;
  return xn || yn ? unordered_f32(xb, yb, xn, yn) : (x >= y ? x : y);
}
inline float fmin_f32(float x, float y) {
  const unsigned xb = f32_bits_of(x), yb = f32_bits_of(y);
  const bool xn = (xb & 0x7fffffffu) > 0x7f800000u, yn = (yb & 0x7fffffffu) > 0x7f800000u;
  return xn || yn ? unordered_f32(xb, yb, xn, yn) : (x <= y ? x : y);
}
#else
inline float fmax_f32(float x, float y) { return fmaxf(x, y); }
inline float fmin_f32(float x, float y) { return fminf(x, y); }
#endif
}  // namespace kiln

namespace kiln { namespace rt { void poll(); } }
// Loops in constexpr functions poll too, so the poll is skipped in constant evaluation (where
// the call could not be made); a compiler without the builtin polls always.
#if defined(__has_builtin)
#if __has_builtin(__builtin_is_constant_evaluated)
#define KILN_CONSTANT_EVALUATED() __builtin_is_constant_evaluated()
#endif
#endif
#ifndef KILN_CONSTANT_EVALUATED
#define KILN_CONSTANT_EVALUATED() false
#endif
#define KILN_POLL() (KILN_CONSTANT_EVALUATED() ? (void)0 : ::kiln::rt::poll())
#define KILN_POLL_TRUE() (KILN_CONSTANT_EVALUATED() || (::kiln::rt::poll(), true))

// The sanitizer's hooks (`check.h`), compiled only into the libraries `kiln check` runs, which
// define KILN_CHECKED; elsewhere they vanish.
#if KILN_CHECKED
namespace kiln { namespace rt { struct Group; } }
namespace kiln { namespace chk {
void barrier_enter(const void* site, uint32_t flags);
void barrier_leave(uint32_t flags);
void collective_leave();
void collective_enter(const void* site);
void tg_opened(int slot, const char* data, uint64_t size, const char* name, uint32_t elem, bool zeroed);
void group_begin(uint64_t lin);
void group_end();
void barrier_release(const kiln::rt::Group& g);
bool inactive_lane(const void* site, uint32_t src);
int thread_order(int i, int n);
bool run_ahead();
void private_open(const void* data, uint64_t size, const char* name, uint32_t elem);
void private_close();
template <class T> struct elem_size { static const uint32_t value = sizeof(T); };
template <class T, size_t N> struct elem_size<T[N]> : elem_size<T> {};
template <class T> struct elem_type { typedef T type; };
template <class T, size_t N> struct elem_type<T[N]> : elem_type<T> {};
// A private array in scope, tracked for reads of elements its thread never wrote. Arrays of types
// with a constructor (which may write them before this runs) are not tracked.
struct PrivateArray {
  template <class A>
  __attribute__((always_inline)) PrivateArray(A& a, const char* name) {
    if (__is_trivially_constructible(typename elem_type<A>::type)) {
      private_open(&a, sizeof(A), name, elem_size<A>::value);
      tracked = true;
    }
  }
  __attribute__((always_inline)) ~PrivateArray() {
    if (tracked) private_close();
  }
  PrivateArray(const PrivateArray&) = delete;
  bool tracked = false;
};
} }
#define KILN_CHECK(call) call
// The lowering writes this after each private array declared without an initialiser.
#define KILN_PRIVATE_ARRAY(name) ::kiln::chk::PrivateArray kiln_private_##name(name, #name)
#else
#define KILN_CHECK(call)
#define KILN_PRIVATE_ARRAY(name)
#endif
