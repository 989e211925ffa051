//! Tensor-core prefill for CUDA devices (FlashAttention-2 forward), written directly in CUDA
//! through `CudaKernel`; the parent's rule sends bf16/f16 inputs with D = 64 or 128, no mask or
//! the causal mask, here. The portable Metal prefill stays the reference path.
//!
//! A block of `NW` warps takes `16·MT·NW` queries of one (batch, query head); each warp owns
//! `MT` m-tiles of 16 queries. Key/value tiles of `BN` rows are staged in shared memory with
//! `cp.async` (two stages: tile `j+1` loads while tile `j` is used). Per tile and warp:
//!   S = Q Kᵀ            mma.m16n8k16 (bf16|f16 → f32); Q fragments held in registers (QREG)
//!                       or re-read per tile, K fragments by `ldmatrix`, each feeding MT mma;
//!   S *= scale·log2(e); masked entries (keys ≥ Tk; causal: key > query + Tk − Tq) → −inf,
//!                       only on tiles that cross the diagonal or the end of the keys;
//!   m' = max(m, rowmax S); p = 2^(S − m'); l = l·2^(m − m') + Σp; O = O·2^(m − m') + P V,
//!                       P rounded to the input dtype in registers and used as the A operand,
//!                       V fragments by `ldmatrix.trans`.
//! At the end O / l (0 where l = 0: a query that sees no key) is rounded to the input dtype and
//! stored through shared memory in 16-byte rows. Causal blocks stop at their last visible key
//! tile (a warp skips the tiles past its own), and the longest blocks start first. The block
//! shape per head dimension and mask (`Shape::of`) is the fastest measured.
//!
//! Shared memory rows are D 16-bit values; 16-byte chunk `c` of row `r` sits at chunk
//! `c ^ (r & 7)`, so the eight row addresses of each `ldmatrix` phase hit distinct banks.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) row-contiguous (copied otherwise) with
//! rows 16-byte aligned; output (B, Hq, Tq, D). Reference: the parent's `reference` (f64).
//! Tolerance: the dtype table (P is rounded to the input dtype, as in FlashAttention).

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, LaunchSpec};
use crate::ops::kernel_cache::KernelCache;

/// Head dimensions the kernel takes.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
/// The block shape of one kernel instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    warps: usize,
    /// 16-query m-tiles per warp: each key/value fragment read from shared memory feeds this
    /// many mma.
    m_tiles: usize,
    /// Whether a warp keeps its Q fragments in registers (else re-reads them per key tile).
    q_in_registers: bool,
    /// Keys per tile.
    keys: usize,
}

impl Shape {
    /// The fastest measured on an H100 at B4 H32 T4096 for each head dimension and mask.
    fn of(d: usize, causal: bool) -> Shape {
        let (m_tiles, q_in_registers) = match (d, causal) {
            (128, true) => (1, true),
            (128, false) => (2, false),
            (_, true) => (2, false),
            (_, false) => (2, true),
        };
        Shape { warps: 4, m_tiles, q_in_registers, keys: 64 }
    }

    fn queries(self) -> usize {
        16 * self.m_tiles * self.warps
    }

    /// Shared memory bytes: the query tile and two stages of key and value tiles.
    fn shared_bytes(self, d: usize) -> usize {
        (self.queries() + 4 * self.keys) * d * 2
    }
}

pub(super) const HEADER: &str = r#"
namespace kiln_sdpa {
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
// 16 bytes global -> shared; `bytes` = 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void ldsm_x4(unsigned a, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned a, unsigned* r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// c (16x8 f32) += a (16x16, row) * b (16x8, col).
template <int BF> __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    if constexpr (BF) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}
// Two floats rounded to nearest and packed, `lo` in the low half.
template <int BF> __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if constexpr (BF) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}
// Rows r0.. of a (rows_total, D) matrix into a swizzled tile of ROWS rows (chunk c of row r at
// chunk c ^ (r & 7)); rows past the end are zeros.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_rows(unsigned short* dst, const unsigned short* src, int r0, int rows_total, int tid) {
    constexpr int CPR = D / 8;
    static_assert(ROWS * CPR % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int it = 0; it < ROWS * CPR / THREADS; ++it) {
        int i = tid + it * THREADS;
        int r = i / CPR;
        int c = i % CPR;
        int gr = r0 + r;
        bool ok = gr < rows_total;
        const unsigned short* p = src + static_cast<long>(ok ? gr : 0) * D + c * 8;
        cp_async16(smem_u32(dst + r * D + ((c ^ (r & 7)) << 3)), p, ok ? 16 : 0);
    }
}
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
}  // namespace kiln_sdpa
"#;

