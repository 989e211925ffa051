//! Softmax over the last axis, numerically stable:
//! `y[r, i] = exp(x[r, i] − m_r) / Σ_j exp(x[r, j] − m_r)` with `m_r = max_j x[r, j]`.
//!
//! Online form: each thread keeps a (max m, sum s) pair — a new block of values with maximum
//! b turns it into (max(m, b), s · e^{m − max} + Σ e^{x − max}) — so the statistics need one
//! pass at any length.
//! Threads combine their pairs by the same rule: `simd_max` of m, then `simd_sum` of the
//! rescaled s; across simdgroups one barrier, after which every simdgroup folds the partials
//! with one per lane. Values of −∞ (masked positions) contribute zero; a row of only −∞ gives
//! NaN, as the formula does. All arithmetic in f32; one rounding to the dtype on store.
//!
//! Layout: `x` (..., D) of f32/f16/bf16, any batch axes (a non-contiguous input is copied to
//! row-contiguous first); output (..., D) row-contiguous in the dtype of `x`.
//!
//! Variant rule (deterministic on the device, D, dtype and alignment), the row plan of
//! `rms_norm` with 8 units per thread for f32 rows:
//! - `thread`: the CPU's plan — one thread per row: the row's max, then e = exp(v − m) summed
//!   (for f32 stored as the output, which the last pass scales: one exp per element; 16-bit
//!   rows take exp again in the last pass, so they round once), then the store of e / s. No
//!   SIMD-group function or barrier, so the CPU backend runs it as a plain loop.
//!   `softmax_call_planned_for` gives a GPU's plan on any device (to check it on the CPU).
//! - `simdgroup`: D ≤ 1024 — one simdgroup per row, 2 rows per threadgroup, no barrier.
//! - `threadgroup`: D > 1024 — one threadgroup per row, one barrier.
//!
//! `vec4` forms load 4 elements at once when D % 4 == 0, D ≥ 8 and `x` is 4-element aligned,
//! and keep the row in registers when it fits in 32 floats per thread (D up to 32768): one
//! read, one exp per element. Longer rows and scalar forms take the online pass and re-read the
//! row (from cache) for the store.
//!
//! `packed` forms: f16/bf16 rows of 1024 < D ≤ 65536 with D % 8 == 0 whose `x` is 8-element
//! aligned go by 16-byte units of 8 elements kept as loaded (the plan of `RowLaunch::packed`:
//! 4 registers per unit, threadgroups of at most 512 threads) and take two exps per element.
//! Packed rows measured faster on the H100 at D = 32768 (equal at 4096); rows of D ≤ 1024 (one
//! simdgroup) keep the `vec4` register form, one exp per element, which measured faster there.
//! Register and packed forms are compiled for their row length (template `DS`, as `rms_norm`).
//!
//! The `vec4` and `packed` forms take exp of the element values as exp2(y · log2 e) for
//! f16/bf16 (relative error about |y| · 6e-8, three orders under the 16-bit rounding),
//! full-precision exp for f32.
//!
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::plan::OpCall;
use super::rows::{row_index_source, RowKernels, RowLaunch, RowMapping, RowUnits, UNITS_PER_THREAD};
use super::util::{check_float, check_nonempty, vec4_aligned, vec8_aligned, VEC4_HEADER};
use crate::array::Array;
use crate::device::Device;
use crate::error::Result;
use crate::kernel::MetalKernel;

const OP: &str = "softmax";
/// Units per thread of f32 rows kept in registers: 8, one simdgroup per row at D = 1024 and 128
/// threads at D = 4096 (the fastest measured on the H100). 16-bit rows of D > 1024 take
/// the packed plan where aligned; unaligned ones keep the default.
const UNITS: RowUnits = RowUnits { short_f32: 8, long_16bit: UNITS_PER_THREAD, long_f32: 8 };

const HEADER: &str = r#"
// exp for the element values: exp2(y log2 e) for 16-bit outputs (relative error about
// |y| · 6e-8, far under their rounding), the full-precision exp for f32.
template <typename T>
inline float kiln_exp(float y) {
    return sizeof(T) == 2 ? metal::exp2(1.4426950408889634f * y) : metal::exp(y);
}
// kiln_exp(v - m); for 16-bit outputs one fused multiply-add, exp2(v log2 e - m log2 e).
template <typename T>
inline float kiln_exp_shifted(float v, float m) {
    return sizeof(T) == 2 ? metal::exp2(metal::fma(v, 1.4426950408889634f, -1.4426950408889634f * m))
                          : metal::exp(v - m);
}
// Adds one value to a running (max, sum) pair.
inline void kiln_online_add(thread float& m, thread float& s, float v) {
    float nm = metal::max(m, v);
    if (nm != -INFINITY) {
        s = s * metal::exp(m - nm) + metal::exp(v - nm);
        m = nm;
    }
}
"#;

