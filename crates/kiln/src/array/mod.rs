//! `Array`: a shared buffer plus offset, shape, element strides and dtype. Views (slices with
//! negative steps, transposes, broadcasts) share the buffer and copy nothing.

#[doc(hidden)]
pub mod npy;
mod recycle;
mod view;

use std::fmt;
use std::sync::Arc;

pub use view::SliceArg;

use smallvec::SmallVec;

use crate::device::{Device, DeviceBuffer};
use crate::dtype::{convert_element_bytes, element_bytes_to_f64, f64_to_element_bytes, DType, Element};
use crate::error::{Error, Result};

/// A shape: extents per axis, outermost first (inline up to four axes, so arrays of up to
/// four dimensions are made and cloned without allocating).
pub type Shape = SmallVec<[usize; 4]>;
/// Strides in elements (not bytes), one per axis; may be zero (broadcast) or negative.
pub type Strides = SmallVec<[isize; 4]>;

/// Host memory owned outside kiln (another framework's array), shared with kiln without a copy.
/// Implementors guarantee that `bytes` stays valid, at the same address, for the value's whole
/// life; kernels may write through it (in-place buffers of whole-file kernels), as they may
/// through any input.
pub trait HostMemory: Send + Sync + fmt::Debug {
    /// The memory.
    fn bytes(&self) -> &[u8];
}

/// Readable zeros kept before and after each host buffer of kiln's own of at least
/// [`HOST_APRON_FROM`] bytes, so a kernel that loads just outside an array and discards the value
/// (load-then-select, as the MLX docs' grid_sample does at image borders) runs on the CPU as on
/// a GPU instead of faulting at the edge of the buffer's mapping. Untouched, they cost address
/// space, not memory.
pub const HOST_APRON_BYTES: usize = 1 << 20;
/// The size from which host buffers get aprons (smaller ones sit inside the allocator's heap).
pub const HOST_APRON_FROM: usize = 64 << 10;

/// Words of apron on each side of a buffer of `len` bytes.
fn apron_words(len: usize) -> usize {
    if len >= HOST_APRON_FROM {
        HOST_APRON_BYTES / 16
    } else {
        0
    }
}

/// Host memory: kiln's own, 16-byte aligned so any element type (and vector loads of it) may
/// alias it, or memory lent by another framework ([`HostMemory`]).
#[derive(Clone)]
pub struct HostBuffer {
    repr: HostRepr,
}

#[derive(Clone)]
enum HostRepr {
    /// `len` bytes from word `start` of `words` (the words around them are the aprons);
    /// `reusable` for an output's buffer, kept for the next output of its size when dropped.
    Owned {
        words: Vec<u128>,
        start: usize,
        len: usize,
        reusable: bool,
    },
    Lent(Arc<dyn HostMemory>),
}

