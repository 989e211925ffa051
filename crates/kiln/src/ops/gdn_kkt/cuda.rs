//! The CUDA path of `chunk_scaled_dot_kkt`: tensor-core `mma.sync` (bf16 or f16 in, f32
//! accumulate) through `CudaKernel`, for k of bfloat16 or float16 on a CUDA device.
//!
//! One block of 4 warps per (batch, chunk, key head) copies the 64 x K key tile into shared
//! memory once (`cp.async`, rows padded by 16 bytes so `ldmatrix` rows hit distinct banks) and
//! writes the 64 x 64 blocks of all `R = H / Hg` value heads that read it. A warp owns two
//! 16-row strips of one head, {3, 0} or {2, 1}, so both warps of a head compute 10 of the 20
//! 16 x 8 tiles on or below the diagonal. The A operand `kb` is formed in registers from the
//! `ldmatrix` fragment: one f32 product with beta, one RNE rounding (`cvt.rn.bf16x2.f32`), as
//! the portable kernel does; the products of two bf16/f16 values are exact in f32, so only the
//! order of the f32 sums differs from it. Gates use the same TwoSum form of `g_i - g_j`.
//! Stores are whole rows: each warp stages 8 rows of its strip in shared memory at a time and
//! writes them back as 16-byte stores, two 256-byte rows per instruction, the zeros right of the
//! strip's diagonal block included.
//! The op is memory-bound: it reads k, beta and g once and writes A (f32, zeros included).

use crate::ops::kernel_cache::KernelCache;

use super::{CHUNK, OP};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, LaunchSpec};

/// Threads per block: 4 warps.
const THREADS: usize = 128;
/// The largest head dim served: the key tile (64 x (2K + 16) bytes), the warps' staging rows
/// (9 KB) and the gates of `MAX_GROUP` heads (4 KB) fit the 48 KB of static shared memory.
pub const MAX_K: usize = 256;
/// The most value heads per key head served (their gates and betas are staged in shared memory).
pub const MAX_GROUP: usize = 8;

