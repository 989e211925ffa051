//! Scaled dot-product attention `out = softmax(scale * Q K^T + mask) V` with grouped-query heads,
//! never forming the score matrix (online softmax, f32 accumulation).
//!
//! Query head `hq` reads key/value head `hq / (Hq / Hkv)`. Masks: none; causal (query `i` sees
//! keys `j <= i + Tk - Tq`); or an additive array broadcastable to (B, Hq, Tq, Tk). A query that
//! sees no key (causal with Tq > Tk, or an all `-inf` mask row) yields zeros.
//! Online softmax: per query a running max `m` (a finite -1e30 start, so a fully masked prefix
//! merges with weight 0), denominator `l` and weighted sum `acc`, rescaled by `exp(m_old - m_new)`.
//! Three portable paths, by a fixed rule on the shape ([`path`]):
//! - tiled prefill (Tq > 4, D a multiple of 32 up to 128): a threadgroup of 64 threads takes 32
//!   queries of one head and walks 32-key tiles; Q and K are staged transposed in f32 so that
//!   each thread computes a 4×4 block of scores from two float4 reads per step, the row softmax
//!   runs over the 8 lanes sharing the rows, and each thread accumulates 4 queries × D/8 outputs
//!   from the value tile (staged in the key tile's buffer), `p` broadcast by `simd_shuffle`.
//! - prefill (other Tq > 4): a threadgroup of `BQ` simdgroups takes `BQ` consecutive queries of one
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
//!   partial per range, and a second kernel merges the ranges. Its CUDA translation keeps
//!   generic pointers (`MetalKernel::restrict_pointers(false)`), which the H100 runs faster.
//!
//! - CUDA tensor-core prefill ([`route`]): on a CUDA device, bf16/f16, D = 64 or 128, Tq > 4,
//!   no mask or the causal mask, rows 16-byte aligned: on a device of compute capability 9.0
//!   exactly, the warp-specialised warpgroup (TMA and `wgmma`, sm_90a) forward
//!   (prefill_wgmma.rs); else the FlashAttention-2 forward with `mma.sync` (prefill_cuda.rs).
//!   Additive masks, f32, other head dimensions and the CPU take the Metal paths above, which
//!   stay the reference path.
//!
//! Layout: `q` (B, Hq, Tq, D), `k`, `v` (B, Hkv, Tk, D) of f32/f16/bf16 (one dtype), D <= 256;
//! mask of any float dtype; output (B, Hq, Tq, D) in the input dtype.
//! Reference: [`reference`](fn@reference), two-pass softmax in f64 on the dtype-rounded inputs.
//! Tolerance: the dtype table.

use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{KernelInput, LaunchSpec, MetalKernel};
use crate::ops::kernel_cache::KernelCache;
use crate::ops::plan::{OpCall, OpPlan};

mod decode;
mod prefill;
pub mod prefill_cuda;
pub mod prefill_wgmma;

use decode::{COMBINE, DECODE, DECODE_HEADER};
use prefill::{PREFILL, PREFILL_TILED, TILED_HEADER};

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
/// Largest head dimension of the tiled prefill: its Q and K/V tiles (f32) fill 32 KiB.
const TILED_MAX_HEAD_DIM: usize = 128;
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
    /// 32 queries × 32 keys per threadgroup of 64 threads, 4×4 scores per thread.
    PrefillTiled,
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
/// [`DECODE_MIN_SPLIT`] keys) so that about `DECODE_THREADGROUPS` threadgroups fill the GPU;
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
    if d % 32 == 0 && d <= TILED_MAX_HEAD_DIM {
        return Path::PrefillTiled;
    }
    let q_bytes = BQ * d * 4;
    let keys_per_tile =
        [32, 16, 8].into_iter().find(|bk| bk * (2 * d + 1) * dtype.size() + q_bytes <= TILE_BUDGET).unwrap_or(8);
    Path::Prefill { keys_per_tile }
}

/// Which kernel family runs a call: a CUDA tensor-core prefill or a portable Metal path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `mma.sync` (prefill_cuda.rs).
    CudaPrefill,
    /// `wgmma`, compute capability 9.0 only (prefill_wgmma.rs).
    CudaPrefillWgmma,
    Metal(Path),
}