impl HostBuffer {
    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        let start = apron_words(len);
        HostBuffer {
            repr: HostRepr::Owned { words: vec![0u128; len.div_ceil(16) + 2 * start], start, len, reusable: false },
        }
    }

    /// A zero-filled buffer of `len` bytes, or `None` when that memory cannot be allocated.
    pub fn try_zeroed(len: usize) -> Option<Self> {
        let start = apron_words(len);
        let total = len.div_ceil(16).checked_add(2 * start)?;
        let mut words = Vec::new();
        words.try_reserve_exact(total).ok()?;
        words.resize(total, 0u128);
        Some(HostBuffer { repr: HostRepr::Owned { words, start, len, reusable: false } })
    }

    /// A buffer of `len` bytes for an output whose every data byte the caller writes (aprons as
    /// `zeroed`, at least `HOST_APRON_BYTES` each side, holding zeros), whose data starts `phase`
    /// bytes past a multiple of `align` (a power of two of at least 16; `phase` a multiple of 16
    /// below it), with its whole allocation: the address of its first byte, its size and the
    /// data's offset in it. For the CPU backend, which lays guard ranges over the aprons while a
    /// kernel writes the buffer, then hands it out as an output; the aprons must hold zeros
    /// again by then. A large one may be an earlier output's allocation (`recycle`): its data
    /// holds what that output held.
    pub(crate) fn placed_for_output(
        len: usize,
        align: usize,
        phase: usize,
    ) -> Option<(HostBuffer, *mut u8, usize, usize)> {
        let apron = HOST_APRON_BYTES / 16;
        let total = len.div_ceil(16).checked_add(2 * apron)?.checked_add(align / 16)?;
        let (mut words, reused) = match recycle::take(total) {
            Some(words) => (words, true),
            None => (vec![0u128; total], false),
        };
        let base = words.as_mut_ptr() as *mut u8;
        let first = base as usize + HOST_APRON_BYTES;
        let data = (first - phase).div_ceil(align) * align + phase - base as usize;
        let start = data / 16;
        if reused {
            words[..start].fill(0);
            words[start + len.div_ceil(16)..].fill(0);
        }
        let buffer = HostBuffer { repr: HostRepr::Owned { words, start, len, reusable: true } };
        Some((buffer, base, total * 16, data))
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = HostBuffer::zeroed(bytes.len());
        b.bytes_mut().copy_from_slice(bytes);
        b
    }

    /// A buffer over memory lent by another framework, without a copy.
    pub fn lent(memory: Arc<dyn HostMemory>) -> Self {
        HostBuffer { repr: HostRepr::Lent(memory) }
    }

    /// True when the memory is lent by another framework.
    pub fn is_lent(&self) -> bool {
        matches!(self.repr, HostRepr::Lent(_))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.repr {
            HostRepr::Owned { words, start, len, .. } => {
                &bytemuck::cast_slice::<u128, u8>(words)[start * 16..start * 16 + len]
            }
            HostRepr::Lent(m) => m.bytes(),
        }
    }

    /// The bytes, writable. Lent memory is first copied into a buffer of kiln's own (a lender
    /// may alias its memory, so kiln never hands out a `&mut` to it).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if let HostRepr::Lent(m) = &self.repr {
            let copy = HostBuffer::from_bytes(m.bytes());
            *self = copy;
        }
        match &mut self.repr {
            HostRepr::Owned { words, start, len, .. } => {
                &mut bytemuck::cast_slice_mut::<u128, u8>(words)[*start * 16..*start * 16 + *len]
            }
            HostRepr::Lent(_) => &mut [],
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        match &self.repr {
            HostRepr::Owned { len, .. } => *len,
            HostRepr::Lent(m) => m.bytes().len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let HostRepr::Owned { words, reusable: true, .. } = &mut self.repr {
            recycle::keep(std::mem::take(words));
        }
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({} bytes{})", self.len(), if self.is_lent() { ", lent" } else { "" })
    }
}

/// Where an array's bytes live.
#[derive(Debug)]
pub enum Storage {
    /// Host memory (the CPU backend runs on it in place).
    Host(HostBuffer),
    /// Memory a GPU backend owns.
    Device(Box<dyn DeviceBuffer>),
}

/// An n-dimensional array: a view (offset, shape, element strides, dtype) of storage on one
/// [`Device`], shared by its views. Cloning and slicing copy no data; moving between devices is
/// explicit (`to_device`, `to_host`).
///
/// ```
/// use kiln::{Array, DType, SliceArg};
/// let a = Array::from_slice(&[2, 3], &[1i32, 2, 3, 4, 5, 6])?;
/// let t = a.t();                                                  // a transposed view
/// assert_eq!((t.shape(), t.strides()), (&[3, 2][..], &[1, 3][..]));
/// assert_eq!(t.to_vec::<i32>()?, [1, 4, 2, 5, 3, 6]);
/// let r = a.slice(&SliceArg::parse_list(":, ::-2")?)?;            // columns 2 and 0
/// assert_eq!(r.to_vec::<i32>()?, [3, 1, 6, 4]);
/// let b = a.broadcast_to(&[4, 2, 3])?;                            // stride 0, no copy
/// assert_eq!((b.size(), b.strides()[0]), (24, 0));
/// let on_gpu = a.to_device(kiln::best_device())?;                 // a copy, unless already there
/// assert_eq!(on_gpu.to_host()?.astype(DType::F32)?.to_f64_vec()?, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Array {
    storage: Arc<Storage>,
    offset: usize,
    shape: Shape,
    strides: Strides,
    dtype: DType,
}

