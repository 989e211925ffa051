//! Warpgroup tensor-core prefill for compute capability 9.0 (FlashAttention-3 style forward),
//! written in CUDA through `CudaKernel` for the architecture-specific `sm_90a` target; the
//! parent's rule sends bf16/f16 inputs with D = 128, no mask or the causal mask, here on a
//! device of compute capability 9.0 exactly. Other devices keep the `mma.sync` prefill.
//!
//! A block of `NWG` warpgroups (128 threads each) takes `64·NWG` queries of one (batch, query
//! head); each warpgroup owns 64 of them. Key/value tiles of `BN` rows are staged in shared
//! memory with `cp.async` by all threads (two stages each), each thread fencing its copies into
//! the async proxy before the block barrier. Step `j` issues S_j = Q K_jᵀ and O += P_{j-1} V_{j-1}
//! together and runs the softmax of S_j while the second product is in flight; K_{j+1} and V_j
//! load during step j. Per tile and warpgroup:
//!   S = Q Kᵀ            `wgmma.mma_async m64n128k16` (bf16|f16 → f32), Q and K read from
//!                       shared memory through matrix descriptors, D/16 = 8 steps, one group;
//!   masked entries (keys ≥ Tk; causal: key > query + Tk − Tq) hidden, only on tiles that
//!                       cross the diagonal or the end of the keys (the other tiles run a loop
//!                       without the key test);
//!   m' = max(m, rowmax S) over the raw scores (min under a negative scale);
//!   p = 2^(S·c − m'·c), c = scale·log2(e), one FFMA and one ex2 per score (0 where hidden);
//!   l = l·2^((m − m')·c) + Σp; O = O·2^((m − m')·c) + P V,
//!                       P rounded to the input dtype in registers (the f32 accumulator layout
//!                       of S is the register A-operand layout of P) and V read from shared
//!                       memory through a transposed (MN-major) descriptor.
//! At the end O / l (0 where l = 0: a query that sees no key) is rounded to the input dtype,
//! staged in the warpgroup's own Q rows and stored in 16-byte chunks. Causal blocks stop at
//! their last visible key tile (a warpgroup skips the tiles past its own), longest blocks first.
//! H100, B4 H32 T4096 D128 bf16, one run: the masking test kept out of the tiles that need none
//! and the scale folded into the FFMA took causal from 1.729–1.756 to 1.421–1.443 ms (full
//! 2.592–2.595 → 2.597–2.634); skipping the rescale of O when no row maximum of the warp moved
//! (a warp vote) measured slower (causal 1.449–1.469, full 2.626–2.662 ms).
//!
//! Shared memory (the 128-byte swizzle of the descriptors): a tile of R rows of D = 128 values
//! is two column blocks of 64 values; block `b` of row `r` is 128 bytes at `b·R·128 + r·128`,
//! its 16-byte chunk `c` stored at chunk `c ^ (r & 7)`; tiles start on 1024-byte boundaries.
//! K-major descriptors (Q, K): stride between 8-row groups 1024 bytes, step `k` of 16 values at
//! block `k / 4`, byte `32 (k % 4)`. MN-major descriptor (V): 8-key groups 1024 bytes apart,
//! column blocks `R·128` bytes apart, step `k` at key `16 k`.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) row-contiguous (copied otherwise) with
//! rows 16-byte aligned; output (B, Hq, Tq, D). Reference: the parent's `reference` (f64).
//! Tolerance: the dtype table (P is rounded to the input dtype, as in FlashAttention).

use std::fmt::Write;
use std::sync::OnceLock;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{CudaKernel, LaunchSpec};

/// Head dimensions the kernel takes.
pub const HEAD_DIMS: [usize; 1] = [128];
/// The compute capability whose architecture-specific target (`sm_90a`) the kernel needs.
pub const CAPABILITY: (u32, u32) = (9, 0);
/// Consumer warpgroups per block (64 queries each).
const WARPGROUPS: usize = 2;
/// Keys per tile.
const KEYS: usize = 128;

fn queries() -> usize {
    64 * WARPGROUPS
}

/// Shared memory bytes: the query tile, two stages of key and value tiles, and 1024 bytes to
/// align the start.
fn shared_bytes(d: usize) -> usize {
    (queries() + 4 * KEYS) * d * 2 + 1024
}

