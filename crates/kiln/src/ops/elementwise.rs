//! Elementwise activations: `exp`, `silu`, `gelu` (tanh approximation) and `gelu_erf`.
//!
//! Maths, evaluated in f32 and rounded once to the input dtype:
//! - `exp(x)`
//! - `silu(x) = x / (1 + exp(-x))`
//! - `gelu(x) = x/2 · (1 + tanh(u)) = x / (1 + exp(-2u))`, `u = √(2/π) · (x + 0.044715 x³)`;
//!   the second form is the same function without the cancellation of `1 + tanh` in the
//!   negative tail.
//! - `gelu_erf(x) = x/2 · (1 + erf(x/√2)) = x/2 · erfc(-x/√2)`. Metal has no erf: the kernel
//!   evaluates erfc with a Chebyshev fit whose relative error is below 1.2e-7 over the whole
//!   line, so the negative tail (where 1 + erf cancels) stays accurate too.
//!
//! f16/bf16 outputs take `exp(y)` as `exp2(y · log2 e)`: a relative error of about |y| · 6e-8
//! (below 1e-6 over the whole f16 range), three orders under the 16-bit rounding, for a few
//! instructions less per element. f32 outputs use the full-precision `exp`.
//!
//! Layout: `x` any shape and any view (slices, negative steps, transposes, broadcasts) of
//! f32/f16/bf16; the output has the same shape, row-contiguous, in the dtype of `x`.
//! Variant rule (deterministic on the layout):
//! - `contiguous`: `x` row-contiguous at a 4-element-aligned offset, 8 elements or more, and
//!   f32 — or f16/bf16 at an offset that is not a multiple of 8 elements. Chunks of 4 elements
//!   with `vec<T, 4>` loads and stores; each thread handles K chunks, all K loads issued before
//!   the first store: K = 1 in threadgroups of 512 for f32 (one 16-byte load), K = 4 in
//!   threadgroups of 256 for f16/bf16 (four 8-byte loads).
//! - `contiguous16`: f16/bf16, row-contiguous at an 8-element-aligned offset, 16 elements or
//!   more. One unit of 8 elements per thread, in threadgroups of 256: one 16-byte `uint4` load
//!   and store whose 32-bit words hold element pairs.
//!
//!   In both, threadgroup g owns the K · G adjacent chunks from g · K · G (coalesced), whole
//!   threadgroups are launched, and every threadgroup but the last skips the bounds checks and
//!   the read of `n`, so its loads depend on the builtins alone; the last checks each chunk and
//!   maps the tail elements past the last whole chunk. The unit and threadgroup sizes are the
//!   fastest measured on the H100; 16-byte chunks are read through `kiln_load16` (evict-last
//!   for the L2 on CUDA), also measured faster there (`bench/results/notes/ops.md`).
//! - `strided`: anything else, read in place through `elem_to_loc` (no copy) after merging
//!   axes that are contiguous with each other, one thread per element.
//! - `flat`, planned for the CPU: `x` row-contiguous, one element per thread (exactly `n`
//!   threads, in groups of 256), each mapped by the same function as in the GPU variants. The
//!   CPU runs each thread as an iteration of a plain loop, where chunks add work per element
//!   and no memory parallelism. `unary_call_planned_for` gives a GPU's plan on any device (to
//!   check it on the CPU).
//!
//! Reference: the formulas in f64 (erf by its Taylor series below 2, the continued fraction of
//! erfc above) on the dtype-rounded inputs. Tolerance: the dtype table of `kiln::check`.

use super::kernel_cache::KernelCache;
use super::plan::OpCall;
use super::util::{check_float, check_nonempty, grid_dim, load16_source};
use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LaunchSpec, MetalKernel, MAX_NDIM};

/// Which activation; the discriminant is the kernel's `OP` template value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    Exp = 0,
    Silu = 1,
    Gelu = 2,
    GeluErf = 3,
}

impl Unary {
    pub const ALL: [Unary; 4] = [Unary::Exp, Unary::Silu, Unary::Gelu, Unary::GeluErf];

