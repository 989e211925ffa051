//! A queue of device work owned by another framework (PyTorch's current CUDA stream of a
//! device): a launch given one is queued there instead of on the backend's own queue, so the
//! lender's ordering (its caching allocator, its later kernels) covers kiln's work without a
//! wait. The type names its device, so launch descriptions carry it without naming a backend;
//! the backend of that device reads the handle.

use crate::device::Device;

/// A stream of device work owned by the caller, on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalStream {
    handle: usize,
    device: Device,
}

impl ExternalStream {
    /// The CUDA stream `handle` (a `CUstream`, as `torch.cuda.Stream.cuda_stream` gives it; 0 is
    /// the legacy default stream) of CUDA device `ordinal`.
    ///
    /// # Safety
    /// `handle` must be 0 or a stream of device `ordinal`'s primary context that stays alive
    /// until every kernel queued on it has run.
    pub unsafe fn cuda(handle: usize, ordinal: usize) -> Self {
        ExternalStream { handle, device: Device::Cuda(ordinal) }
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The raw handle, for the backend of [`ExternalStream::device`].
    pub(crate) fn handle(&self) -> usize {
        self.handle
    }
}
