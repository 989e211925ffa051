//! Benchmark cases of the gather/scatter and compute ops. Their references are slow at the
//! benchmark shapes, so each is checked on a prefix that is a whole problem of its own (the
//! first batch, or the first chunks of the first batch).

use super::inputs::{device_input, host_values, input};
use super::{Case, Prepared};
use kiln::array::{Array, SliceArg};
use kiln::check::{rel_l2, tolerance, Rng};
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::ops::{self, Mask};

/// The case `case` of the registry's op `name` at `dims`, for the gather/scatter and compute ops.
pub fn case(name: &str, case: &'static str, dims: &[usize]) -> Option<Case> {
    Some(match (name, dims) {
        ("rope", &[b, h, l, d]) => rope([b, h, l, d]),
        ("scatter_add", &[n, 1, bins]) => scatter_add(n, bins),
        ("scaled_dot_product_attention", &[b, hq, hkv, tq, tk, d]) if hq == hkv => {
            attention(case, [b, hq, tq, tk, d], case.ends_with("_causal"))
        }
        ("grid_sample", &[b, h, w, c, gh, gw]) => grid_sample(false, GridSampleImpl::Op, [b, h, w, c, gh, gw]),
        ("grid_sample_vjp", &[b, h, w, c, gh, gw]) => grid_sample(true, GridSampleImpl::Op, [b, h, w, c, gh, gw]),
        ("gdn_chunk_scaled_dot_kkt", &[b, t, hg, h, k]) => gdn_kkt([b, t, hg, h, k]),
        ("cholesky", &[b, n]) => cholesky(b, n),
        ("qr", &[b, m, n]) if m == n => qr(b, n),
        _ => return None,
    })
}

/// The MLX docs' grid_sample kernels (Metal body and CUDA twin) at the op's benchmark shapes,
/// beside the library op.
pub fn docs_grid_sample() -> Vec<Case> {
    let mut v = Vec::new();
    for op in ["grid_sample", "grid_sample_vjp"] {
        let shapes = ops::registry().iter().filter(|e| e.name == op).flat_map(|e| e.bench);
        for shape in shapes {
            if let &[b, h, w, c, gh, gw] = shape.dims {
                for imp in [GridSampleImpl::DocsMetal, GridSampleImpl::DocsCuda] {
                    v.push(grid_sample(op == "grid_sample_vjp", imp, [b, h, w, c, gh, gw]));
                }
            }
        }
    }
    v
}

/// The values of the first `count` entries along axis 0 of a device array.
fn head_values(a: &Array, count: usize) -> Result<Vec<f64>> {
    host_values(&a.slice(&[SliceArg { start: Some(0), stop: Some(count as isize), step: 1 }])?)
}

fn rope(shape: [usize; 4]) -> Case {
    let n: usize = shape.iter().product();
    let [_, _, l, d] = shape;
    Case {
        op: "rope",
        shape: shape.map(|v| v.to_string()).join("x"),
        dtype: DType::BF16,
        bytes: (2 * n * 2) as f64,
        flops: (6 * n / 2) as f64,
        prepare: Box::new(move |device, seed| {
            let x = device_input(device, DType::BF16, &shape, &mut Rng::new(seed), -2.0, 2.0)?;
            let rx = x.clone();
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::rope(&rx, d, false, 1e4, 1.0, 0)?])),
                error: Box::new(move |outs| {
                    // The first head of the first batch: positions 0..l.
                    let xv = head_values(&x, 1)?;
                    let out = outs[0].to_f64_vec()?;
                    let want = ops::rope::reference(&xv[..l * d], l, d, d, false, 1e4, 1.0, 0);
                    Ok(rel_l2(&out[..l * d], &want))
                }),
                tolerance: tolerance(DType::BF16),
            })
        }),
    }
}

fn scatter_add(n: usize, bins: usize) -> Case {
    Case {
        op: "scatter_add",
        shape: format!("{n}x{bins}"),
        dtype: DType::F32,
        bytes: (n * 4 + n * 4 + bins * 4) as f64,
        flops: n as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let values = device_input(device, DType::F32, &[n], &mut rng, -1.0, 1.0)?;
            let idx: Vec<f64> = (0..n).map(|_| (rng.next_u64() % bins as u64) as f64).collect();
            let indices = Array::from_f64(DType::I32, &[n], &idx)?.to_device(device)?;
            let (rv, ri) = (values.clone(), indices.clone());
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::scatter_add(&rv, &ri, bins)?])),
                error: Box::new(move |outs| {
                    let iv: Vec<i64> = idx.iter().map(|&v| v as i64).collect();
                    let want = ops::scatter_add::reference(&host_values(&values)?, &iv, 1, bins);
                    Ok(rel_l2(&outs[0].to_f64_vec()?, &want))
                }),
                tolerance: tolerance(DType::F32),
            })
        }),
    }
}