// Register form (CPT > 0, the plan of `rows::RowLaunch`): the thread loads its chunks, takes
// their max m and keeps e = exp(v − m) in registers with s = Σ e; after the (m, s) reduction each
// e is scaled by exp(m − m_row) / s_row — one exp per element, the row read once. A thread whose
// values are all −∞ keeps e = 0 and scale 0 (NaN when the whole row is −∞, through 1/s = ∞).
// Loop form (CPT = 0): the online pass, then a second pass that re-reads the row from cache.
const VEC_SOURCE: &str = r#"
    %INDEX%
    uint D = DS > 0 ? uint(DS) : uint(d);
    uint D4 = D / 4;
    const device T* xr = x + int64_t(row) * D;
    device T* yr = out + int64_t(row) * D;
    float4 v[CPT > 0 ? CPT * P : 1];
    float m = -INFINITY;
    float s = 0.0f;
    float lm = -INFINITY;
    if (CPT > 0) {
        #pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            kiln_load_unit<T, P>(xr, i * nt + tid, D4, &v[i * P], -INFINITY);
        }
        #pragma unroll
        for (uint k = 0; k < uint(CPT * P); ++k) {
            lm = metal::max(lm, metal::max(metal::max(v[k].x, v[k].y), metal::max(v[k].z, v[k].w)));
        }
        float sm = lm == -INFINITY ? 0.0f : lm;
        #pragma unroll
        for (uint k = 0; k < uint(CPT * P); ++k) {
            v[k] = float4(kiln_exp_shifted<T>(v[k].x, sm), kiln_exp_shifted<T>(v[k].y, sm),
                          kiln_exp_shifted<T>(v[k].z, sm), kiln_exp_shifted<T>(v[k].w, sm));
            s += v[k].x + v[k].y + v[k].z + v[k].w;
        }
        m = lm;
    } else {
        for (uint q = tid; q * uint(P) < D4; q += nt) {
            float4 t[P];
            kiln_load_unit<T, P>(xr, q, D4, t, -INFINITY);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                float4 u = t[j];
                float nm = metal::max(m, metal::max(metal::max(u.x, u.y), metal::max(u.z, u.w)));
                if (nm != -INFINITY) {
                    s = s * kiln_exp<T>(m - nm) + kiln_exp<T>(u.x - nm) + kiln_exp<T>(u.y - nm) + kiln_exp<T>(u.z - nm) +
                        kiln_exp<T>(u.w - nm);
                    m = nm;
                }
            }
        }
    }
    %REDUCE%
    float inv = 1.0f / s;
    if (CPT > 0) {
        float scale = (lm == -INFINITY ? 0.0f : kiln_exp<T>(lm - m)) * inv;
        #pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            uint u = i * nt + tid;
            if (u * uint(P) < D4) {
                float4 e[P];
                #pragma unroll
                for (uint j = 0; j < uint(P); ++j) {
                    e[j] = v[i * P + j] * scale;
                }
                kiln_store_unit<T, P>(yr, u, e);
            }
        }
    } else {
        for (uint q = tid; q * uint(P) < D4; q += nt) {
            float4 t[P];
            kiln_load_unit<T, P>(xr, q, D4, t, -INFINITY);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                float4 u = t[j];
                t[j] = float4(kiln_exp<T>(u.x - m), kiln_exp<T>(u.y - m), kiln_exp<T>(u.z - m), kiln_exp<T>(u.w - m)) * inv;
            }
            kiln_store_unit<T, P>(yr, q, t);
        }
    }
"#;

