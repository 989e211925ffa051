//! NumPy's C API (through the `numpy` crate) on the two hot paths of a call on NumPy arrays:
//! an input array's fields (pointer, shape, strides, dtype, flags) read from the array object,
//! where `__array_interface__` would build a dict per access (about 1 µs), and an output array
//! made over kiln's buffer with the buffer's holder as its base, where `np.asarray` would parse
//! an interface dict. Everything else about NumPy arrays (other byte orders, misaligned views,
//! dtypes kiln has no fast name for) stays on the general path in `lent.rs`.

use std::ffi::{c_int, c_long, c_void};

use kiln::array::{Shape, Strides};
use kiln::DType;
use numpy::npyffi::{self, npy_intp, NpyTypes, PyArrayObject, NPY_TYPES, PY_ARRAY_API};
use pyo3::prelude::*;
use smallvec::SmallVec;

/// What a NumPy array says of itself.
pub struct Fields {
    /// The address of its first element.
    pub address: usize,
    pub shape: Shape,
    /// Strides in bytes, `None` for a C-contiguous array (whose strides of length-1 axes may be
    /// anything; `__array_interface__` leaves them out too).
    pub byte_strides: Option<Strides>,
    /// kiln's dtype of its elements, when the dtype is one of NumPy's own that kiln has.
    pub dtype: Option<DType>,
    /// Whether its elements are in the machine's byte order.
    pub native: bool,
    /// Whether NumPy counts it aligned (every element at a multiple of its alignment).
    pub aligned: bool,
}

/// Whether `obj` is a NumPy array (`np.ndarray` or a subclass).
pub fn is_array(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object (the GIL is held, as the `Bound` proves); the check reads
    // its type and NumPy's array type object from NumPy's C API table (imported on first use).
    unsafe { npyffi::array::PyArray_Check(obj.py(), obj.as_ptr()) != 0 }
}

/// The fields of `array`, a NumPy array (`is_array`).
pub fn fields(array: &Bound<'_, PyAny>) -> Fields {
    debug_assert!(is_array(array));
    // SAFETY: `array` is a NumPy array (the caller checked `is_array`), so its object is a
    // `PyArrayObject` whose `nd` dimensions and strides, data pointer, flags and descriptor are
    // valid while the GIL is held and the object lives.
    unsafe {
        let a = &*(array.as_ptr() as *const PyArrayObject);
        let nd = a.nd.max(0) as usize;
        let (dims, strides) = if nd == 0 {
            (&[][..], &[][..])
        } else {
            (std::slice::from_raw_parts(a.dimensions, nd), std::slice::from_raw_parts(a.strides, nd))
        };
        let descr = &*a.descr;
        Fields {
            address: a.data as usize,
            shape: dims.iter().map(|&d| d as usize).collect(),
            byte_strides: (a.flags & npyffi::NPY_ARRAY_C_CONTIGUOUS == 0).then(|| strides.iter().copied().collect()),
            dtype: dtype_of_type_num(descr.type_num),
            native: native_order(descr.byteorder as u8),
            aligned: a.flags & npyffi::NPY_ARRAY_ALIGNED != 0,
        }
    }
}

/// `np.asarray(obj)`: a NumPy array over `obj`'s memory where it exports one (the buffer
/// protocol, `__array_interface__`), else NumPy's conversion of it.
pub fn as_array<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    // SAFETY: `obj` is a live object (the GIL is held); `PyArray_FromAny` takes no reference to
    // the null dtype and context it is given and returns a new reference, or null with
    // Python's error set.
    unsafe {
        let out = PY_ARRAY_API.PyArray_FromAny(py, obj.as_ptr(), std::ptr::null_mut(), 0, 0, 0, std::ptr::null_mut());
        if out.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, out))
    }
}

/// The array that owns the memory `array` (a NumPy array) views: the last NumPy array down its
/// chain of bases, and whether it owns its data (a view of another object's memory does not).
pub fn root<'py>(array: &Bound<'py, PyAny>) -> (Bound<'py, PyAny>, bool) {
    let py = array.py();
    let mut root = array.clone();
    loop {
        // SAFETY: `root` is a NumPy array (checked on the way down); its `base` is null or an
        // object the array holds a reference to, alive while the array is.
        let base = unsafe { (*(root.as_ptr() as *const PyArrayObject)).base };
        if base.is_null() {
            break;
        }
        // SAFETY: `base` is a live object (above); the new `Bound` takes a reference of its own.
        let base = unsafe { Bound::from_borrowed_ptr(py, base) };
        if !is_array(&base) {
            break;
        }
        root = base;
    }
    // SAFETY: `root` is a NumPy array (above).
    let flags = unsafe { (*(root.as_ptr() as *const PyArrayObject)).flags };
    (root, flags & npyffi::NPY_ARRAY_OWNDATA != 0)
}