/// The deterministic rule between the families, for inputs that pass validation: see
/// [`route_rule`], with the compute capability of a CUDA device queried from it; a
/// row-contiguous input is aligned when it starts on a 16-byte boundary (other inputs are
/// copied, hence aligned).
pub fn route(q: &Array, k: &Array, v: &Array, mask: &Mask) -> Result<Route> {
    let dims = validate(q, k, v)?;
    let aligned = aligned16(q, k, v);
    let capability = match q.device() {
        Device::Cuda(_) => crate::backend::capabilities(q.device())?.compute_capability,
        _ => None,
    };
    Ok(route_rule(q.device(), capability, q.dtype(), dims, mask, aligned))
}

fn aligned16(q: &Array, k: &Array, v: &Array) -> bool {
    [q, k, v].iter().all(|a| !a.is_row_contiguous() || (a.offset() * a.dtype().size()) % 16 == 0)
}

/// The CUDA prefill when the device is CUDA, the dtype bf16 or f16, D one of
/// [`prefill_cuda::HEAD_DIMS`], Tq above [`DECODE_MAX_QUERIES`], the mask none or causal, and
/// the inputs `aligned`: the `wgmma` one when the device's `capability` is
/// [`prefill_wgmma::CAPABILITY`] (9.0) exactly and D is one of [`prefill_wgmma::HEAD_DIMS`],
/// else the `mma.sync` one; otherwise the Metal [`path`]. `dims` = `[B, Hq, Hkv, Tq, Tk, D]`.
pub fn route_rule(
    device: Device,
    capability: Option<(u32, u32)>,
    dtype: DType,
    dims: [usize; 6],
    mask: &Mask,
    aligned: bool,
) -> Route {
    let [b, hq, _, tq, tk, d] = dims;
    let cuda = matches!(device, Device::Cuda(_))
        && matches!(dtype, DType::BF16 | DType::F16)
        && prefill_cuda::HEAD_DIMS.contains(&d)
        && tq > DECODE_MAX_QUERIES
        && matches!(mask, Mask::None | Mask::Causal)
        && aligned;
    if !cuda {
        return Route::Metal(path(b * hq, tq, tk, d, dtype));
    }
    if capability == Some(prefill_wgmma::CAPABILITY) && prefill_wgmma::HEAD_DIMS.contains(&d) {
        Route::CudaPrefillWgmma
    } else {
        Route::CudaPrefill
    }
}

const INPUTS: [&str; 6] = ["q", "k", "v", "mask", "mstr", "scale"];

fn prefill_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || MetalKernel::new("kiln_sdpa_prefill", &INPUTS, &["out"], PREFILL))
}

fn prefill_tiled_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || {
        Ok(MetalKernel::new("kiln_sdpa_prefill_tiled", &INPUTS, &["out"], PREFILL_TILED)?.header(TILED_HEADER))
    })
}

fn decode_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || {
        // Generic pointers on CUDA: the key/value loads schedule better (measured on the H100).
        Ok(MetalKernel::new("kiln_sdpa_decode", &INPUTS, &["part_acc", "part_ml"], DECODE)?
            .header(DECODE_HEADER)
            .restrict_pointers(false))
    })
}

fn combine_kernel() -> Result<&'static MetalKernel> {
    static CELL: KernelCache<MetalKernel> = KernelCache::new();
    CELL.one(OP, || MetalKernel::new("kiln_sdpa_combine", &["part_acc", "part_ml"], &["out"], COMBINE))
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

/// Validates q, k and v; returns `[B, Hq, Hkv, Tq, Tk, D]`.
fn validate(q: &Array, k: &Array, v: &Array) -> Result<[usize; 6]> {
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
    Ok([b, hq, hkv, tq, tk, d])
}

