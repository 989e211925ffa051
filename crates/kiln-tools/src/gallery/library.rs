//! The demo's second half: the kernel library (`kiln::ops`), each op the registry demos run once
//! at its demo shape (small, odd sizes) on fresh seeded inputs and checked against its own f64 reference, so the demo
//! shows the library beside the custom-kernel gallery.

use std::time::Instant;

use super::{host_input, normal_input, values, DemoFn, Entry, Outcome, Part, Rng};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::ops;

/// Every library op the registry demos, in its order, each with the runner below.
pub fn entries() -> Vec<Entry> {
    ops::registry()
        .iter()
        .filter_map(|op| {
            let demo = op.demo.as_ref()?;
            let dtypes = std::slice::from_ref(&demo.dtype);
            Some(Entry { name: demo.label, dtypes, demo_dtypes: dtypes, demo: runner(op.name)? })
        })
        .collect()
}

/// The demo run of the registry's op `name`.
fn runner(name: &str) -> Option<DemoFn> {
    Some(match name {
        "gelu_erf" => gelu_erf,
        "rms_norm" => rms_norm,
        "residual_rms_norm" => residual_rms_norm,
        "softmax" => softmax,
        "rope" => rope,
        "scaled_dot_product_attention" => attention,
        "scatter_add" => scatter_add,
        "overlap_add" => overlap_add,
        "grid_sample_vjp" => grid_sample_vjp,
        "cholesky" => cholesky,
        "qr" => qr,
        "gdn_chunk_scaled_dot_kkt" => gdn_kkt,
        _ => return None,
    })
}

/// The registry's demo sizes of `op`, `N` of them.
fn dims<const N: usize>(op: &str) -> Result<[usize; N]> {
    let demo = ops::registry().iter().find(|e| e.name == op).and_then(|e| e.demo);
    demo.and_then(|d| <[usize; N]>::try_from(d.dims).ok())
        .ok_or_else(|| Error::invalid(op, format!("the registry has no demo shape of {N} sizes")))
}

/// Runs `op` once to compile and warm up, then times a second run (outputs copied back).
fn timed(op: impl Fn() -> Result<Vec<Array>>) -> Result<(Vec<Vec<f64>>, std::time::Duration)> {
    op()?;
    let start = Instant::now();
    let outs = op()?;
    let host = outs.iter().map(|a| a.to_host()).collect::<Result<Vec<_>>>()?;
    let elapsed = start.elapsed();
    Ok((host.iter().map(values).collect::<Result<Vec<_>>>()?, elapsed))
}

