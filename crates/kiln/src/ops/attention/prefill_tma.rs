//! Warp-specialised Hopper prefill (FlashAttention-3 structure) for compute capability 9.0:
//! a producer warpgroup streams the query, key and value tiles with the tensor memory
//! accelerator (TMA), two consumer warpgroups compute with `wgmma` and take turns at the tensor
//! cores, so one's softmax runs while the other's products do.
//!
//! A block of 384 threads takes 128 queries of one (batch, query head):
//!   warpgroup 0 (producer, 24 registers a thread after `setmaxnreg`): one thread loads the
//!       two 64-query halves of Q, then for each key tile j K_j and V_j, 128 keys each, into
//!       two stages, each tile as two 64-column boxes with the 128-byte swizzle; a stage is
//!       reused once both consumers have released it (an "empty" mbarrier per stage, one
//!       arrival per consumer warp), and a tile's arrival is a "full" mbarrier with the
//!       transaction byte count;
//!   warpgroups 1 and 2 (consumers, 240 registers): 64 queries each. Step j issues
//!       S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} together (`wgmma.m64n128k16`, K released as soon
//!       as S_j is complete, V_{j-1} once the product is), runs the online softmax of S_j while
//!       the product is in flight, rescales O and keeps P_j as register A fragments (see
//!       prefill_wgmma.rs for the maths, the masking and the accumulator layout). Two named
//!       barriers make the consumers issue their products in turn.
//! Tensor maps (`backend::cuda::tensor_map_16bit`, built per call for the arrays passed): Q
//! as (D, Tq, B·Hq) in boxes of (64, 64, 1), K and V as (D, Tk, B·Hkv) in boxes of (64, 128, 1);
//! rows past Tq or Tk arrive as zeros. The shared-memory layout is prefill_wgmma.rs's, which is
//! the TMA 128-byte swizzle of those boxes.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) row-contiguous with 16-byte aligned
//! starts (D = 128); output (B, Hq, Tq, D). Reference: the parent's `reference` (f64).
//! Tolerance: the dtype table (P is rounded to the input dtype, as in FlashAttention).

use std::sync::OnceLock;

use crate::array::Array;
use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec};

/// Head dimensions the kernel takes.
pub const HEAD_DIMS: [usize; 1] = [128];
/// Keys per tile.
const KEYS: usize = 128;
/// Threads per block: the producer warpgroup and two consumers.
const THREADS: usize = 384;

/// Shared memory bytes: the query tile (128 rows), two stages of key and value tiles, and 1024
/// bytes to align the start.
fn shared_bytes(d: usize) -> usize {
    (128 + 4 * KEYS) * d * 2 + 1024
}

const TMA_HEADER: &str = r#"
namespace kiln_tma {
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nKILN_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra KILN_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// One box of a 3-D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void load_box(unsigned dst, const void* map, int c0, int c1, int c2, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
// The host wrote the maps through the generic proxy; the TMA reads them through its own.
__device__ __forceinline__ void acquire_map(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
}
}  // namespace kiln_tma
"#;

/// The wgmma prefill's helpers and the TMA ones.
fn header() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| format!("{}{}", super::prefill_wgmma::header(), TMA_HEADER))
}

