//! Residual add fused with RMSNorm, in one pass over the inputs:
//! `h = x + residual`, `y[r, i] = h[r, i] · rsqrt(mean_i(h[r, i]²) + eps) · w[i]`; returns
//! `(y, h)` — the normalised activations and the new residual stream.
//!
//! `h` is rounded to the dtype of `x` when stored, and the norm is taken of that rounded `h`
//! (what an unfused `rms_norm(x + residual)` sees). Sum of squares and scaling in f32.
//!
//! Layout: `x` and `residual` (..., D) of one float dtype, same shape, any batch axes (a
//! non-contiguous input is copied to row-contiguous first); `w` (D,) in that dtype; `eps` ≥ 0.
//! Outputs `y` and `h` (..., D) row-contiguous in that dtype.
//!
//! Variant rule: as `rms_norm` — on the CPU one thread per row (`residual_rms_norm_call_planned_for`
//! gives a GPU's plan on any device); on GPUs one simdgroup per row for D ≤ 1024 (f32 register rows: 2
//! units per thread, one threadgroup of D/8 threads), else one threadgroup per row; `vec4`
//! loads when D % 4 == 0, D ≥ 8 and every input is 4-element aligned, by 16-byte units of 8
//! elements for f16/bf16 when D % 8 == 0 and every input is 8-element aligned. `vec4` rows that fit — f32 at any D, f16/bf16 up to D = 1024 — are held in
//! registers (x and residual loaded whole before any store); otherwise the first pass reads `x`
//! and `residual` once and writes `h`, and the second reads back the `h` the same thread just
//! wrote (from cache). Either way DRAM sees each input once and each output once. Register
//! forms are compiled for their row length (template `DS`, as `rms_norm`).
//!
//! Reference: `rms_norm::reference` of the f64 sum `x + residual` of the dtype-rounded inputs,
//! and that sum for `h`. Tolerance: the dtype table.

use super::plan::OpCall;
use super::rms_norm::{check_norm_args, norm_source};
use super::rows::{RowKernels, RowLaunch, RowMapping, RowUnits, SIMDGROUP_MAX_D, UNITS_PER_THREAD};
use super::util::{check_same_dtype, common_device, vec4_aligned, vec8_aligned, VEC4_HEADER};
use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::MetalKernel;

const OP: &str = "residual_rms_norm";
/// Units per thread of short f32 rows kept in registers (128 threads at D = 1024, the fastest
/// measured on the H100); 16-bit rows of D > 1024 loop (see the call), so their default stays.
const UNITS: RowUnits = RowUnits { short_f32: 2, long_16bit: UNITS_PER_THREAD, long_f32: UNITS_PER_THREAD };

// Register form (CPT > 0, the plan of `rows::RowLaunch`): `x` and `residual` are loaded
// whole before any store (and, for 16-byte units, `w` still packed), `h` kept in registers for
// the scaled store. Loop form (CPT = 0): the
// second pass reads back the `h` this thread just wrote (from cache).
const VEC_SOURCE: &str = r#"
    %INDEX%
    uint D = DS > 0 ? uint(DS) : uint(d);
    uint D4 = D / 4;
    const device T* xr = x + int64_t(row) * D;
    const device T* rr = residual + int64_t(row) * D;
    device T* hr = h + int64_t(row) * D;
    device T* yr = out + int64_t(row) * D;
    float4 v[CPT > 0 ? CPT * P : 1];
    uint4 wq[CPT > 0 && P == 2 ? CPT : 1];
    float ss = 0.0f;
    if (CPT > 0) {
        float4 u[CPT > 0 ? CPT * P : 1];
        #pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            kiln_load_unit<T, P>(xr, i * nt + tid, D4, &v[i * P], 0.0f);
            kiln_load_unit<T, P>(rr, i * nt + tid, D4, &u[i * P], 0.0f);
        }
        %W_PREFETCH%
        #pragma unroll
        for (uint i = 0; i < uint(CPT); ++i) {
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                float4 hv = kiln_round4<T>(v[i * P + j] + u[i * P + j]);
                v[i * P + j] = hv;
                ss += hv.x * hv.x + hv.y * hv.y + hv.z * hv.z + hv.w * hv.w;
            }
            if ((i * nt + tid) * uint(P) < D4) {
                kiln_store_unit<T, P>(hr, i * nt + tid, &v[i * P]);
            }
        }
    } else {
        for (uint q = tid; q * uint(P) < D4; q += nt) {
            float4 a[P];
            float4 b[P];
            kiln_load_unit<T, P>(xr, q, D4, a, 0.0f);
            kiln_load_unit<T, P>(rr, q, D4, b, 0.0f);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                a[j] = kiln_round4<T>(a[j] + b[j]);
                ss += a[j].x * a[j].x + a[j].y * a[j].y + a[j].z * a[j].z + a[j].w * a[j].w;
            }
            kiln_store_unit<T, P>(hr, q, a);
        }
    }
    %SUM%
    float scale = metal::rsqrt(ss / float(D) + eps);
    if (CPT > 0) {
        %SCALED_STORE%
    } else {
        for (uint q = tid; q * uint(P) < D4; q += nt) {
            float4 a[P];
            float4 wv[P];
            kiln_load_unit<T, P>((const device T*)hr, q, D4, a, 0.0f);
            kiln_load_unit<T, P>(w, q, D4, wv, 0.0f);
            #pragma unroll
            for (uint j = 0; j < uint(P); ++j) {
                a[j] = a[j] * scale * wv[j];
            }
            kiln_store_unit<T, P>(yr, q, a);
        }
    }