pub(super) const SOURCE: &str = r#"
    using namespace kiln_sdpa;
    // MT m-tiles (16 queries each) per warp; QREG: Q fragments held in registers (else re-read
    // from shared memory per key tile).
    constexpr int RW = 16 * MT;
    constexpr int BM = RW * NW;
    constexpr int CPR = D / 8;
    constexpr int THREADS = 32 * NW;
    constexpr int TILE = BN * D;
    extern __shared__ __align__(1024) uint4 kiln_sdpa_smem[];
    unsigned short* sq = reinterpret_cast<unsigned short*>(kiln_sdpa_smem);
    unsigned short* sk = sq + BM * D;
    unsigned short* sv = sk + 2 * TILE;
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int Hq = q_shape[1];
    const int Tq = q_shape[2];
    const int Hkv = k_shape[1];
    const int Tk = k_shape[2];
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BM;
    const int w0 = q0 + warp * RW;
    const int shift = Tk - Tq;
    int kend = Tk;
    int wend = Tk;
    if (CAUSAL) {
        kend = min(max(min(q0 + BM, Tq) + shift, 0), Tk);
        wend = min(max(min(w0 + RW, Tq) + shift, 0), Tk);
    }
    const int ntiles = (kend + BN - 1) / BN;
    const unsigned short* qb = reinterpret_cast<const unsigned short*>(q) + static_cast<long>(b * Hq + h) * Tq * D;
    const unsigned short* kb = reinterpret_cast<const unsigned short*>(k) + static_cast<long>(b * Hkv + hk) * Tk * D;
    const unsigned short* vb = reinterpret_cast<const unsigned short*>(v) + static_cast<long>(b * Hkv + hk) * Tk * D;
    unsigned short* ob = reinterpret_cast<unsigned short*>(out) + static_cast<long>(b * Hq + h) * Tq * D;

    // ldmatrix row addresses: A operands and V (.trans) take matrices (rows 0-7, chunk 0),
    // (rows 8-15, chunk 0), (rows 0-7, chunk 1), (rows 8-15, chunk 1); K takes (keys 0-7,
    // chunk 0), (keys 0-7, chunk 1), (keys 8-15, chunk 0), (keys 8-15, chunk 1).
    const int x7 = lane & 7;
    const int a_row = x7 + ((lane >> 3) & 1) * 8;
    const int a_ch = lane >> 4;
    const int k_row = x7 + (lane >> 4) * 8;
    const int k_ch = (lane >> 3) & 1;
    // Chunk `2i + ch` of a row sits at byte (32i) ^ (16 (ch ^ x7)) of it; rows and tiles start
    // on multiples of the row size, so each address is a lane constant XOR 32i.
    const unsigned sq_addr = smem_u32(sq) + (warp * RW + a_row) * D * 2 + ((a_ch ^ x7) << 4);
    const unsigned sk_addr = smem_u32(sk) + k_row * D * 2 + ((k_ch ^ x7) << 4);
    const unsigned sv_addr = smem_u32(sv) + a_row * D * 2 + ((a_ch ^ x7) << 4);
    const float NEG_INF = neg_inf();
    const float sl2 = scale[0] * 1.4426950408889634f;
    const int row_lo = w0 + (lane >> 2);

    unsigned qf[QREG ? MT : 1][QREG ? D / 16 : 1][4];
    float o[MT][D / 8][4];
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            o[t][i][0] = o[t][i][1] = o[t][i][2] = o[t][i][3] = 0.0f;
        }
    }
    float m[MT][2];
    float l[MT][2];
