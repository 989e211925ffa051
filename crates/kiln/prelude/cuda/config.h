// kiln CUDA prelude, first header: what the common prelude expects from its target (the
// function annotation, file-scope `constant` data, loop polling) for NVRTC, which has no
// standard headers; the C maths functions (expf, ...) are NVRTC builtins.
#pragma once
// The macros Metal's compiler predefines (kernel::PREDEFINED_MACROS; a test keeps these in step).
#define __METAL_VERSION__ 310
#define __HAVE_BFLOAT__ 1

#define KILN_HD __device__
#define KILN_CUDA 1
// The prelude is wrapped in namespace kiln_metal (source/cuda.rs), where its global names live.
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
}  // namespace kiln
// GNU's `__extension__` (ggml-common.h marks its anonymous unions with it), which NVRTC does not
// know; it only silences warnings.
#define __extension__