    pub fn name(self) -> &'static str {
        match self {
            Unary::Exp => "exp",
            Unary::Silu => "silu",
            Unary::Gelu => "gelu",
            Unary::GeluErf => "gelu_erf",
        }
    }
}

const HEADER: &str = concat!(
    load16_source!(),
    r#"
// A chunk of the input: 16-byte chunks through `kiln_load16`, others plainly.
template <typename C>
inline C kiln_load_chunk(const device C* p) {
    return *p;
}
template <>
inline uint4 kiln_load_chunk(const device uint4* p) {
    return kiln_load16(p);
}
template <>
inline float4 kiln_load_chunk(const device float4* p) {
    return as_type<float4>(kiln_load16((const device uint4*)p));
}
// erfc with relative error < 1.2e-7 everywhere (Chebyshev fit of erfc(z) e^{z^2}).
inline float kiln_erfc(float x) {
    float z = metal::abs(x);
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f +
              t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f +
              t * (-0.82215223f + t * 0.17087277f))))))));
    float r = t * metal::exp(-z * z + p);
    return x >= 0.0f ? r : 2.0f - r;
}

template <int OP>
inline float kiln_unary(float x) {
    if (OP == 0) {
        return metal::exp(x);
    } else if (OP == 1) {
        return x / (1.0f + metal::exp(-x));
    } else if (OP == 2) {
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return x / (1.0f + metal::exp(-2.0f * u));
    } else {
        return 0.5f * x * kiln_erfc(-0.7071067811865476f * x);
    }
}

// The same functions for 16-bit outputs: exp(y) = exp2(y log2 e).
template <int OP>
inline float kiln_unary16(float x) {
    if (OP == 0) {
        return metal::exp2(1.4426950408889634f * x);
    } else if (OP == 1) {
        return x / (1.0f + metal::exp2(-1.4426950408889634f * x));
    } else if (OP == 2) {
        float u = 2.302208198144325f * (x + 0.044715f * x * x * x);
        return x / (1.0f + metal::exp2(-u));
    } else {
        return kiln_unary<3>(x);
    }
}

// Two 16-bit elements packed in a 32-bit word (low half first), mapped by `kiln_unary16`.
template <typename T, int OP>
inline uint kiln_unary_pair(uint u) {
    float lo = static_cast<float>(as_type<T>(ushort(u & 0xffffu)));
    float hi = static_cast<float>(as_type<T>(ushort(u >> 16)));
    uint a = as_type<ushort>(static_cast<T>(kiln_unary16<OP>(lo)));
    uint b = as_type<ushort>(static_cast<T>(kiln_unary16<OP>(hi)));
    return a | (b << 16);
}

template <typename T, int OP>
inline float kiln_unary_any(float x) {
    return sizeof(T) == 2 ? kiln_unary16<OP>(x) : kiln_unary<OP>(x);
}

// Eight 16-bit elements in a 16-byte unit.
template <typename T, int OP>
inline uint4 kiln_unary_unit(uint4 q) {
    return uint4(kiln_unary_pair<T, OP>(q.x), kiln_unary_pair<T, OP>(q.y), kiln_unary_pair<T, OP>(q.z),
                 kiln_unary_pair<T, OP>(q.w));
}

template <typename T, int OP>
inline vec<T, 4> kiln_unary4(vec<T, 4> v) {
    return vec<T, 4>(static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(v.x))),
                     static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(v.y))),
                     static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(v.z))),
                     static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(v.w))));
}
"#
);

