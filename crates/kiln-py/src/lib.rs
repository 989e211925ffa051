//! The `kiln._kiln` extension module: kiln's kernels, libraries and ops for Python. The Python
//! package (`python/kiln`) hands it NumPy arrays and PyTorch tensors (read here, `lent.rs`; DLPack
//! and CUDA-array-interface objects are first unpacked into one of those or into raw memory)
//! and wraps what comes back; everything here is zero-copy over the caller's memory.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod arrays;
mod call_args;
mod convert;
mod errors;
mod handoff;
mod kernel;
mod lent;
mod library;
mod mlx_cuda;
mod mlx_host;
mod numpy_api;
mod ops;
#[cfg(unix)]
mod sigint;
mod torch_call;

use pyo3::prelude::*;

/// Whether the CUDA backend can run here, and why not when it cannot.
#[pyfunction]
fn cuda_status() -> (bool, String) {
    let st = kiln::backend::cuda::status();
    match st.unavailable {
        None => (true, st.devices.iter().map(|(d, about)| format!("{d}: {about}")).collect::<Vec<_>>().join("\n")),
        Some(reason) => (false, reason),
    }
}

/// NVRTC's version as (major, minor), when NVRTC can be loaded (no GPU needed).
#[pyfunction]
fn nvrtc_version() -> PyResult<(i32, i32)> {
    kiln::backend::cuda::nvrtc_version().map_err(errors::to_py)
}

/// Every backend's devices, as `kiln devices` prints them.
#[pyfunction]
fn devices() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for st in kiln::backend::statuses() {
        for (d, about) in st.devices {
            out.push((d.to_string(), about));
        }
    }
    out
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<kernel::Kernel>()?;
    m.add_class::<library::Library>()?;
    m.add_class::<mlx_cuda::PyCudaKernel>()?;
    m.add_function(wrap_pyfunction!(mlx_cuda::mlx_cuda_kernel_source, m)?)?;
    m.add_function(wrap_pyfunction!(mlx_cuda::mlx_cuda_launch_limit, m)?)?;
    m.add_function(wrap_pyfunction!(mlx_cuda::mlx_metal_verbose_text, m)?)?;
    m.add_class::<arrays::HostArray>()?;
    m.add_class::<arrays::DeviceArray>()?;
    m.add_class::<lent::LentArray>()?;
    m.add_function(wrap_pyfunction!(lent::lend, m)?)?;
    m.add_function(wrap_pyfunction!(call_args::read_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(torch_call::torch_outputs, m)?)?;
    m.add_function(wrap_pyfunction!(cuda_status, m)?)?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    m.add_function(wrap_pyfunction!(nvrtc_version, m)?)?;
    ops::register(m)?;
    Ok(())
}
