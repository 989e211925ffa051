//! The benchmark cases: each op at the shapes and dtypes of the reference table, with the
//! fewest bytes and FLOPs it needs and a check against its reference at the benchmark shape
//! (on a subsample of elements or rows where the full reference would take too long).
//! The ops and shapes come from `kiln::ops::registry()`; `bench/peers.py` reads the same list
//! (`kiln bench --list-json`).

use super::inputs::{device_input, host_values, input, sample};
use super::{Case, Prepared};
use kiln::check::{rel_l2, tolerance, Rng};
use kiln::dtype::DType;
use kiln::ops::{self, BenchShape, Unary};

/// Every case, in report order: each registry op's benchmark shapes in registry order, then the
/// MLX docs' grid_sample kernels beside the library's.
pub fn all() -> Vec<Case> {
    let mut v: Vec<Case> =
        ops::registry().iter().flat_map(|op| op.bench.iter().filter_map(move |shape| case(op.name, shape))).collect();
    v.extend(super::compute_cases::docs_grid_sample());
    v
}

/// The case of the registry's op `name` at `shape`; `None` where no builder here takes that op
/// and shape (the tests check every registry shape has one).
pub fn case(name: &str, shape: &BenchShape) -> Option<Case> {
    case_at(name, shape, shape.dims)
}

/// The case of the registry's op `name` at `shape` with other sizes `dims` (of the same meaning),
/// e.g. smaller ones for the CPU emulator.
pub fn case_at(name: &str, shape: &BenchShape, dims: &[usize]) -> Option<Case> {
    let dtype = shape.dtype;
    Some(match (name, dims) {
        ("exp", &[n]) => unary(shape.case, dtype, n, 1.0, Unary::Exp),
        ("silu", &[n]) => unary(shape.case, dtype, n, 4.0, Unary::Silu),
        ("gelu", &[n]) => unary(shape.case, dtype, n, 9.0, Unary::Gelu),
        ("rms_norm", &[rows, d]) => rms_norm(dtype, rows, d),
        ("residual_rms_norm", &[rows, d]) => residual_rms_norm(dtype, rows, d),
        ("softmax", &[rows, d]) => softmax(dtype, rows, d),
        _ => return super::compute_cases::case(name, shape.case, dims),
    })
}

/// A registry benchmark case as `kiln bench --list-json` prints it, for peers (`bench/peers.py`)
/// to build the same case: the registry's op name, the case name, sizes and dtype, and kiln's
/// count of its bytes and FLOPs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ListedCase {
    /// `case/shape/dtype`, as in reports.
    pub id: String,
    /// The op's name in the registry (`kiln::ops::<op>`).
    pub op: &'static str,
    /// The case's name in reports.
    pub case: &'static str,
    /// The sizes, as the registry entry's `dims` describes them.
    pub dims: &'static [usize],
    /// The dtype's name.
    pub dtype: &'static str,
    /// The fewest bytes the op must move.
    pub bytes: f64,
    /// The fewest floating-point operations the op must do.
    pub flops: f64,
}

/// Every registry benchmark case, in report order.
pub fn listed() -> Vec<ListedCase> {
    let mut v = Vec::new();
    for op in ops::registry() {
        for shape in op.bench {
            if let Some(c) = case(op.name, shape) {
                let id = c.id();
                let (bytes, flops) = (c.bytes, c.flops);
                v.push(ListedCase {
                    id,
                    op: op.name,
                    case: shape.case,
                    dims: shape.dims,
                    dtype: shape.dtype.name(),
                    bytes,
                    flops,
                });
            }
        }
    }
    v
}

fn unary(op: &'static str, dtype: DType, n: usize, flops_per_element: f64, which: Unary) -> Case {
    Case {
        op,
        shape: n.to_string(),
        dtype,
        bytes: 2.0 * (n * dtype.size()) as f64,
        flops: flops_per_element * n as f64,
        prepare: Box::new(move |device, seed| {
            let x = device_input(device, dtype, &[n], &mut Rng::new(seed), -4.0, 4.0)?;
            let run_x = x.clone();
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::unary(which, &run_x)?])),
                error: Box::new(move |outs| {
                    let out = outs[0].to_f64_vec()?;
                    let xv = host_values(&x)?;
                    let (got, want): (Vec<f64>, Vec<f64>) =
                        sample(n, 1 << 20).map(|i| (out[i], ops::elementwise::reference_one(which, xv[i]))).unzip();
                    Ok(rel_l2(&got, &want))
                }),
                tolerance: tolerance(dtype),
            })
        }),
    }
}

/// Rows checked of a row-wise op: about 256, spread over all of them.
fn sampled_rows(rows: usize) -> Vec<usize> {
    sample(rows, 256).collect()
}