// Threadgroup g owns the K · G adjacent chunks from g · K · G; chunk c is 4 elements
// (`contiguous`) or one 16-byte unit of 8 16-bit elements (`contiguous16`). Every group but the
// last lies wholly inside `x` (whole groups are launched for n rounded up), so it runs without
// bounds checks and without reading `n`: its loads wait on nothing but the builtins. The last
// group checks each chunk and its thread at chunk n / 4 (n / 8) maps the tail elements. All K
// loads are issued before the first store: `out` may alias `inp` as far as the compiler knows,
// so a store between two loads would keep the second load from being issued early.
// %CHUNK%: the chunk type, %MAP%: its map, %PER%: elements per chunk.
const CHUNKED_SOURCE: &str = r#"
    uint first = threadgroup_position_in_grid.x * (K * G) + thread_position_in_threadgroup.x;
    const device %CHUNK%* xc = (const device %CHUNK%*)inp;
    device %CHUNK%* oc = (device %CHUNK%*)out;
    if (threadgroup_position_in_grid.x + 1 < threadgroups_per_grid.x) {
        %CHUNK% v[K];
        #pragma unroll
        for (uint k = 0; k < K; ++k) {
            v[k] = kiln_load_chunk(xc + first + k * G);
        }
        #pragma unroll
        for (uint k = 0; k < K; ++k) {
            oc[first + k * G] = %MAP%(v[k]);
        }
        return;
    }
    uint chunks = uint(n) / %PER%;
    for (uint k = 0; k < K; ++k) {
        uint c = first + k * G;
        if (c < chunks) {
            oc[c] = %MAP%(xc[c]);
        } else if (c == chunks) {
            for (uint i = %PER% * chunks; i < uint(n); ++i) {
                out[i] = static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(inp[i])));
            }
        }
    }
"#;

/// The chunked body for chunks of `chunk` (`per` elements each) mapped by `map`.
fn chunked_source(chunk: &str, map: &str, per: usize) -> String {
    CHUNKED_SOURCE.replace("%CHUNK%", chunk).replace("%MAP%", map).replace("%PER%", &per.to_string())
}

// A signed element index keeps negative strides exact in `elem_to_loc`.
const STRIDED_SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    int64_t loc = elem_to_loc(static_cast<int64_t>(elem), inp_shape, inp_strides, inp_ndim);
    out[elem] = static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(inp[loc])));
"#;

const FLAT_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    out[i] = static_cast<T>(kiln_unary_any<T, OP>(static_cast<float>(inp[i])));
"#;

static FLAT: KernelCache<MetalKernel> = KernelCache::new();
static CONTIGUOUS: KernelCache<MetalKernel> = KernelCache::new();
static CONTIGUOUS16: KernelCache<MetalKernel> = KernelCache::new();
static STRIDED: KernelCache<MetalKernel> = KernelCache::new();

/// Threads per threadgroup of the strided variant.
const GROUP: u32 = 256;

fn contiguous_kernel(op: &str) -> Result<&'static MetalKernel> {
    CONTIGUOUS.one(op, || {
        Ok(MetalKernel::new(
            "kiln_unary_contiguous",
            &["inp", "n"],
            &["out"],
            chunked_source("vec<T, 4>", "kiln_unary4<T, OP>", 4),
        )?
        .header(HEADER))
    })
}

fn contiguous16_kernel(op: &str) -> Result<&'static MetalKernel> {
    CONTIGUOUS16.one(op, || {
        Ok(MetalKernel::new(
            "kiln_unary_contiguous16",
            &["inp", "n"],
            &["out"],
            chunked_source("uint4", "kiln_unary_unit<T, OP>", 8),
        )?
        .header(HEADER))
    })
}

fn flat_kernel(op: &str) -> Result<&'static MetalKernel> {
    FLAT.one(op, || Ok(MetalKernel::new("kiln_unary_flat", &["inp"], &["out"], FLAT_SOURCE)?.header(HEADER)))
}

fn strided_kernel(op: &str) -> Result<&'static MetalKernel> {
    STRIDED.one(op, || {
        Ok(MetalKernel::new("kiln_unary_strided", &["inp"], &["out"], STRIDED_SOURCE)?
            .header(HEADER)
            .ensure_row_contiguous(false))
    })
}