/// One `wgmma.mma_async` m64n128k16 wrapper: A from shared memory (`ss`) or registers (`rs`).
fn wgmma_fn(out: &mut String, name: &str, a_in_registers: bool, trans_b: bool) {
    let _ = writeln!(
        out,
        "template <int BF> __device__ __forceinline__ void {name}(float* d, {}, unsigned long long db, int acc) {{",
        if a_in_registers { "const unsigned* a" } else { "unsigned long long da" }
    );
    let regs: Vec<String> = (0..64).map(|i| format!("%{i}")).collect();
    let (a_ops, next) = if a_in_registers { ("{%64, %65, %66, %67}".to_string(), 68) } else { ("%64".to_string(), 65) };
    let imm = if a_in_registers { format!("{}", trans_b as u8) } else { format!("0, {}", trans_b as u8) };
    let outs: Vec<String> = (0..64).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a_in = if a_in_registers { "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" } else { "\"l\"(da)" };
    for (ty, cond) in [("bf16", "if constexpr (BF)"), ("f16", "else")] {
        let _ = writeln!(
            out,
            "  {cond} {{\n    asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n\"\n      \"wgmma.mma_async.sync.aligned.m64n128k16.f32.{ty}.{ty} {{{}}}, {a_ops}, %{next}, p, 1, 1, {imm};\\n}}\\n\"\n      : {}\n      : {a_in}, \"l\"(db), \"r\"(acc));\n  }}",
            next + 1,
            regs.join(", "),
            outs.join(", "),
        );
    }
    out.push_str("}\n");
}

