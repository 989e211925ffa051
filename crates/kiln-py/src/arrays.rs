//! kiln's own arrays handed to Python without copies: host arrays as NumPy arrays over their
//! buffers (made through NumPy's C API, or by NumPy from the holder's `__array_interface__`;
//! NumPy keeps the holder alive as the array's base), device arrays as opaque holders that copy
//! to NumPy on request.

use kiln::{Array, DType, Device};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::IntoPy;

/// NumPy's type string of `dtype`; bfloat16 travels as its bits (`<u2`) and is viewed as
/// `ml_dtypes.bfloat16` by the Python side.
fn typestr(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::U16 | DType::BF16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
    }
}

/// A kiln host array, exposed to NumPy in place.
#[pyclass(module = "kiln._kiln", frozen)]
pub struct HostArray {
    array: Array,
}

/// A kiln device array (an output of a launch on a GPU that no framework allocated).
#[pyclass(module = "kiln._kiln", frozen)]
pub struct DeviceArray {
    array: Array,
}

#[pymethods]
impl HostArray {
    /// NumPy's array interface over kiln's buffer (no copy).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let a = &self.array;
        let (address, byte_strides) = host_layout(a);
        let d = PyDict::new(py);
        d.set_item(intern!(py, "version"), 3)?;
        d.set_item(intern!(py, "shape"), PyTuple::new(py, a.shape())?)?;
        d.set_item(intern!(py, "typestr"), typestr(a.dtype()))?;
        d.set_item(intern!(py, "data"), (address, false))?;
        let strides = byte_strides.map(|s| PyTuple::new(py, s)).transpose()?;
        d.set_item(intern!(py, "strides"), strides)?;
        Ok(d)
    }

    /// kiln's dtype name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.array.dtype().name()
    }
}

#[pymethods]
impl DeviceArray {
    /// A host copy of the array (waits for the kernel that writes it).
    fn to_host(&self, py: Python<'_>) -> PyResult<HostArray> {
        let array = py.detach(|| self.array.to_host()).py_err()?;
        Ok(HostArray { array })
    }

    /// The device, as `cuda:N`.
    #[getter]
    fn device(&self) -> String {
        self.array.device().to_string()
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.array.shape().to_vec()
    }

    /// kiln's dtype name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.array.dtype().name()
    }
}

/// Where a host array's first element lies (0 for an empty buffer) and its byte strides (`None`
/// when row-contiguous).
fn host_layout(a: &Array) -> (usize, Option<Vec<isize>>) {
    let bytes = a.host_buffer().map(|b| b.bytes()).unwrap_or(&[]);
    let start = a.offset() * a.dtype().size();
    let address = bytes.get(start..).map_or(0, |b| b.as_ptr() as usize);
    let es = a.dtype().size() as isize;
    (address, (!a.is_row_contiguous()).then(|| a.strides().iter().map(|&s| s * es).collect()))
}

/// A kiln host array of a NumPy dtype (not bfloat16) as a NumPy array over its buffer, whose
/// base is the array's `HostArray` holder.
pub fn numpy_view(py: Python<'_>, array: Array) -> PyResult<Bound<'_, PyAny>> {
    let dtype = array.dtype();
    numpy_view_as(py, array, dtype)
}

/// [`numpy_view`] with the elements read as `dtype`, a NumPy dtype of the array's element size
/// (a bfloat16 array's bits as `uint16`).
pub fn numpy_view_as(py: Python<'_>, array: Array, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    if array.host_buffer().is_none() {
        return Err(PyValueError::new_err("a host array without a host buffer"));
    }
    if dtype.size() != array.dtype().size() {
        return Err(PyValueError::new_err(format!("{} elements read as {dtype}", array.dtype())));
    }
    let (address, byte_strides) = host_layout(&array);
    let shape = array.shape().to_vec();
    let holder = Bound::new(py, HostArray { array })?.into_any();
    crate::numpy_api::array_over(holder, address, &shape, byte_strides.as_deref(), dtype)?
        .ok_or_else(|| PyValueError::new_err(format!("NumPy has no dtype {dtype}")))
}

/// Wraps kiln arrays for Python: host arrays as `HostArray`, others as `DeviceArray`.
pub fn wrap(py: Python<'_>, arrays: Vec<Array>) -> PyResult<Vec<Py<PyAny>>> {
    arrays
        .into_iter()
        .map(|array| {
            if array.device() == Device::Cpu {
                if array.host_buffer().is_none() {
                    return Err(PyValueError::new_err("a host array without a host buffer"));
                }
                Ok(Py::new(py, HostArray { array })?.into_any())
            } else {
                Ok(Py::new(py, DeviceArray { array })?.into_any())
            }
        })
        .collect()
}
