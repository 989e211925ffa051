// What a GPU's memory system gives a kernel that reads R bytes and writes W bytes, against the
// copy roofline that `kiln bench` reports (a device-to-device copy: half the bytes read, half
// written). A write-heavy op (GDN `chunk_scaled_dot_kkt` reads k, beta and g and writes an f32
// A twice their size) cannot run faster than an ideal streaming kernel with the same mix, so its
// "% of the copy roofline" is bounded by that kernel's.
//
//   nvcc -O3 -arch=sm_90 -o mix_roofline bench/mix_roofline.cu && ./mix_roofline [READ_MB WRITE_MB]
//
// Each timing is the median of 50 runs, CUDA events, L2 flushed before each run (a write of
// four times its size), as `kiln bench` times its cases.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                 \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// Reads `n_read` 16-byte words and writes `ratio` words per word read, grid-stride, each
// written word depending on the word read so no load is dead.
template <int RATIO, bool STREAMING>
__global__ void mixed(const int4* __restrict__ src, int4* __restrict__ dst, size_t n_read) {
  size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_read; i += stride) {
    int4 v = src[i];
#pragma unroll
    for (int r = 0; r < RATIO; ++r) {
      int4 w = make_int4(v.x + r, v.y, v.z, v.w);
      int4* p = dst + i * RATIO + r;
      if (STREAMING) {
        __stcs(p, w);
      } else {
        *p = w;
      }
    }
  }
}

// The same mix as blocks of whole tiles: each block reads `tile` words then writes RATIO * tile
// contiguous words, the shape of a kernel that reads an input tile and writes its output rows.
template <int RATIO>
__global__ void tiled(const int4* __restrict__ src, int4* __restrict__ dst, size_t n_read, int tile) {
  size_t tiles = n_read / tile;
  for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int4* s = src + t * tile;
    int4* d = dst + t * tile * RATIO;
    int acc = 0;
    for (int i = threadIdx.x; i < tile; i += blockDim.x) acc += s[i].x;
    for (int i = threadIdx.x; i < tile * RATIO; i += blockDim.x) d[i] = make_int4(acc, i, 0, 0);
  }
}

// As `tiled`, the output rows staged in shared memory and written by the bulk-copy engine
// (`cp.async.bulk`, sm_90), one store per tile.
template <int RATIO>
__global__ void tiled_bulk(const int4* __restrict__ src, int4* __restrict__ dst, size_t n_read, int tile) {
  extern __shared__ int4 staged[];
  unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(staged));
  size_t tiles = n_read / tile;
  for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int4* s = src + t * tile;
    int4* d = dst + t * tile * RATIO;
    int acc = 0;
    for (int i = threadIdx.x; i < tile; i += blockDim.x) acc += s[i].x;
    if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncthreads();
    for (int i = threadIdx.x; i < tile * RATIO; i += blockDim.x) staged[i] = make_int4(acc, i, 0, 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d), "r"(base),
                   "r"(tile * RATIO * 16) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (threadIdx.x == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Reads every word once (the read-only rate).
__global__ void read_only(const int4* __restrict__ src, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) acc += src[i].x;
  if (acc == 0x7fffffff) *sink = acc;
}

__global__ void flush_kernel(int4* p, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = make_int4(int(i), 0, 0, 0);
}

