//! RMSNorm over the last axis (MLX `mx.fast.rms_norm`):
//! `y[r, i] = x[r, i] · rsqrt(mean_i(x[r, i]²) + eps) · w[i]`.
//!
//! Layout: `x` (..., D) of f32/f16/bf16, any batch axes, any view (a non-contiguous `x` is
//! copied to row-contiguous first); `w` (D,) in the dtype of `x`; `eps` ≥ 0. Output (..., D)
//! row-contiguous in the dtype of `x`. Sum of squares and scaling in f32, one rounding on store.
//!
//! Variant rule (deterministic on the device, D, dtype and alignment):
//! - `thread`: the CPU's plan — one thread per row, the row read in loops (two passes, the
//!   second from cache), no SIMD-group function or barrier, so the CPU backend runs it as a plain
//!   loop; `rms_norm_call_planned_for` gives a GPU's plan on any device (to check it on the CPU).
//! - `simdgroup`: D ≤ 1024 — one simdgroup of 32 lanes per row, 2 rows per threadgroup, the
//!   reduction a single `simd_sum` (no barrier). f32 rows kept in registers go here only when
//!   the op's units per thread for short f32 rows (`RowLaunch::new`) give at most 32 threads.
//! - `threadgroup`: D > 1024, or short f32 register rows with more than 32 threads — one
//!   threadgroup per row, `simd_sum` then one barrier to combine the simdgroup partials.
//!
//! `vec4` forms use 4-element loads when D % 4 == 0, D ≥ 8 and the inputs are 4-element
//! aligned; otherwise one element per access. f16/bf16 rows with D % 8 == 0 whose inputs are
//! 8-element aligned go by units of 8 elements, one 16-byte access each (`RowLaunch::p` = 2).
//! A `vec4` row is kept in registers where it fits (`RowLaunch`: about 4 units of 4 or 8
//! elements per thread, 2 for this op's 16-bit rows of D > 1024, at most 32 floats) and read from
//! memory once; 16-byte units also fetch their `w` before the reduction. Register forms are
//! compiled for their row length (template `DS` = D: constant offsets, no bound checks left);
//! the others take D at run time (`DS` = 0). Longer rows loop: read the row for the sum of
//! squares, then again (from cache) for the scaled store.
//! These plans measured fastest on the H100 (`bench/results/notes/ops.md`).
//!
//! Reference: the formula in f64 on the dtype-rounded inputs. Tolerance: the dtype table.

use super::plan::OpCall;
use super::rows::{row_index_source, row_sum_source, RowKernels, RowLaunch, RowMapping, RowUnits, UNITS_PER_THREAD};
use super::util::{
    check_float, check_nonempty, check_same_dtype, common_device, vec4_aligned, vec8_aligned, VEC4_HEADER,
};
use crate::array::Array;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::MetalKernel;

const OP: &str = "rms_norm";

/// Units per thread of this op's register rows: 4 for short f32 rows (64 threads at D = 1024);
/// 2 for 16-bit rows of one threadgroup (D > 1024), twice the threads of the default and about
/// half the registers (39 against 68 on sm_90, 70 % of the warps active against 41 %).
/// (faster on the H100 at D = 4096, level at 8192).
const UNITS: RowUnits = RowUnits { short_f32: 4, long_16bit: 2, long_f32: UNITS_PER_THREAD };

// Row loads go through `kiln_load16` (evict-last on CUDA), except the 16-byte units of register
// rows of one threadgroup (16-bit, D > 1024), which measured slower with it on the H100; the
// other forms of those rows measured slower too (`bench/results/notes/ops.md`).
// Register form (CPT > 0): thread `tid` owns units `i * nt + tid` of P adjacent 4-element
// chunks, loads them all before the reduction and scales them from registers, so the row is read
// from memory once; 16-byte units (P = 2) also fetch their `w` units, still packed, before the
// reduction. Loop form (CPT = 0, rows too long for registers): two passes, the second
// re-reading the row from cache.
const VEC_SOURCE: &str = r#"
    %INDEX%
    uint D = DS > 0 ? uint(DS) : uint(d);
    uint D4 = D / 4;
    const device T* xr = x + int64_t(row) * D;
    device T* yr = out + int64_t(row) * D;
    float4 v[CPT > 0 ? CPT * P : 1];
    uint4 wq[CPT > 0 && P == 2 ? CPT : 1];
    float ss = 0.0f;
    if (CPT > 0) {
        #pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            kiln_load_unit<T, P, %KEEP16%>(xr, i * nt + tid, D4, &v[i * P], 0.0f);
        }
        %W_PREFETCH%
        #pragma unroll
        for (uint k = 0; k < uint(CPT * P); ++k) {
            ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
    } else {
        for (uint u = tid; u * uint(P) < D4; u += nt) {
            float4 t[P];
            kiln_load_unit<T, P>(xr, u, D4, t, 0.0f);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                ss += t[j].x * t[j].x + t[j].y * t[j].y + t[j].z * t[j].z + t[j].w * t[j].w;
            }
        }
    }
    %SUM%
    float scale = metal::rsqrt(ss / float(D) + eps);
    if (CPT > 0) {
        %SCALED_STORE%
    } else {
        for (uint u = tid; u * uint(P) < D4; u += nt) {
            float4 t[P];
            float4 wv[P];
            kiln_load_unit<T, P>(xr, u, D4, t, 0.0f);
            kiln_load_unit<T, P>(w, u, D4, wv, 0.0f);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                t[j] = t[j] * scale * wv[j];
            }
            kiln_store_unit<T, P>(yr, u, t);
        }
    }
"#;

