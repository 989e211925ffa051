//! The CUDA path of `scatter_add` for flat float32 values: every block keeps a histogram of all
//! the bins in shared memory, so each value and index is read from DRAM exactly once.
//!
//! ```text
//! hist[0..BINS) = 0                                   (dynamic shared memory, BINS * 4 bytes)
//! each warp walks its steps in order: tiles of TILE = 32 * ITEMS * STEPS units of 4 elements,
//!                            contiguous, taken from a counter in global memory; per step ITEMS
//!                            16-byte loads of values and of indices per lane
//!     the loads of step s + 1 go into the other register buffer before the adds of step s:
//!               one shared-memory atomicAdd per in-range element
//! block 0 adds the n % 4 trailing elements
//! flush: the non-zero 4-bin groups of hist into out with one `red.global.v4.f32.add` each,
//!        each block starting at its own offset so blocks do not queue on the same lines
//! ```
//! Tiles are taken from a counter (the word after the bins, padded to a multiple of 4, in the
//! one output buffer, so a single fill zeroes bins and counter before the launch; the caller
//! gets a view of the bins), so the resident blocks share the values evenly on any number of
//! multiprocessors; blocks that start after the work ran out leave after one counter access
//! per warp. Out-of-range indices (negative, or at least bins) are skipped, as on the portable
//! path. Float sums depend on the order the atomics land in. Shared-memory f32 `atomicAdd` is a
//! compare-and-swap loop on sm_90 (`ATOMS.CAST.SPIN`); a warp waiting on its adds has its next
//! loads in flight, so the DRAM stream does not stop while the adds run. The loads carry an L2
//! evict-last policy (measured faster on the H100).
//!
//! Two buffers of one load per lane, 8 steps per tile, 1024 threads: the fastest of the forms
//! measured on the H100 (the measurements and the forms tried without gain: `bench/results/notes/ops.md`).

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec};
use crate::SliceArg;

use super::OP;

const HEADER: &str = r#"
namespace kiln_scatter {
// Four consecutive elements of a 16-byte-aligned unit, read once (no L1 allocation; the L2
// line marked evict-last).
__device__ __forceinline__ unsigned long long keep_policy() {
  unsigned long long p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "l"(p), "l"(keep_policy()));
}
// Four indices as bins; out-of-range ones become 0xffffffff (>= any bin count served).
__device__ __forceinline__ void bins4(const int32_t* p, unsigned (&b)[4]) {
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "l"(p), "l"(keep_policy()));
}
__device__ __forceinline__ void bins4(const uint32_t* p, unsigned (&b)[4]) {
  bins4(reinterpret_cast<const int32_t*>(p), b);
}
__device__ __forceinline__ void bins4(const int64_t* p, unsigned (&b)[4]) {
  unsigned long long q[4];
  asm volatile("ld.global.nc.L1::no_allocate.v2.u64 {%0,%1}, [%2];" : "=l"(q[0]), "=l"(q[1]) : "l"(p));
  asm volatile("ld.global.nc.L1::no_allocate.v2.u64 {%0,%1}, [%2];" : "=l"(q[2]), "=l"(q[3]) : "l"(p + 2));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    b[j] = q[j] < 0xffffffffull ? static_cast<unsigned>(q[j]) : 0xffffffffu;
  }
}
__device__ __forceinline__ unsigned bin1(int32_t i) { return static_cast<unsigned>(i); }
__device__ __forceinline__ unsigned bin1(uint32_t i) { return i; }
__device__ __forceinline__ unsigned bin1(int64_t i) {
  unsigned long long q = static_cast<unsigned long long>(i);
  return q < 0xffffffffull ? static_cast<unsigned>(q) : 0xffffffffu;
}
__device__ __forceinline__ void red4(float* p, float a, float b, float c, float d) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.v4.f32.add [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
  atomicAdd(p, a); atomicAdd(p + 1, b); atomicAdd(p + 2, c); atomicAdd(p + 3, d);
#endif
}
}  // namespace kiln_scatter
"#;