struct Timer {
  int4* flush;
  size_t flush_words;
  cudaEvent_t a, b;
  template <class F>
  double median_ms(F run) {
    std::vector<float> t;
    for (int k = 0; k < 53; ++k) {
      flush_kernel<<<1024, 256>>>(flush, flush_words);
      CHECK(cudaEventRecord(a));
      run();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      if (k >= 3) t.push_back(ms);
    }
    CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

int main(int argc, char** argv) {
  // Default: GDN kkt at 8x4096, 16 key heads of 128, 32 value heads: k, beta and g read
  // (134.2 + 8.4 MB), A written (268.4 MB).
  double read_mb = argc > 2 ? std::atof(argv[1]) : 142.6;
  double write_mb = argc > 2 ? std::atof(argv[2]) : 268.4;
  size_t n_read = size_t(read_mb * 1e6 / 16) / 4096 * 4096;
  size_t n_write = 2 * n_read;
  double bytes = double(n_read + n_write) * 16;

  int dev = 0;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  int4 *src, *dst, *flush;
  size_t flush_words = size_t(prop.l2CacheSize) * 4 / 16;
  CHECK(cudaMalloc(&src, n_write * 16));  // large enough for the copy below
  CHECK(cudaMalloc(&dst, n_write * 16));
  CHECK(cudaMalloc(&flush, flush_words * 16));
  CHECK(cudaMemset(src, 1, n_write * 16));
  Timer timer{flush, flush_words, nullptr, nullptr};
  CHECK(cudaEventCreate(&timer.a));
  CHECK(cudaEventCreate(&timer.b));
  std::printf("%s, %d SMs, L2 %d MB; read %.1f MB, write %.1f MB (%.1f MB in all)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, n_read * 16 / 1e6, n_write * 16 / 1e6, bytes / 1e6);

  // The copy roofline: a copy of the same total bytes (half read, half written).
  size_t half = size_t(bytes / 2);
  double copy = timer.median_ms([&] { CHECK(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice)); });
  double copy_gbs = bytes / copy / 1e6;
  std::printf("copy (cudaMemcpy D2D, same bytes) %.4f ms: %.0f GB/s\n", copy, copy_gbs);

  auto report = [&](const char* name, double ms) {
    double gbs = bytes / ms / 1e6;
    std::printf("%-34s %.4f ms: %.0f GB/s = %.1f %% of the copy roofline\n", name, ms, gbs, 100.0 * gbs / copy_gbs);
  };
  int sms = prop.multiProcessorCount;
  for (int blocks_per_sm : {4, 8, 16}) {
    for (int threads : {256, 512}) {
      char name[64];
      std::snprintf(name, sizeof name, "mixed 1:2 %2dx%d/SM", blocks_per_sm, threads);
      report(name, timer.median_ms([&] { mixed<2, false><<<sms * blocks_per_sm, threads>>>(src, dst, n_read); }));
      std::snprintf(name, sizeof name, "mixed 1:2 st.cs %2dx%d/SM", blocks_per_sm, threads);
      report(name, timer.median_ms([&] { mixed<2, true><<<sms * blocks_per_sm, threads>>>(src, dst, n_read); }));
    }
  }
  for (int tile : {1024, 2048}) {
    for (int blocks_per_sm : {4, 8, 16}) {
      char name[64];
      std::snprintf(name, sizeof name, "tiled 1:2 %d words %2dx128/SM", tile, blocks_per_sm);
      report(name, timer.median_ms([&] { tiled<2><<<sms * blocks_per_sm, 128>>>(src, dst, n_read, tile); }));
    }
  }
  for (int tile : {256, 512}) {
    for (int blocks_per_sm : {8, 16}) {
      int smem = tile * 2 * 16;
      CHECK(cudaFuncSetAttribute(tiled_bulk<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      char name[64];
      std::snprintf(name, sizeof name, "bulk-store 1:2 %d words %2dx128/SM", tile, blocks_per_sm);
      report(name, timer.median_ms([&] { tiled_bulk<2><<<sms * blocks_per_sm, 128, smem>>>(src, dst, n_read, tile); }));
    }
  }
  // Write-only and read-only parts, for the arithmetic.
  int* sink;
  CHECK(cudaMalloc(&sink, 4));
  double r = timer.median_ms([&] { read_only<<<sms * 8, 512>>>(src, n_read, sink); });
  std::printf("read of the read bytes            %.4f ms: %.0f GB/s\n", r, n_read * 16 / r / 1e6);
  double w = timer.median_ms([&] { CHECK(cudaMemsetAsync(dst, 0, n_write * 16)); });
  std::printf("memset of the written bytes       %.4f ms: %.0f GB/s\n", w, n_write * 16 / w / 1e6);
  return 0;
}
