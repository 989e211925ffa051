//! Warpgroup tensor-core prefill for compute capability 9.0 (FlashAttention-3 structure),
//! written in CUDA through `CudaKernel` for the architecture-specific `sm_90a` target; the
//! parent's rule sends bf16/f16 inputs with D = 64 or 128 (template `HD`), no mask or the
//! causal mask, here on a
//! device of compute capability 9.0 exactly. Other devices keep the `mma.sync` prefill.
//!
//! A block of 384 threads takes 128 queries of one (batch, query head):
//!   warpgroup 0, the producer (24 registers a thread after `setmaxnreg`): one thread loads the
//!       two 64-query halves of Q, then for each key tile j K_j and V_j (`BN` = 128 keys)
//!       into two stages with the tensor memory accelerator
//!       (TMA, `cp.async.bulk.tensor`), each tile as 64-column boxes with the 128-byte
//!       swizzle. A tile's arrival is a "full" mbarrier with the transaction byte count; a
//!       stage is reused once each consumer that read it released it (an "empty" mbarrier per
//!       stage and consumer, one arrival per warp).
//!   warpgroups 1 and 2, the consumers (240 registers), 64 queries each, per tile j:
//!   S = Q K_jᵀ          `wgmma.mma_async m64nBNk16` (bf16|f16 → f32), Q and K read from
//!                       shared memory through matrix descriptors, D/16 steps, one group;
//!   O = O·corr_{j-1}    while S_j runs, then O += P_{j-1} V_{j-1} issued (`m64nDk16`, P
//!                       from registers, V through a transposed (MN-major) descriptor);
//!   masked entries (keys ≥ Tk; causal: key > query + Tk − Tq) hidden, only on tiles that
//!                       cross the diagonal or the end of the keys;
//!   m' = max(m, rowmax S) over the raw scores (min under a negative scale: NEG);
//!   p = 2^(S·c − m'·c), c = scale·log2(e), one FFMA and one ex2 per score (0 where hidden);
//!   l = l·corr + Σp, corr = 2^((m − m')·c), computed while P_{j-1} V_{j-1} is in flight;
//!   P_j rounded to the input dtype into register A fragments once that product completed
//!                       (the f32 accumulator layout of S is the A-operand layout of P).
//!   K_j is released when S_j completes, V_{j-1} when its product does. The consumers issue
//!   their products in strict turns (two named barriers), so one's softmax runs while the
//!   other's products do. Every `wgmma` sits on a path that depends only on warp-uniform
//!   values and no accumulator or A fragment is touched while its product is in flight, so
//!   the compiler keeps the products asynchronous (it serialises them otherwise).
//! At the end O / l (0 where l = 0: a query that sees no key) is rounded to the input dtype,
//! staged in the consumer's own Q rows and stored in 16-byte chunks. Causal consumers stop at
//! their last visible key tile. The grid is (query tiles, Hq, B), the last query tile first:
//! the blocks of one head run side by side and share its K and V in the L2. Ordering the
//! longest tiles of every head first instead (grid (B·Hq, tiles)) spreads the running blocks
//! over as many heads and measured 1.556 / 2.938 ms (causal / full) against 0.985–1.057 /
//! 1.713–1.878 ms on the H100; groups of 4 or 8 heads with the longest tiles of the group
//! first measured 1.00–1.06 / 1.83–1.89 ms against 0.99–1.03 / 1.71–1.84 ms. A persistent form (one block per multiprocessor taking every
//! 132nd query tile in that order, the producer loading the next tile's Q and keys while the
//! consumers finish the current one, the output staged apart from Q) measured 1.04–1.08 /
//! 1.78–1.83 ms against 0.98–1.01 / 1.80–1.88 ms (same call): the fixed split balances the
//! causal blocks worse than the hardware's block scheduler, and there was no per-block cost
//! to win back in the full case.
//!
//! Shared memory (the TMA 128-byte swizzle, which the descriptors read): a tile of R rows of
//! D values is D/64 column blocks of 64 values; block `b` of row `r` is 128 bytes at
//! `b·R·128 + r·128`, its 16-byte chunk `c` stored at chunk `c ^ (r & 7)`; tiles start on
//! 1024-byte boundaries. K-major descriptors (Q, K): stride between 8-row groups 1024 bytes,
//! step `k` of 16 values at block `k / 4`, byte `32 (k % 4)`. MN-major descriptor (V): 8-key
//! groups 1024 bytes apart, column blocks `R·128` bytes apart, step `k` at key `16 k`.
//! Tensor maps (`CudaBackend::tensor_map_16bit`, encoded per call for the arrays passed and
//! read by the kernel from device memory): Q as (D, Tq, B·Hq) in boxes of (64, 64, 1), K and
//! V as (D, Tk, B·Hkv) in boxes of (64, BN, 1); rows past Tq or Tk arrive as zeros.
//!
//! H100, B4 H32 T4096 D128 bf16 (`kiln bench`, same call): this structure took full from
//! 2.60–2.64 to 1.73–1.77 ms and causal from 1.42–1.44 to 1.03–1.04 ms against the previous
//! one (all threads loading with `cp.async` behind a block barrier per tile, whose products
//! the compiler had serialised). D = 64 (same shape otherwise) against the `mma.sync` kernel,
//! same call: full 1.73–1.75 → 1.33–1.34 ms, causal 1.21 → 0.74–0.75 ms; letting the D = 64
//! consumers run without turns measured level (1.33–1.34 / 0.74 ms, same call), and so did
//! causal blocks without turns (D = 128: 1.025–1.062 ms against 0.988–1.069; D = 64:
//! 0.742–0.745 against 0.751–0.760, three rounds, same call).
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D), row-contiguous (copied otherwise)
//! with 16-byte aligned starts; output (B, Hq, Tq, D). Reference: the parent's `reference`
//! (f64). Tolerance: the dtype table (P is rounded to the input dtype, as in FlashAttention).

