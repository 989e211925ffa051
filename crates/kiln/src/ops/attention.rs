//! Scaled dot-product attention `out = softmax(scale * Q K^T + mask) V` with grouped-query heads,
//! never forming the score matrix (online softmax, f32 accumulation).
//!
//! Query head `hq` reads key/value head `hq / (Hq / Hkv)`. Masks: none; causal (query `i` sees
//! keys `j <= i + Tk - Tq`); or an additive array broadcastable to (B, Hq, Tq, Tk). A query that
//! sees no key (causal with Tq > Tk, or an all `-inf` mask row) yields zeros.
//! Online softmax: per query a running max `m` (a finite -1e30 start, so a fully masked prefix
//! merges with weight 0), denominator `l` and weighted sum `acc`, rescaled by `exp(m_old - m_new)`.
//! Two paths, by a fixed rule on the shape ([`path`]):
//! - prefill (Tq > 4): a threadgroup of `BQ` simdgroups takes `BQ` consecutive queries of one
//!   head; key/value tiles of `BK` rows are staged in threadgroup memory (keys padded one column
//!   against bank conflicts) and shared by all its queries. Within a simdgroup, lane `j % BK`
//!   scores key `j` over a `32 / BK` share of the head dimension (summed by `simd_shuffle_xor`),
//!   then the lanes split the head dimension to accumulate `p_j v_j` with `p_j` broadcast by
//!   `simd_shuffle`. BK = 32, 16 or 8, the largest whose tiles fit the threadgroup budget.
//! - decode (Tq <= 4): memory-bound, so each key and value row is read once in 16-byte chunks.
//!   The keys are split into `NS` ranges, one threadgroup of 4 simdgroups per (query, range),
//!   enough ranges for about 8192 threadgroups. Within it, `LPK` lanes (a stream) score one key
//!   (a chunk each, summed by `simd_shuffle_xor`), with `U` keys' K and V chunks loaded before
//!   use; each stream keeps its own (m, l, acc), merged in threadgroup memory into an f32
//!   partial per range, and a second kernel merges the ranges.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) of f32/f16/bf16 (one dtype), D <= 256;
//! mask of any float dtype; output (B, Hq, Tq, D) in the input dtype.
//! Reference: [`reference`], two-pass softmax in f64 on the dtype-rounded inputs.
//! Tolerance: the dtype table.

use std::sync::OnceLock;

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelInput, LaunchSpec, MetalKernel};

const OP: &str = "scaled_dot_product_attention";

/// Queries per head up to which the decode (split-keys) path runs.
pub const DECODE_MAX_QUERIES: usize = 4;
/// Largest head dimension.
pub const MAX_HEAD_DIM: usize = 256;
/// Queries (simdgroups) per prefill threadgroup.
const BQ: usize = 8;
/// Simdgroups per decode threadgroup.
const DECODE_SG: usize = 4;
/// Decode threadgroups the key split aims for: many waves on a large GPU, so the last is short.
const DECODE_THREADGROUPS: usize = 8192;
/// Shortest decode key range.
pub const DECODE_MIN_SPLIT: usize = 64;
/// Threadgroup bytes the prefill key/value tiles may use.
const TILE_BUDGET: usize = 24 * 1024;

/// The attention mask.
#[derive(Clone, Copy, Debug)]
pub enum Mask<'a> {
    None,
    /// Query `i` sees keys `j <= i + Tk - Tq`.
    Causal,
    /// Added to the scaled scores; broadcastable to (B, Hq, Tq, Tk).
    Additive(&'a Array),
}

/// Which kernel path a shape takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Prefill {
        keys_per_tile: usize,
    },
    /// `lanes_per_key` lanes read one key row in 16-byte chunks.
    Decode {
        splits: usize,
        split_len: usize,
        lanes_per_key: usize,
    },
}

