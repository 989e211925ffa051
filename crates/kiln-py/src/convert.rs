//! Python values as kiln's: dtype names, shapes, kernel inputs, streams, and lent memory as kiln
//! arrays (`lent.rs` reads the arrays of each framework into them).

use kiln::backend::cpu::{lent_host_array, LentHostMemory};
use kiln::backend::cuda::{lent_cuda_array, LentCudaMemory};
use kiln::backend::ExternalStream;
use kiln::{Array, DType, KernelInput};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyTuple};
use smallvec::SmallVec;

use crate::errors::{to_py, IntoPy};

/// The dtype named `name` (kiln's names, which are NumPy's and MLX's).
pub fn dtype(name: &str) -> PyResult<DType> {
    DType::from_name(name).ok_or_else(|| PyTypeError::new_err(format!("kiln has no dtype {name:?}")))
}

/// A kiln array over `nbytes` of lent memory at `address` (host memory for `ordinal` < 0, else
/// device memory of CUDA device `ordinal`), viewed `offset` elements in with `shape` and element
/// `strides`; `owner` is kept alive while kiln views the memory.
#[allow(clippy::too_many_arguments)]
pub fn lent(
    owner: Box<dyn std::any::Any + Send + Sync>,
    address: usize,
    nbytes: usize,
    offset: usize,
    shape: &[usize],
    strides: &[isize],
    dtype: DType,
    ordinal: i64,
) -> PyResult<Array> {
    if address == 0 && nbytes > 0 {
        return Err(PyValueError::new_err("an array's data pointer is null"));
    }
    if ordinal < 0 {
        // SAFETY: the callers pass the address and length of the allocation that holds the
        // array `owner` (NumPy's `__array_interface__`, a tensor's storage), which stays at
        // that address while `owner` lives; kiln keeps `owner` alive for as long as it views the
        // memory, and the GIL-holding caller does not write the array during the call.
        let memory = unsafe { LentHostMemory::new(address as *const u8, nbytes, owner) };
        lent_host_array(memory, dtype, offset, shape, strides).py_err()
    } else {
        // SAFETY: as above, for device memory of the tensor's device, which PyTorch and the
        // CUDA runtime allocate in the device's primary context (the one kiln uses); kiln queues
        // its work on the tensor owner's current stream, after the work that produced it.
        let memory = unsafe { LentCudaMemory::new(address as u64, nbytes, ordinal as usize, owner) };
        lent_cuda_array(memory, dtype, offset, shape, strides).py_err()
    }
}

/// The span of memory a view at `address` (its first element) with element `strides` reaches:
/// `(start, nbytes, offset)`, the view's first element `offset` elements after `start`. The span
/// starts at a 64-byte boundary where that is a whole number of elements (same page, same
/// allocation granule), so that kiln sees a view's true alignment in its element offset and
/// picks vector loads only where they are aligned.
pub fn span(address: usize, shape: &[usize], strides: &[isize], itemsize: usize) -> (usize, usize, usize) {
    if shape.contains(&0) {
        return (address, 0, 0);
    }
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&n, &s) in shape.iter().zip(strides) {
        let r = (n as isize - 1) * s;
        if r < 0 {
            lo += r;
        } else {
            hi += r;
        }
    }
    let start = address.wrapping_add_signed(lo * itemsize as isize);
    let pad = match start % 64 {
        p if p % itemsize == 0 => p,
        _ => 0,
    };
    (start - pad, (hi - lo + 1) as usize * itemsize + pad, pad / itemsize + (-lo) as usize)
}

/// The integers of a tuple (a shape, strides), inline up to four.
pub fn tuple_of<T, const N: usize>(item: Borrowed<'_, '_, PyAny>) -> PyResult<SmallVec<[T; N]>>
where
    [T; N]: smallvec::Array<Item = T>,
    T: for<'a, 'py> FromPyObject<'a, 'py>,
{
    let t = item.cast::<PyTuple>().map_err(|_| PyTypeError::new_err("a shape or strides must be a tuple"))?;
    let mut out = SmallVec::with_capacity(t.len());
    for v in t.iter_borrowed() {
        out.push(v.extract().map_err(Into::into)?);
    }
    Ok(out)
}

/// A Python bool, int or float (subclasses too) as a kernel input by MLX's rules; `None` for any
/// other object. An int outside int64 is an error.
pub fn scalar(item: &Bound<'_, PyAny>) -> Option<PyResult<KernelInput>> {
    if let Ok(b) = item.cast::<PyBool>() {
        return Some(Ok(KernelInput::Bool(b.is_true())));
    }
    if item.is_instance_of::<PyInt>() {
        let too_large = || to_py(kiln::Error::invalid("kiln", format!("the scalar = {item} does not fit int64")));
        return Some(item.extract::<i64>().map(KernelInput::Int).map_err(|_| too_large()));
    }
    if item.is_instance_of::<PyFloat>() {
        return Some(item.extract().map(KernelInput::Float));
    }
    None
}

/// `(handle, ordinal)` from Python as a stream of that device.
pub fn external_stream(stream: Option<(usize, usize)>) -> Option<ExternalStream> {
    // SAFETY: the Python side passes `torch.cuda.current_stream(device).cuda_stream` of the
    // device the inputs live on (its primary context); PyTorch keeps its streams alive for the
    // process.
    stream.map(|(handle, ordinal)| unsafe { ExternalStream::cuda(handle, ordinal) })
}