use std::fmt::Write;
use std::sync::OnceLock;

use crate::array::Array;
use crate::backend::Backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, KernelInput, LaunchSpec};

/// Head dimensions the kernel takes.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
/// The compute capability whose architecture-specific target (`sm_90a`) the kernel needs.
pub const CAPABILITY: (u32, u32) = (9, 0);
/// Threads per block: the producer warpgroup and two consumers.
const THREADS: usize = 384;

/// Keys per tile. 176 without a mask (FlashAttention-3's choice) measured no faster on the
/// H100 (full B4 H32 T4096 D128 bf16: 1.722 / 1.852 ms against 1.747 / 1.705 ms, same call).
/// Also no faster there (three rounds each, same call, full / causal in ms): three stages
/// instead of two (1.80–1.88 / 0.97–1.02 against 1.74–1.84 / 0.98–1.04), and waiting for
/// V_{j-1} after S_j is issued instead of before the turn (1.88–1.91 / 0.97–0.99): a consumer
/// then holds the turn while V arrives.
const KEYS: usize = 128;

/// Shared memory bytes: the query tile (128 rows), two stages of key and value tiles, and 1024
/// bytes to align the start.
fn shared_bytes(d: usize) -> usize {
    (128 + 4 * KEYS) * d * 2 + 1024
}

/// One `wgmma.mma_async` m64nNk16 wrapper (N / 2 f32 accumulators a thread): A from shared
/// memory (`ss`) or registers (`rs`).
fn wgmma_fn(out: &mut String, name: &str, n: usize, a_in_registers: bool, trans_b: bool) {
    let _ = writeln!(
        out,
        "template <int BF> __device__ __forceinline__ void {name}(float* d, {}, unsigned long long db, int acc) {{",
        if a_in_registers { "const unsigned* a" } else { "unsigned long long da" }
    );
    let acc = n / 2;
    let regs: Vec<String> = (0..acc).map(|i| format!("%{i}")).collect();
    let (a_ops, next) = if a_in_registers {
        (format!("{{%{}, %{}, %{}, %{}}}", acc, acc + 1, acc + 2, acc + 3), acc + 4)
    } else {
        (format!("%{acc}"), acc + 1)
    };
    let imm = if a_in_registers { format!("{}", trans_b as u8) } else { format!("0, {}", trans_b as u8) };
    let outs: Vec<String> = (0..acc).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a_in = if a_in_registers { "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" } else { "\"l\"(da)" };
    for (ty, cond) in [("bf16", "if constexpr (BF)"), ("f16", "else")] {
        let _ = writeln!(
            out,
            "  {cond} {{\n    asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n\"\n      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, {a_ops}, %{next}, p, 1, 1, {imm};\\n}}\\n\"\n      : {}\n      : {a_in}, \"l\"(db), \"r\"(acc));\n  }}",
            next + 1,
            regs.join(", "),
            outs.join(", "),
        );
    }
    out.push_str("}\n");
}

/// The kernel's helpers: the `mma.sync` prefill's (packing, `ex2`), the warpgroup ones and
/// the TMA ones.
fn header() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = String::from(super::prefill_cuda::HEADER);
        s.push_str(WG_HEADER);
        s.push_str(TMA_HEADER);
        s.push_str("namespace kiln_wg {\n");
        wgmma_fn(&mut s, "mma_ss", KEYS, false, false);
        wgmma_fn(&mut s, "mma_rs_vt", 128, true, true);
        wgmma_fn(&mut s, "mma_rs_vt64", 64, true, true);
        s.push_str("}  // namespace kiln_wg\n");
        s
    })
}