#pragma unroll
    for (int t = 0; t < MT; ++t) {
        m[t][0] = m[t][1] = NEG_INF;
        l[t][0] = l[t][1] = 0.0f;
    }

    if (ntiles > 0) {
        load_rows<BM, D, THREADS>(sq, qb, q0, Tq, tid);
        load_rows<BN, D, THREADS>(sk, kb, 0, Tk, tid);
        load_rows<BN, D, THREADS>(sv, vb, 0, Tk, tid);
        cp_commit();
    }
    for (int j = 0; j < ntiles; ++j) {
        const int st = j & 1;
        if (j + 1 < ntiles) {
            load_rows<BN, D, THREADS>(sk + (st ^ 1) * TILE, kb, (j + 1) * BN, Tk, tid);
            load_rows<BN, D, THREADS>(sv + (st ^ 1) * TILE, vb, (j + 1) * BN, Tk, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (QREG && j == 0) {
#pragma unroll
            for (int t = 0; t < (QREG ? MT : 0); ++t) {
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk) {
                    ldsm_x4((sq_addr + t * 16 * D * 2) ^ (kk << 5), qf[QREG ? t : 0][QREG ? kk : 0]);
                }
            }
        }
        const int n0 = j * BN;
        // Causal: a warp whose queries all precede this tile's first visible key skips it.
        if (n0 < wend) {
            float s[MT][BN / 8][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) {
#pragma unroll
                for (int n = 0; n < BN / 8; ++n) {
                    s[t][n][0] = s[t][n][1] = s[t][n][2] = s[t][n][3] = 0.0f;
                }
            }
            const unsigned kt = sk_addr + st * TILE * 2;
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                unsigned qa[MT][4];
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    if (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            qa[t][e] = qf[QREG ? t : 0][QREG ? kk : 0][e];
                        }
                    } else {
                        ldsm_x4((sq_addr + t * 16 * D * 2) ^ (kk << 5), qa[t]);
                    }
                }
#pragma unroll
                for (int np = 0; np < BN / 16; ++np) {
                    unsigned r[4];
                    ldsm_x4((kt + np * 16 * D * 2) ^ (kk << 5), r);
#pragma unroll
                    for (int t = 0; t < MT; ++t) {
                        mma<BF16>(s[t][2 * np], qa[t], r[0], r[1]);
                        mma<BF16>(s[t][2 * np + 1], qa[t], r[2], r[3]);
                    }
                }
            }
            const bool edge = n0 + BN > Tk || (CAUSAL && n0 + BN - 1 > w0 + shift);
#pragma unroll
            for (int t = 0; t < MT; ++t) {
#pragma unroll
                for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        float x = s[t][n][c] * sl2;
                        if (edge) {
                            int key = n0 + n * 8 + 2 * (lane & 3) + (c & 1);
                            int row = row_lo + t * 16 + (c >> 1) * 8;
                            bool ok = key < Tk && (!CAUSAL || key <= row + shift);
                            x = ok ? x : NEG_INF;
                        }
                        s[t][n][c] = x;
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < MT; ++t) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float mx = NEG_INF;
#pragma unroll
                    for (int n = 0; n < BN / 8; ++n) {
                        mx = fmaxf(mx, fmaxf(s[t][n][2 * r], s[t][n][2 * r + 1]));
                    }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m[t][r], mx);
                    // A row with no visible key so far keeps m = -inf; subtracting 0 keeps p = 0.
                    const float m_use = m_new == NEG_INF ? 0.0f : m_new;
                    const float corr = ex2(m[t][r] - m_use);
                    m[t][r] = m_new;
                    float sum = 0.0f;
#pragma unroll
                    for (int n = 0; n < BN / 8; ++n) {
                        s[t][n][2 * r] = ex2(s[t][n][2 * r] - m_use);
                        s[t][n][2 * r + 1] = ex2(s[t][n][2 * r + 1] - m_use);
                        sum += s[t][n][2 * r] + s[t][n][2 * r + 1];
                    }
                    l[t][r] = l[t][r] * corr + sum;
#pragma unroll
                    for (int i = 0; i < D / 8; ++i) {
                        o[t][i][2 * r] *= corr;
                        o[t][i][2 * r + 1] *= corr;
                    }
                }
            }
            // P as A fragments (half the registers of S, which dies here).
            unsigned pa[MT][BN / 16][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) {
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    pa[t][kk][0] = pack2<BF16>(s[t][2 * kk][0], s[t][2 * kk][1]);
                    pa[t][kk][1] = pack2<BF16>(s[t][2 * kk][2], s[t][2 * kk][3]);
                    pa[t][kk][2] = pack2<BF16>(s[t][2 * kk + 1][0], s[t][2 * kk + 1][1]);
                    pa[t][kk][3] = pack2<BF16>(s[t][2 * kk + 1][2], s[t][2 * kk + 1][3]);
                }
            }
            const unsigned vt = sv_addr + st * TILE * 2;
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    unsigned r[4];
                    ldsm_x4_t((vt + kk * 16 * D * 2) ^ (dp << 5), r);