fn outcome(
    names: &[&'static str],
    got: Vec<Vec<f64>>,
    want: Vec<Vec<f64>>,
    dtype: DType,
    time: std::time::Duration,
) -> Outcome {
    let parts = names
        .iter()
        .zip(got.into_iter().zip(want))
        .map(|(&name, (output, reference))| Part { name, output, reference })
        .collect();
    Outcome { parts, tolerance_dtype: dtype, time }
}

fn gelu_erf(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let (x, xv) = normal_input(&mut Rng::new(seed), device, dtype, &dims::<2>("gelu_erf")?, 2.0)?;
    let (got, time) = timed(|| Ok(vec![ops::gelu_erf(&x)?]))?;
    let want = ops::elementwise::reference(ops::Unary::GeluErf, &xv);
    Ok(outcome(&["out"], got, vec![want], dtype, time))
}

fn rms_norm(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let shape = dims::<3>("rms_norm")?;
    let d = shape[2];
    let (x, xv) = normal_input(&mut rng, device, dtype, &shape, 1.0)?;
    let (w, wv) = normal_input(&mut rng, device, dtype, &[d], 1.0)?;
    let (got, time) = timed(|| Ok(vec![ops::rms_norm(&x, &w, 1e-5)?]))?;
    Ok(outcome(&["out"], got, vec![ops::rms_norm::reference(&xv, &wv, d, 1e-5)], dtype, time))
}

fn residual_rms_norm(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let [rows, d] = dims("residual_rms_norm")?;
    let (x, xv) = normal_input(&mut rng, device, dtype, &[rows, d], 1.0)?;
    let (r, rv) = normal_input(&mut rng, device, dtype, &[rows, d], 1.0)?;
    let (w, wv) = normal_input(&mut rng, device, dtype, &[d], 1.0)?;
    let (got, time) = timed(|| {
        let (y, h) = ops::residual_rms_norm(&x, &r, &w, 1e-5)?;
        Ok(vec![y, h])
    })?;
    // The norm is of the sum rounded to the dtype, as the op documents.
    let (_, hv) = host_input(dtype, &[rows, d], &xv.iter().zip(&rv).map(|(a, b)| a + b).collect::<Vec<_>>())?;
    let want_y = ops::rms_norm::reference(&hv, &wv, d, 1e-5);
    Ok(outcome(&["y", "h"], got, vec![want_y, hv], dtype, time))
}

fn softmax(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let [rows, d] = dims("softmax")?;
    let (x, xv) = normal_input(&mut Rng::new(seed), device, dtype, &[rows, d], 4.0)?;
    let (got, time) = timed(|| Ok(vec![ops::softmax(&x)?]))?;
    Ok(outcome(&["out"], got, vec![ops::softmax::reference(&xv, d)], dtype, time))
}

fn rope(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let [b, h, l, d] = dims("rope")?;
    let (x, xv) = normal_input(&mut Rng::new(seed), device, dtype, &[b, h, l, d], 1.0)?;
    let (got, time) = timed(|| Ok(vec![ops::rope(&x, 48, false, 1e4, 1.0, 5)?]))?;
    let want = ops::rope::reference(&xv, l, d, 48, false, 1e4, 1.0, 5);
    Ok(outcome(&["out"], got, vec![want], dtype, time))
}

fn attention(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let [b, hq, hkv, tq, tk, d] = dims("scaled_dot_product_attention")?;
    let (q, qv) = normal_input(&mut rng, device, dtype, &[b, hq, tq, d], 1.0)?;
    let (k, kv) = normal_input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0)?;
    let (v, vv) = normal_input(&mut rng, device, dtype, &[b, hkv, tk, d], 1.0)?;
    let scale = 1.0 / (d as f32).sqrt();
    let (got, time) = timed(|| Ok(vec![ops::scaled_dot_product_attention(&q, &k, &v, scale, ops::Mask::Causal)?]))?;
    let want = ops::attention::reference(&qv, &kv, &vv, [b, hq, hkv, tq, tk, d], scale as f64, true, None);
    Ok(outcome(&["out"], got, vec![want], dtype, time))
}

fn scatter_add(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let [n, m, bins] = dims("scatter_add")?;
    let (vals, vv) = normal_input(&mut rng, device, dtype, &[n, m], 1.0)?;
    let idx: Vec<i64> = (0..n).map(|_| (rng.next_u64() % bins as u64) as i64).collect();
    let indices = Array::from_vec(&[n], idx.iter().map(|&i| i as i32).collect())?.to_device(device)?;
    let (got, time) = timed(|| Ok(vec![ops::scatter_add(&vals, &indices, bins)?]))?;
    Ok(outcome(&["out"], got, vec![ops::scatter_add::reference(&vv, &idx, m, bins)], dtype, time))
}

fn overlap_add(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let [batch, n_frames, frame_len, hop] = dims("overlap_add")?;
    let (f, fv) = normal_input(&mut Rng::new(seed), device, dtype, &[batch, n_frames, frame_len], 1.0)?;
    let (got, time) = timed(|| Ok(vec![ops::overlap_add(&f, hop)?]))?;
    Ok(outcome(&["out"], got, vec![ops::overlap_add::reference(&fv, n_frames, frame_len, hop)], dtype, time))
}