const HEADER: &str = r#"
namespace gdn_kkt {
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}
// 16 bytes global -> shared; zero-filled when !full (rows past the sequence end).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
template <bool BF16> __device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <> __device__ __forceinline__ void mma<true>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma<false>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two packed 16-bit keys times beta, each one f32 product rounded once to nearest even.
template <bool BF16> __device__ __forceinline__ unsigned scale_pair(unsigned v, float beta);
template <> __device__ __forceinline__ unsigned scale_pair<true>(unsigned v, float beta) {
  float lo = __uint_as_float(v << 16) * beta;
  float hi = __uint_as_float(v & 0xffff0000u) * beta;
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned scale_pair<false>(unsigned v, float beta) {
  unsigned short l = static_cast<unsigned short>(v & 0xffffu);
  unsigned short h = static_cast<unsigned short>(v >> 16);
  float fl;
  float fh;
  asm("cvt.f32.f16 %0, %1;" : "=f"(fl) : "h"(l));
  asm("cvt.f32.f16 %0, %1;" : "=f"(fh) : "h"(h));
  float lo = fl * beta;
  float hi = fh * beta;
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// exp(gi - gj) with the rounding error of the difference (TwoSum), as the portable kernel.
__device__ __forceinline__ float gate(float gi, float gj) {
  float mgj = -gj;
  float d = gi + mgj;
  float bv = d - gi;
  float err = (gi - (d - bv)) + (mgj - bv);
  return expf(d) * (1.0f + err);
}
__device__ __forceinline__ void store4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// Floats between rows of a warp's staging area (8 rows): 64 + 8 keeps the 8-byte stores of the
// accumulator layout free of bank conflicts.
constexpr int STAGE_LD = 72;
// Rows [16S, 16S + 16) of one head's 64 x 64 block: tiles 0..2S+1 by mma, the rest zeros.
// `tile` is the shared key tile, `stage` the warp's staging area (shared addresses), `bs`/`gs`
// this head's 64 betas and gates, `out` row 0 of the block in A, `stride` floats between rows.
template <int S, int KD, bool BF16>
__device__ __forceinline__ void strip(unsigned tile, unsigned stage, const float* bs, const float* gs, float* out,
                                      int stride, int valid, int lane) {
  constexpr int ROW = KD * 2 + 16;
  constexpr int NT = 2 * S + 2;
  float acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    acc[n][0] = 0.0f; acc[n][1] = 0.0f; acc[n][2] = 0.0f; acc[n][3] = 0.0f;
  }
  int grp = lane >> 2;
  int q = lane & 3;
  float beta0 = bs[16 * S + grp];
  float beta1 = bs[16 * S + grp + 8];
  unsigned a_addr = tile + (16 * S + (lane & 7) + ((lane >> 3) & 1) * 8) * ROW + (lane >> 4) * 16;
  unsigned b_addr = tile + ((lane >> 4) * 8 + (lane & 7)) * ROW + ((lane >> 3) & 1) * 16;
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    unsigned a[4];
    ldmatrix_x4(a, a_addr + kk * 32);
    a[0] = scale_pair<BF16>(a[0], beta0);
    a[1] = scale_pair<BF16>(a[1], beta1);
    a[2] = scale_pair<BF16>(a[2], beta0);
    a[3] = scale_pair<BF16>(a[3], beta1);
#pragma unroll
    for (int nb = 0; nb <= S; ++nb) {
      unsigned b[4];
      ldmatrix_x4(b, b_addr + nb * 16 * ROW + kk * 32);
      mma<BF16>(acc[2 * nb], a, b[0], b[1]);
      mma<BF16>(acc[2 * nb + 1], a, b[2], b[3]);
    }
  }
  int i0 = 16 * S + grp;
  int i1 = i0 + 8;
  float gi0 = gs[i0];
  float gi1 = gs[i1];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    int j = 8 * n + 2 * q;
    float gj0 = gs[j];
    float gj1 = gs[j + 1];
    // Tiles left of the strip's diagonal block lie wholly below the diagonal.
    bool below = n < 2 * S;
    acc[n][0] = below || j < i0 ? acc[n][0] * gate(gi0, gj0) : 0.0f;
    acc[n][1] = below || j + 1 < i0 ? acc[n][1] * gate(gi0, gj1) : 0.0f;
    acc[n][2] = below || j < i1 ? acc[n][2] * gate(gi1, gj0) : 0.0f;
    acc[n][3] = below || j + 1 < i1 ? acc[n][3] * gate(gi1, gj1) : 0.0f;
  }
  // Rows 0-7 of the strip, then rows 8-15, go through the warp's 8-row staging area so each
  // store writes two whole 256-byte rows; columns right of the diagonal block are zeros.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    __syncwarp();
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      asm volatile("st.shared.v2.f32 [%0], {%1,%2};" :: "r"(stage + (grp * STAGE_LD + 8 * n + 2 * q) * 4),
                   "f"(acc[n][2 * half]), "f"(acc[n][2 * half + 1]) : "memory");
    }
    __syncwarp();
    int col = 4 * (lane & 15);
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      int r = 2 * it + (lane >> 4);
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (col < 16 * (S + 1)) {
        asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                     : "r"(stage + (r * STAGE_LD + col) * 4) : "memory");
      }
      int row = 16 * S + 8 * half + r;
      if (row < valid) {
        store4(out + row * stride + col, v[0], v[1], v[2], v[3]);
      }
    }
  }
}
}  // namespace gdn_kkt
"#;

