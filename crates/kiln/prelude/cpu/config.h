// kiln CPU prelude, part 1 (before the common headers): host system headers, the KILN_HD
// macro (empty on the host), the C math functions the common math header calls, and the macros
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
#define KILN_HAVE_STDINT 1
#define KILN_HD
#define KILN_CONSTANT static const

extern "C" {
#define KILN_LIBM1(f) float f(float) noexcept;
#define KILN_LIBM2(f) float f(float, float) noexcept;
KILN_LIBM1(expf) KILN_LIBM1(exp2f) KILN_LIBM1(logf) KILN_LIBM1(log2f) KILN_LIBM1(log10f)
KILN_LIBM1(sqrtf) KILN_LIBM1(sinf) KILN_LIBM1(cosf) KILN_LIBM1(tanf) KILN_LIBM1(asinf)
KILN_LIBM1(acosf) KILN_LIBM1(atanf) KILN_LIBM1(sinhf) KILN_LIBM1(coshf) KILN_LIBM1(tanhf)
KILN_LIBM1(asinhf) KILN_LIBM1(acoshf) KILN_LIBM1(atanhf) KILN_LIBM1(floorf) KILN_LIBM1(ceilf)
KILN_LIBM1(roundf) KILN_LIBM1(truncf) KILN_LIBM1(rintf) KILN_LIBM1(fabsf) KILN_LIBM1(cbrtf)
KILN_LIBM1(log1pf) KILN_LIBM1(expm1f) KILN_LIBM1(erff)
KILN_LIBM2(powf) KILN_LIBM2(atan2f) KILN_LIBM2(fmodf) KILN_LIBM2(fminf) KILN_LIBM2(fmaxf)
KILN_LIBM2(copysignf)
float fmaf(float, float, float) noexcept;
void* calloc(size_t, size_t) noexcept;
void free(void*) noexcept;
#undef KILN_LIBM1
#undef KILN_LIBM2
}

namespace kiln { namespace rt { void poll(); } }
#define KILN_POLL() ::kiln::rt::poll()
#define KILN_POLL_TRUE() (::kiln::rt::poll(), true)