// Packed form (16-bit rows by 16-byte units, the plan of `RowLaunch::packed`): the thread keeps
// its units as loaded (4 registers per 8 elements), widens them once for the max, once for
// s = Σ exp(v − m) and once for the store of exp(v − m_row) / s_row: two exps per element, half
// the registers of the float form, so that two rows of up to 512 threads share a
// multiprocessor. Units past the row end are skipped. exp(y) is exp2(y log2 e), one fused
// multiply-add for the shift.
const PACKED_SOURCE: &str = r#"
    %INDEX%
    uint D = DS > 0 ? uint(DS) : uint(d);
    uint D4 = D / 4;
    const device uint4* xr = (const device uint4*)(x + int64_t(row) * D);
    device T* yr = out + int64_t(row) * D;
    const float L2E = 1.4426950408889634f;
    uint4 q[CPT];
    #pragma unroll
    for (uint i = 0; i < uint(CPT); ++i) {
        uint u = i * nt + tid;
        q[i] = 2 * u < D4 ? kiln_load16(xr + u) : uint4(0u);
    }
    float m = -INFINITY;
    #pragma unroll
    for (uint i = 0; i < uint(CPT); ++i) {
        if (2 * (i * nt + tid) < D4) {
            float4 a[2];
            kiln_widen_unit<T>(q[i], a);
            float4 b = metal::max(a[0], a[1]);
            m = metal::max(m, metal::max(metal::max(b.x, b.y), metal::max(b.z, b.w)));
        }
    }
    float c = (m == -INFINITY ? 0.0f : m) * L2E;
    float s = 0.0f;
    #pragma unroll
    for (uint i = 0; i < uint(CPT); ++i) {
        if (2 * (i * nt + tid) < D4) {
            float4 a[2];
            kiln_widen_unit<T>(q[i], a);
            #pragma unroll
            for (uint j = 0; j < 2; ++j) {
                s += metal::exp2(metal::fma(a[j].x, L2E, -c)) + metal::exp2(metal::fma(a[j].y, L2E, -c)) +
                     metal::exp2(metal::fma(a[j].z, L2E, -c)) + metal::exp2(metal::fma(a[j].w, L2E, -c));
            }
        }
    }
    %REDUCE%
    float inv = 1.0f / s;
    c = m * L2E;
    #pragma unroll
    for (uint i = 0; i < uint(CPT); ++i) {
        uint u = i * nt + tid;
        if (2 * u < D4) {
            float4 a[2];
            kiln_widen_unit<T>(q[i], a);
            #pragma unroll
            for (uint j = 0; j < 2; ++j) {
                a[j] = float4(metal::exp2(metal::fma(a[j].x, L2E, -c)), metal::exp2(metal::fma(a[j].y, L2E, -c)),
                              metal::exp2(metal::fma(a[j].z, L2E, -c)), metal::exp2(metal::fma(a[j].w, L2E, -c))) * inv;
            }
            kiln_store_unit<T, 2>(yr, u, a);
        }
    }
"#;

// Indexes the input directly: inputs under 8 elements live in `constant` space.
const SCALAR_SOURCE: &str = r#"
    %INDEX%
    uint D = uint(d);
    int64_t base = int64_t(row) * D;
    float m = -INFINITY;
    float s = 0.0f;
    for (uint i = tid; i < D; i += nt) {
        kiln_online_add(m, s, static_cast<float>(x[base + i]));
    }
    %REDUCE%
    float inv = 1.0f / s;
    for (uint i = tid; i < D; i += nt) {
        out[base + i] = static_cast<T>(metal::exp(static_cast<float>(x[base + i]) - m) * inv);
    }
"#;

// A row per thread (the CPU's plan; see the module header). A row of only −∞ gives NaN through
// exp(−∞ − (−∞)), as the formula does.
const THREAD_SOURCE: &str = r#"
    %INDEX%
    uint D = uint(d);
    int64_t base = int64_t(row) * D;
    float m = -INFINITY;
    for (uint i = 0; i < D; ++i) {
        m = metal::max(m, static_cast<float>(x[base + i]));
    }
    float s = 0.0f;
    for (uint i = 0; i < D; ++i) {
        float e = metal::exp(static_cast<float>(x[base + i]) - m);
        if (sizeof(T) == 4) {
            out[base + i] = static_cast<T>(e);
        }
        s += e;
    }
    float inv = 1.0f / s;
    for (uint i = 0; i < D; ++i) {
        float e = sizeof(T) == 4 ? static_cast<float>(out[base + i]) : metal::exp(static_cast<float>(x[base + i]) - m);
        out[base + i] = static_cast<T>(e * inv);
    }
"#;

const SIMDGROUP_REDUCE: &str = r#"
    {
        float gm = simd_max(m);
        s = simd_sum(m == -INFINITY ? 0.0f : s * metal::exp(m - gm));
        m = gm;
    }
"#;