/// Template arguments: `I` the index type, `BINS`, `ITEMS` 16-byte loads per lane and step,
/// `STEPS` steps per tile. `out` holds `PAD = 4 * ceil(BINS / 4)` floats, then the counter.
const SOURCE: &str = r#"
    extern __shared__ __align__(16) float hist[];
    constexpr int TILE = 32 * ITEMS * STEPS;
    constexpr int PAD = (BINS + 3) / 4 * 4;
    unsigned* work = reinterpret_cast<unsigned*>(out + PAD);
    const long long n = values_shape[0];
    const long long units = n >> 2;
    const long long tiles = (units + TILE - 1) / TILE;
    const unsigned lane = threadIdx.x & 31;
    unsigned taken = 0;
    if (lane == 0) {
        taken = atomicAdd(work, 1u);
    }
    long long tile = __shfl_sync(0xffffffffu, taken, 0);
    bool tail = blockIdx.x == 0 && (n & 3) != 0;
    if (!__syncthreads_or(tile < tiles || tail)) {
        return;
    }
    for (int i = threadIdx.x; i < PAD; i += blockDim.x) {
        hist[i] = 0.0f;
    }
    __syncthreads();
    // The warp's steps in order (step `step` of tile `tile`, the next tile from the counter),
    // loaded into two register buffers in turn: the loads of the next step are in flight while
    // the adds of this one run. fetch() is false once the warp's work has run out.
    int step = 0;
    float v[2][ITEMS][4];
    unsigned b[2][ITEMS][4];
    auto fetch = [&](int buf) {
        if (step == STEPS) {
            if (lane == 0) {
                taken = atomicAdd(work, 1u);
            }
            tile = __shfl_sync(0xffffffffu, taken, 0);
            step = 0;
        }
        bool any = false;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long u = tile * TILE + (step * ITEMS + k) * 32 + lane;
            if (tile < tiles && u < units) {
                kiln_scatter::load4(values + 4 * u, v[buf][k]);
                kiln_scatter::bins4(indices + 4 * u, b[buf][k]);
                any = true;
            } else {
                b[buf][k][0] = b[buf][k][1] = b[buf][k][2] = b[buf][k][3] = 0xffffffffu;
            }
        }
        ++step;
        return __any_sync(0xffffffffu, any);
    };
    auto add = [&](int buf) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (b[buf][k][j] < unsigned(BINS)) {
                    atomicAdd(&hist[b[buf][k][j]], v[buf][k][j]);
                }
            }
        }
    };
    bool more = fetch(0);
    while (more) {
        const bool next = fetch(1);
        add(0);
        if (!next) {
            break;
        }
        more = fetch(0);
        add(1);
    }
    if (tail) {
        for (long long e = 4 * units + threadIdx.x; e < n; e += blockDim.x) {
            unsigned t = kiln_scatter::bin1(indices[e]);
            if (t < unsigned(BINS)) {
                atomicAdd(&hist[t], values[e]);
            }
        }
    }
    __syncthreads();
    // PAD / 4 groups of 4 bins (the padding bins stay zero); each block starts at its own group.
    constexpr int QUADS = PAD / 4;
    int start = int((blockIdx.x * 256ull) % unsigned(QUADS));
    for (int i = threadIdx.x; i < QUADS; i += blockDim.x) {
        int q = i + start < QUADS ? i + start : i + start - QUADS;
        float h0 = hist[4 * q], h1 = hist[4 * q + 1], h2 = hist[4 * q + 2], h3 = hist[4 * q + 3];
        if (h0 != 0.0f || h1 != 0.0f || h2 != 0.0f || h3 != 0.0f) {
            kiln_scatter::red4(out + 4 * q, h0, h1, h2, h3);
        }
    }
"#;

/// How the kernel is launched: threads per block, 16-byte loads per lane and step (threads x
/// items at most 2048: each lane holds two steps, and more needs over the 64 registers a thread
/// has at 1024 threads), steps per tile, blocks (the resident ones share the work; the others
/// leave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub threads: usize,
    pub items: usize,
    pub steps: usize,
    pub blocks: usize,
}

