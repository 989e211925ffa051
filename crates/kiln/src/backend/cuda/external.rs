//! Memory and streams lent by another framework (a PyTorch CUDA tensor and its current stream):
//! kiln binds the memory in place and queues kernels on the lender's stream, so the lender's
//! own ordering (its caching allocator, its later kernels) covers kiln's work without a wait.
//! Lent memory has no guard apron: it is bound exactly as the lender laid it out.

use std::any::Any;

use crate::array::Array;
use crate::backend::ExternalStream;
use crate::device::{Device, DeviceBuffer};
use crate::dtype::DType;
use crate::error::Result;

/// Device memory owned by another framework, kept alive by `owner` while kiln views it.
pub struct LentCudaMemory {
    address: u64,
    len: usize,
    ordinal: usize,
    _owner: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for LentCudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LentCudaMemory({} bytes at {:#x} on cuda:{})", self.len, self.address, self.ordinal)
    }
}

impl LentCudaMemory {
    /// Memory of `len` bytes at device address `address` of CUDA device `ordinal`.
    ///
    /// # Safety
    /// `address .. address + len` must be device memory of device `ordinal`'s primary context
    /// (what the CUDA runtime and PyTorch use), valid for reads and for the writes of the kernels
    /// it is bound to, for as long as `owner` lives, and every stream that kiln queues work on
    /// against it must be ordered after the work that produced it.
    pub unsafe fn new(address: u64, len: usize, ordinal: usize, owner: Box<dyn Any + Send + Sync>) -> Self {
        LentCudaMemory { address, len, ordinal, _owner: owner }
    }

    /// The device address of byte 0.
    pub fn address(&self) -> u64 {
        self.address
    }
}

impl DeviceBuffer for LentCudaMemory {
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }
    fn len_bytes(&self) -> usize {
        self.len
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Whether `array` views memory lent by another framework (ordered by that framework's
/// streams), not kiln's own (ordered by the backend's stream).
pub(super) fn is_lent(array: &Array) -> bool {
    array.device_buffer().is_some_and(|b| b.as_any().is::<LentCudaMemory>())
}

/// A view of lent device memory: `offset` elements from its start, with `shape` and element
/// `strides`; an error when the view reaches outside the memory.
pub fn lent_cuda_array(
    memory: LentCudaMemory,
    dtype: DType,
    offset: usize,
    shape: &[usize],
    strides: &[isize],
) -> Result<Array> {
    let elements = memory.len / dtype.size();
    let whole = Array::from_device_buffer(Box::new(memory), dtype, &[elements]);
    whole.as_strided(offset, shape, strides)
}

/// The `CUstream` of a caller's stream (of a CUDA device: `dispatch` checks which).
pub(super) fn cu_stream(stream: &ExternalStream) -> cudarc::driver::sys::CUstream {
    stream.handle() as cudarc::driver::sys::CUstream
}

/// Whether device `ordinal`'s primary context (the one PyTorch and the CUDA runtime use) is the
/// calling thread's current context, for a device kiln has already set up (false before: setting
/// a device up makes its context current). A launch makes its device's context current and
/// leaves it so; when this holds, a launch on `ordinal` leaves the thread's current device
/// (PyTorch's `torch.cuda.current_device()`) as it found it, so a caller needs no device guard.
pub fn is_current_context(ordinal: usize) -> Result<bool> {
    let Some(backend) = super::created_backend(ordinal) else { return Ok(false) };
    let current = cudarc::driver::result::ctx::get_current()
        .map_err(|e| backend.fail("current context", "reading the thread's current context", e))?;
    Ok(current == Some(backend.ctx.cu_ctx()))
}

impl super::CudaBackend {
    /// Makes `waiter` wait for the work queued on `on` so far (an event, no host wait).
    pub(super) fn order_after(
        &self,
        kernel: &str,
        waiter: cudarc::driver::sys::CUstream,
        on: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        use cudarc::driver::sys;
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: `event` is valid for writes; the context is bound to this thread (by `run`).
        let created = unsafe { sys::cuEventCreate(&mut event, flags) }.result();
        created.map_err(|e| self.fail(kernel, "creating an event", e))?;
        // SAFETY: `event` was created above; both streams belong to this context. Destroying an
        // event whose wait is queued is allowed: the driver releases it once the wait is done.
        let ordered = unsafe {
            sys::cuEventRecord(event, on).result().and_then(|()| sys::cuStreamWaitEvent(waiter, event, 0).result())
        };
        // SAFETY: as above; the event is not used after this.
        let _ = unsafe { sys::cuEventDestroy_v2(event) };
        ordered.map_err(|e| self.fail(kernel, "ordering streams", e))
    }
}