/// The same elements with axes of extent 1 dropped and neighbouring axes merged where one
/// steps over the other exactly, so `elem_to_loc` walks as few axes as possible.
fn merge_axes(a: &Array) -> Array {
    let mut shape: Vec<usize> = Vec::new();
    let mut strides: Vec<isize> = Vec::new();
    for (&n, &s) in a.shape().iter().zip(a.strides()) {
        if n == 1 {
            continue;
        }
        match (shape.last_mut(), strides.last_mut()) {
            (Some(pn), Some(ps)) if *ps == s * n as isize => {
                *pn *= n;
                *ps = s;
            }
            _ => {
                shape.push(n);
                strides.push(s);
            }
        }
    }
    if shape.is_empty() {
        shape.push(1);
        strides.push(1);
    }
    a.with_view(a.offset(), shape, strides)
}

/// The validated call of `op` on `x` (see the module header for the variant rule), planned for
/// the device `x` lives on.
pub fn unary_call(op: Unary, x: &Array) -> Result<OpCall> {
    unary_call_planned_for(op, x, x.device())
}

/// The validated call with the plan `plan_device` would get, run where `x` lives (a GPU's plan
/// on a CPU array runs on the CPU emulator, which is how it is checked without a GPU).
pub fn unary_call_planned_for(op: Unary, x: &Array, plan_device: Device) -> Result<OpCall> {
    let name = op.name();
    check_float(name, "x", x)?;
    check_nonempty(name, "x", x, 0)?;
    let n = x.size();
    if n > i32::MAX as usize {
        return Err(Error::invalid(name, format!("{n} elements exceed the 32-bit index range")));
    }
    let dtype = x.dtype();
    if plan_device == Device::Cpu && x.is_row_contiguous() {
        let spec = LaunchSpec::new([grid_dim(name, n)?, 1, 1], [GROUP, 1, 1])
            .output(x.shape(), dtype)
            .template("T", dtype)
            .template("OP", op as i32);
        return Ok(OpCall::new(flat_kernel(name)?, vec![x.reshape(&[n])?.into()], spec));
    }
    // (kernel, elements per chunk, chunks per thread K, threads per group G)
    let vector = if dtype.size() == 2 && x.is_row_contiguous() && x.offset() % 8 == 0 && n >= 16 {
        Some((contiguous16_kernel(name)?, 8usize, 1usize, 256u32))
    } else if x.is_row_contiguous() && x.offset() % 4 == 0 && n >= 8 {
        // Inputs under 8 elements live in `constant` space, where vector casts do not apply.
        let (k, g) = if dtype == DType::F32 { (1, 512) } else { (4, 256) };
        Some((contiguous_kernel(name)?, 4, k, g))
    } else {
        None
    };
    if let Some((kernel, unit, k, g)) = vector {
        // Whole groups, with a chunk for the tail elements when n is not a multiple of `unit`.
        let threads = n.div_ceil(unit * k * g as usize) * g as usize;
        let spec = LaunchSpec::new([grid_dim(name, threads)?, 1, 1], [g, 1, 1])
            .output(x.shape(), dtype)
            .template("T", dtype)
            .template("OP", op as i32)
            .template("K", k as i32)
            .template("G", g as i32);
        let flat = x.reshape(&[n])?;
        return Ok(OpCall::new(kernel, vec![flat.into(), (n as i32).into()], spec));
    }
    let view = merge_axes(x);
    if view.ndim() > MAX_NDIM {
        return Err(Error::invalid(
            name,
            format!("a view with {} non-mergeable axes exceeds {MAX_NDIM}; copy it first", view.ndim()),
        ));
    }
    let spec = LaunchSpec::new([grid_dim(name, n)?, 1, 1], [GROUP, 1, 1])
        .output(x.shape(), dtype)
        .template("T", dtype)
        .template("OP", op as i32);
    Ok(OpCall::new(strided_kernel(name)?, vec![view.into()], spec))
}

/// Applies `op` elementwise; the result is row-contiguous on the device of `x`.
pub fn unary(op: Unary, x: &Array) -> Result<Array> {
    unary_call(op, x)?.run_one()
}

/// `exp(x)` elementwise.
pub fn exp(x: &Array) -> Result<Array> {
    unary(Unary::Exp, x)
}