const SOURCE: &str = r#"
    using namespace kiln_sdpa;
    constexpr int QWG = 64 * 256;      // bytes of one consumer's query rows
    constexpr int TBYTES = BN * 256;   // bytes of one key or value tile
    extern __shared__ __align__(1024) uint4 kiln_wg_smem[];
    // q_full, k_full[stage], v_full[stage], k_empty[stage][consumer], v_empty[stage][consumer]
    __shared__ __align__(8) unsigned long long kiln_bars[13];
    const unsigned base = (smem_u32(kiln_wg_smem) + 1023u) & ~1023u;
    const unsigned sq = base;
    const unsigned sk = sq + 2 * QWG;
    const unsigned sv = sk + 2 * TBYTES;
    const unsigned q_full = smem_u32(kiln_bars);
    auto k_full = [&](int s) { return q_full + 8 * (1 + s); };
    auto v_full = [&](int s) { return q_full + 8 * (3 + s); };
    auto k_empty = [&](int s, int c) { return q_full + 8 * (5 + 2 * s + c); };
    auto v_empty = [&](int s, int c) { return q_full + 8 * (9 + 2 * s + c); };
    const int tid = threadIdx.x;
    const int Hq = q_shape[1];
    const int Tq = q_shape[2];
    const int Hkv = k_shape[1];
    const int Tk = k_shape[2];
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * 128;
    const int shift = Tk - Tq;
    // Key tiles consumer c uses (causal: up to its last visible key); consumer 1's queries come
    // later, so it never uses fewer, and the block's tiles are its.
    auto tiles_of = [&](int c) {
        const int w = q0 + 64 * c;
        const int end = CAUSAL ? min(max(min(w + 64, Tq) + shift, 0), Tk) : Tk;
        return (end + BN - 1) / BN;
    };
    const int nw0 = tiles_of(0);
    const int nw1 = tiles_of(1);
    const int ntiles = nw1;
    if (tid == 0) {
        kiln_tma::bar_init(q_full, 1);
        for (int s = 0; s < 2; ++s) {
            kiln_tma::bar_init(k_full(s), 1);
            kiln_tma::bar_init(v_full(s), 1);
            for (int c = 0; c < 2; ++c) {
                kiln_tma::bar_init(k_empty(s, c), 4);
                kiln_tma::bar_init(v_empty(s, c), 4);
            }
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (tid == 0 && ntiles > 0) {
            const unsigned char* qmap = maps;
            const unsigned char* kmap = maps + 128;
            const unsigned char* vmap = maps + 256;
            kiln_tma::acquire_map(qmap);
            kiln_tma::acquire_map(kmap);
            kiln_tma::acquire_map(vmap);
            kiln_tma::expect_bytes(q_full, 2 * QWG);
            for (int w = 0; w < 2; ++w) {
                for (int cb = 0; cb < 2; ++cb) {
                    kiln_tma::load_box(sq + w * QWG + cb * (64 * 128), qmap, cb * 64, q0 + 64 * w, b * Hq + h, q_full);
                }
            }
            const int kv = b * Hkv + hk;
            // Tile j reuses the stage of tile j - 2 once each consumer that used it released it.
            for (int j = 0; j < ntiles; ++j) {
                const int s = j & 1;
                const unsigned parity = (static_cast<unsigned>(j >> 1) - 1) & 1;
                if (j >= 2) {
                    if (j - 2 < nw0) {
                        kiln_tma::wait(k_empty(s, 0), parity);
                    }
                    kiln_tma::wait(k_empty(s, 1), parity);
                }
                kiln_tma::expect_bytes(k_full(s), TBYTES);
                for (int cb = 0; cb < 2; ++cb) {
                    kiln_tma::load_box(sk + s * TBYTES + cb * (BN * 128), kmap, cb * 64, j * BN, kv, k_full(s));
                }
                if (j >= 2) {
                    if (j - 2 < nw0) {
                        kiln_tma::wait(v_empty(s, 0), parity);
                    }
                    kiln_tma::wait(v_empty(s, 1), parity);
                }
                kiln_tma::expect_bytes(v_full(s), TBYTES);
                for (int cb = 0; cb < 2; ++cb) {
                    kiln_tma::load_box(sv + s * TBYTES + cb * (BN * 128), vmap, cb * 64, j * BN, kv, v_full(s));
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    // Consumer 0 or 1, from lane 0 so the compiler sees it warp-uniform: every `wgmma` below
    // sits on a path that depends only on uniform values, which keeps the products
    // asynchronous.
    const int cw = __shfl_sync(0xffffffffu, (tid >> 7) - 1, 0);
    const int wt = tid & 127;
    const int warp = wt >> 5;
    const int lane = tid & 31;
    const int w0 = q0 + cw * 64;
    const int nw = cw == 0 ? nw0 : nw1;
    unsigned short* ob = reinterpret_cast<unsigned short*>(out) + static_cast<long>(b * Hq + h) * Tq * 128;
    const unsigned sqw = sq + cw * QWG;
    const float NEG_INF = neg_inf();
    const float HIDE = NEG ? -NEG_INF : NEG_INF;
    auto extreme = [](float a, float b) { return NEG ? fminf(a, b) : fmaxf(a, b); };
    const float sl2 = scale[0] * 1.4426950408889634f;
    const int rl = 16 * warp + (lane >> 2);
    const int row_lo = w0 + rl;
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        o[i] = 0.0f;
    }
    float s[64];
    float m[2] = {HIDE, HIDE};
    float l[2] = {0.0f, 0.0f};
    float corr[2] = {0.0f, 0.0f};
    unsigned pa[BN / 16][4];

    // The consumers issue their products in strict turns: consumer 0 takes its turn on barrier
    // 3 and passes it on barrier 4, consumer 1 the other way round (a named barrier counts
    // threads, so neither side may pass twice before the other took the turn). Consumer c has
    // one turn per tile it uses and one for the last P V; consumer 0, which may use one tile
    // fewer, takes and passes empty turns at the end until it has as many as consumer 1, and
    // consumer 1 passes every turn but its last.
    const int turns0 = nw0 > 0 ? nw0 + 1 : 0;
    const int turns1 = nw1 > 0 ? nw1 + 1 : 0;
    int turn = 0;
    auto take_turn = [&]() { asm volatile("bar.sync %0, 256;\n" ::"r"(3 + cw) : "memory"); };
    auto pass_turn = [&]() {
        if (cw == 0 || turn < turns1 - 1) {
            asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - cw) : "memory");
        }
        ++turn;
    };
    auto release = [&](unsigned bar) {
        if (lane == 0) {
            kiln_tma::arrive(bar);
        }
    };
    auto issue_s = [&](int j) {
        const unsigned kt = sk + (j & 1) * TBYTES;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            const unsigned long long da = kiln_wg::desc(sqw + (kk >> 2) * (64 * 128) + (kk & 3) * 32, 16, 1024);
            const unsigned long long db = kiln_wg::desc(kt + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
            kiln_wg::mma_ss<BF16>(s, da, db, kk > 0);
        }
        kiln_wg::commit();
    };
    auto issue_pv = [&](int j) {
        const unsigned vt = sv + (j & 1) * TBYTES;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            const unsigned long long db = kiln_wg::desc(vt + kk * 2048, BN * 128, 1024);
            kiln_wg::mma_rs_vt<BF16>(o, pa[kk], db, 1);
        }
        kiln_wg::commit();
    };
    // O scaled by the last tile's correction, before P V of that tile is added.
    auto rescale = [&]() {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int jj = 0; jj < 16; ++jj) {
                o[4 * jj + 2 * i] *= corr[i];
                o[4 * jj + 2 * i + 1] *= corr[i];
            }
        }
    };
    // The online softmax of S_j: new row extremes, the correction of the old sums, P_j in s.
    auto softmax = [&](int j) {
        const int n0 = j * BN;
        const bool edge = n0 + BN > Tk || (CAUSAL && n0 + BN - 1 > w0 + shift);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = row_lo + 8 * i;
            float mx = HIDE;
            if (edge) {
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int key = n0 + 8 * jj + 2 * (lane & 3) + c;
                        const bool ok = key < Tk && (!CAUSAL || key <= row + shift);
                        const float x = ok ? s[4 * jj + 2 * i + c] : HIDE;
                        s[4 * jj + 2 * i + c] = x;
                        mx = extreme(mx, x);
                    }
                }
            } else {
#pragma unroll
                for (int jj = 0; jj < BN / 8; ++jj) {
                    mx = extreme(mx, extreme(s[4 * jj + 2 * i], s[4 * jj + 2 * i + 1]));
                }
            }
            mx = extreme(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = extreme(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = extreme(m[i], mx);
            // A row with no visible key so far keeps m = HIDE and p = 0.
            const float m_use = m_new == HIDE ? 0.0f : m_new;
            corr[i] = m[i] == HIDE ? 0.0f : ex2((m[i] - m_use) * sl2);
            m[i] = m_new;
            const float mb = -m_use * sl2;
            float sum = 0.0f;
#pragma unroll
            for (int jj = 0; jj < BN / 8; ++jj) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const float x = s[4 * jj + 2 * i + c];
                    float p = ex2(fmaf(x, sl2, mb));
                    if (edge) {
                        p = x == HIDE ? 0.0f : p;
                    }
                    s[4 * jj + 2 * i + c] = p;
                    sum += p;
                }
            }
            l[i] = l[i] * corr[i] + sum;
        }
    };
    // P_j as register A fragments (kk covers keys 16kk..16kk+15), once the product that reads
    // the previous ones is complete.
    auto pack = [&]() {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            pa[kk][0] = pack2<BF16>(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = pack2<BF16>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2<BF16>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2<BF16>(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };

    if (ntiles > 0) {
        // Consumer 0 stages its output in its query rows, so it waits for them even when it
        // uses no key tile.
        kiln_tma::wait(q_full, 0);
    }
    if (cw == 1 && turns1 >= 1) {
        asm volatile("bar.arrive %0, 256;\n" ::"r"(3) : "memory");
    }
    if (nw > 0) {
        // Tile 0: S_0 alone.
        kiln_tma::wait(k_full(0), 0);
        take_turn();
        kiln_wg::keep(s);
        kiln_wg::fence();
        issue_s(0);
        kiln_wg::keep(s);
        pass_turn();
        kiln_wg::wait<0>();
        kiln_wg::keep(s);
        release(k_empty(0, cw));
        softmax(0);
        pack();
        // Tile j: S_j and P_{j-1} V_{j-1} in flight together, the softmax of S_j running while
        // the second product is.
        for (int j = 1; j < nw; ++j) {
            kiln_tma::wait(k_full(j & 1), static_cast<unsigned>(j >> 1) & 1);
            kiln_tma::wait(v_full((j - 1) & 1), static_cast<unsigned>((j - 1) >> 1) & 1);
            take_turn();
            kiln_wg::keep(s);
            kiln_wg::fence();
            issue_s(j);
            kiln_wg::keep(o);
            rescale();
            kiln_wg::keep(o);
            kiln_wg::fence();
            issue_pv(j - 1);
            kiln_wg::keep(s);
            kiln_wg::keep(o);
            pass_turn();
            kiln_wg::wait<1>();
            kiln_wg::keep(s);
            release(k_empty(j & 1, cw));
            softmax(j);
            kiln_wg::wait<0>();
            kiln_wg::keep(o);
            release(v_empty((j - 1) & 1, cw));
            pack();
        }
        // The last tile's P V.
        kiln_tma::wait(v_full((nw - 1) & 1), static_cast<unsigned>((nw - 1) >> 1) & 1);
        take_turn();
        kiln_wg::keep(o);
        rescale();
        kiln_wg::keep(o);
        kiln_wg::fence();
        issue_pv(nw - 1);
        kiln_wg::keep(o);
        pass_turn();
        kiln_wg::wait<0>();
        kiln_wg::keep(o);
        release(v_empty((nw - 1) & 1, cw));
    }
    if (cw == 0) {
        for (int t = turns0; t < turns1; ++t) {
            take_turn();
            pass_turn();
        }
    }

    // Each consumer stages its rows in its own query rows (read only by its own products, all
    // complete), then stores them in 16-byte chunks.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float lt = l[i];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        const int r = rl + 8 * i;
#pragma unroll
        for (int jj = 0; jj < 16; ++jj) {
            const unsigned a = sqw + (jj >> 3) * (64 * 128) + r * 128 + (((jj & 7) ^ (r & 7)) << 4) + (lane & 3) * 4;
            kiln_wg::sts32(a, pack2<BF16>(o[4 * jj + 2 * i] * inv, o[4 * jj + 2 * i + 1] * inv));
        }
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int i = wt + it * 128;
        const int r = i >> 4;
        const int ch = i & 15;
        const int gr = w0 + r;
        const uint4 val = kiln_wg::lds128(sqw + (ch >> 3) * (64 * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
        if (gr < Tq) {
            *reinterpret_cast<uint4*>(ob + static_cast<long>(gr) * 128 + ch * 8) = val;
        }
    }
"#;

const INPUTS: [&str; 5] = ["q", "k", "v", "scale", "maps"];

pub(super) fn kernel(op: &str, d: usize) -> Result<&'static CudaKernel> {
    type Cell = OnceLock<std::result::Result<CudaKernel, String>>;
    static CELL: Cell = OnceLock::new();
    if !HEAD_DIMS.contains(&d) {
        return Err(Error::shape(op, format!("the TMA prefill takes D in {HEAD_DIMS:?}, got {d}")));
    }
    CELL.get_or_init(|| {
        Ok(CudaKernel::new("kiln_sdpa_prefill_tma", &INPUTS, &["out"], SOURCE)
            .map_err(|e| e.to_string())?
            .header(header())
            .shared_memory(shared_bytes(d))
            .arch_specific(super::prefill_wgmma::CAPABILITY)
            .launch_bounds(THREADS as u32, 1))
    })
    .as_ref()
    .map_err(|m| Error::invalid(op, m.clone()))
}

/// The launch for `q` (B, Hq, Tq, D); `negative_scale` compiles the variant whose row extreme
/// is the minimum of the raw scores.
pub(super) fn spec(op: &str, q: &Array, hq: usize, b: usize, causal: bool, negative_scale: bool) -> Result<LaunchSpec> {
    let dim = |n: usize| u32::try_from(n).map_err(|_| Error::invalid(op, format!("grid extent {n} exceeds u32")));
    let tq = q.shape()[2];
    Ok(LaunchSpec::new([dim(tq.div_ceil(128) * THREADS)?, dim(hq)?, dim(b)?], [THREADS as u32, 1, 1])
        .output(q.shape(), q.dtype())
        .template("BF16", (q.dtype() == DType::BF16) as i32)
        .template("CAUSAL", causal as i32)
        .template("NEG", negative_scale as i32)
        .template("BN", KEYS as i32)
        .device(q.device()))
}

/// The inputs of the kernel for CUDA arrays `q`, `k`, `v` and `scale`: the three made
/// row-contiguous (copied when they are not) and their tensor maps, encoded for those copies.
pub(super) fn inputs(op: &str, q: &Array, k: &Array, v: &Array, scale: f32) -> Result<Vec<KernelInput>> {
    let crate::device::Device::Cuda(ordinal) = q.device() else {
        return Err(Error::invalid(op, format!("the TMA prefill runs on CUDA devices, not {}", q.device())));
    };
    let backend = crate::backend::cuda::cuda_backend(ordinal)?;
    let [q, k, v] = [q, k, v].map(|a| if a.is_row_contiguous() { Ok(a.clone()) } else { backend.row_contiguous(a) });
    let (q, k, v) = (q?, k?, v?);
    let (qs, ks) = (q.shape(), k.shape());
    let d = qs[3] as u64;
    let mut maps = Vec::with_capacity(3 * crate::backend::cuda::TENSOR_MAP_BYTES);
    maps.extend(backend.tensor_map_16bit(op, &q, [d, qs[2] as u64, (qs[0] * qs[1]) as u64], [64, 64, 1])?);
    for a in [&k, &v] {
        maps.extend(backend.tensor_map_16bit(
            op,
            a,
            [d, ks[2] as u64, (ks[0] * ks[1]) as u64],
            [64, KEYS as u32, 1],
        )?);
    }
    let maps = Array::from_bytes(DType::U8, &[maps.len()], &maps)?.to_device(q.device())?;
    Ok(vec![q.into(), k.into(), v.into(), scale.into(), maps.into()])
}

/// The entry name and CUDA source (without the prelude) of the kernel for `dtype`, `d` and the
/// mask kind, for compile-only checks (compile for `sm_90a`).
pub fn cuda_source(dtype: DType, d: usize, causal: bool) -> Result<(String, String)> {
    let op = "scaled_dot_product_attention";
    let q = Array::full(dtype, &[1, 1, 1, d], 0.0);
    let spec = spec(op, &q, 1, 1, causal, false)?;
    let k = kernel(op, d)?;
    let scale = Array::scalar(1.0f32);
    let maps = Array::full(DType::U8, &[3 * crate::backend::cuda::TENSOR_MAP_BYTES], 0.0);
    Ok((k.kernel_name(&spec.template), k.generate(&[q.clone(), q.clone(), q, scale, maps], &spec)?))
}
