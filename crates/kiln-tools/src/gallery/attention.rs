//! Single-head attention with online softmax: `out = softmax(scale * Q K^T) V`, never forming
//! the score matrix.
//!
//! One threadgroup of `SG` simdgroups per query row. Simdgroup `s` takes keys `s, s+SG, ...`;
//! its lanes split the head dimension (`(D+31)/32` elements per lane, the tail masked), form
//! each score with `simd_sum`, and keep a running max `m`, denominator `l` and weighted sum of
//! values, rescaled by `exp(m_old - m_new)` whenever the max grows. The simdgroups' partial
//! states are then merged through threadgroup memory after one barrier. The running max starts
//! at a finite -1e30 so a simdgroup that sees no key (Lk < SG) merges with weight exactly 0.
//! Layout: `queries` (Lq, D), `keys` and `values` (Lk, D) of f32/f16/bf16, `scale` a 0-d f32;
//! output (Lq, D) in the input dtype. Templates `T`, `D` (head dim) and `SG`. f32 accumulation.
//! Reference: the two-pass softmax in f64 on the dtype-rounded inputs. Tolerance: dtype table.

use super::entry::{
    check_dtype, check_shape, dim, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared, Rng,
    FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "attention", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F32], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    constexpr int DPL = (D + 31) / 32;
    constexpr int ACC_SIZE = SG * D;
    uint q_row = thread_position_in_grid.y;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint Lk = keys_shape[0];
    threadgroup float sg_max[SG];
    threadgroup float sg_sum[SG];
    threadgroup float sg_acc[ACC_SIZE];

    float q[DPL];
    float acc[DPL];
    for (int c = 0; c < DPL; ++c) {
        int d = c * 32 + static_cast<int>(lane);
        q[c] = d < D ? static_cast<float>(queries[q_row * D + d]) : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -1e30f;
    float l = 0.0f;
    for (uint j = sg; j < Lk; j += SG) {
        float partial = 0.0f;
        for (int c = 0; c < DPL; ++c) {
            int d = c * 32 + static_cast<int>(lane);
            if (d < D) {
                partial += q[c] * static_cast<float>(keys[j * D + d]);
            }
        }
        float score = simd_sum(partial) * scale;
        float m_new = metal::max(m, score);
        float corr = metal::exp(m - m_new);
        float p = metal::exp(score - m_new);
        l = l * corr + p;
        for (int c = 0; c < DPL; ++c) {
            int d = c * 32 + static_cast<int>(lane);
            if (d < D) {
                acc[c] = acc[c] * corr + p * static_cast<float>(values[j * D + d]);
            }
        }
        m = m_new;
    }
    if (lane == 0) {
        sg_max[sg] = m;
        sg_sum[sg] = l;
    }
    for (int c = 0; c < DPL; ++c) {
        int d = c * 32 + static_cast<int>(lane);
        if (d < D) {
            sg_acc[sg * D + d] = acc[c];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float g_max = -1e30f;
    for (int s = 0; s < SG; ++s) {
        g_max = metal::max(g_max, sg_max[s]);
    }
    for (uint d = thread_index_in_threadgroup; d < D; d += threads_per_threadgroup.x) {
        float num = 0.0f;
        float den = 0.0f;
        for (int s = 0; s < SG; ++s) {
            float w = metal::exp(sg_max[s] - g_max);
            num += sg_acc[s * D + d] * w;
            den += sg_sum[s] * w;
        }
        out[q_row * D + d] = static_cast<T>(num / den);
    }
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(q: &Array, k: &Array, v: &Array, scale: f32, simdgroups: usize) -> Result<Prepared> {
    let op = "attention";
    check_dtype(op, q.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, k.dtype(), &[q.dtype()])?;
    check_dtype(op, v.dtype(), &[q.dtype()])?;
    let (&[lq, d], &[lk, _]) = (q.shape(), k.shape()) else {
        return Err(Error::shape(op, format!("queries and keys must be 2-D, got {:?} and {:?}", q.shape(), k.shape())));
    };
    check_shape(op, "keys", k, &[lk, d])?;
    check_shape(op, "values", v, &[lk, d])?;
    if d == 0 || lk == 0 {
        return Err(Error::shape(op, "the head dimension and the key count must be positive"));
    }
    if simdgroups == 0 || simdgroups > 32 {
        return Err(Error::invalid(op, format!("simdgroups per query must be in 1..=32, got {simdgroups}")));
    }
    let kernel = KERNEL
        .one(op, || MetalKernel::new("gallery_attention", &["queries", "keys", "values", "scale"], &["out"], SOURCE))?;
    let threads = dim(op, 32 * simdgroups)?;
    let spec = LaunchSpec::new([threads, dim(op, lq)?, 1], [threads, 1, 1])
        .output(&[lq, d], q.dtype())
        .template("T", q.dtype())
        .template("D", i32::try_from(d).map_err(|_| Error::shape(op, "head dimension too large"))?)
        .template("SG", simdgroups as i32);
    Ok(Prepared::new(kernel, vec![q.into(), k.into(), v.into(), scale.into()], spec))
}

/// `softmax(scale * q k^T) v` for `q` (Lq, D), `k`, `v` (Lk, D), `simdgroups` per query row.
pub fn attention(q: &Array, k: &Array, v: &Array, scale: f32, simdgroups: usize) -> Result<Array> {
    prepare(q, k, v, scale, simdgroups)?.run_one()
}

pub fn reference(q: &[f64], k: &[f64], v: &[f64], d: usize, scale: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(q.len());
    for qr in q.chunks(d) {
        let scores: Vec<f64> =
            k.chunks(d).map(|kr| scale * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>()).collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for i in 0..d {
            out.push(weights.iter().zip(v.chunks(d)).map(|(w, vr)| w * vr[i]).sum::<f64>() / total);
        }
    }
    out
}

/// One verified run: `lq` queries, `lk` keys, head dim `d`, `simdgroups` per query row.
pub fn check(
    device: Device,
    dtype: DType,
    lq: usize,
    lk: usize,
    d: usize,
    simdgroups: usize,
    seed: u64,
) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (q, qv) = normal_input(&mut rng, device, dtype, &[lq, d], 1.0)?;
    let (k, kv) = normal_input(&mut rng, device, dtype, &[lk, d], 1.0)?;
    let (v, vv) = normal_input(&mut rng, device, dtype, &[lk, d], 1.0)?;
    // The scale is rounded to f32 before the reference sees it, as the kernel does.
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let (outs, time) = prepare(&q, &k, &v, scale, simdgroups)?.poisoned().timed()?;
    let parts =
        vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&qv, &kv, &vv, d, scale as f64) }];
    Ok(Outcome { parts, tolerance_dtype: dtype, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 9, 77, 48, 4, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_source_instantiates_head_dim_and_simdgroup_templates() {
        let q = kiln::Array::from_f64(kiln::DType::F16, &[2, 40], &[0.5; 80]).unwrap();
        let k = kiln::Array::from_f64(kiln::DType::F16, &[3, 40], &[0.5; 120]).unwrap();
        let p = super::prepare(&q, &k, &k, 0.5, 3).unwrap();
        let inputs = [q, k.clone(), k, kiln::Array::scalar(0.5f32)];
        let src = p.metal_kernel().unwrap().generate(&inputs, p.spec()).unwrap().source;
        assert!(src.contains("template <typename T, int D, int SG>"), "{src}");
        assert!(src.contains("<float16_t, 40, 3>;"), "{src}");
        assert!(src.contains("const constant float& scale [[buffer("), "{src}");
    }

    #[test]
    fn reference_with_one_key_returns_its_value_and_equal_scores_average() {
        let v = [0.5, -2.0];
        assert_eq!(super::reference(&[1.0, 3.0], &[0.2, 0.1], &v, 2, 1.0), v.to_vec());
        let out = super::reference(&[0.0, 0.0], &[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 6.0], 2, 0.7);
        assert!((out[0] - 2.0).abs() < 1e-12 && (out[1] - 4.0).abs() < 1e-12);
    }
}