/// `x · sigmoid(x)` elementwise.
pub fn silu(x: &Array) -> Result<Array> {
    unary(Unary::Silu, x)
}

/// GELU, tanh approximation, elementwise.
pub fn gelu(x: &Array) -> Result<Array> {
    unary(Unary::Gelu, x)
}

/// GELU with the exact error function, elementwise.
pub fn gelu_erf(x: &Array) -> Result<Array> {
    unary(Unary::GeluErf, x)
}

/// erf(x) in f64: Taylor series for |x| < 2, else 1 − erfc from its continued fraction.
pub fn erf_f64(x: f64) -> f64 {
    let z = x.abs();
    if z < 2.0 {
        return erf_series(z).copysign(x);
    }
    (1.0 - erfc_fraction(z)).copysign(x)
}

/// erf(z) = 2/√π Σ (-1)^n z^(2n+1) / (n! (2n+1)); for z ≤ 2 the terms fall below 1e-17
/// well before 80 and cancel to about 1e-15.
fn erf_series(z: f64) -> f64 {
    let (mut term, mut sum) = (z, z);
    for n in 1..80 {
        term *= -z * z / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// erfc(z) for z ≥ 2 by the continued fraction e^{-z²}/√π · 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))).
fn erfc_fraction(z: f64) -> f64 {
    let mut f = z;
    for k in (1..60).rev() {
        f = z + (k as f64 / 2.0) / f;
    }
    (-z * z).exp() / std::f64::consts::PI.sqrt() / f
}

/// The activation in f64.
pub fn reference_one(op: Unary, x: f64) -> f64 {
    match op {
        Unary::Exp => x.exp(),
        Unary::Silu => x / (1.0 + (-x).exp()),
        Unary::Gelu => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + u.tanh())
        }
        Unary::GeluErf => {
            let z = -x / std::f64::consts::SQRT_2;
            // Far in the negative tail erfc is taken directly, so it does not cancel.
            let erfc = if z >= 2.0 { erfc_fraction(z) } else { 1.0 - erf_f64(z) };
            0.5 * x * erfc
        }
    }
}

/// The activation over values in row-major order.
pub fn reference(op: Unary, x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| reference_one(op, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_reference_matches_known_values() {
        // erf(0.5), erf(1), erf(2), erfc(4) from tables.
        assert!((erf_f64(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
        assert!((erf_f64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
        assert!((erf_f64(-2.0) + 0.995_322_265_018_952_7).abs() < 1e-15);
        assert!((erfc_fraction(4.0) - 1.541_725_790_028_002e-8).abs() < 1e-20);
        // The two methods agree where they meet.
        assert!((erf_series(2.0) - (1.0 - erfc_fraction(2.0))).abs() < 1e-15);
    }

    #[test]
    fn activations_have_their_textbook_values() {
        assert_eq!(reference_one(Unary::Silu, 0.0), 0.0);
        assert!((reference_one(Unary::Silu, 1.0) - 0.731_058_578_630_004_9).abs() < 1e-15);
        assert!((reference_one(Unary::GeluErf, 1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((reference_one(Unary::Gelu, 1.0) - 0.841_191_990_607_459_5).abs() < 1e-12);
        // Deep negative tail: x Φ(x) at x = -6.
        assert!((reference_one(Unary::GeluErf, -6.0) + 5.919_525_870_226_207e-9).abs() < 1e-21);
    }

    #[test]
    fn merge_axes_collapses_contiguous_runs() {
        let a = Array::from_f64(DType::F32, &[2, 3, 4], &[1.0; 24]).unwrap();
        assert_eq!(merge_axes(&a).shape(), &[24]);
        let t = a.transpose(&[0, 2, 1]).unwrap();
        assert_eq!(merge_axes(&t).shape(), &[2, 4, 3]);
        let b = a.broadcast_to(&[5, 2, 3, 4]).unwrap();
        assert_eq!(merge_axes(&b).shape(), &[5, 24]);
        assert_eq!(merge_axes(&b).strides(), &[0, 1]);
    }
}