/// The helpers of the kernel: the `mma.sync` prefill's (`cp.async`, packing, `ex2`) and the
/// warpgroup ones.
pub(super) fn header() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = String::from(super::prefill_cuda::HEADER);
        s.push_str(WG_HEADER);
        s.push_str("namespace kiln_wg {\n");
        wgmma_fn(&mut s, "mma_ss", false, false);
        wgmma_fn(&mut s, "mma_rs_vt", true, true);
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
// Keeps the compiler from moving accesses of the 64 accumulators across a wgmma wait.
__device__ __forceinline__ void keep(float* d) {
#pragma unroll
    for (int i = 0; i < 64; ++i) {
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
// Rows r0.. of a (rows_total, 128) matrix into the swizzled layout, in regions of RPR rows
// (each two column blocks of RPR x 128 bytes); rows past the end are zeros.
template <int ROWS, int RPR, int THREADS>
__device__ __forceinline__ void load_tile(unsigned dst, const unsigned short* src, int r0, int rows_total, int tid) {
    static_assert(ROWS * 16 % THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int it = 0; it < ROWS * 16 / THREADS; ++it) {
        const int i = tid + it * THREADS;
        const int r = i >> 4;
        const int ch = i & 15;
        const int rr = r % RPR;
        const int gr = r0 + r;
        const bool ok = gr < rows_total;
        const unsigned short* p = src + static_cast<long>(ok ? gr : 0) * 128 + ch * 8;
        const unsigned a = dst + (r / RPR) * RPR * 256 + (ch >> 3) * RPR * 128 + rr * 128 + (((ch & 7) ^ (rr & 7)) << 4);
        kiln_sdpa::cp_async16(a, p, ok ? 16 : 0);
    }
}
}  // namespace kiln_wg
"#;

const SOURCE: &str = r#"
    using namespace kiln_sdpa;
    constexpr int BM = 64 * NWG;
    constexpr int THREADS = 128 * NWG;
    constexpr int QWG = 64 * 256;      // bytes of one warpgroup's query rows
    constexpr int TBYTES = BN * 256;   // bytes of one key or value tile
    extern __shared__ __align__(1024) uint4 kiln_wg_smem[];
    const unsigned base = (smem_u32(kiln_wg_smem) + 1023u) & ~1023u;
    const unsigned sq = base;
    const unsigned sk = sq + NWG * QWG;
    const unsigned sv = sk + 2 * TBYTES;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int wt = tid & 127;
    const int warp = wt >> 5;
    const int lane = tid & 31;
    const int Hq = q_shape[1];
    const int Tq = q_shape[2];
    const int Hkv = k_shape[1];
    const int Tk = k_shape[2];
    const int b = blockIdx.z;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BM;
    const int w0 = q0 + wg * 64;
    const int shift = Tk - Tq;
    int kend = Tk;
    int wend = Tk;
    if (CAUSAL) {
        kend = min(max(min(q0 + BM, Tq) + shift, 0), Tk);
        wend = min(max(min(w0 + 64, Tq) + shift, 0), Tk);
    }
    const int ntiles = (kend + BN - 1) / BN;
    const unsigned short* qb = reinterpret_cast<const unsigned short*>(q) + static_cast<long>(b * Hq + h) * Tq * 128;
    const unsigned short* kb = reinterpret_cast<const unsigned short*>(k) + static_cast<long>(b * Hkv + hk) * Tk * 128;
    const unsigned short* vb = reinterpret_cast<const unsigned short*>(v) + static_cast<long>(b * Hkv + hk) * Tk * 128;
    unsigned short* ob = reinterpret_cast<unsigned short*>(out) + static_cast<long>(b * Hq + h) * Tq * 128;
    const unsigned sqw = sq + wg * QWG;
    const float NEG_INF = neg_inf();
    // The raw score a hidden key takes: below (above, under a negative scale) every real one.
    const float HIDE = NEG ? -NEG_INF : NEG_INF;
    // The row extreme of two scores: the larger, or the smaller under a negative scale.
    auto extreme = [](float a, float b) { return NEG ? fminf(a, b) : fmaxf(a, b); };
    const float sl2 = scale[0] * 1.4426950408889634f;
    // This thread's accumulator rows (of the warpgroup's 64) are rl and rl + 8; its columns
    // 8j + 2 (lane & 3) + {0, 1} in register 4j + 2i + {0, 1} (i = 0 for rl, 1 for rl + 8).
    const int rl = 16 * warp + (lane >> 2);
    const int row_lo = w0 + rl;

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) {
        o[i] = 0.0f;
    }
    float m[2] = {HIDE, HIDE};
    float l[2] = {0.0f, 0.0f};

    // Tiles this warpgroup uses (causal: up to its last visible key).
    const int nw = (wend + BN - 1) / BN;
    unsigned pa[BN / 16][4];
    if (ntiles > 0) {
        kiln_wg::load_tile<BM, 64, THREADS>(sq, qb, q0, Tq, tid);
        kiln_wg::load_tile<BN, BN, THREADS>(sk, kb, 0, Tk, tid);
        cp_commit();
    }
    // Step j: S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} issued together, the softmax of S_j running
    // while the second product is in flight. K_{j+1} and V_j load during step j.
    for (int j = 0; j <= ntiles; ++j) {
        cp_wait<0>();
        kiln_wg::fence_async_shared();
        __syncthreads();
        if (j + 1 < ntiles) {
            kiln_wg::load_tile<BN, BN, THREADS>(sk + ((j + 1) & 1) * TBYTES, kb, (j + 1) * BN, Tk, tid);
        }
        if (j < ntiles) {
            kiln_wg::load_tile<BN, BN, THREADS>(sv + (j & 1) * TBYTES, vb, j * BN, Tk, tid);
        }
        cp_commit();
        const bool do_s = j < nw;
        const bool do_pv = j >= 1 && j <= nw;
        if (!do_s && !do_pv) {
            continue;
        }
        kiln_wg::fence();
        float s[64];
        if (do_s) {
            const unsigned kt = sk + (j & 1) * TBYTES;
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                const unsigned long long da = kiln_wg::desc(sqw + (kk >> 2) * (64 * 128) + (kk & 3) * 32, 16, 1024);
                const unsigned long long db = kiln_wg::desc(kt + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
                kiln_wg::mma_ss<BF16>(s, da, db, kk > 0);
            }
            kiln_wg::commit();
        }
        if (do_pv) {
            const unsigned vt = sv + ((j - 1) & 1) * TBYTES;
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned long long db = kiln_wg::desc(vt + kk * 2048, BN * 128, 1024);
                kiln_wg::mma_rs_vt<BF16>(o, pa[kk], db, 1);
            }
            kiln_wg::commit();
        }
        if (!do_s) {
            kiln_wg::wait<0>();
            kiln_wg::keep(o);
            continue;
        }
        if (do_pv) {
            kiln_wg::wait<1>();
        } else {
            kiln_wg::wait<0>();
        }
        kiln_wg::keep(s);
        const int n0 = j * BN;
        const bool edge = n0 + BN > Tk || (CAUSAL && n0 + BN - 1 > w0 + shift);
        // The row extreme is taken over the raw scores (the maximum, or the minimum under a
        // negative scale: NEG), so p = 2^(s·sl2 − m·sl2) is one FFMA and one ex2 per score.
        float corr[2];
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
            // A row with no visible key so far keeps m = HIDE and p = 0 (hidden scores are
            // HIDE, and 2^(HIDE·sl2 − 0) = 0 for sl2 != 0; sl2 = 0 is handled below).
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
        if (do_pv) {
            kiln_wg::wait<0>();
            kiln_wg::keep(o);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int jj = 0; jj < 16; ++jj) {
                o[4 * jj + 2 * i] *= corr[i];
                o[4 * jj + 2 * i + 1] *= corr[i];
            }
        }
        // P as register A fragments for the next step: kk covers keys 16kk..16kk+15.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            pa[kk][0] = pack2<BF16>(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = pack2<BF16>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2<BF16>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2<BF16>(s[8 * kk + 6], s[8 * kk + 7]);
        }
    }

    // Each warpgroup stages its rows in its own query rows (read only by its own wgmma, all
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
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
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