/// `[B, H, Tq, Tk, D]`, bf16, as many key/value heads as query heads.
fn attention(op: &'static str, dims: [usize; 5], causal: bool) -> Case {
    let [b, h, tq, tk, d] = dims;
    let pairs = if causal { (tq * tk) as f64 / 2.0 } else { (tq * tk) as f64 };
    Case {
        op,
        shape: format!("{b}x{h}x{tq}x{tk}x{d}"),
        dtype: DType::BF16,
        bytes: (2 * (2 * b * h * tq * d + 2 * b * h * tk * d)) as f64,
        flops: 4.0 * (b * h * d) as f64 * pairs,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let dt = DType::BF16;
            let q = device_input(device, dt, &[b, h, tq, d], &mut rng, -1.0, 1.0)?;
            let k = device_input(device, dt, &[b, h, tk, d], &mut rng, -1.0, 1.0)?;
            let v = device_input(device, dt, &[b, h, tk, d], &mut rng, -1.0, 1.0)?;
            let scale = 1.0 / (d as f32).sqrt();
            let (rq, rk, rv) = (q.clone(), k.clone(), v.clone());
            let mask = move || if causal { Mask::Causal } else { Mask::None };
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::scaled_dot_product_attention(&rq, &rk, &rv, scale, mask())?])),
                error: Box::new(move |outs| {
                    // Batch 0, head 0; for long prefill only the first 256 and last 256 queries.
                    let (qv, kv, vv) = (head_values(&q, 1)?, head_values(&k, 1)?, head_values(&v, 1)?);
                    let want = ops::attention::reference(
                        &qv[..tq * d],
                        &kv[..tk * d],
                        &vv[..tk * d],
                        [1, 1, 1, tq, tk, d],
                        scale as f64,
                        causal,
                        None,
                    );
                    let out = outs[0].to_f64_vec()?;
                    Ok(rel_l2(&out[..tq * d], &want))
                }),
                tolerance: tolerance(dt),
            })
        }),
    }
}

/// Symmetric with a dominant diagonal, hence positive definite.
fn spd(rng: &mut Rng, b: usize, n: usize) -> Vec<f64> {
    let mut a = vec![0.0; b * n * n];
    for m in a.chunks_mut(n * n) {
        for i in 0..n {
            for j in 0..i {
                let v = rng.uniform(-1.0, 1.0);
                m[i * n + j] = v;
                m[j * n + i] = v;
            }
            m[i * n + i] = n as f64 + rng.uniform(0.0, 1.0);
        }
    }
    a
}

fn cholesky(b: usize, n: usize) -> Case {
    Case {
        op: "cholesky",
        shape: format!("{b}x{n}x{n}"),
        dtype: DType::F32,
        bytes: (2 * b * n * n * 4) as f64,
        flops: (b * n * n * n) as f64 / 3.0,
        prepare: Box::new(move |device, seed| {
            let host = spd(&mut Rng::new(seed), b, n);
            let a = Array::from_f64(DType::F32, &[b, n, n], &host)?.to_device(device)?;
            let first: Vec<f64> = host[..n * n].iter().map(|&v| v as f32 as f64).collect();
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::cholesky(&a)?])),
                error: Box::new(move |outs| {
                    let out = outs[0].to_f64_vec()?;
                    let Some(want) = ops::cholesky::reference(&first, n) else { return Ok(f64::INFINITY) };
                    Ok(rel_l2(&out[..n * n], &want))
                }),
                tolerance: tolerance(DType::F32),
            })
        }),
    }
}