/// The deterministic path rule, on `heads` = B·Hq and the shape: decode for at most
/// [`DECODE_MAX_QUERIES`] queries, the keys split into ranges (multiples of
/// [`DECODE_MIN_SPLIT`] keys) so that about [`DECODE_THREADGROUPS`] threadgroups fill the GPU;
/// else prefill with the largest key tile (32, 16, 8 rows) that fits the budget.
pub fn path(heads: usize, tq: usize, tk: usize, d: usize, dtype: DType) -> Path {
    if tq <= DECODE_MAX_QUERIES {
        let rows = heads * tq;
        let splits = DECODE_THREADGROUPS.div_ceil(rows).clamp(1, tk.div_ceil(DECODE_MIN_SPLIT));
        let split_len = tk.div_ceil(splits).next_multiple_of(DECODE_MIN_SPLIT);
        let chunks = (d * dtype.size()).div_ceil(16);
        let lanes_per_key = chunks.next_power_of_two().min(32);
        return Path::Decode { splits: tk.div_ceil(split_len), split_len, lanes_per_key };
    }
    let q_bytes = BQ * d * 4;
    let keys_per_tile =
        [32, 16, 8].into_iter().find(|bk| bk * (2 * d + 1) * dtype.size() + q_bytes <= TILE_BUDGET).unwrap_or(8);
    Path::Prefill { keys_per_tile }
}

const PREFILL: &str = r#"
    constexpr int DPL = (D + 31) / 32;
    constexpr int KS = D + 1;
    constexpr int SPLIT = 32 / BK;
    constexpr int K_TILE = BK * KS;
    constexpr int V_TILE = BK * D;
    constexpr int Q_TILE = BQ * D;
    threadgroup T k_s[K_TILE];
    threadgroup T v_s[V_TILE];
    threadgroup float q_s[Q_TILE];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int n_threads = static_cast<int>(threads_per_threadgroup.x);
    int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int Hq = q_shape[1];
    int Tq = q_shape[2];
    int Hkv = k_shape[1];
    int Tk = k_shape[2];
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int hq = static_cast<int>(threadgroup_position_in_grid.y);
    int hk = hq / (Hq / Hkv);
    int q0 = static_cast<int>(threadgroup_position_in_grid.x) * BQ;
    int row = q0 + sg;
    bool live = row < Tq;
    int shift = Tk - Tq;
    int kend = Tk;
    int kend_row = Tk;
    if (MASK == 1) {
        kend = metal::clamp(metal::min(q0 + BQ, Tq) + shift, 0, Tk);
        kend_row = metal::clamp(row + shift + 1, 0, Tk);
    }
    const device T* kb = k + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* vb = v + static_cast<long>(b * Hkv + hk) * Tk * D;
    for (int e = tid; e < BQ * D; e += n_threads) {
        int r = q0 + e / D;
        q_s[e] = r < Tq ? static_cast<float>(q[(static_cast<long>(b * Hq + hq) * Tq + r) * D + e % D]) : 0.0f;
    }

    float acc[DPL];
    for (int c = 0; c < DPL; ++c) {
        acc[c] = 0.0f;
    }
    float m = -1e30f;
    float l = 0.0f;
    for (int t0 = 0; t0 < kend; t0 += BK) {
        int nk = metal::min(BK, kend - t0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int e = tid; e < BK * D; e += n_threads) {
            int r = e / D;
            int c = e % D;
            T kv = T(0);
            T vv = T(0);
            if (r < nk) {
                kv = kb[static_cast<long>(t0 + r) * D + c];
                vv = vb[static_cast<long>(t0 + r) * D + c];
            }
            k_s[r * KS + c] = kv;
            v_s[r * D + c] = vv;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (live) {
            // Lane-dependent choices are selects, not branches, up to the collectives.
            int j = lane % BK;
            int part = lane / BK;
            int key = t0 + j;
            float s = 0.0f;
            for (int d = part; d < D; d += SPLIT) {
                s += q_s[sg * D + d] * static_cast<float>(k_s[j * KS + d]);
            }
            for (int o = BK; o < 32; o *= 2) {
                s += simd_shuffle_xor(s, static_cast<ushort>(o));
            }
            s *= scale;
            bool valid = j < nk && key < kend_row;
            if (MASK == 2) {
                int kc = metal::min(key, Tk - 1);
                s += static_cast<float>(mask[b * mstr[0] + hq * mstr[1] + row * mstr[2] + kc * mstr[3]]);
            }
            s = metal::select(-INFINITY, s, valid);
            float m_new = metal::max(m, simd_max(s));
            float p = metal::exp(s - m_new);
            float corr = metal::exp(m - m_new);
            l = l * corr + simd_sum(metal::select(0.0f, p, part == 0));
            for (int c = 0; c < DPL; ++c) {
                acc[c] *= corr;
            }
            for (int jj = 0; jj < nk; ++jj) {
                float pj = simd_shuffle(p, static_cast<ushort>(jj));
                for (int c = 0; c < DPL; ++c) {
                    int d = metal::min(c * 32 + lane, D - 1);
                    acc[c] += pj * static_cast<float>(v_s[jj * D + d]);
                }
            }
            m = m_new;
        }
    }
    if (live) {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < DPL; ++c) {
            int d = c * 32 + lane;
            if (d < D) {
                out[(static_cast<long>(b * Hq + hq) * Tq + row) * D + d] = static_cast<T>(acc[c] * inv);
            }
        }
    }