/// Validates the inputs; returns `[B, Hq, Hkv, Tq, Tk, D]` and the mask operands.
fn plan(q: &Array, k: &Array, v: &Array, mask: Mask) -> Result<Plan> {
    let [b, hq, hkv, tq, tk, d] = validate(q, k, v)?;
    let device = q.device();
    let (mask_kind, mask_arr, strides) = match mask {
        Mask::None | Mask::Causal => {
            let kind = if matches!(mask, Mask::Causal) { 1 } else { 0 };
            (kind, Array::full(DType::F32, &[1], 0.0)?.to_device(device)?, [0i64; 4])
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
    scaled_dot_product_attention_plan(q, k, v, scale, mask)?.with_init(init).run_one()
}

/// The kernel calls the op makes for these inputs, by [`route`]: a CUDA prefill, or the Metal
/// [`launches`].
pub fn scaled_dot_product_attention_plan(q: &Array, k: &Array, v: &Array, scale: f32, mask: Mask) -> Result<OpPlan> {
    plan_by(route(q, k, v, &mask)?, q, k, v, scale, mask)
}

/// As [`scaled_dot_product_attention_with`] along `route` instead of the rule's choice (tests
/// compare the paths on one device). A CUDA route needs inputs in its set: CUDA arrays, bf16 or
/// f16, its head dimensions, no mask or causal, 16-byte aligned rows; the `wgmma` one fails
/// with an error on a device whose compute capability is not 9.0.
pub fn scaled_dot_product_attention_by(
    route: Route,
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: Mask,
    init: Option<f64>,
) -> Result<Array> {
    if route != Route::CudaPrefill && route != Route::CudaPrefillWgmma {
        return scaled_dot_product_attention_with(q, k, v, scale, mask, init);
    }
    // The set the route takes, whatever the device's capability (checked at the launch).
    let capability = (route == Route::CudaPrefillWgmma).then_some(prefill_wgmma::CAPABILITY);
    let dims = validate(q, k, v)?;
    if route_rule(q.device(), capability, q.dtype(), dims, &mask, aligned16(q, k, v)) != route {
        return Err(Error::invalid(OP, format!("{route:?} does not take these inputs: {dims:?} {}", q.dtype())));
    }
    plan_by(route, q, k, v, scale, mask)?.with_init(init).run_one()
}

fn plan_by(route: Route, q: &Array, k: &Array, v: &Array, scale: f32, mask: Mask) -> Result<OpPlan> {
    let causal = matches!(mask, Mask::Causal);
    match route {
        Route::CudaPrefill | Route::CudaPrefillWgmma => {
            let [b, hq, _, _, _, d] = validate(q, k, v)?;
            if route == Route::CudaPrefillWgmma {
                let kernel = prefill_wgmma::kernel(OP, d)?;
                let schedule = prefill_wgmma::schedule(q.device(), b * hq, q.shape()[2], k.shape()[2], d, causal)?;
                let spec = prefill_wgmma::spec(OP, q, causal, scale, &schedule)?;
                let inputs = prefill_wgmma::inputs(OP, q, k, v, scale, &schedule)?;
                return Ok(OpPlan::new(vec![OpCall::cuda(kernel, inputs, spec)]).outputs(&[(0, 0)]));
            }
            let (kernel, spec) = (prefill_cuda::kernel(OP, d, causal)?, prefill_cuda::spec(OP, q, hq, b, d, causal)?);
            return Ok(OpCall::cuda(kernel, vec![q.into(), k.into(), v.into(), scale.into()], spec).into());
        }
        Route::Metal(_) => {}
    }
    let calls = launches(q, k, v, scale, mask)?;
    Ok(OpPlan::new(calls.into_iter().map(|(kernel, inputs, spec)| OpCall::new(kernel, inputs, spec)).collect()))
}

type Call = (&'static MetalKernel, Vec<KernelInput>, LaunchSpec);

/// The portable Metal kernel calls for these inputs, in order, whatever the device; each call's
/// outputs are appended to the next call's inputs.
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
        Path::PrefillTiled => {
            let aligned = [q, k, v].iter().all(|a| !a.is_row_contiguous() || a.offset() % 4 == 0);
            let spec = common(
                LaunchSpec::new([grid_dim(tq.div_ceil(32) * 64)?, grid_dim(hq)?, grid_dim(b)?], [64, 1, 1])
                    .output(q.shape(), dtype),
            )
            .template("VEC", aligned as i32);
            Ok(vec![(prefill_tiled_kernel()?, inputs, spec)])
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