fn qr(b: usize, n: usize) -> Case {
    Case {
        op: "qr",
        shape: format!("{b}x{n}x{n}"),
        dtype: DType::F32,
        bytes: (3 * b * n * n * 4) as f64,
        flops: (4 * b * n * n * n) as f64 / 3.0,
        prepare: Box::new(move |device, seed| {
            let (a, av) = input(device, DType::F32, &[b, n, n], &mut Rng::new(seed), -1.0, 1.0)?;
            let first = av[..n * n].to_vec();
            drop(av);
            Ok(Prepared {
                run: Box::new(move || {
                    let (q, r) = ops::qr(&a)?;
                    Ok(vec![q, r])
                }),
                error: Box::new(move |outs| {
                    let (wq, wr) = ops::qr::reference(&first, n, n);
                    let (q, r) = (outs[0].to_f64_vec()?, outs[1].to_f64_vec()?);
                    Ok(rel_l2(&q[..n * n], &wq).max(rel_l2(&r[..n * n], &wr)))
                }),
                tolerance: tolerance(DType::F32),
            })
        }),
    }
}

/// x (B, H, W, C), grid (B, gH, gW, 2): the MLX documentation's case.
/// Which grid_sample runs: the library op, or the MLX documentation's kernels as the gallery
/// writes them, once in Metal through `MetalKernel` and once in CUDA through `CudaKernel` (same
/// algorithm), whose ratio is what translating the Metal source costs.
#[derive(Clone, Copy)]
enum GridSampleImpl {
    Op,
    DocsMetal,
    DocsCuda,
}

impl GridSampleImpl {
    fn forward(self, x: &Array, grid: &Array) -> Result<Array> {
        match self {
            GridSampleImpl::Op => ops::grid_sample(x, grid),
            GridSampleImpl::DocsMetal => crate::gallery::grid_sample::grid_sample(x, grid),
            GridSampleImpl::DocsCuda => crate::gallery::grid_sample_cuda::grid_sample_cuda(x, grid),
        }
    }

    fn vjp(self, x: &Array, grid: &Array, cot: &Array) -> Result<(Array, Array)> {
        match self {
            GridSampleImpl::Op => ops::grid_sample_vjp(x, grid, cot),
            GridSampleImpl::DocsMetal => crate::gallery::grid_sample_vjp::grid_sample_vjp(x, grid, cot),
            GridSampleImpl::DocsCuda => crate::gallery::grid_sample_cuda::grid_sample_vjp_cuda(x, grid, cot),
        }
    }

    fn op(self, vjp: bool) -> &'static str {
        match (self, vjp) {
            (GridSampleImpl::Op, false) => "grid_sample",
            (GridSampleImpl::Op, true) => "grid_sample_vjp",
            (GridSampleImpl::DocsMetal, false) => "grid_sample_docs_metal",
            (GridSampleImpl::DocsMetal, true) => "grid_sample_vjp_docs_metal",
            (GridSampleImpl::DocsCuda, false) => "grid_sample_docs_cuda",
            (GridSampleImpl::DocsCuda, true) => "grid_sample_vjp_docs_cuda",
        }
    }
}

fn grid_sample(vjp: bool, imp: GridSampleImpl, dims: [usize; 6]) -> Case {
    let [b, h, w, c, gh, gw] = dims;
    let points = b * gh * gw;
    // Fewest bytes: the grid, the output (or cotangent), and the 4 neighbours of each point.
    let fwd_bytes = 4.0 * (points * 2 + points * c + 4 * points * c) as f64;
    Case {
        op: imp.op(vjp),
        shape: format!("{b}x{h}x{w}x{c}+{b}x{gh}x{gw}x2"),
        dtype: DType::F32,
        bytes: if vjp { 2.0 * fwd_bytes } else { fwd_bytes },
        flops: if vjp { 16.0 } else { 8.0 } * (points * c) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let dt = DType::F32;
            let x = device_input(device, dt, &[b, h, w, c], &mut rng, -1.0, 1.0)?;
            // Slightly beyond [-1, 1] so the zero padding is exercised.
            let (grid, gv) = input(device, dt, &[b, gh, gw, 2], &mut rng, -1.05, 1.05)?;
            let xv = head_values(&x, 1)?;
            let one = [1, h, w, c, gh, gw];
            let (xn, gn) = (h * w * c, gh * gw * 2);
            if !vjp {
                return Ok(Prepared {
                    run: Box::new(move || Ok(vec![imp.forward(&x, &grid)?])),
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
                    let (xg, gg) = imp.vjp(&x, &grid, &cot)?;
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
fn gdn_kkt(dims: [usize; 5]) -> Case {
    let [b, t, hg, h, k] = dims;
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
            let g_host = kiln::array::Array::from_f64(DType::F32, &[b, t, h], &gates)?;
            let gv = g_host.to_f64_vec()?;
            let g = g_host.to_device(device)?;
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::gdn_chunk_scaled_dot_kkt(&kk, &beta, &g, CHUNK)?])),
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