const WG_HEADER: &str = r#"
namespace kiln_wg {
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ordinary (and cp.async) writes to shared memory made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of N accumulators across a wgmma fence or wait.
template <int N> __device__ __forceinline__ void keep(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        asm volatile("" : "+f"(d[i])::"memory");
    }
}
// A 128-byte-swizzle matrix descriptor.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(lbo >> 4) << 16) |
           (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void sts32(unsigned a, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 lds128(unsigned a) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a) : "memory");
    return v;
}
}  // namespace kiln_wg
"#;

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

const SOURCE: &str = r#"
    using namespace kiln_sdpa;
    constexpr int QWG = 64 * HD * 2;   // bytes of one consumer's query rows
    constexpr int TBYTES = BN * HD * 2; // bytes of one key or value tile
    constexpr int CB = HD / 64;        // 64-column blocks of a row
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
                for (int cb = 0; cb < CB; ++cb) {
                    kiln_tma::load_box(sq + w * QWG + cb * (64 * 128), qmap, cb * 64, q0 + 64 * w, b * Hq + h, q_full);
                }
            }
            const int kv = b * Hkv + hk;
            // Key or value tile j into its stage (`dst`), which it takes over from tile j - 2 once
            // each consumer that used that one released it (`empty`).
            auto load_tile = [&](int j, unsigned full, auto empty, unsigned dst, const unsigned char* map) {
                const int s = j & 1;
                if (j >= 2) {
                    const unsigned parity = (static_cast<unsigned>(j >> 1) - 1) & 1;
                    if (j - 2 < nw0) {
                        kiln_tma::wait(empty(s, 0), parity);
                    }
                    kiln_tma::wait(empty(s, 1), parity);
                }
                kiln_tma::expect_bytes(full, TBYTES);
                for (int cb = 0; cb < CB; ++cb) {
                    kiln_tma::load_box(dst + cb * (BN * 128), map, cb * 64, j * BN, kv, full);
                }
            };
            for (int j = 0; j < ntiles; ++j) {
                const int s = j & 1;
                load_tile(j, k_full(s), k_empty, sk + s * TBYTES, kmap);
                load_tile(j, v_full(s), v_empty, sv + s * TBYTES, vmap);
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
    unsigned short* ob = reinterpret_cast<unsigned short*>(out) + static_cast<long>(b * Hq + h) * Tq * HD;
    const unsigned sqw = sq + cw * QWG;
    const float NEG_INF = neg_inf();
    const float HIDE = NEG ? -NEG_INF : NEG_INF;
    auto extreme = [](float a, float b) { return NEG ? fminf(a, b) : fmaxf(a, b); };
    const float sl2 = scale[0] * 1.4426950408889634f;
    const int rl = 16 * warp + (lane >> 2);
    const int row_lo = w0 + rl;
    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) {
        o[i] = 0.0f;
    }
    float s[BN / 2];
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
        for (int kk = 0; kk < HD / 16; ++kk) {
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
            if constexpr (HD == 128) {
                kiln_wg::mma_rs_vt<BF16>(o, pa[kk], db, 1);
            } else {
                kiln_wg::mma_rs_vt64<BF16>(o, pa[kk], db, 1);
            }
        }
        kiln_wg::commit();
    };
    // O scaled by the last tile's correction, before P V of that tile is added.
    auto rescale = [&]() {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int jj = 0; jj < HD / 8; ++jj) {
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
        kiln_wg::keep<BN / 2>(s);
        kiln_wg::fence();
        issue_s(0);
        kiln_wg::keep<BN / 2>(s);
        pass_turn();
        kiln_wg::wait<0>();
        kiln_wg::keep<BN / 2>(s);
        release(k_empty(0, cw));
        softmax(0);
        pack();
        // Tile j: S_j and P_{j-1} V_{j-1} in flight together, the softmax of S_j running while
        // the second product is.
        for (int j = 1; j < nw; ++j) {
            kiln_tma::wait(k_full(j & 1), static_cast<unsigned>(j >> 1) & 1);
            kiln_tma::wait(v_full((j - 1) & 1), static_cast<unsigned>((j - 1) >> 1) & 1);
            take_turn();
            kiln_wg::keep<BN / 2>(s);
            kiln_wg::fence();
            issue_s(j);
            kiln_wg::keep<HD / 2>(o);
            rescale();
            kiln_wg::keep<HD / 2>(o);
            kiln_wg::fence();
            issue_pv(j - 1);
            kiln_wg::keep<BN / 2>(s);
            kiln_wg::keep<HD / 2>(o);
            pass_turn();
            kiln_wg::wait<1>();
            kiln_wg::keep<BN / 2>(s);
            release(k_empty(j & 1, cw));
            softmax(j);
            kiln_wg::wait<0>();
            kiln_wg::keep<HD / 2>(o);
            release(v_empty((j - 1) & 1, cw));
            pack();
        }
        // The last tile's P V.
        kiln_tma::wait(v_full((nw - 1) & 1), static_cast<unsigned>((nw - 1) >> 1) & 1);
        take_turn();
        kiln_wg::keep<HD / 2>(o);
        rescale();
        kiln_wg::keep<HD / 2>(o);
        kiln_wg::fence();
        issue_pv(nw - 1);
        kiln_wg::keep<HD / 2>(o);
        pass_turn();
        kiln_wg::wait<0>();
        kiln_wg::keep<HD / 2>(o);
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
        for (int jj = 0; jj < HD / 8; ++jj) {
            const unsigned a = sqw + (jj >> 3) * (64 * 128) + r * 128 + (((jj & 7) ^ (r & 7)) << 4) + (lane & 3) * 4;
            kiln_wg::sts32(a, pack2<BF16>(o[4 * jj + 2 * i] * inv, o[4 * jj + 2 * i + 1] * inv));
        }
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory");
#pragma unroll
    for (int it = 0; it < HD / 16; ++it) {
        const int i = wt + it * 128;
        const int r = i / (HD / 8);
        const int ch = i % (HD / 8);
        const int gr = w0 + r;
        const uint4 val = kiln_wg::lds128(sqw + (ch >> 3) * (64 * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
        if (gr < Tq) {
            *reinterpret_cast<uint4*>(ob + static_cast<long>(gr) * HD + ch * 8) = val;
        }
    }
"#;

const INPUTS: [&str; 5] = ["q", "k", "v", "scale", "maps"];

/// The kernel for head dimension `d` (one of [`HEAD_DIMS`]; its shared memory is sized for it).
pub(super) fn kernel(op: &str, d: usize) -> Result<&'static CudaKernel> {
    type Cell = OnceLock<std::result::Result<CudaKernel, String>>;
    static CELLS: [Cell; 2] = [OnceLock::new(), OnceLock::new()];
    let Some(slot) = HEAD_DIMS.iter().position(|&h| h == d) else {
        return Err(Error::shape(op, format!("the warpgroup prefill takes D in {HEAD_DIMS:?}, got {d}")));
    };
    CELLS[slot]
        .get_or_init(|| {
            Ok(CudaKernel::new("kiln_sdpa_prefill_wgmma", &INPUTS, &["out"], SOURCE)
                .map_err(|e| e.to_string())?
                .header(header())
                .shared_memory(shared_bytes(d))
                .arch_specific(CAPABILITY)
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
        .template("HD", q.shape()[3] as i32)
        .device(q.device()))
}

/// The inputs of the kernel for CUDA arrays `q`, `k`, `v` and `scale`: the three made
/// row-contiguous (copied when they are not) and their tensor maps, encoded for those copies.
pub(super) fn inputs(op: &str, q: &Array, k: &Array, v: &Array, scale: f32) -> Result<Vec<KernelInput>> {
    let crate::device::Device::Cuda(ordinal) = q.device() else {
        return Err(Error::invalid(op, format!("the warpgroup prefill runs on CUDA devices, not {}", q.device())));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_carry_one_accumulator_per_two_columns() {
        let mut text = String::new();
        wgmma_fn(&mut text, "probe", 64, true, true);
        assert!(text.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"), "{text}");
        assert!(text.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"), "{text}");
        // 32 accumulators, then the four A registers and the B descriptor, per dtype branch.
        assert_eq!(text.matches("\"+f\"(d[").count(), 2 * 32, "{text}");
        assert!(text.contains("{%32, %33, %34, %35}, %36, p, 1, 1, 1;"), "{text}");
        let mut ss = String::new();
        wgmma_fn(&mut ss, "probe_ss", 128, false, false);
        assert_eq!(ss.matches("\"+f\"(d[").count(), 2 * 64, "{ss}");
        assert!(ss.contains("%64, %65, p, 1, 1, 0, 0;"), "{ss}");
    }

    #[test]
    fn head_dimensions_outside_the_set_are_refused() {
        for d in [32, 96, 256] {
            let err = kernel("attention", d).unwrap_err();
            assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        }
        for d in HEAD_DIMS {
            let q = Array::full(DType::BF16, &[2, 3, 300, d], 0.0);
            let spec = spec("attention", &q, 3, 2, true, false).unwrap();
            assert_eq!(spec.grid, [3 * THREADS as u32, 3, 2]);
            assert_eq!(spec.threadgroup, [THREADS as u32, 1, 1]);
            let (entry, text) = cuda_source(DType::BF16, d, true).unwrap();
            assert!(text.contains(&format!("constexpr int HD = {d};")) && text.contains(&entry), "{entry}");
        }
    }
}