impl Launch {
    /// The launch measured on the H100: 32 warps per block (one block per multiprocessor with a
    /// 128 KB histogram), 132 blocks (its multiprocessors; more only add counter traffic at the
    /// end, fewer leave multiprocessors idle). [`super::scatter_add`] uses
    /// [`Self::for_multiprocessors`] of the device.
    pub const DEFAULT: Launch = Launch { threads: 1024, items: 1, steps: 8, blocks: 132 };

    /// [`Self::DEFAULT`] with one block per multiprocessor of a device that has
    /// `multiprocessors` of them (the H100's 132 give `DEFAULT`).
    pub fn for_multiprocessors(multiprocessors: usize) -> Launch {
        Launch { blocks: multiprocessors.max(1), ..Launch::DEFAULT }
    }
}

/// The most bins served on a device of compute capability `arch`: its opt-in shared memory per
/// block (227 KB on 9.x and 10.x, 163 KB on 8.0 and 8.7, 99 KB otherwise) in 4-byte bins, less
/// 1 KB for the runtime's reserve.
pub fn max_bins(arch: (u32, u32)) -> usize {
    let kb = match arch {
        (9, _) | (10, _) => 227,
        (8, 0) | (8, 7) => 163,
        _ => 99,
    };
    (kb - 1) * 1024 / 4
}

/// The kernel for `bins` (its dynamic shared memory is the histogram).
pub fn kernel(bins: usize) -> Result<CudaKernel> {
    Ok(CudaKernel::new("kiln_scatter_add_smem", &["values", "indices"], &["out"], SOURCE)?
        .header(HEADER)
        .shared_memory(bins.div_ceil(4) * 16)
        .launch_bounds(1024, 1))
}

/// The launch of [`kernel`] for `indices` of `dtype` into `bins` bins: one zeroed output of
/// `4 * ceil(bins / 4)` bins and the tile counter after them ([`run`] returns the bins).
pub fn spec(index: DType, bins: usize, launch: Launch) -> Result<LaunchSpec> {
    let Launch { threads, items, steps, blocks } = launch;
    if threads == 0
        || threads % 32 != 0
        || threads > 1024
        || items == 0
        || threads * items > 2048
        || steps == 0
        || blocks == 0
    {
        return Err(Error::invalid(
            OP,
            format!(
                "launch {launch:?}: threads must be whole warps up to 1024, 1 <= threads x items <= 2048, steps and blocks >= 1"
            ),
        ));
    }
    let int = |what: &str, v: usize| {
        i32::try_from(v).map_err(|_| Error::invalid(OP, format!("{what} = {v} exceeds the 32-bit range")))
    };
    let grid = u32::try_from(blocks * threads)
        .map_err(|_| Error::invalid(OP, format!("{blocks} blocks of {threads} exceed the grid")))?;
    Ok(LaunchSpec::new([grid, 1, 1], [threads as u32, 1, 1])
        .output(&[bins.div_ceil(4) * 4 + 1], DType::F32)
        .template("I", index)
        .template("BINS", int("bins", bins)?)
        .template("ITEMS", int("items", items)?)
        .template("STEPS", int("steps", steps)?)
        .init_value(0.0))
}

/// Runs the kernel: `values` (N,) float32 and `indices` (N,) int32/uint32/int64 on one CUDA
/// device, both 16-byte aligned (row-contiguous at an offset that is a multiple of 4 elements),
/// N <= 2^31 - 1, bins within [`max_bins`]. The caller has checked these ([`super::path`]).
pub fn run(values: &Array, indices: &Array, bins: usize, launch: Launch) -> Result<Array> {
    let spec = spec(indices.dtype(), bins, launch)?.device(values.device());
    let inputs = [KernelInput::from(values), KernelInput::from(indices)];
    bins_of(&kernel(bins)?.call(&inputs, &spec)?, bins)
}

/// The `bins` bins of the kernel's outputs `outs` (without the padding and the tile counter).
pub fn bins_of(outs: &[Array], bins: usize) -> Result<Array> {
    let out = outs.first().ok_or_else(|| Error::invalid(OP, "the kernel returned no output"))?;
    out.slice(&[SliceArg { start: Some(0), stop: Some(bins as isize), step: 1 }])
}
