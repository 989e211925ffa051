//! Arrays of other frameworks read once, here, as kiln arrays over their memory: NumPy arrays
//! (their fields through NumPy's C API, `numpy_api.rs`), PyTorch tensors (pointer, shape, strides, dtype, device) and,
//! for the DLPack capsules and other exports the Python side unpacks, raw memory. The result is
//! a [`LentArray`]: the named value the Python side holds for an array and passes to every
//! call of this module (kernels, libraries, ops), instead of re-describing the array.
//!
//! A view is lent as the span of memory it reaches, starting at a 64-byte boundary where that
//! is a whole number of elements (same page, same allocation granule), so that kiln sees the
//! view's true alignment in its element offset and picks vector loads only where aligned.

use kiln::array::{row_major_strides, Strides};
use kiln::{Array, DType, Device, KernelInput};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyType, PyWeakrefReference};

use crate::convert;
use crate::numpy_api;
use crate::torch_call;

/// An array of another framework (or kiln's own host output) as kiln views it: its memory is
/// kept alive, unresized, while the value lives.
#[pyclass(module = "kiln._kiln", name = "LentArray", frozen)]
pub struct LentArray {
    array: Array,
}

impl LentArray {
    /// A lent array of `array` (memory another framework owns, kept alive by it).
    pub fn new(array: Array) -> Self {
        LentArray { array }
    }

    /// The kiln array over the lent memory.
    pub fn array(&self) -> &Array {
        &self.array
    }
}

#[pymethods]
impl LentArray {
    /// A view of `owner`'s memory: its first element at `address`, `shape` and element
    /// `strides`, kiln's dtype name, on CUDA device `ordinal` (-1: host memory).
    #[staticmethod]
    fn from_memory(
        owner: Py<PyAny>,
        address: usize,
        shape: Vec<usize>,
        strides: Vec<isize>,
        dtype: &str,
        ordinal: i64,
    ) -> PyResult<Self> {
        if strides.len() != shape.len() {
            return Err(PyValueError::new_err("a view has one stride per axis"));
        }
        let dtype = convert::dtype(dtype)?;
        let (start, nbytes, offset) = convert::span(address, &shape, &strides, dtype.size());
        let array = convert::lent(Box::new(owner), start, nbytes, offset, &shape, &strides, dtype, ordinal)?;
        Ok(LentArray { array })
    }

