// kiln common prelude: the vector, packed vector and matrix types under their qualified Metal
// spellings too (`metal::vec<T, N>`, `metal::float2`, `metal::packed_half3`,
// `metal::float4x4`), as Metal declares them in namespace metal. They are the global types
// (no second type), so both spellings mix freely. KILN_GLOBAL_SCOPE is the namespace that holds
// them: the global one on the host, the prelude's namespace under NVRTC.
#pragma once

namespace metal {
using KILN_GLOBAL_SCOPE::vec;
using KILN_GLOBAL_SCOPE::packed_vec;
#define KILN_QUALIFIED_VECTORS(T)                            \
  using KILN_GLOBAL_SCOPE::T##2;                             \
  using KILN_GLOBAL_SCOPE::T##3;                             \
  using KILN_GLOBAL_SCOPE::T##4;                             \
  using KILN_GLOBAL_SCOPE::packed_##T##2;                    \
  using KILN_GLOBAL_SCOPE::packed_##T##3;                    \
  using KILN_GLOBAL_SCOPE::packed_##T##4;
KILN_QUALIFIED_VECTORS(float) KILN_QUALIFIED_VECTORS(half) KILN_QUALIFIED_VECTORS(bfloat)
KILN_QUALIFIED_VECTORS(int) KILN_QUALIFIED_VECTORS(uint) KILN_QUALIFIED_VECTORS(short)
KILN_QUALIFIED_VECTORS(ushort) KILN_QUALIFIED_VECTORS(char) KILN_QUALIFIED_VECTORS(uchar)
KILN_QUALIFIED_VECTORS(long) KILN_QUALIFIED_VECTORS(ulong)
#undef KILN_QUALIFIED_VECTORS
using KILN_GLOBAL_SCOPE::bool2;
using KILN_GLOBAL_SCOPE::bool3;
using KILN_GLOBAL_SCOPE::bool4;
#define KILN_QUALIFIED_MATRICES(T)                           \
  using KILN_GLOBAL_SCOPE::T##2x2;                           \
  using KILN_GLOBAL_SCOPE::T##2x3;                           \
  using KILN_GLOBAL_SCOPE::T##2x4;                           \
  using KILN_GLOBAL_SCOPE::T##3x2;                           \
  using KILN_GLOBAL_SCOPE::T##3x3;                           \
  using KILN_GLOBAL_SCOPE::T##3x4;                           \
  using KILN_GLOBAL_SCOPE::T##4x2;                           \
  using KILN_GLOBAL_SCOPE::T##4x3;                           \
  using KILN_GLOBAL_SCOPE::T##4x4;
KILN_QUALIFIED_MATRICES(float) KILN_QUALIFIED_MATRICES(half)
#undef KILN_QUALIFIED_MATRICES
}  // namespace metal