/// The relative error of `out` against `reference` applied row by row on sampled rows.
pub fn row_error(out: &[f64], x: &[f64], d: usize, reference: impl Fn(&[f64], usize) -> Vec<f64>) -> f64 {
    let rows = x.len() / d;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for r in sampled_rows(rows) {
        got.extend_from_slice(&out[r * d..(r + 1) * d]);
        want.extend(reference(&x[r * d..(r + 1) * d], r));
    }
    rel_l2(&got, &want)
}

fn rms_norm(dtype: DType, rows: usize, d: usize) -> Case {
    Case {
        op: "rms_norm",
        shape: format!("{rows}x{d}"),
        dtype,
        bytes: ((2 * rows * d + d) * dtype.size()) as f64,
        flops: 4.0 * (rows * d) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let (x, xv) = input(device, dtype, &[rows, d], &mut rng, -2.0, 2.0)?;
            let (w, wv) = input(device, dtype, &[d], &mut rng, 0.5, 1.5)?;
            let eps = 1e-5;
            let (rx, rw) = (x.clone(), w.clone());
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::rms_norm(&rx, &rw, eps)?])),
                error: Box::new(move |outs| {
                    let out = outs[0].to_f64_vec()?;
                    Ok(row_error(&out, &xv, d, |row, _| ops::rms_norm::reference(row, &wv, d, eps as f64)))
                }),
                tolerance: tolerance(dtype),
            })
        }),
    }
}

fn residual_rms_norm(dtype: DType, rows: usize, d: usize) -> Case {
    Case {
        op: "residual_rms_norm",
        shape: format!("{rows}x{d}"),
        dtype,
        bytes: ((4 * rows * d + d) * dtype.size()) as f64,
        flops: 5.0 * (rows * d) as f64,
        prepare: Box::new(move |device, seed| {
            let mut rng = Rng::new(seed);
            let (x, xv) = input(device, dtype, &[rows, d], &mut rng, -2.0, 2.0)?;
            let (r, rv) = input(device, dtype, &[rows, d], &mut rng, -2.0, 2.0)?;
            let (w, wv) = input(device, dtype, &[d], &mut rng, 0.5, 1.5)?;
            let eps = 1e-5;
            Ok(Prepared {
                run: Box::new(move || {
                    let (y, h) = ops::residual_rms_norm(&x, &r, &w, eps)?;
                    Ok(vec![y, h])
                }),
                error: Box::new(move |outs| {
                    let (y, h) = (outs[0].to_f64_vec()?, outs[1].to_f64_vec()?);
                    let (mut got, mut want) = (Vec::new(), Vec::new());
                    for row in sample(rows, 256) {
                        let span = row * d..(row + 1) * d;
                        let (ry, rh) =
                            ops::residual_rms_norm::reference(&xv[span.clone()], &rv[span.clone()], &wv, d, eps as f64);
                        got.extend_from_slice(&y[span.clone()]);
                        got.extend_from_slice(&h[span]);
                        want.extend(ry);
                        want.extend(rh);
                    }
                    Ok(rel_l2(&got, &want))
                }),
                tolerance: tolerance(dtype),
            })
        }),
    }
}

fn softmax(dtype: DType, rows: usize, d: usize) -> Case {
    Case {
        op: "softmax",
        shape: format!("{rows}x{d}"),
        dtype,
        bytes: (2 * rows * d * dtype.size()) as f64,
        flops: 4.0 * (rows * d) as f64,
        prepare: Box::new(move |device, seed| {
            let (x, xv) = input(device, dtype, &[rows, d], &mut Rng::new(seed), -4.0, 4.0)?;
            let rx = x.clone();
            Ok(Prepared {
                run: Box::new(move || Ok(vec![ops::softmax(&rx)?])),
                error: Box::new(move |outs| {
                    let out = outs[0].to_f64_vec()?;
                    Ok(row_error(&out, &xv, d, |row, _| ops::softmax::reference(row, d)))
                }),
                tolerance: tolerance(dtype),
            })
        }),
    }
}

#[cfg(test)]
mod tests {
    use kiln::ops;

    #[test]
    fn every_registry_bench_shape_builds_a_case() {
        for op in ops::registry() {
            for shape in op.bench {
                let case = super::case(op.name, shape);
                assert!(case.is_some(), "no benchmark case for {} at {:?}", op.name, shape.dims);
                assert!(case.is_some_and(|c| c.op == shape.case && c.dtype == shape.dtype));
            }
        }
        let shapes = ops::registry().iter().map(|e| e.bench.len()).sum::<usize>();
        assert_eq!(super::all().len(), shapes + 4, "the registry's cases and the docs grid_sample kernels");
        assert_eq!(super::listed().len(), shapes);
    }
}