impl Clone for Array {
    /// A new view of the same storage. Shape and strides are copied as slices (the derived
    /// clone goes element by element through `SmallVec::extend`, several times slower; arrays
    /// are cloned at every kernel call).
    fn clone(&self) -> Self {
        Array {
            storage: Arc::clone(&self.storage),
            offset: self.offset,
            shape: Shape::from_slice(&self.shape),
            strides: Strides::from_slice(&self.strides),
            dtype: self.dtype,
        }
    }
}

/// Elements of `shape`, or `None` when their count overflows `usize`.
pub fn checked_size(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Bytes of a contiguous array of `shape` and `dtype`, or `None` when they exceed what an
/// address space holds (`isize::MAX`).
pub fn checked_byte_size(shape: &[usize], dtype: DType) -> Option<usize> {
    checked_size(shape)?.checked_mul(dtype.size()).filter(|&b| b <= isize::MAX as usize)
}

/// [`checked_byte_size`], or an error of `op` saying that `what` is too large. `what` is only
/// formatted for the error, so a `format_args!` label costs a call nothing.
pub(crate) fn byte_size(op: &str, what: impl std::fmt::Display, shape: &[usize], dtype: DType) -> Result<usize> {
    checked_byte_size(shape, dtype).ok_or_else(|| {
        Error::invalid(
            op,
            format!("{what} of shape {shape:?} and dtype {dtype} has more bytes than an address space holds"),
        )
    })
}

/// An error unless `given` values fill `shape` exactly, counted in elements.
fn check_element_count(shape: &[usize], dtype: DType, given: usize) -> Result<()> {
    let want = byte_size("array", "an array", shape, dtype)? / dtype.size();
    if given == want {
        Ok(())
    } else {
        Err(Error::shape("array", format!("{given} elements given for shape {shape:?} ({want} expected)")))
    }
}

/// Row-major (C order) strides for `shape`.
pub fn row_major_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = smallvec::smallvec![0isize; shape.len()];
    let mut acc = 1isize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= n.max(1) as isize;
    }
    strides
}

