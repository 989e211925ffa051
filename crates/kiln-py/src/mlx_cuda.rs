//! What the MLX drop-in (`kiln.mlx`) needs to run kernels through MLX's `mx.fast.cuda_kernel`:
//! `mlx_cuda_kernel_source`, the `cuda_kernel` arguments of a call of a `kiln._kiln.MetalKernel`
//! (from the inputs' dtypes and shapes only, so lazy MLX arrays are never evaluated), and
//! `kiln._kiln.CudaKernel`, kiln's reproduction of `cuda_kernel` (its wrapper text, an NVRTC
//! compile without a GPU, a run on one), which the tests use in place of MLX's.

use kiln::{Array, CudaKernel, CudaKernelPlan, DType, Device, LaunchSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrays;
use crate::convert;
use crate::errors::{detached, no_panic, IntoPy};
use crate::kernel::{spec_of, Kernel};

/// An input described by its dtype and shape: an array of that shape over one element, which is
/// all the source generation reads.
fn placeholder(op: &str, dtype: &str, shape: &[usize]) -> PyResult<Array> {
    let dtype: DType = convert::dtype(dtype)?;
    let one = Array::full(dtype, &[], 0.0).py_err()?;
    let strides = vec![0isize; shape.len()];
    no_panic(op, || one.as_strided(0, shape, &strides).py_err())
}

fn placeholders(op: &str, inputs: &[(String, Vec<usize>)]) -> PyResult<Vec<Array>> {
    inputs.iter().map(|(d, s)| placeholder(op, d, s)).collect()
}

/// Why MLX's `cuda_kernel` cannot run a grid of `grid` threads in threadgroups of
/// `threadgroup` in one CUDA launch (None where it can): what makes a call's plan unsupported
/// whatever its kernel, checked at every call since plans are kept per call signature.
#[pyfunction]
pub fn mlx_cuda_launch_limit(grid: (u32, u32, u32), threadgroup: (u32, u32, u32)) -> Option<String> {
    kiln::kernel::cuda_kernel_launch_limit(grid.into(), threadgroup.into())
}

/// The `cuda_kernel` arguments of a call of `kernel` with inputs of these `(dtype, shape)`:
/// a dict with `name`, `input_names`, `output_names`, `source`, `header`,
/// `ensure_row_contiguous`, `shared_memory` and `grid_input` (the name of the extra grid input,
/// or None), or `{"unsupported": reason}` where `cuda_kernel` cannot run the call.
#[pyfunction]
#[pyo3(signature = (kernel, inputs, output_shapes, output_dtypes, grid, threadgroup, template))]
#[allow(clippy::too_many_arguments)]
pub fn mlx_cuda_kernel_source<'py>(
    py: Python<'py>,
    kernel: &Bound<'py, Kernel>,
    inputs: Vec<(String, Vec<usize>)>,
    output_shapes: &Bound<'py, PyList>,
    output_dtypes: &Bound<'py, PyList>,
    grid: (u32, u32, u32),
    threadgroup: (u32, u32, u32),
    template: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyDict>> {
    let k = kernel.get().metal_kernel();
    let arrays = placeholders(k.op(), &inputs)?;
    let spec = spec_of(output_shapes, output_dtypes, grid, threadgroup, template)?;
    let plan = no_panic(k.op(), || k.cuda_kernel_source(&arrays, &spec).py_err())?;
    let d = PyDict::new(py);
    match plan {
        CudaKernelPlan::Unsupported(reason) => d.set_item("unsupported", reason)?,
        CudaKernelPlan::Source(s) => {
            d.set_item("name", s.name)?;
            d.set_item("input_names", s.input_names)?;
            d.set_item("output_names", s.output_names)?;
            d.set_item("source", s.source)?;
            d.set_item("header", s.header)?;
            d.set_item("ensure_row_contiguous", s.ensure_row_contiguous)?;
            d.set_item("shared_memory", s.shared_memory)?;
            d.set_item("grid_input", s.grid_input)?;
        }
    }
    Ok(d)
}

/// What MLX prints for `verbose=True` on a Mac for a call of `kernel` with inputs of these
/// `(dtype, shape)`: the generated Metal source.
#[pyfunction]
#[pyo3(signature = (kernel, inputs, output_shapes, output_dtypes, template))]
pub fn mlx_metal_verbose_text(
    kernel: &Bound<'_, Kernel>,
    inputs: Vec<(String, Vec<usize>)>,
    output_shapes: &Bound<'_, PyList>,
    output_dtypes: &Bound<'_, PyList>,
    template: &Bound<'_, PyList>,
) -> PyResult<String> {
    let k = kernel.get().metal_kernel();
    let arrays = placeholders(k.op(), &inputs)?;
    let spec = spec_of(output_shapes, output_dtypes, (1, 1, 1), (1, 1, 1), template)?;
    no_panic(k.op(), || Ok(k.verbose_text(&k.generate(&arrays, &spec).py_err()?)))
}

/// A kernel defined as for `mx.fast.cuda_kernel` (kiln's `CudaKernel`).
#[pyclass(module = "kiln._kiln", name = "CudaKernel", frozen)]
pub struct PyCudaKernel {
    kernel: CudaKernel,
}

impl PyCudaKernel {
    fn op(&self) -> String {
        format!("cuda_kernel {}", self.kernel.name())
    }
}

#[pymethods]
impl PyCudaKernel {
    #[new]
    #[pyo3(signature = (name, input_names, output_names, source, header="", ensure_row_contiguous=true, shared_memory=0))]
    fn new(
        name: &str,
        input_names: Vec<String>,
        output_names: Vec<String>,
        source: &str,
        header: &str,
        ensure_row_contiguous: bool,
        shared_memory: usize,
    ) -> PyResult<Self> {
        let inputs: Vec<&str> = input_names.iter().map(String::as_str).collect();
        let outputs: Vec<&str> = output_names.iter().map(String::as_str).collect();
        let kernel = CudaKernel::new(name, &inputs, &outputs, source)
            .py_err()?
            .header(header)
            .ensure_row_contiguous(ensure_row_contiguous)
            .shared_memory(shared_memory);
        Ok(PyCudaKernel { kernel })
    }

    /// The CUDA source of a call with inputs of these `(dtype, shape)` (MLX's wrapper as kiln
    /// writes it, without kiln's prelude).
    #[pyo3(name = "_generate", signature = (inputs, output_shapes, output_dtypes, template))]
    fn generate(
        &self,
        inputs: Vec<(String, Vec<usize>)>,
        output_shapes: &Bound<'_, PyList>,
        output_dtypes: &Bound<'_, PyList>,
        template: &Bound<'_, PyList>,
    ) -> PyResult<String> {
        let op = self.op();
        let arrays = placeholders(&op, &inputs)?;
        let spec = spec_of(output_shapes, output_dtypes, (1, 1, 1), (1, 1, 1), template)?;
        no_panic(&op, || self.kernel.generate(&arrays, &spec).py_err())
    }

    /// Compiles a call with inputs of these `(dtype, shape)` with NVRTC for compute capability
    /// `arch` (no GPU needed); returns the cubin's size in bytes.
    #[pyo3(name = "_compile", signature = (inputs, output_shapes, output_dtypes, template, arch))]
    fn compile(
        &self,
        py: Python<'_>,
        inputs: Vec<(String, Vec<usize>)>,
        output_shapes: &Bound<'_, PyList>,
        output_dtypes: &Bound<'_, PyList>,
        template: &Bound<'_, PyList>,
        arch: (u32, u32),
    ) -> PyResult<usize> {
        let op = self.op();
        let arrays = placeholders(&op, &inputs)?;
        let spec = spec_of(output_shapes, output_dtypes, (1, 1, 1), (1, 1, 1), template)?;
        let program = no_panic(&op, || self.kernel.program(&arrays, &spec).py_err())?;
        let cubin = detached(py, &op, || kiln::backend::cuda::compile_cubin(&program, arch))?;
        Ok(cubin.len())
    }

    /// Runs one call on `device` (a CUDA device; host inputs are copied there) and returns the
    /// outputs it allocated.
    #[pyo3(name = "_launch", signature = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, device))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyList>,
        output_shapes: &Bound<'_, PyList>,
        output_dtypes: &Bound<'_, PyList>,
        grid: (u32, u32, u32),
        threadgroup: (u32, u32, u32),
        template: &Bound<'_, PyList>,
        init_value: Option<f64>,
        device: &str,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let op = self.op();
        let inputs: Vec<kiln::KernelInput> =
            inputs.iter().map(|i| crate::lent::kernel_input(&i)).collect::<PyResult<_>>()?;
        let mut spec: LaunchSpec = spec_of(output_shapes, output_dtypes, grid, threadgroup, template)?;
        spec.init_value = init_value;
        let device: Device = device
            .parse()
            .map_err(|e| crate::errors::to_py(kiln::Error::invalid(op.as_str(), format!("device {device:?}: {e}"))))?;
        spec.device = Some(device);
        let kernel = &self.kernel;
        let outputs = detached(py, &op, || kernel.call(&inputs, &spec))?;
        arrays::wrap(py, outputs)
    }

    #[getter]
    fn name(&self) -> &str {
        self.kernel.name()
    }
}
