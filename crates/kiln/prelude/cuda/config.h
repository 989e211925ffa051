// kiln CUDA prelude, first header: what the common prelude expects from its target (the
// function annotation, file-scope `constant` data, loop polling) for NVRTC, which has no
// standard headers; the C maths functions (expf, ...) are NVRTC builtins.
#pragma once
// The macros Metal's compiler predefines (kernel::PREDEFINED_MACROS; a test keeps these in step).
#define __METAL_VERSION__ 310
#define __HAVE_BFLOAT__ 1

#define KILN_HD __device__
#define KILN_CUDA 1
// The prelude is wrapped in namespace kiln_metal (backend/cuda/emit.rs), where its global names live.
#define KILN_GLOBAL_SCOPE kiln_metal
#define KILN_CONSTANT __constant__ const
// A GPU kernel cannot be stopped from the host, so loops need no poll.
#define KILN_POLL() ((void)0)
#define KILN_POLL_TRUE() true

namespace kiln {
// Byte copy for bit casts (the optimiser turns it into register moves).
template <class T, class U> __device__ __forceinline__ void copy_bits(T* to, const U* from, unsigned n) {
  char* d = reinterpret_cast<char*>(to);
  const char* s = reinterpret_cast<const char*>(from);
  for (unsigned i = 0; i < n; ++i) d[i] = s[i];
}
// fmax and fmin: CUDA's (the CPU prelude has its own, as glibc computes them).
KILN_HD inline float fmax_f32(float x, float y) { return fmaxf(x, y); }
KILN_HD inline float fmin_f32(float x, float y) { return fminf(x, y); }
}  // namespace kiln
// GNU's `__extension__` (ggml-common.h marks its anonymous unions with it), which NVRTC does not
// know; it only silences warnings.
#define __extension__
// The bit-counting builtins of clang and GCC that Metal programs call, in constant expressions
// too (MLX's fft.h: `constexpr short power = __builtin_ctz(radix);`), which NVRTC does not know:
// a loop while constant-evaluated, CUDA's intrinsics at run time; undefined for 0, as theirs.
namespace kiln {
#if defined(__has_builtin)
#if __has_builtin(__builtin_is_constant_evaluated)
#define KILN_BITS_CONSTANT() __builtin_is_constant_evaluated()
#endif
#endif
#ifndef KILN_BITS_CONSTANT
#define KILN_BITS_CONSTANT() false
#endif
KILN_HD constexpr int ctz_of(unsigned long long x, int width) {
  if (KILN_BITS_CONSTANT()) {
    int n = 0;
    while (n < width && !((x >> n) & 1ull)) ++n;
    return n;
  }
  return width == 32 ? __ffs(static_cast<int>(x)) - 1 : __ffsll(static_cast<long long>(x)) - 1;
}
KILN_HD constexpr int clz_of(unsigned long long x, int width) {
  if (KILN_BITS_CONSTANT()) {
    int n = 0;
    while (n < width && !((x >> (width - 1 - n)) & 1ull)) ++n;
    return n;
  }
  return width == 32 ? __clz(static_cast<int>(x)) : __clzll(static_cast<long long>(x));
}
KILN_HD constexpr int popcount_of(unsigned long long x) {
  if (KILN_BITS_CONSTANT()) {
    int n = 0;
    for (; x; x &= x - 1) ++n;
    return n;
  }
  return __popcll(x);
}
#undef KILN_BITS_CONSTANT
}  // namespace kiln
#define __builtin_ctz(x) ::kiln::ctz_of(static_cast<unsigned>(x), 32)
#define __builtin_ctzl(x) ::kiln::ctz_of(static_cast<unsigned long long>(x), 64)
#define __builtin_ctzll(x) ::kiln::ctz_of(static_cast<unsigned long long>(x), 64)
#define __builtin_clz(x) ::kiln::clz_of(static_cast<unsigned>(x), 32)
#define __builtin_clzl(x) ::kiln::clz_of(static_cast<unsigned long long>(x), 64)
#define __builtin_clzll(x) ::kiln::clz_of(static_cast<unsigned long long>(x), 64)
#define __builtin_popcount(x) ::kiln::popcount_of(static_cast<unsigned>(x))
#define __builtin_popcountl(x) ::kiln::popcount_of(static_cast<unsigned long long>(x))
#define __builtin_popcountll(x) ::kiln::popcount_of(static_cast<unsigned long long>(x))