#pragma unroll
                    for (int t = 0; t < MT; ++t) {
                        mma<BF16>(o[t][2 * dp], pa[t][kk], r[0], r[1]);
                        mma<BF16>(o[t][2 * dp + 1], pa[t][kk], r[2], r[3]);
                    }
                }
            }
        }
        __syncthreads();
    }

    // Each warp stages its rows in its own rows of the Q tile (read only by this warp), then
    // stores them in 16-byte chunks.
    unsigned short* sw = sq + warp * RW * D;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float lt = l[t][r];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
            const int row = t * 16 + (lane >> 2) + 8 * r;
#pragma unroll
            for (int i = 0; i < D / 8; ++i) {
                *reinterpret_cast<unsigned*>(sw + row * D + ((i ^ (row & 7)) << 3) + 2 * (lane & 3)) =
                    pack2<BF16>(o[t][i][2 * r] * inv, o[t][i][2 * r + 1] * inv);
            }
        }
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < RW * CPR; i += 32) {
        int r = i / CPR;
        int c = i % CPR;
        int gr = w0 + r;
        if (gr < Tq) {
            *reinterpret_cast<uint4*>(ob + static_cast<long>(gr) * D + c * 8) =
                *reinterpret_cast<const uint4*>(sw + r * D + ((c ^ (r & 7)) << 3));
        }
    }
"#;

const INPUTS: [&str; 4] = ["q", "k", "v", "scale"];

pub(super) fn kernel(op: &str, d: usize, causal: bool) -> Result<&'static CudaKernel> {
    static CELLS: KernelCache<CudaKernel, 4> = KernelCache::new();
    let i = HEAD_DIMS
        .iter()
        .position(|&x| x == d)
        .ok_or_else(|| Error::shape(op, format!("the tensor-core prefill takes D in {HEAD_DIMS:?}, got {d}")))?;
    let bytes = Shape::of(d, causal).shared_bytes(d);
    CELLS.get(op, 2 * i + causal as usize, || {
        Ok(CudaKernel::new("kiln_sdpa_prefill_mma", &INPUTS, &["out"], SOURCE)?.header(HEADER).shared_memory(bytes))
    })
}

pub(super) fn spec(op: &str, q: &Array, hq: usize, b: usize, d: usize, causal: bool) -> Result<LaunchSpec> {
    let dim = |n: usize| u32::try_from(n).map_err(|_| Error::invalid(op, format!("grid extent {n} exceeds u32")));
    let tq = q.shape()[2];
    let shape = Shape::of(d, causal);
    let threads = 32 * shape.warps;
    Ok(LaunchSpec::new([dim(tq.div_ceil(shape.queries()) * threads)?, dim(hq)?, dim(b)?], [threads as u32, 1, 1])
        .output(q.shape(), q.dtype())
        .template("BF16", (q.dtype() == DType::BF16) as i32)
        .template("D", d as i32)
        .template("CAUSAL", causal as i32)
        .template("NW", shape.warps as i32)
        .template("MT", shape.m_tiles as i32)
        .template("QREG", shape.q_in_registers as i32)
        .template("BN", shape.keys as i32)
        .device(q.device()))
}

/// The entry name and CUDA source (without the prelude) of the kernel for `dtype`, `d` and the
/// mask kind, for compile-only checks.
pub fn cuda_source(dtype: DType, d: usize, causal: bool) -> Result<(String, String)> {
    let op = "scaled_dot_product_attention";
    let q = Array::full(dtype, &[1, 1, 1, d], 0.0)?;
    let spec = spec(op, &q, 1, 1, d, causal)?;
    let k = kernel(op, d, causal)?;
    let scale = Array::scalar(1.0f32);
    Ok((k.kernel_name(&spec.template), k.generate(&[q.clone(), q.clone(), q, scale], &spec)?))
}