/// A writeable NumPy array of `dtype` over host memory at `address` with `shape` and byte
/// strides (`None`: row-major), whose base is `holder`, the object that keeps the memory alive;
/// `None` for bfloat16, which NumPy has no type number for.
pub fn array_over<'py>(
    holder: Bound<'py, PyAny>,
    address: usize,
    shape: &[usize],
    byte_strides: Option<&[isize]>,
    dtype: DType,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(num) = type_num_of(dtype) else { return Ok(None) };
    let py = holder.py();
    let mut dims: SmallVec<[npy_intp; 4]> = shape.iter().map(|&d| d as npy_intp).collect();
    let mut strides: Option<SmallVec<[npy_intp; 4]>> = byte_strides.map(|s| s.iter().map(|&b| b as npy_intp).collect());
    let strides_ptr = strides.as_mut().map_or(std::ptr::null_mut(), |s| s.as_mut_ptr());
    // An empty buffer has no address: NumPy allocates the (empty) array's memory itself.
    let data = if address == 0 { std::ptr::null_mut() } else { address as *mut c_void };
    let flags = match (data.is_null(), strides.is_some()) {
        (true, _) => 0,
        (false, false) => npyffi::NPY_ARRAY_CARRAY,
        (false, true) => npyffi::NPY_ARRAY_WRITEABLE | npyffi::NPY_ARRAY_ALIGNED,
    };
    // SAFETY: NumPy's C API table is imported by the `numpy` crate on first use (under the GIL,
    // held here). `PyArray_DescrFromType` returns a new reference, which `PyArray_NewFromDescr`
    // steals; `dims` and `strides` hold `shape.len()` entries and outlive the call, which copies
    // them; `data` is null or the first element of memory of the array's extent that `holder`
    // keeps alive, and `PyArray_SetBaseObject` steals the reference to `holder` handed to it (on
    // failure too), so the array keeps `holder`, and the memory, for as long as it lives.
    unsafe {
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, num);
        if descr.is_null() {
            return Err(PyErr::fetch(py));
        }
        let subtype = PY_ARRAY_API.get_type_object(py, NpyTypes::PyArray_Type);
        let nd = dims.len() as c_int;
        let obj = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr,
            nd,
            dims.as_mut_ptr(),
            strides_ptr,
            data,
            flags,
            std::ptr::null_mut(),
        );
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, obj);
        if !data.is_null() && PY_ARRAY_API.PyArray_SetBaseObject(py, obj as *mut PyArrayObject, holder.into_ptr()) != 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(Some(array))
    }
}

/// Whether C's `long` (NumPy's `NPY_LONG`) has 64 bits (LP64 systems; 32 on Windows).
const LONG_IS_64: bool = std::mem::size_of::<c_long>() == 8;

/// NumPy's type numbers of its own numeric types that kiln has, with kiln's dtype of each. A
/// dtype's first entry is the number `np.dtype(name)` has: int64 is `long` where that has 64
/// bits, else `long long`.
const TYPES: [(NPY_TYPES, DType); 13] = [
    (NPY_TYPES::NPY_BOOL, DType::Bool),
    (NPY_TYPES::NPY_BYTE, DType::I8),
    (NPY_TYPES::NPY_UBYTE, DType::U8),
    (NPY_TYPES::NPY_SHORT, DType::I16),
    (NPY_TYPES::NPY_USHORT, DType::U16),
    (NPY_TYPES::NPY_INT, DType::I32),
    (NPY_TYPES::NPY_UINT, DType::U32),
    (NPY_TYPES::NPY_LONG, if LONG_IS_64 { DType::I64 } else { DType::I32 }),
    (NPY_TYPES::NPY_ULONG, if LONG_IS_64 { DType::U64 } else { DType::U32 }),
    (NPY_TYPES::NPY_LONGLONG, DType::I64),
    (NPY_TYPES::NPY_ULONGLONG, DType::U64),
    (NPY_TYPES::NPY_HALF, DType::F16),
    (NPY_TYPES::NPY_FLOAT, DType::F32),
];

/// kiln's dtype of NumPy's type number `num`, for NumPy's own numeric types kiln has.
fn dtype_of_type_num(num: c_int) -> Option<DType> {
    TYPES.iter().find(|&&(t, _)| t as c_int == num).map(|&(_, d)| d)
}

/// NumPy's type number for kiln's `dtype` (the one `np.dtype(name)` has), `None` for bfloat16.
fn type_num_of(dtype: DType) -> Option<c_int> {
    TYPES.iter().find(|&&(_, d)| d == dtype).map(|&(t, _)| t as c_int)
}

/// Whether NumPy's byte-order character `order` is the machine's order.
fn native_order(order: u8) -> bool {
    match order {
        b'=' | b'|' => true,
        b'<' => cfg!(target_endian = "little"),
        b'>' => cfg!(target_endian = "big"),
        _ => false,
    }
}