const INPUTS: [&str; 4] = ["q", "k", "v", "scale"];

pub(super) fn kernel(op: &str, d: usize) -> Result<&'static CudaKernel> {
    type Cell = OnceLock<std::result::Result<CudaKernel, String>>;
    static CELL: Cell = OnceLock::new();
    if !HEAD_DIMS.contains(&d) {
        return Err(Error::shape(op, format!("the warpgroup prefill takes D in {HEAD_DIMS:?}, got {d}")));
    }
    CELL.get_or_init(|| {
        Ok(CudaKernel::new("kiln_sdpa_prefill_wgmma", &INPUTS, &["out"], SOURCE)
            .map_err(|e| e.to_string())?
            .header(header())
            .shared_memory(shared_bytes(d))
            .arch_specific(CAPABILITY))
    })
    .as_ref()
    .map_err(|m| Error::invalid(op, m.clone()))
}

/// The launch for `q` (B, Hq, Tq, D); `negative_scale` compiles the variant whose row extreme
/// is the minimum of the raw scores.
pub(super) fn spec(op: &str, q: &Array, hq: usize, b: usize, causal: bool, negative_scale: bool) -> Result<LaunchSpec> {
    let dim = |n: usize| u32::try_from(n).map_err(|_| Error::invalid(op, format!("grid extent {n} exceeds u32")));
    let tq = q.shape()[2];
    let threads = 128 * WARPGROUPS;
    Ok(LaunchSpec::new([dim(tq.div_ceil(queries()) * threads)?, dim(hq)?, dim(b)?], [threads as u32, 1, 1])
        .output(q.shape(), q.dtype())
        .template("BF16", (q.dtype() == DType::BF16) as i32)
        .template("CAUSAL", causal as i32)
        .template("NEG", negative_scale as i32)
        .template("NWG", WARPGROUPS as i32)
        .template("BN", KEYS as i32)
        .device(q.device()))
}

/// The entry name and CUDA source (without the prelude) of the kernel for `dtype`, `d` and the
/// mask kind, for compile-only checks (compile for `sm_90a`).
pub fn cuda_source(dtype: DType, d: usize, causal: bool) -> Result<(String, String)> {
    let op = "scaled_dot_product_attention";
    let q = Array::full(dtype, &[1, 1, 1, d], 0.0);
    let spec = spec(op, &q, 1, 1, causal, false)?;
    let k = kernel(op, d)?;
    let scale = Array::scalar(1.0f32);
    Ok((k.kernel_name(&spec.template), k.generate(&[q.clone(), q.clone(), q, scale], &spec)?))
}