/// Register form, shared with `residual_rms_norm`: 16-byte units fetch their packed `w` units
/// into `wq` before the reduction.
const W_PREFETCH: &str = r#"if (P == 2) {
            #pragma unroll
            for (uint i = 0; i < uint(CPT); ++i) {
                uint wu = i * nt + tid;
                wq[i] = 2 * wu < D4 ? ((const device uint4*)w)[wu] : uint4(0u);
            }
        }"#;

/// Register form, shared with `residual_rms_norm`: stores `v · scale · w` for the units the
/// thread holds.
const SCALED_STORE: &str = r#"#pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            uint u = i * nt + tid;
            if (u * uint(P) < D4) {
                float4 wv[P];
                if (P == 2) {
                    kiln_widen_unit<T>(wq[i], wv);
                } else {
                    kiln_load_unit<T, P>(w, u, D4, wv, 0.0f);
                }
                #pragma unroll
                for (uint j = 0; j < uint(P); ++j) {
                    wv[j] = v[i * P + j] * scale * wv[j];
                }
                kiln_store_unit<T, P>(yr, u, wv);
            }
        }"#;

// Indexes the inputs directly (no pointer variables): inputs under 8 elements live in
// `constant` space.
const SCALAR_SOURCE: &str = r#"
    %INDEX%
    uint D = uint(d);
    int64_t base = int64_t(row) * D;
    float ss = 0.0f;
    for (uint i = tid; i < D; i += nt) {
        float v = static_cast<float>(x[base + i]);
        ss += v * v;
    }
    %SUM%
    float scale = metal::rsqrt(ss / float(D) + eps);
    for (uint i = tid; i < D; i += nt) {
        out[base + i] = static_cast<T>(static_cast<float>(x[base + i]) * scale * static_cast<float>(w[i]));
    }
"#;

static KERNELS: RowKernels = RowKernels::new();

fn kernel(mapping: RowMapping, vec4: bool) -> Result<&'static MetalKernel> {
    KERNELS.get(OP, "kiln_rms_norm", &["x", "w", "d", "eps"], &["out"], VEC4_HEADER, mapping, vec4, || {
        norm_source(if vec4 { VEC_SOURCE } else { SCALAR_SOURCE }, mapping)
    })
}

/// A norm kernel's body with its placeholders filled, shared with `residual_rms_norm`.
pub(crate) fn norm_source(template: &str, mapping: RowMapping) -> String {
    template
        .replace("%INDEX%", row_index_source(mapping))
        .replace("%SUM%", &row_sum_source(mapping, "ss"))
        .replace("%W_PREFETCH%", W_PREFETCH)
        .replace("%SCALED_STORE%", SCALED_STORE)
        .replace("%KEEP16%", if mapping == RowMapping::Simdgroup { "true" } else { "false" })
}

/// Validates `x`, `w` and `eps` for a last-axis norm; returns (rows, D).
pub(crate) fn check_norm_args(op: &str, x: &Array, w: &Array, eps: f32) -> Result<(usize, usize)> {
    check_float(op, "x", x)?;
    check_same_dtype(op, "w", w, x.dtype())?;
    check_nonempty(op, "x", x, 1)?;
    let d = x.shape()[x.ndim() - 1];
    if w.shape() != [d] {
        return Err(Error::shape(
            op,
            format!("w has shape {:?}, expected [{d}] for x of shape {:?}", w.shape(), x.shape()),
        ));
    }
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(Error::invalid(op, format!("eps must be finite and non-negative, got {eps}")));
    }
    Ok((x.size() / d, d))
}

/// The validated call (see the module header for the variant rule), planned for the device the
/// inputs live on.
pub fn rms_norm_call(x: &Array, w: &Array, eps: f32) -> Result<OpCall> {
    let device = common_device(OP, &[("x", x), ("w", w)])?;
    rms_norm_call_planned_for(x, w, eps, device)
}

/// The validated call with the plan `plan_device` would get, run where the inputs live (a GPU's
/// plan on CPU arrays runs on the CPU emulator, which is how it is checked without a GPU).
pub fn rms_norm_call_planned_for(x: &Array, w: &Array, eps: f32, plan_device: Device) -> Result<OpCall> {
    let (rows, d) = check_norm_args(OP, x, w, eps)?;
    common_device(OP, &[("x", x), ("w", w)])?;
    let vec4 = d % 4 == 0 && d >= 8 && vec4_aligned(x) && vec4_aligned(w);
    let registers = vec4;
    let wide = vec8_aligned(x) && vec8_aligned(w);
    let launch = RowLaunch::for_device(OP, plan_device, rows, d, x.dtype(), wide, || {
        RowLaunch::new(OP, rows, d, x.dtype(), registers, wide, UNITS)
    })?;
    let spec = launch.spec(x.dtype()).output(x.shape(), x.dtype());
    let inputs = vec![x.into(), w.into(), (d as i32).into(), eps.into()];
    Ok(OpCall::new(kernel(launch.mapping, vec4)?, inputs, spec))
}

/// RMSNorm of `x` over its last axis, scaled by `w`; the result lives on the device of `x`.
pub fn rms_norm(x: &Array, w: &Array, eps: f32) -> Result<Array> {
    rms_norm_call(x, w, eps)?.run_one()
}

/// The formula in f64 over rows of length `d` (values in row-major order).
pub fn reference(x: &[f64], w: &[f64], d: usize, eps: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let mean_sq = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let scale = 1.0 / (mean_sq + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, wi)| v * scale * wi));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_rows_have_unit_rms_before_weighting() {
        let out = super::reference(&[3.0, -4.0, 1.0, 2.0, 2.0, -1.0], &[1.0, 1.0, 1.0], 3, 0.0);
        for row in out.chunks(3) {
            assert!((row.iter().map(|v| v * v).sum::<f64>() / 3.0 - 1.0).abs() < 1e-12);
        }
        assert!((out[0] - 3.0 / (26.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }
}