/// Template arguments: `BF16` (else f16), `KD` the head dim, `R` value heads per key head.
const SOURCE: &str = r#"
    constexpr int BT = 64;
    constexpr int ROW = KD * 2 + 16;
    constexpr int VECS = KD / 8;
    __shared__ __align__(16) unsigned char tile_s[BT * ROW];
    __shared__ float beta_s[R][BT];
    __shared__ float g_s[R][BT];
    __shared__ __align__(16) float stage_s[4][8 * gdn_kkt::STAGE_LD];
    int seq = k_shape[1];
    int HG = k_shape[2];
    int H = HG * R;
    int chunks = (seq + BT - 1) / BT;
    // Key heads vary fastest, so neighbouring blocks read and write neighbouring bytes.
    int hg = blockIdx.x % HG;
    int chunk = (blockIdx.x / HG) % chunks;
    int b = blockIdx.x / HG / chunks;
    int t0 = chunk * BT;
    int valid = seq - t0 < BT ? seq - t0 : BT;
    int tid = threadIdx.x;

    const unsigned short* keys = reinterpret_cast<const unsigned short*>(k) + ((size_t(b) * seq + t0) * HG + hg) * KD;
    unsigned tile = gdn_kkt::smem_addr(tile_s);
    for (int e = tid; e < BT * VECS; e += 128) {
        int r = e / VECS;
        int c = e % VECS;
        bool in = r < valid;
        gdn_kkt::cp_async16(tile + r * ROW + c * 16, keys + (in ? size_t(r) * HG * KD + c * 8 : 0), in);
    }
    for (int e = tid; e < BT * R; e += 128) {
        int r = e / R;
        int hh = e % R;
        float bv = 0.0f;
        float gv = 0.0f;
        if (r < valid) {
            size_t idx = (size_t(b) * seq + t0 + r) * H + hg * R + hh;
            bv = beta[idx];
            gv = g[idx];
        }
        beta_s[hh][r] = bv;
        g_s[hh][r] = gv;
    }
    gdn_kkt::cp_async_wait_all();
    __syncthreads();

    int warp = tid >> 5;
    int lane = tid & 31;
    int stride = H * BT;
    unsigned stage = gdn_kkt::smem_addr(stage_s[warp]);
    for (int item = warp; item < 2 * R; item += 4) {
        int hh = item >> 1;
        float* out = A + ((size_t(b) * seq + t0) * H + hg * R + hh) * BT;
        if (item & 1) {
            gdn_kkt::strip<2, KD, BF16>(tile, stage, beta_s[hh], g_s[hh], out, stride, valid, lane);
            gdn_kkt::strip<1, KD, BF16>(tile, stage, beta_s[hh], g_s[hh], out, stride, valid, lane);
        } else {
            gdn_kkt::strip<3, KD, BF16>(tile, stage, beta_s[hh], g_s[hh], out, stride, valid, lane);
            gdn_kkt::strip<0, KD, BF16>(tile, stage, beta_s[hh], g_s[hh], out, stride, valid, lane);
        }
    }
"#;

/// The kernel of the CUDA path, built once.
pub(super) fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCache<CudaKernel> = KernelCache::new();
    KERNEL.one(OP, || Ok(CudaKernel::new("kiln_gdn_kkt_mma", &["k", "beta", "g"], &["A"], SOURCE)?.header(HEADER)))
}

/// Whether the CUDA path serves these shapes and this key dtype (the device and alignment
/// conditions are checked by the caller). `dims` = `[B, T, Hg, H, K]`.
pub fn serves(dtype: DType, dims: [usize; 5]) -> bool {
    let [b, t, hg, h, kd] = dims;
    let group = h / hg;
    let blocks = b * t.div_ceil(CHUNK) * hg;
    matches!(dtype, DType::BF16 | DType::F16)
        && kd % 16 == 0
        && (16..=MAX_K).contains(&kd)
        && (1..=MAX_GROUP).contains(&group)
        && blocks <= i32::MAX as usize
}

/// The launch for `k` (B, T, Hg, K), `beta` (B, T, H); the caller has validated them and
/// checked [`serves`].
pub(super) fn spec(k: &Array, beta: &Array) -> Result<LaunchSpec> {
    let (&[b, t, hg, kd], &[_, _, h]) = (k.shape(), beta.shape()) else {
        return Err(Error::shape(OP, format!("k {:?} / beta {:?} have the wrong rank", k.shape(), beta.shape())));
    };
    let blocks = b * t.div_ceil(CHUNK) * hg;
    let threads =
        u32::try_from(blocks * THREADS).map_err(|_| Error::invalid(OP, format!("{blocks} blocks exceed the grid")))?;
    let int = |n: usize| i32::try_from(n).map_err(|_| Error::invalid(OP, format!("{n} exceeds int32")));
    Ok(LaunchSpec::new([threads, 1, 1], [THREADS as u32, 1, 1])
        .output(&[b, t, h, CHUNK], DType::F32)
        .template("BF16", k.dtype() == DType::BF16)
        .template("KD", int(kd)?)
        .template("R", int(h / hg)?))
}

/// The `CudaKernel` of the CUDA path and its launch for these inputs (any device), for
/// compile-only checks.
pub fn kernel_and_spec(k: &Array, beta: &Array) -> Result<(&'static CudaKernel, LaunchSpec)> {
    Ok((kernel()?, spec(k, beta)?))
}
