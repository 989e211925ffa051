// kiln CUDA prelude: `os_log` lines through device printf (the process's stdout once the host
// synchronises). One printf per line keeps a line whole; the tag names the Metal threadgroup,
// whose position the entry wrapper of a kernel that logs stores in shared memory (a launch may
// cover a region of the grid, so blockIdx alone is not the Metal position).
#pragma once

namespace kiln { namespace oslog {

__shared__ unsigned group_position[3];

// Every thread of the block stores the same values before the kernel body runs.
__device__ __forceinline__ void set_group(unsigned x, unsigned y, unsigned z) {
  group_position[0] = x;
  group_position[1] = y;
  group_position[2] = z;
}

template <class... A> __device__ void print(const metal::os_log& log, int type, const char* fmt, A... args) {
  printf(fmt, group_position[0], group_position[1], group_position[2], threadIdx.x, threadIdx.y, threadIdx.z,
         level_name(type), log_part(log.subsystem), log_slash(log), log_part(log.category), log_colon(log), args...);
}

}}  // namespace kiln::oslog