"#;

/// 16-byte chunks of a key/value row as raw words, and their widening to f32: `E = 16 /
/// sizeof(T)` elements per chunk. `kiln_word` reads one word element by element (any alignment,
/// zero past `n`); the fast path reads a whole chunk as one `uint4`.
const DECODE_HEADER: &str = r#"
inline uint kiln_word(const device float* p, int i, int n) {
    return i < n ? as_type<uint>(p[i]) : 0u;
}
template <typename T>
inline uint kiln_word(const device T* p, int i, int n) {
    vec<T, 2> h(2 * i < n ? p[2 * i] : T(0), 2 * i + 1 < n ? p[2 * i + 1] : T(0));
    return as_type<uint>(h);
}
template <typename T>
inline uint4 kiln_chunk(const device T* p, int c, int n, bool aligned) {
    if (aligned) {
        return ((const device uint4*)p)[c];
    }
    return uint4(kiln_word(p, 4 * c, n), kiln_word(p, 4 * c + 1, n), kiln_word(p, 4 * c + 2, n),
                 kiln_word(p, 4 * c + 3, n));
}
inline void kiln_widen(uint4 w, thread float* f, float) {
    for (int i = 0; i < 4; ++i) {
        f[i] = as_type<float>(w[i]);
    }
}
template <typename T>
inline void kiln_widen(uint4 w, thread float* f, T) {
    for (int i = 0; i < 4; ++i) {
        vec<T, 2> h = as_type<vec<T, 2>>(w[i]);
        f[2 * i] = static_cast<float>(h.x);
        f[2 * i + 1] = static_cast<float>(h.y);
    }
}
"#;