impl Array {
    /// A row-contiguous host array from raw little-endian bytes.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Array> {
        let want = byte_size("array", "an array", shape, dtype)?;
        if bytes.len() != want {
            return Err(Error::shape(
                "array",
                format!("{} bytes given for shape {:?} of {} ({} bytes expected)", bytes.len(), shape, dtype, want),
            ));
        }
        Ok(Array::from_host(HostBuffer::from_bytes(bytes), dtype, shape))
    }

    /// A row-contiguous host array taking ownership of `buffer`.
    pub fn from_host(buffer: HostBuffer, dtype: DType, shape: &[usize]) -> Array {
        Array {
            storage: Arc::new(Storage::Host(buffer)),
            offset: 0,
            shape: Shape::from_slice(shape),
            strides: row_major_strides(shape),
            dtype,
        }
    }

    /// A row-contiguous array over device memory made by a backend.
    pub fn from_device_buffer(buffer: Box<dyn DeviceBuffer>, dtype: DType, shape: &[usize]) -> Array {
        Array {
            storage: Arc::new(Storage::Device(buffer)),
            offset: 0,
            shape: Shape::from_slice(shape),
            strides: row_major_strides(shape),
            dtype,
        }
    }

    /// A row-contiguous host array of `shape` from typed values, row-major; the dtype follows
    /// the element type (`f32` → float32, `half::f16` → float16, `half::bf16` → bfloat16,
    /// `i32` → int32, `u8` → uint8, `bool` → bool, ...). kiln has no float64 dtype (Metal has
    /// no `double`): convert `f64` data with [`Array::from_f64`], which rounds once to the
    /// dtype you name.
    ///
    /// ```
    /// use kiln::{bf16, Array, DType};
    /// let a = Array::from_slice(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    /// assert_eq!((a.dtype(), a.shape()), (DType::F32, &[2, 3][..]));
    /// let b = Array::from_slice(&[2], &[bf16::from_f32(0.5), bf16::ONE])?;
    /// assert_eq!(b.dtype(), DType::BF16);
    /// // From f64 data: a conversion to a dtype kiln has.
    /// let c = Array::from_f64(DType::F32, &[3], &[0.1, 0.2, 0.3])?;
    /// assert_eq!(c.to_vec::<f32>()?, [0.1f32, 0.2, 0.3]);
    /// // The wrong number of elements is an error in elements.
    /// let e = Array::from_slice(&[3], &[1i32, 2, 3, 4]).unwrap_err();
    /// assert!(e.to_string().contains("4 elements given for shape [3] (3 expected)"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Result<Array> {
        check_element_count(shape, T::DTYPE, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * T::DTYPE.size());
        for &v in values {
            v.write_le(&mut bytes);
        }
        Array::from_bytes(T::DTYPE, shape, &bytes)
    }

    /// A row-contiguous host array from typed values ([`Array::from_slice`], taking the vector).
    pub fn from_vec<T: Element>(shape: &[usize], values: Vec<T>) -> Result<Array> {
        Array::from_slice(shape, &values)
    }

    /// A 0-d host array.
    pub fn scalar<T: Element>(value: T) -> Array {
        let mut bytes = Vec::new();
        value.write_le(&mut bytes);
        Array::from_host(HostBuffer::from_bytes(&bytes), T::DTYPE, &[])
    }

    /// A host array of `dtype` whose elements are `values` converted with a numeric cast.
    pub fn from_f64(dtype: DType, shape: &[usize], values: &[f64]) -> Result<Array> {
        check_element_count(shape, dtype, values.len())?;
        let mut bytes = Vec::with_capacity(values.len() * dtype.size());
        for &v in values {
            bytes.extend(f64_to_element_bytes(v, dtype));
        }
        Array::from_bytes(dtype, shape, &bytes)
    }

    /// A host array filled with `value` (numeric cast to `dtype`); an error where the shape's
    /// bytes exceed what an address space holds.
    pub fn full(dtype: DType, shape: &[usize], value: f64) -> Result<Array> {
        let bytes = byte_size("array", "an array", shape, dtype)?;
        let one = f64_to_element_bytes(value, dtype);
        let mut buf = HostBuffer::try_zeroed(bytes).ok_or_else(|| {
            Error::invalid("array", format!("cannot allocate {bytes} bytes for an array of shape {shape:?}"))
        })?;
        for chunk in buf.bytes_mut().chunks_exact_mut(dtype.size()) {
            chunk.copy_from_slice(&one);
        }
        Ok(Array::from_host(buf, dtype, shape))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Extents per axis, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Element strides.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Offset of element (0, ..., 0) from the start of the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of axes (0 for a scalar).
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes the elements would occupy contiguously.
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype.size()
    }
    /// The storage shared by this view.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The device the array lives on.
    pub fn device(&self) -> Device {
        match &*self.storage {
            Storage::Host(_) => Device::Cpu,
            Storage::Device(b) => b.device(),
        }
    }

    /// The host buffer, when the array lives on the host.
    pub fn host_buffer(&self) -> Option<&HostBuffer> {
        match &*self.storage {
            Storage::Host(b) => Some(b),
            Storage::Device(_) => None,
        }
    }

    /// The device buffer, when the array lives on a device.
    pub fn device_buffer(&self) -> Option<&dyn DeviceBuffer> {
        match &*self.storage {
            Storage::Host(_) => None,
            Storage::Device(b) => Some(b.as_ref()),
        }
    }

    /// True when the elements are laid out row-major without gaps (MLX's `row_contiguous`):
    /// axes of extent 1 may carry any stride.
    pub fn is_row_contiguous(&self) -> bool {
        let mut expected = 1isize;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n == 1 {
                continue;
            }
            if n == 0 {
                return true;
            }
            if s != expected {
                return false;
            }
            expected *= n as isize;
        }
        true
    }

    /// The lowest and highest storage offsets (in elements) the view reaches; `None` when it
    /// has no elements.
    pub fn storage_span(&self) -> Option<(usize, usize)> {
        if self.size() == 0 {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as isize, self.offset as isize);
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            let reach = (n as isize - 1) * s;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        Some((lo as usize, hi as usize))
    }

    /// Storage offsets (in elements) of every element in row-major order.
    pub fn element_offsets(&self) -> Vec<usize> {
        let n = self.size();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        let nd = self.ndim();
        let mut idx = vec![0usize; nd];
        let mut pos = self.offset as isize;
        for _ in 0..n {
            out.push(pos as usize);
            for ax in (0..nd).rev() {
                idx[ax] += 1;
                pos += self.strides[ax];
                if idx[ax] < self.shape[ax] {
                    break;
                }
                pos -= self.strides[ax] * self.shape[ax] as isize;
                idx[ax] = 0;
            }
        }
        out
    }

    /// The elements as contiguous little-endian bytes in row-major order (host arrays only).
    /// A copy larger than the memory that can be had (a broadcast of 2^40 rows, say) is an
    /// error, not the end of the process.
    pub fn to_contiguous_bytes(&self) -> Result<Vec<u8>> {
        let n = self.contiguous_copy_bytes("to_contiguous_bytes")?;
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|_| self.copy_too_large("to_contiguous_bytes", n))?;
        out.resize(n, 0);
        self.copy_row_major("to_contiguous_bytes", &mut out)?;
        Ok(out)
    }

    /// A row-contiguous copy of a host array (or the array itself when already contiguous).
    pub fn to_row_contiguous(&self) -> Result<Array> {
        if self.is_row_contiguous() && self.host_buffer().is_some() {
            return Ok(self.clone());
        }
        let n = self.contiguous_copy_bytes("to_row_contiguous")?;
        let mut buf = HostBuffer::try_zeroed(n).ok_or_else(|| self.copy_too_large("to_row_contiguous", n))?;
        self.copy_row_major("to_row_contiguous", buf.bytes_mut())?;
        Ok(Array::from_host(buf, self.dtype, &self.shape))
    }

    /// Bytes of a row-contiguous copy, or an error of `op` when they overflow an address space.
    fn contiguous_copy_bytes(&self, op: &str) -> Result<usize> {
        byte_size(op, "a row-contiguous copy", &self.shape, self.dtype)
    }

    fn copy_too_large(&self, op: &str, bytes: usize) -> Error {
        Error::invalid(
            op,
            format!(
                "cannot allocate {bytes} bytes for a row-contiguous copy of shape {:?} and dtype {}",
                self.shape, self.dtype
            ),
        )
    }

    /// Writes the elements in row-major order into `dst` (exactly `nbytes` long), walking the
    /// strides without materialising the offsets.
    fn copy_row_major(&self, op: &str, dst: &mut [u8]) -> Result<()> {
        let bytes = self.require_host(op)?.bytes();
        let es = self.dtype.size();
        if dst.is_empty() {
            return Ok(());
        }
        if self.is_row_contiguous() {
            let start = self.offset * es;
            dst.copy_from_slice(&bytes[start..start + dst.len()]);
            return Ok(());
        }
        let nd = self.ndim();
        let mut idx: Shape = smallvec::smallvec![0usize; nd];
        let mut pos = self.offset as isize;
        for chunk in dst.chunks_exact_mut(es) {
            let at = pos as usize * es;
            chunk.copy_from_slice(&bytes[at..at + es]);
            for ax in (0..nd).rev() {
                idx[ax] += 1;
                pos += self.strides[ax];
                if idx[ax] < self.shape[ax] {
                    break;
                }
                pos -= self.strides[ax] * self.shape[ax] as isize;
                idx[ax] = 0;
            }
        }
        Ok(())
    }

    /// The elements in row-major order as `T` (host arrays only; `T` must match the dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::dtype(
                "to_vec",
                self.dtype,
                format!("array holds {}, {} was asked for", self.dtype, T::DTYPE),
            ));
        }
        let bytes = self.to_contiguous_bytes()?;
        Ok(bytes.chunks_exact(self.dtype.size()).map(T::read_le).collect())
    }

    /// The elements in row-major order widened to `f64` (host arrays only).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let bytes = self.to_contiguous_bytes()?;
        Ok(bytes.chunks_exact(self.dtype.size()).map(|c| element_bytes_to_f64(c, self.dtype)).collect())
    }

    /// Converts to `dtype` with a numeric cast that rounds at most once, from each element's
    /// exact value (float to float16/bfloat16 to nearest even, float to integer toward zero with
    /// saturation, integer to integer wrapping); always returns a new row-contiguous host array.
    pub fn astype(&self, dtype: DType) -> Result<Array> {
        if dtype == self.dtype {
            return self.to_row_contiguous();
        }
        let bytes = self.to_contiguous_bytes()?;
        let mut out = Vec::with_capacity(self.size() * dtype.size());
        for c in bytes.chunks_exact(self.dtype.size()) {
            out.extend(convert_element_bytes(c, self.dtype, dtype));
        }
        Array::from_bytes(dtype, &self.shape, &out)
    }

    fn require_host(&self, what: &str) -> Result<&HostBuffer> {
        self.host_buffer().ok_or_else(|| {
            Error::invalid(
                what,
                format!("array lives on {}; move it to the host first (Array::to_host)", self.device()),
            )
        })
    }

    /// A view of this array's storage with its own offset (in elements), shape and element
    /// strides (any sign, zero for broadcast), as `torch.as_strided`; an error when the view
    /// reaches outside the storage.
    pub fn as_strided(&self, offset: usize, shape: &[usize], strides: &[isize]) -> Result<Array> {
        if shape.len() != strides.len() {
            return Err(Error::shape("as_strided", format!("{} strides given for shape {shape:?}", strides.len())));
        }
        let view = self.with_view(offset, Shape::from_slice(shape), Strides::from_slice(strides));
        let stored = match &*self.storage {
            Storage::Host(b) => b.len(),
            Storage::Device(b) => b.len_bytes(),
        } / self.dtype.size();
        if let Some((lo, hi)) = view.storage_span_checked() {
            if lo < 0 || hi >= stored as i128 {
                return Err(Error::invalid(
                    "as_strided",
                    format!(
                        "a view at offset {offset} of shape {shape:?} and strides {strides:?} reaches elements {lo}..={hi} \
                         of a storage of {stored}"
                    ),
                ));
            }
        }
        Ok(view)
    }

    /// As [`Array::storage_span`], in wide signed integers, for views not yet known to fit.
    fn storage_span_checked(&self) -> Option<(i128, i128)> {
        if self.size() == 0 {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            let reach = (n as i128 - 1) * s as i128;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        Some((lo, hi))
    }

    pub(crate) fn with_view(&self, offset: usize, shape: impl Into<Shape>, strides: impl Into<Strides>) -> Array {
        Array { storage: self.storage.clone(), offset, shape: shape.into(), strides: strides.into(), dtype: self.dtype }
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Array({} {:?} strides {:?} offset {} on {})",
            self.dtype,
            self.shape,
            self.strides,
            self.offset,
            self.device()
        )
    }
}