// Lane 0 of each simdgroup publishes its pair; after the one barrier every simdgroup folds the
// pairs with one pair per lane (`simd_max`, then `simd_sum` of the rescaled sums: one exp per
// lane however many simdgroups), so every thread holds the same (m, s): faster on the H100 than
// every thread folding all pairs in turn.
const THREADGROUP_REDUCE: &str = r#"
    threadgroup float part_m[32];
    threadgroup float part_s[32];
    {
        float gm = simd_max(m);
        float gs = simd_sum(m == -INFINITY ? 0.0f : s * metal::exp(m - gm));
        if (thread_index_in_simdgroup == 0) {
            part_m[simdgroup_index_in_threadgroup] = gm;
            part_s[simdgroup_index_in_threadgroup] = gs;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    {
        uint lane = thread_index_in_simdgroup;
        bool held = lane < simdgroups_per_threadgroup;
        float pm = held ? part_m[lane] : -INFINITY;
        float ps = held ? part_s[lane] : 0.0f;
        m = simd_max(pm);
        s = simd_sum(pm == -INFINITY ? 0.0f : ps * metal::exp(pm - m));
    }
"#;

static KERNELS: RowKernels = RowKernels::new();
/// The packed forms (only the `vec4` slots are used).
static PACKED: RowKernels = RowKernels::new();

/// The kernel of a plan; a row per thread takes one source (`vec4` is then false).
fn kernel(mapping: RowMapping, vec4: bool, packed: bool) -> Result<&'static MetalKernel> {
    let header = format!("{VEC4_HEADER}{HEADER}");
    let (cells, base) = if packed { (&PACKED, "kiln_softmax_packed") } else { (&KERNELS, "kiln_softmax") };
    cells.get(OP, base, &["x", "d"], &["out"], &header, mapping, vec4, || {
        let body = match (mapping, packed, vec4) {
            (RowMapping::Thread, _, _) => THREAD_SOURCE,
            (_, true, _) => PACKED_SOURCE,
            (_, false, true) => VEC_SOURCE,
            (_, false, false) => SCALAR_SOURCE,
        };
        let reduce = if mapping == RowMapping::Simdgroup { SIMDGROUP_REDUCE } else { THREADGROUP_REDUCE };
        body.replace("%INDEX%", row_index_source(mapping)).replace("%REDUCE%", reduce)
    })
}

/// The validated call (see the module header for the variant rule), planned for the device `x`
/// lives on.
pub fn softmax_call(x: &Array) -> Result<OpCall> {
    softmax_call_planned_for(x, x.device())
}

/// The validated call with the plan `plan_device` would get, run where `x` lives (a GPU's plan
/// on a CPU array runs on the CPU emulator, which is how it is checked without a GPU).
pub fn softmax_call_planned_for(x: &Array, plan_device: Device) -> Result<OpCall> {
    check_float(OP, "x", x)?;
    check_nonempty(OP, "x", x, 1)?;
    let d = x.shape()[x.ndim() - 1];
    let rows = x.size() / d;
    if plan_device == Device::Cpu {
        let launch = RowLaunch::per_thread(OP, rows, d, x.dtype(), false)?;
        let spec = launch.spec(x.dtype()).output(x.shape(), x.dtype());
        return Ok(OpCall::new(kernel(RowMapping::Thread, false, false)?, vec![x.into(), (d as i32).into()], spec));
    }
    let vec4 = d % 4 == 0 && d >= 8 && vec4_aligned(x);
    let packed = if vec4 { RowLaunch::packed(OP, rows, d, x.dtype(), vec8_aligned(x))? } else { None };
    let (launch, packed) = match packed {
        Some(launch) => (launch, true),
        None => (RowLaunch::new(OP, rows, d, x.dtype(), vec4, vec8_aligned(x), UNITS)?, false),
    };
    let spec = launch.spec(x.dtype()).output(x.shape(), x.dtype());
    Ok(OpCall::new(kernel(launch.mapping, vec4, packed)?, vec![x.into(), (d as i32).into()], spec))
}

/// Softmax of `x` over its last axis; the result lives on the device of `x`.
pub fn softmax(x: &Array) -> Result<Array> {
    softmax_call(x)?.run_one()
}

/// The formula in f64 over rows of length `d`.
pub fn reference(x: &[f64], d: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        out.extend(row.iter().map(|v| (v - max).exp() / sum));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_rows_sum_to_one_and_ignore_shifts() {
        let out = super::reference(&[1.0, 2.0, 3.0, 1001.0, 1002.0, 1003.0], 3);
        assert!((out[..3].iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((0..3).all(|i| (out[i] - out[i + 3]).abs() < 1e-12));
        assert!((out[0] - 1f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp())).abs() < 1e-12);
        let masked = super::reference(&[f64::NEG_INFINITY, 0.0], 2);
        assert_eq!(masked, vec![0.0, 1.0]);
    }
}
