//! Benchmark cases of the gather/scatter and compute ops. Their references are slow at the
//! benchmark shapes, so each is checked on a prefix that is a whole problem of its own (the
//! first batch, or the first chunks of the first batch).

use super::cases::input;
use super::{Case, Prepared};
use crate::check::{rel_l2, tolerance, Rng};
use crate::dtype::DType;
use crate::ops;

pub fn all() -> Vec<Case> {
    vec![grid_sample(false), grid_sample(true), gdn_kkt()]
}

/// x (B, H, W, C), grid (B, gH, gW, 2): the MLX documentation's case.
const GS: [usize; 6] = [8, 1024, 1024, 64, 256, 256];

fn grid_sample(vjp: bool) -> Case {
    let [b, h, w, c, gh, gw] = GS;
    let points = b * gh * gw;
    // Fewest bytes: the grid, the output (or cotangent), and the 4 neighbours of each point.
    let fwd_bytes = 4.0 * (points * 2 + points * c + 4 * points * c) as f64;
    Case {
        op: if vjp { "grid_sample_vjp" } else { "grid_sample" },
        shape: format!("{b}x{h}x{w}x{c}+{b}x{gh}x{gw}x2"),
        dtype: DType::F32,
        bytes: if vjp { 2.0 * fwd_bytes } else { fwd_bytes },
        flops: if vjp { 16.0 } else { 8.0 } * (points * c) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let dt = DType::F32;
            let (x, xv) = input(device, dt, &[b, h, w, c], &mut rng, -1.0, 1.0)?;
            // Slightly beyond [-1, 1] so the zero padding is exercised.
            let (grid, gv) = input(device, dt, &[b, gh, gw, 2], &mut rng, -1.05, 1.05)?;
            let one = [1, h, w, c, gh, gw];
            let (xn, gn) = (h * w * c, gh * gw * 2);
            if !vjp {
                return Ok(Prepared {
                    run: Box::new(move || Ok(vec![ops::grid_sample::grid_sample(&x, &grid)?])),
                    error: Box::new(move |outs| {
                        let out = outs[0].to_f64_vec()?;
                        let want = ops::grid_sample::reference(&xv[..xn], &gv[..gn], one);
                        Ok(rel_l2(&out[..want.len()], &want))
                    }),
                    tolerance: tolerance(dt),
                });
            }
            let (cot, cv) = input(device, dt, &[b, gh, gw, c], &mut rng, -1.0, 1.0)?;
            Ok(Prepared {
                run: Box::new(move || {
                    let (xg, gg) = ops::grid_sample::grid_sample_vjp(&x, &grid, &cot)?;
                    Ok(vec![xg, gg])
                }),
                error: Box::new(move |outs| {
                    let (xg, gg) = (outs[0].to_f64_vec()?, outs[1].to_f64_vec()?);
                    let (wx, wg) = ops::grid_sample::reference_vjp(&xv[..xn], &gv[..gn], &cv[..gh * gw * c], one);
                    Ok(rel_l2(&xg[..wx.len()], &wx).max(rel_l2(&gg[..wg.len()], &wg)))
                }),
                tolerance: tolerance(dt),
            })
        }),
    }
}

/// k (B, T, Hg, K) bf16, beta and g (B, T, H) f32, chunk 64: FLA's benchmark shape.
fn gdn_kkt() -> Case {
    let (b, t, hg, h, k) = (8, 4096, 16, 32, 128);
    const CHUNK: usize = 64;
    // Rows of the first batch checked against the reference (whole chunks).
    const CHECK_T: usize = 512;
    Case {
        op: "gdn_kkt",
        shape: format!("{b}x{t}x{hg}x{k}"),
        dtype: DType::BF16,
        bytes: (b * t * hg * k * 2 + 2 * b * t * h * 4 + b * t * h * CHUNK * 4) as f64,
        // The lower triangle of each chunk's Gram matrix: 64*63/2 dot products of length K.
        flops: (b * h * (t / CHUNK) * (CHUNK * (CHUNK - 1) / 2) * 2 * k) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let (kk, kv) = input(device, DType::BF16, &[b, t, hg, k], &mut rng, -1.0, 1.0)?;
            let (beta, bv) = input(device, DType::F32, &[b, t, h], &mut rng, 0.0, 1.0)?;
            // Cumulative log-gates within each chunk, as the model produces them.
            let mut gates = rng.uniforms(b * t * h, -0.1, 0.0);
            for bi in 0..b {
                for ti in 0..t {
                    if ti % CHUNK != 0 {
                        for hi in 0..h {
                            let (prev, cur) = (((bi * t + ti - 1) * h) + hi, ((bi * t + ti) * h) + hi);
                            gates[cur] += gates[prev];
                        }
                    }
                }
            }
            let g_host = crate::array::Array::from_f64(DType::F32, &[b, t, h], &gates)?;
            let gv = g_host.to_f64_vec()?;
            let g = g_host.to_device(device)?;
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::gdn_kkt::gdn_chunk_scaled_dot_kkt(&kk, &beta, &g, CHUNK)?])),
                error: Box::new(move |outs| {
                    let out = outs[0].to_f64_vec()?;
                    let want = ops::gdn_kkt::reference(
                        &kv[..CHECK_T * hg * k],
                        &bv[..CHECK_T * h],
                        &gv[..CHECK_T * h],
                        [1, CHECK_T, hg, h, k],
                        DType::BF16,
                    );
                    Ok(rel_l2(&out[..want.len()], &want))
                }),
                tolerance: 1e-5,
            })
        }),
    }
}
