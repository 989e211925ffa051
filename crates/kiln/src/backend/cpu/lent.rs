//! Host memory lent by another framework (a NumPy array, a PyTorch CPU tensor): kernels read
//! and write it in place, and the lender's owner object stays alive while any array views it.

use std::any::Any;
use std::sync::Arc;

use crate::array::{Array, HostBuffer, HostMemory};
use crate::dtype::DType;
use crate::error::Result;

/// `len` bytes at `ptr`, owned by another framework and kept alive by `owner`.
pub struct LentHostMemory {
    ptr: *const u8,
    len: usize,
    _owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: the memory is plain bytes whose validity `new`'s contract ties to `owner`, which is
// itself `Send + Sync`; kiln synchronises its own accesses (a launch reads and writes it only
// between its start and its end).
unsafe impl Send for LentHostMemory {}
// SAFETY: as for `Send`.
unsafe impl Sync for LentHostMemory {}

impl std::fmt::Debug for LentHostMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentHostMemory({} bytes at {:p})", self.len, self.ptr)
    }
}

impl LentHostMemory {
    /// Memory of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr .. ptr + len` must be one allocation valid for reads, and for the writes of the
    /// kernels it is bound to, at a fixed address for as long as `owner` lives; while kiln
    /// reads or writes it (a launch), no one else may write it.
    pub unsafe fn new(ptr: *const u8, len: usize, owner: Box<dyn Any + Send + Sync>) -> Self {
        LentHostMemory { ptr, len, _owner: owner }
    }
}

impl HostMemory for LentHostMemory {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 || self.ptr.is_null() {
            return &[];
        }
        // SAFETY: `new`'s contract: `len` readable bytes at `ptr` while `self` (and its owner)
        // lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A view of lent host memory: `offset` elements from its start, with `shape` and element
/// `strides`; an error when the view reaches outside the memory.
pub fn lent_host_array(
    memory: LentHostMemory,
    dtype: DType,
    offset: usize,
    shape: &[usize],
    strides: &[isize],
) -> Result<Array> {
    let elements = memory.len / dtype.size();
    let whole = Array::from_host(HostBuffer::lent(Arc::new(memory)), dtype, &[elements]);
    whole.as_strided(offset, shape, strides)
}