const DECODE: &str = r#"
    // A stream is LPK lanes that score one key at a time, each lane owning CPL 16-byte chunks of
    // the head dimension; every stream keeps its own (m, l, acc) until the end of the range.
    constexpr int E = 16 / sizeof(T);
    constexpr int NC = (D + E - 1) / E;
    constexpr int CPL = (NC + LPK - 1) / LPK;
    constexpr int NSTREAM = SG * (32 / LPK);
    constexpr int STEP = NSTREAM * U;
    threadgroup float st_m[NSTREAM];
    threadgroup float st_l[NSTREAM];
    threadgroup float st_acc[NSTREAM * D];
    int tid = static_cast<int>(thread_index_in_threadgroup);
    int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    int lane = static_cast<int>(thread_index_in_simdgroup);
    int stream = sg * (32 / LPK) + lane / LPK;
    int sub = lane % LPK;
    int Hq = q_shape[1];
    int Tq = q_shape[2];
    int Hkv = k_shape[1];
    int Tk = k_shape[2];
    int split = static_cast<int>(threadgroup_position_in_grid.x);
    int n_splits = static_cast<int>(threadgroups_per_grid.x);
    int r = static_cast<int>(threadgroup_position_in_grid.y);
    int b = static_cast<int>(threadgroup_position_in_grid.z);
    int hq = r / Tq;
    int row = r % Tq;
    int hk = hq / (Hq / Hkv);
    int kend = Tk;
    if (MASK == 1) {
        kend = metal::clamp(row + Tk - Tq + 1, 0, Tk);
    }
    int k_lo = split * SPLIT_LEN;
    int k_hi = metal::min(kend, k_lo + SPLIT_LEN);
    const device T* kb = k + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* vb = v + static_cast<long>(b * Hkv + hk) * Tk * D;
    const device T* qr = q + (static_cast<long>(b * Hq + hq) * Tq + row) * D;

    float qf[CPL][E];
    float acc[CPL][E];
    for (int cc = 0; cc < CPL; ++cc) {
        int c = metal::min(sub + cc * LPK, NC - 1);
        kiln_widen(kiln_chunk(qr, c, D, false), qf[cc], T(0));
        for (int e = 0; e < E; ++e) {
            qf[cc][e] = sub + cc * LPK < NC ? qf[cc][e] : 0.0f;
            acc[cc][e] = 0.0f;
        }
    }
    float m = -1e30f;
    float l = 0.0f;
    // The loop bounds are uniform over the threadgroup; keys past the range are clamped loads
    // whose scores are masked to -inf.
    for (int base = k_lo; base < k_hi; base += STEP) {
        uint4 kw[U][CPL];
        uint4 vw[U][CPL];
        for (int u = 0; u < U; ++u) {
            int kc = metal::min(base + u * NSTREAM + stream, k_hi - 1);
            for (int cc = 0; cc < CPL; ++cc) {
                int c = metal::min(sub + cc * LPK, NC - 1);
                kw[u][cc] = kiln_chunk(kb + static_cast<long>(kc) * D, c, D, VEC == 1);
                vw[u][cc] = kiln_chunk(vb + static_cast<long>(kc) * D, c, D, VEC == 1);
            }
        }
        float s[U];
        float s_max = -INFINITY;
        for (int u = 0; u < U; ++u) {
            float dot = 0.0f;
            for (int cc = 0; cc < CPL; ++cc) {
                float kf[E];
                kiln_widen(kw[u][cc], kf, T(0));
                for (int e = 0; e < E; ++e) {
                    dot += qf[cc][e] * kf[e];
                }
            }
            for (int o = LPK / 2; o > 0; o /= 2) {
                dot += simd_shuffle_xor(dot, static_cast<ushort>(o));
            }
            int key = base + u * NSTREAM + stream;
            float x = dot * scale;
            if (MASK == 2) {
                int kc = metal::min(key, k_hi - 1);
                x += static_cast<float>(mask[b * mstr[0] + hq * mstr[1] + row * mstr[2] + kc * mstr[3]]);
            }
            s[u] = metal::select(-INFINITY, x, key < k_hi);
            s_max = metal::max(s_max, s[u]);
        }
        float m_new = metal::max(m, s_max);
        float corr = metal::exp(m - m_new);
        l *= corr;
        for (int cc = 0; cc < CPL; ++cc) {
            for (int e = 0; e < E; ++e) {
                acc[cc][e] *= corr;
            }
        }
        for (int u = 0; u < U; ++u) {
            float p = metal::exp(s[u] - m_new);
            l += p;
            for (int cc = 0; cc < CPL; ++cc) {
                float vf[E];
                kiln_widen(vw[u][cc], vf, T(0));
                for (int e = 0; e < E; ++e) {
                    acc[cc][e] += p * vf[e];
                }
            }
        }
        m = m_new;
    }
    if (sub == 0) {
        st_m[stream] = m;
        st_l[stream] = l;
    }
    for (int cc = 0; cc < CPL; ++cc) {
        for (int e = 0; e < E; ++e) {
            int d = (sub + cc * LPK) * E + e;
            if (d < D) {
                st_acc[stream * D + d] = acc[cc][e];
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float gm = -1e30f;
    for (int s = 0; s < NSTREAM; ++s) {
        gm = metal::max(gm, st_m[s]);
    }
    long pbase = (static_cast<long>(b) * Hq * Tq + r) * n_splits + split;
    for (int d = tid; d < D; d += SG * 32) {
        float num = 0.0f;
        for (int s = 0; s < NSTREAM; ++s) {
            num += st_acc[s * D + d] * metal::exp(st_m[s] - gm);
        }
        part_acc[pbase * D + d] = num;
    }
    if (tid == 0) {
        float den = 0.0f;
        for (int s = 0; s < NSTREAM; ++s) {
            den += st_l[s] * metal::exp(st_m[s] - gm);
        }
        part_ml[2 * pbase] = gm;
        part_ml[2 * pbase + 1] = den;
    }
"#;

const COMBINE: &str = r#"
    int d = static_cast<int>(thread_position_in_grid.x);
    long r = thread_position_in_grid.y;
    int D = part_acc_shape[2];
    int NS = part_acc_shape[1];
    const device float* ml = part_ml + r * NS * 2;
    float gm = -1e30f;
    for (int s = 0; s < NS; ++s) {
        gm = metal::max(gm, ml[2 * s]);
    }
    float num = 0.0f;
    float den = 0.0f;
    for (int s = 0; s < NS; ++s) {
        float w = metal::exp(ml[2 * s] - gm);
        num += part_acc[(r * NS + s) * D + d] * w;
        den += ml[2 * s + 1] * w;
    }
    out[r * D + d] = static_cast<T>(den > 0.0f ? num / den : 0.0f);
"#;

type Cell = OnceLock<std::result::Result<MetalKernel, String>>;

fn cached(cell: &'static Cell, build: impl FnOnce() -> Result<MetalKernel>) -> Result<&'static MetalKernel> {
    cell.get_or_init(|| build().map_err(|e| e.to_string())).as_ref().map_err(|msg| Error::invalid(OP, msg.clone()))
}

const INPUTS: [&str; 6] = ["q", "k", "v", "mask", "mstr", "scale"];

fn prefill_kernel() -> Result<&'static MetalKernel> {
    static CELL: Cell = OnceLock::new();
    cached(&CELL, || MetalKernel::new("kiln_sdpa_prefill", &INPUTS, &["out"], PREFILL))
}

fn decode_kernel() -> Result<&'static MetalKernel> {
    static CELL: Cell = OnceLock::new();
    cached(&CELL, || {
        Ok(MetalKernel::new("kiln_sdpa_decode", &INPUTS, &["part_acc", "part_ml"], DECODE)?.header(DECODE_HEADER))
    })
}

fn combine_kernel() -> Result<&'static MetalKernel> {
    static CELL: Cell = OnceLock::new();
    cached(&CELL, || MetalKernel::new("kiln_sdpa_combine", &["part_acc", "part_ml"], &["out"], COMBINE))
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

fn grid_dim(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(OP, format!("grid extent {n} exceeds u32")))
}

/// Everything one call needs after validation.
struct Plan {
    dims: [usize; 6],
    mask_kind: i32,
    mask: Array,
    strides: Array,
}

/// Validates the inputs; returns `[B, Hq, Hkv, Tq, Tk, D]` and the mask operands.
fn plan(q: &Array, k: &Array, v: &Array, mask: Mask) -> Result<Plan> {
    if !is_float(q.dtype()) {
        return Err(Error::dtype(OP, q.dtype(), "q must be float32, float16 or bfloat16"));
    }
    for (name, a) in [("k", k), ("v", v)] {
        if a.dtype() != q.dtype() {
            return Err(Error::dtype(OP, a.dtype(), format!("{name} must have q's dtype {}", q.dtype())));
        }
    }
    let (&[b, hq, tq, d], &[kb, hkv, tk, kd]) = (q.shape(), k.shape()) else {
        return Err(Error::shape(OP, format!("q and k must be (B, H, T, D), got {:?} and {:?}", q.shape(), k.shape())));
    };
    if kb != b || kd != d || v.shape() != k.shape() {
        return Err(Error::shape(OP, format!("q {:?}, k {:?} and v {:?} disagree", q.shape(), k.shape(), v.shape())));
    }
    if q.size() == 0 || k.size() == 0 {
        return Err(Error::shape(OP, format!("empty input: q {:?}, k {:?}", q.shape(), k.shape())));
    }
    if hq % hkv != 0 {
        return Err(Error::shape(OP, format!("query heads ({hq}) must be a multiple of key heads ({hkv})")));
    }
    if d > MAX_HEAD_DIM {
        return Err(Error::shape(OP, format!("head dimension {d} exceeds {MAX_HEAD_DIM}")));
    }
    if k.device() != q.device() || v.device() != q.device() {
        return Err(Error::invalid(OP, "q, k and v must live on one device"));
    }
    let device = q.device();
    let (mask_kind, mask_arr, strides) = match mask {
        Mask::None | Mask::Causal => {
            let kind = if matches!(mask, Mask::Causal) { 1 } else { 0 };
            (kind, Array::full(DType::F32, &[1], 0.0).to_device(device)?, [0i64; 4])
        }
        Mask::Additive(m) => {
            if !is_float(m.dtype()) {
                return Err(Error::dtype(OP, m.dtype(), "the mask must be float32, float16 or bfloat16"));
            }
            if m.device() != device {
                return Err(Error::invalid(OP, format!("the mask lives on {} but q on {device}", m.device())));
            }
            (2, m.clone(), broadcast_strides(m.shape(), [b, hq, tq, tk])?)
        }
    };
    Ok(Plan {
        dims: [b, hq, hkv, tq, tk, d],
        mask_kind,
        mask: mask_arr,
        strides: Array::from_vec(&[4], strides.to_vec())?.to_device(device)?,
    })
}

/// Element strides of a row-contiguous array of `shape` broadcast to `target` (0 on broadcast axes).
fn broadcast_strides(shape: &[usize], target: [usize; 4]) -> Result<[i64; 4]> {
    if shape.len() > 4 || shape.contains(&0) {
        return Err(Error::shape(OP, format!("mask {shape:?} is not broadcastable to {target:?}")));
    }
    let mut out = [0i64; 4];
    let mut stride = 1i64;
    for (i, &n) in shape.iter().enumerate().rev() {
        let axis = 4 - shape.len() + i;
        if n != target[axis] && n != 1 {
            return Err(Error::shape(OP, format!("mask {shape:?} is not broadcastable to {target:?}")));
        }
        out[axis] = if n == 1 { 0 } else { stride };
        stride *= n as i64;
    }
    Ok(out)
}

/// `softmax(scale * q k^T + mask) v` for `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D).
pub fn scaled_dot_product_attention(q: &Array, k: &Array, v: &Array, scale: f32, mask: Mask) -> Result<Array> {
    scaled_dot_product_attention_with(q, k, v, scale, mask, None)
}

/// As [`scaled_dot_product_attention`], the output first filled with `init` (tests poison it).
pub fn scaled_dot_product_attention_with(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: Mask,
    init: Option<f64>,
) -> Result<Array> {
    let calls = launches(q, k, v, scale, mask)?;
    let n = calls.len();
    let mut carried: Vec<Array> = Vec::new();
    for (i, (kernel, mut inputs, mut spec)) in calls.into_iter().enumerate() {
        if i + 1 == n {
            spec.init_value = init;
        }
        inputs.extend(carried.drain(..).map(KernelInput::Array));
        carried = kernel.call(&inputs, &spec)?;
    }
    carried.pop().ok_or_else(|| Error::invalid(OP, "the kernel returned no output"))
}

type Call = (&'static MetalKernel, Vec<KernelInput>, LaunchSpec);

/// The kernel calls for these inputs, in order; each call's outputs are appended to the next
/// call's inputs.
pub fn launches(q: &Array, k: &Array, v: &Array, scale: f32, mask: Mask) -> Result<Vec<Call>> {
    let Plan { dims, mask_kind, mask, strides } = plan(q, k, v, mask)?;
    let [b, hq, _, tq, tk, d] = dims;
    let dtype = q.dtype();
    let device = q.device();
    let inputs: Vec<KernelInput> =
        vec![q.into(), k.into(), v.into(), mask.clone().into(), strides.into(), scale.into()];
    let common = |spec: LaunchSpec| {
        spec.template("T", dtype)
            .template("M", mask.dtype())
            .template("D", d as i32)
            .template("MASK", mask_kind)
            .device(device)
    };
    match path(b * hq, tq, tk, d, dtype) {
        Path::Prefill { keys_per_tile } => {
            let tiles = tq.div_ceil(BQ);
            let threads = 32 * BQ;
            let spec = common(
                LaunchSpec::new([grid_dim(tiles * threads)?, grid_dim(hq)?, grid_dim(b)?], [threads as u32, 1, 1])
                    .output(q.shape(), dtype),
            )
            .template("BK", keys_per_tile as i32)
            .template("BQ", BQ as i32);
            Ok(vec![(prefill_kernel()?, inputs, spec)])
        }
        Path::Decode { splits, split_len, lanes_per_key } => {
            let threads = 32 * DECODE_SG;
            let rows = hq * tq;
            let elems = 16 / dtype.size();
            let chunks_per_lane = d.div_ceil(elems).div_ceil(lanes_per_key);
            // Whole 16-byte chunks need rows of whole chunks from an aligned start; copies made
            // by `ensure_row_contiguous` start aligned.
            let aligned = d % elems == 0 && [k, v].iter().all(|a| !a.is_row_contiguous() || a.offset() % elems == 0);
            let spec = common(
                LaunchSpec::new([grid_dim(splits * threads)?, grid_dim(rows)?, grid_dim(b)?], [threads as u32, 1, 1])
                    .output(&[b * rows, splits, d], DType::F32)
                    .output(&[b * rows, splits, 2], DType::F32),
            )
            .template("SG", DECODE_SG as i32)
            .template("SPLIT_LEN", split_len as i32)
            .template("LPK", lanes_per_key as i32)
            // Eight (four) keys' chunks of K and V in flight per lane.
            .template("U", if chunks_per_lane > 1 { 4 } else { 8 })
            .template("VEC", aligned as i32);
            let combine = LaunchSpec::new([grid_dim(d)?, grid_dim(b * rows)?, 1], [d.min(256) as u32, 1, 1])
                .output(q.shape(), dtype)
                .template("T", dtype)
                .device(device);
            Ok(vec![(decode_kernel()?, inputs, spec), (combine_kernel()?, Vec::new(), combine)])
        }
    }
}

/// Two-pass softmax attention in f64. `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) values;
/// `mask` the additive mask already broadcast to (B, Hq, Tq, Tk), if any; `dims` =
/// `[B, Hq, Hkv, Tq, Tk, D]`. Rows that see no key are zero.
pub fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dims: [usize; 6],
    scale: f64,
    causal: bool,
    mask: Option<&[f64]>,
) -> Vec<f64> {
    let [b, hq, hkv, tq, tk, d] = dims;
    let mut out = vec![0.0; b * hq * tq * d];
    for bi in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for i in 0..tq {
                let qr = &q[((bi * hq + h) * tq + i) * d..][..d];
                let limit = if causal { (i + tk + 1).saturating_sub(tq).min(tk) } else { tk };
                let mut scores = Vec::with_capacity(limit);
                for j in 0..limit {
                    let kr = &k[((bi * hkv + kh) * tk + j) * d..][..d];
                    let mut s = scale * qr.iter().zip(kr).map(|(a, c)| a * c).sum::<f64>();
                    if let Some(m) = mask {
                        s += m[((bi * hq + h) * tq + i) * tk + j];
                    }
                    scores.push(s);
                }
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if scores.is_empty() || max == f64::NEG_INFINITY {
                    continue;
                }
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = w.iter().sum();
                let o = &mut out[((bi * hq + h) * tq + i) * d..][..d];
                for (j, wj) in w.iter().enumerate() {
                    let vr = &v[((bi * hkv + kh) * tk + j) * d..][..d];
                    for (oc, vc) in o.iter_mut().zip(vr) {
                        *oc += wj * vc / total;
                    }
                }
            }
        }
    }
    out
}