    /// The CUDA device ordinal of the memory, -1 for host memory.
    #[getter]
    fn ordinal(&self) -> i64 {
        match self.array.device() {
            Device::Cuda(i) => i as i64,
            _ => -1,
        }
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.array.ndim()
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

    fn __repr__(&self) -> String {
        format!("<kiln.LentArray {:?} {} on {}>", self.array.shape(), self.array.dtype(), self.array.device())
    }
}

/// `obj` (a NumPy array or a PyTorch tensor) as a [`LentArray`]; errors are the package's
/// (`UnsupportedDTypeError` naming the dtype, `TypeError` for other objects), without the
/// argument's name, which the caller adds.
#[pyfunction]
pub fn lend(obj: &Bound<'_, PyAny>) -> PyResult<LentArray> {
    Ok(LentArray { array: read(obj)? })
}

/// `obj` as a kiln array over its memory: a [`LentArray`], a NumPy array or a PyTorch tensor.
pub fn read(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    if let Ok(lent) = obj.cast::<LentArray>() {
        return Ok(lent.get().array.clone());
    }
    let py = obj.py();
    if numpy_api::is_array(obj) {
        return numpy_array(obj, numpy(py)?);
    }
    if let Some(torch) = torch_call::torch(py) {
        if obj.is_instance(torch.tensor_type(py))? {
            return torch_call::read_tensor(obj, torch).map(|(array, _, _)| array);
        }
    }
    Err(PyTypeError::new_err(format!("[kiln] {} is not an array kiln can read", obj.get_type().name()?)))
}

/// A kernel input of the extension's lower-level calls (`_launch`, whose arguments the caller
/// checked): a Python bool, int or float (MLX's scalar rules) or an array ([`read`]).
pub fn kernel_input(item: &Bound<'_, PyAny>) -> PyResult<KernelInput> {
    match convert::scalar(item) {
        Some(scalar) => scalar,
        None => Ok(KernelInput::Array(read(item)?)),
    }
}

/// Whether `x` is a NumPy scalar (`np.generic`).
pub fn is_numpy_scalar(x: &Bound<'_, PyAny>) -> PyResult<bool> {
    x.is_instance(numpy(x.py())?.generic.bind(x.py()))
}

/// NumPy's objects the reader uses, looked up once.
struct NumPy {
    generic: Py<PyType>,
    /// NumPy's native-order dtype objects (singletons, compared by identity) and kiln's dtypes;
    /// another dtype object is read by its name.
    dtypes: Vec<(Py<PyAny>, DType)>,
    /// `kiln._arrays.native`: a native-order, aligned copy of an array that is not.
    native: Py<PyAny>,
}

static NUMPY: PyOnceLock<NumPy> = PyOnceLock::new();

fn numpy(py: Python<'_>) -> PyResult<&NumPy> {
    NUMPY.get_or_try_init(py, || {
        let np = py.import("numpy")?;
        let make = np.getattr("dtype")?;
        let mut dtypes = Vec::new();
        for dtype in DType::ALL {
            if dtype != DType::BF16 {
                dtypes.push((make.call1((dtype.name(),))?.unbind(), dtype));
            }
        }
        Ok(NumPy {
            generic: np.getattr("generic")?.cast_into::<PyType>()?.unbind(),
            dtypes,
            native: py.import("kiln._arrays")?.getattr("native")?.unbind(),
        })
    })
}

/// kiln's dtype of a NumPy dtype object and whether it is in native byte order.
fn numpy_dtype(d: &Bound<'_, PyAny>, numpy: &NumPy) -> PyResult<(DType, bool)> {
    if let Some((_, dtype)) = numpy.dtypes.iter().find(|(o, _)| d.is(o)) {
        return Ok((*dtype, true));
    }
    let py = d.py();
    let name = d.getattr(intern!(py, "name"))?;
    let name = name.cast::<PyString>()?.to_str()?;
    let Some(dtype) = DType::from_name(if name == "bool_" { "bool" } else { name }) else {
        // The package's own check raises its UnsupportedDTypeError naming the dtype.
        py.import("kiln._dtypes")?.getattr("dtype_name")?.call1((d,))?;
        return Err(PyTypeError::new_err(format!("[kiln] unsupported dtype {name:?}")));
    };
    Ok((dtype, d.getattr(intern!(py, "isnative"))?.is_truthy()?))
}

/// A NumPy array read in place; one of another byte order or with misaligned elements is read
/// through a native copy (which keeps its values).
fn numpy_array(a: &Bound<'_, PyAny>, numpy: &NumPy) -> PyResult<Array> {
    let py = a.py();
    let fields = numpy_api::fields(a);
    let dtype = match fields.dtype {
        Some(dtype) if fields.native => dtype,
        // Another dtype (bfloat16, one kiln has not) or byte order: by the dtype object.
        _ => {
            let (dtype, is_native) = numpy_dtype(&a.getattr(intern!(py, "dtype"))?, numpy)?;
            if !is_native {
                return numpy_array(&numpy.native.bind(py).call1((a,))?, numpy);
            }
            dtype
        }
    };
    let size = dtype.size() as isize;
    let strided_apart = fields.byte_strides.as_ref().is_some_and(|b| b.iter().any(|s| s % size != 0));
    if !fields.aligned || fields.address % dtype.size() != 0 || strided_apart {
        return numpy_array(&numpy.native.bind(py).call1((a,))?, numpy);
    }
    let shape = fields.shape;
    let strides: Strides = match fields.byte_strides {
        Some(bytes) => bytes.iter().map(|s| s / size).collect(),
        None => row_major_strides(&shape),
    };
    let (start, nbytes, offset) = convert::span(fields.address, &shape, &strides, dtype.size());
    convert::lent(pinned(a)?, start, nbytes, offset, &shape, &strides, dtype, -1)
}

/// What keeps a NumPy array's memory at its address while kiln uses it: the array, and a weak
/// reference to the array that owns the data, which makes NumPy refuse to resize that array
/// (`resize(..., refcheck=False)` from another thread) until kiln lets go.
fn pinned(a: &Bound<'_, PyAny>) -> PyResult<Box<dyn std::any::Any + Send + Sync>> {
    let (root, owns) = numpy_api::root(a);
    let pin = if owns { Some(PyWeakrefReference::new(&root)?.into_any().unbind()) } else { None };
    Ok(Box::new((a.clone().unbind(), pin)))
}