fn grid_sample_vjp(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let dims = dims("grid_sample_vjp")?;
    let [b, h, w, c, gh, gw] = dims;
    let (x, xv) = normal_input(&mut rng, device, dtype, &[b, h, w, c], 1.0)?;
    let (g, gv) = host_input(dtype, &[b, gh, gw, 2], &rng.uniforms(b * gh * gw * 2, -1.1, 1.1))?;
    let g = g.to_device(device)?;
    let (cot, cv) = normal_input(&mut rng, device, dtype, &[b, gh, gw, c], 1.0)?;
    let (got, time) = timed(|| {
        let (xg, gg) = ops::grid_sample_vjp(&x, &g, &cot)?;
        Ok(vec![xg, gg])
    })?;
    let (want_x, want_g) = ops::grid_sample::reference_vjp(&xv, &gv, &cv, dims);
    Ok(outcome(&["x_grad", "grid_grad"], got, vec![want_x, want_g], dtype, time))
}

/// `batch` symmetric positive definite n×n matrices: M Mᵀ + n I.
fn spd(rng: &mut Rng, batch: usize, n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(batch * n * n);
    for _ in 0..batch {
        let m = rng.normals(n * n, 1.0);
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum();
                out.push(dot + if i == j { n as f64 } else { 0.0 });
            }
        }
    }
    out
}

fn cholesky(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let [batch, n] = dims("cholesky")?;
    let (a, av) = host_input(dtype, &[batch, n, n], &spd(&mut Rng::new(seed), batch, n))?;
    let a = a.to_device(device)?;
    let (got, time) = timed(|| Ok(vec![ops::cholesky(&a)?]))?;
    let mut want = Vec::with_capacity(av.len());
    for m in av.chunks(n * n) {
        want.extend(ops::cholesky::reference(m, n).unwrap_or_else(|| vec![f64::NAN; n * n]));
    }
    Ok(outcome(&["L"], got, vec![want], dtype, time))
}

fn qr(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let [batch, m, n] = dims("qr")?;
    let (a, av) = normal_input(&mut Rng::new(seed), device, dtype, &[batch, m, n], 1.0)?;
    let (got, time) = timed(|| {
        let (q, r) = ops::qr(&a)?;
        Ok(vec![q, r])
    })?;
    let (mut want_q, mut want_r) = (Vec::new(), Vec::new());
    for mat in av.chunks(m * n) {
        let (q, r) = ops::qr::reference(mat, m, n);
        want_q.extend(q);
        want_r.extend(r);
    }
    Ok(outcome(&["Q", "R"], got, vec![want_q, want_r], dtype, time))
}

fn gdn_kkt(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let dims = dims("gdn_chunk_scaled_dot_kkt")?;
    let [b, t, hg, h, k] = dims;
    let (kk, kv) = normal_input(&mut rng, device, dtype, &[b, t, hg, k], 0.5)?;
    let (beta, bv) = host_input(DType::F32, &[b, t, h], &rng.uniforms(b * t * h, 0.1, 1.0))?;
    // Cumulative log gates, decreasing along time as in gated delta nets.
    let mut gvals = vec![0.0; b * t * h];
    for head in 0..h {
        let mut acc = 0.0;
        for ti in 0..t {
            acc -= rng.uniform(0.0, 0.2);
            gvals[ti * h + head] = acc;
        }
    }
    let (g, gv) = host_input(DType::F32, &[b, t, h], &gvals)?;
    let (beta, g) = (beta.to_device(device)?, g.to_device(device)?);
    let (got, time) = timed(|| Ok(vec![ops::gdn_chunk_scaled_dot_kkt(&kk, &beta, &g, 64)?]))?;
    let want = ops::gdn_kkt::reference(&kv, &bv, &gv, dims, dtype);
    // f32 output of an exactly-rounded bf16 product: held to the f32 entry of the table.
    Ok(outcome(&["A"], got, vec![want], DType::F32, time))
}