"#;

// Indexes the inputs directly: inputs under 8 elements live in `constant` space.
const SCALAR_SOURCE: &str = r#"
    %INDEX%
    uint D = uint(d);
    int64_t base = int64_t(row) * D;
    float ss = 0.0f;
    for (uint i = tid; i < D; i += nt) {
        T hv = static_cast<T>(static_cast<float>(x[base + i]) + static_cast<float>(residual[base + i]));
        h[base + i] = hv;
        float v = static_cast<float>(hv);
        ss += v * v;
    }
    %SUM%
    float scale = metal::rsqrt(ss / float(D) + eps);
    for (uint i = tid; i < D; i += nt) {
        out[base + i] = static_cast<T>(static_cast<float>(h[base + i]) * scale * static_cast<float>(w[i]));
    }
"#;

static KERNELS: RowKernels = RowKernels::new();

fn kernel(mapping: RowMapping, vec4: bool) -> Result<&'static MetalKernel> {
    let (inputs, outputs) = (["x", "residual", "w", "d", "eps"], ["out", "h"]);
    KERNELS.get(OP, "kiln_residual_rms_norm", &inputs, &outputs, VEC4_HEADER, mapping, vec4, || {
        norm_source(if vec4 { VEC_SOURCE } else { SCALAR_SOURCE }, mapping)
    })
}

/// The validated call (see the module header for the variant rule), planned for the device the
/// inputs live on.
pub fn residual_rms_norm_call(x: &Array, residual: &Array, w: &Array, eps: f32) -> Result<OpCall> {
    let device = common_device(OP, &[("x", x), ("residual", residual), ("w", w)])?;
    residual_rms_norm_call_planned_for(x, residual, w, eps, device)
}

/// The validated call with the plan `plan_device` would get, run where the inputs live (see
/// `rms_norm_call_planned_for`).
pub fn residual_rms_norm_call_planned_for(
    x: &Array,
    residual: &Array,
    w: &Array,
    eps: f32,
    plan_device: Device,
) -> Result<OpCall> {
    let (rows, d) = check_norm_args(OP, x, w, eps)?;
    check_same_dtype(OP, "residual", residual, x.dtype())?;
    if residual.shape() != x.shape() {
        return Err(Error::shape(
            OP,
            format!("residual has shape {:?}, expected the shape of x {:?}", residual.shape(), x.shape()),
        ));
    }
    common_device(OP, &[("x", x), ("residual", residual), ("w", w)])?;
    let vec4 = d % 4 == 0 && d >= 8 && vec4_aligned(x) && vec4_aligned(residual) && vec4_aligned(w);
    // The register form (x and residual held together) measured faster on the H100 than the
    // looped form at D = 1024 and slower at 4096 and 8192, so 16-bit rows take registers only
    // up to D = 1024.
    let registers = vec4 && (x.dtype() == DType::F32 || d <= SIMDGROUP_MAX_D);
    let wide = vec8_aligned(x) && vec8_aligned(residual) && vec8_aligned(w);
    let launch = RowLaunch::for_device(OP, plan_device, rows, d, x.dtype(), wide, || {
        RowLaunch::new(OP, rows, d, x.dtype(), registers, wide, UNITS)
    })?;
    let spec = launch.spec(x.dtype()).output(x.shape(), x.dtype()).output(x.shape(), x.dtype());
    let inputs = vec![x.into(), residual.into(), w.into(), (d as i32).into(), eps.into()];
    Ok(OpCall::new(kernel(launch.mapping, vec4)?, inputs, spec))
}

/// Returns `(rms_norm(x + residual) · w, x + residual)`, both on the device of `x`.
pub fn residual_rms_norm(x: &Array, residual: &Array, w: &Array, eps: f32) -> Result<(Array, Array)> {
    let mut outs = residual_rms_norm_call(x, residual, w, eps)?.run()?;
    match (outs.pop(), outs.pop()) {
        (Some(h), Some(y)) => Ok((y, h)),
        _ => Err(Error::invalid(OP, "the kernel returned fewer than two outputs")),
    }
}

/// `(y, h)` in f64 over rows of length `d`.
pub fn reference(x: &[f64], residual: &[f64], w: &[f64], d: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let h: Vec<f64> = x.iter().zip(residual).map(|(a, b)| a + b).collect();
    (super::rms_norm::reference(&h, w, d, eps), h)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_normalises_the_sum() {
        let (y, h) = super::reference(&[1.0, 2.0], &[2.0, 2.0], &[1.0, 2.0], 2, 0.0);
        assert_eq!(h, vec![3.0, 4.0]);
        let s = (12.5f64).sqrt();
        assert!((y[0] - 3.0 / s).abs() < 1e-12 && (y[1] - 8.0 / s).abs() < 1e-12);
    }
}
