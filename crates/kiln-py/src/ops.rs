//! `kiln.ops`: the kernel library on arrays of the caller's framework. Ops run where their
//! inputs live on the host (the CPU emulator); on CUDA tensors they are refused (ops launch on
//! kiln's own stream, which a caller's stream would not be ordered with).

use kiln::ops;
use kiln::{Array, Device};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrays;
use crate::convert;
use crate::errors::{to_py, IntoPy};
use crate::kernel::run_interruptible;

fn host(op: &str, desc: &Bound<'_, PyTuple>) -> PyResult<Array> {
    let a = convert::array(desc)?;
    if a.device() != Device::Cpu {
        return Err(to_py(kiln::Error::invalid(
            op,
            format!("kiln.ops runs on host arrays; this input lives on {}", a.device()),
        )));
    }
    Ok(a)
}

fn run(py: Python<'_>, f: impl FnOnce() -> kiln::Result<Vec<Array>> + Send) -> PyResult<Vec<Py<PyAny>>> {
    let outputs = run_interruptible(py, false, None, f)?;
    arrays::wrap(py, outputs)
}

/// `kiln.ops.<unary>(x)`: exp, silu, gelu (tanh approximation), gelu_erf.
#[pyfunction]
pub fn unary(py: Python<'_>, name: &str, x: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let op = match name {
        "exp" => ops::elementwise::Unary::Exp,
        "silu" => ops::elementwise::Unary::Silu,
        "gelu" => ops::elementwise::Unary::Gelu,
        "gelu_erf" => ops::elementwise::Unary::GeluErf,
        other => return Err(to_py(kiln::Error::invalid("kiln.ops", format!("no unary op {other:?}")))),
    };
    let x = host(name, x)?;
    run(py, || Ok(vec![ops::elementwise::unary(op, &x)?]))
}

#[pyfunction]
pub fn rms_norm(py: Python<'_>, x: &Bound<'_, PyTuple>, w: &Bound<'_, PyTuple>, eps: f32) -> PyResult<Vec<Py<PyAny>>> {
    let (x, w) = (host("rms_norm", x)?, host("rms_norm", w)?);
    run(py, || Ok(vec![ops::rms_norm::rms_norm(&x, &w, eps)?]))
}

#[pyfunction]
pub fn residual_rms_norm(
    py: Python<'_>,
    x: &Bound<'_, PyTuple>,
    residual: &Bound<'_, PyTuple>,
    w: &Bound<'_, PyTuple>,
    eps: f32,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "residual_rms_norm";
    let (x, r, w) = (host(op, x)?, host(op, residual)?, host(op, w)?);
    run(py, || {
        let (normed, sum) = ops::residual_rms_norm::residual_rms_norm(&x, &r, &w, eps)?;
        Ok(vec![normed, sum])
    })
}

#[pyfunction]
pub fn softmax(py: Python<'_>, x: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let x = host("softmax", x)?;
    run(py, || Ok(vec![ops::softmax::softmax(&x)?]))
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn rope(
    py: Python<'_>,
    x: &Bound<'_, PyTuple>,
    dims: usize,
    traditional: bool,
    base: f32,
    scale: f32,
    offset: i32,
) -> PyResult<Vec<Py<PyAny>>> {
    let x = host("rope", x)?;
    run(py, || Ok(vec![ops::rope::rope(&x, dims, traditional, base, scale, offset)?]))
}

#[pyfunction]
#[pyo3(signature = (q, k, v, scale, mask_kind, mask))]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    q: &Bound<'_, PyTuple>,
    k: &Bound<'_, PyTuple>,
    v: &Bound<'_, PyTuple>,
    scale: f32,
    mask_kind: &str,
    mask: Option<&Bound<'_, PyTuple>>,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "scaled_dot_product_attention";
    let (q, k, v) = (host(op, q)?, host(op, k)?, host(op, v)?);
    let mask_array = mask.map(|m| host(op, m)).transpose()?;
    run(py, || {
        let mask = match (mask_kind, &mask_array) {
            ("causal", _) => ops::attention::Mask::Causal,
            ("array", Some(m)) => ops::attention::Mask::Additive(m),
            _ => ops::attention::Mask::None,
        };
        Ok(vec![ops::attention::scaled_dot_product_attention(&q, &k, &v, scale, mask)?])
    })
}

#[pyfunction]
pub fn grid_sample(py: Python<'_>, x: &Bound<'_, PyTuple>, grid: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let (x, g) = (host("grid_sample", x)?, host("grid_sample", grid)?);
    run(py, || Ok(vec![ops::grid_sample::grid_sample(&x, &g)?]))
}

#[pyfunction]
pub fn grid_sample_vjp(
    py: Python<'_>,
    x: &Bound<'_, PyTuple>,
    grid: &Bound<'_, PyTuple>,
    cotangent: &Bound<'_, PyTuple>,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "grid_sample_vjp";
    let (x, g, c) = (host(op, x)?, host(op, grid)?, host(op, cotangent)?);
    run(py, || {
        let (dx, dg) = ops::grid_sample::grid_sample_vjp(&x, &g, &c)?;
        Ok(vec![dx, dg])
    })
}

#[pyfunction]
pub fn scatter_add(
    py: Python<'_>,
    values: &Bound<'_, PyTuple>,
    indices: &Bound<'_, PyTuple>,
    bins: usize,
) -> PyResult<Vec<Py<PyAny>>> {
    let (v, i) = (host("scatter_add", values)?, host("scatter_add", indices)?);
    run(py, || Ok(vec![ops::scatter_add::scatter_add(&v, &i, bins)?]))
}

#[pyfunction]
pub fn overlap_add(py: Python<'_>, frames: &Bound<'_, PyTuple>, hop: usize) -> PyResult<Vec<Py<PyAny>>> {
    let f = host("overlap_add", frames)?;
    run(py, || Ok(vec![ops::overlap_add::overlap_add(&f, hop)?]))
}

#[pyfunction]
pub fn cholesky(py: Python<'_>, a: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("cholesky", a)?;
    run(py, || Ok(vec![ops::cholesky::cholesky(&a)?]))
}

#[pyfunction]
pub fn qr(py: Python<'_>, a: &Bound<'_, PyTuple>) -> PyResult<Vec<Py<PyAny>>> {
    let a = host("qr", a)?;
    run(py, || {
        let (q, r) = ops::qr::qr(&a)?;
        Ok(vec![q, r])
    })
}

#[pyfunction]
pub fn gdn_chunk_scaled_dot_kkt(
    py: Python<'_>,
    k: &Bound<'_, PyTuple>,
    beta: &Bound<'_, PyTuple>,
    g: &Bound<'_, PyTuple>,
    chunk: usize,
) -> PyResult<Vec<Py<PyAny>>> {
    let op = "gdn_chunk_scaled_dot_kkt";
    let (k, b, g) = (host(op, k)?, host(op, beta)?, host(op, g)?);
    run(py, || Ok(vec![ops::gdn_kkt::gdn_chunk_scaled_dot_kkt(&k, &b, &g, chunk)?]))
}

/// Adds every op to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(residual_rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)?;
    m.add_function(wrap_pyfunction!(rope, m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample, m)?)?;
    m.add_function(wrap_pyfunction!(grid_sample_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(overlap_add, m)?)?;
    m.add_function(wrap_pyfunction!(cholesky, m)?)?;
    m.add_function(wrap_pyfunction!(qr, m)?)?;
    m.add_function(wrap_pyfunction!(gdn_chunk_scaled_dot_kkt, m)?)?;
    Ok(())
}
