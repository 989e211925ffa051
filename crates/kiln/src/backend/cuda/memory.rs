//! Device memory of the CUDA backend: buffers, uploads, downloads, fills and the strided gather
//! that makes a view row-contiguous on the device.

use std::any::Any;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::{result as drv, DevicePtr};

use super::external::LentCudaMemory;
use super::pool::{placement, size_class, Block, BlockPool};
use super::{driver_error, CudaBackend};
use crate::array::{Array, HostBuffer};
use crate::device::{Device, DeviceBuffer};
use crate::dtype::{f64_to_element_bytes, DType};
use crate::error::{Error, Result};

/// Device memory owned by the CUDA backend, with readable aprons around it (`pool.rs`); its
/// block returns to the backend's pool on drop.
pub struct CudaBuffer {
    block: ManuallyDrop<Block>,
    pub(super) ordinal: usize,
    pub(super) len: usize,
    pool: Arc<BlockPool>,
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        // SAFETY: `block` is taken exactly once, here, and never used afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        self.pool.give(block);
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.len, self.ordinal)
    }
}

impl DeviceBuffer for CudaBuffer {
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

impl CudaBuffer {
    /// The device address of byte 0.
    pub(super) fn address(&self) -> u64 {
        self.block.address()
    }
}

/// Parameters of the gather kernel (mirrors `GatherArgs` in [`GATHER_SOURCE`]).
#[repr(C)]
pub(super) struct GatherArgs {
    pub src: u64,
    pub dst: u64,
    pub n: u64,
    pub elem: u32,
    pub ndim: u32,
    pub shape: [i64; 10],
    pub strides: [i64; 10],
}

/// A standalone kernel copying a strided view (element strides, any sign) into a dense buffer.
pub(super) const GATHER_SOURCE: &str = r#"
struct GatherArgs {
  unsigned long long src, dst, n;
  unsigned elem, ndim;
  long long shape[10], strides[10];
};
extern "C" __global__ void kiln_gather(const __grid_constant__ GatherArgs a) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.n) return;
  long long loc = 0;
  unsigned long long rest = i;
  for (int d = (int)a.ndim - 1; d >= 0; --d) {
    loc += (long long)(rest % (unsigned long long)a.shape[d]) * a.strides[d];
    rest /= (unsigned long long)a.shape[d];
  }
  const unsigned char* s = (const unsigned char*)a.src + loc * (long long)a.elem;
  unsigned char* d = (unsigned char*)a.dst + i * a.elem;
  switch (a.elem) {
    case 1: *d = *s; break;
    case 2: *(unsigned short*)d = *(const unsigned short*)s; break;
    case 4: *(unsigned*)d = *(const unsigned*)s; break;
    default: *(unsigned long long*)d = *(const unsigned long long*)s; break;
  }
}
"#;

impl CudaBackend {
    /// Allocates `len` bytes (at least one, so every buffer has an address), from the pool of
    /// freed blocks when one of its size class is there. Every buffer has [`APRON_BYTES`] of
    /// readable memory before and after it (`pool.rs`).
    ///
    /// [`APRON_BYTES`]: super::APRON_BYTES
    pub(super) fn alloc(&self, what: &str, len: usize) -> Result<CudaBuffer> {
        let class = size_class(len);
        let block = match self.pool.take(class) {
            Some(block) => block,
            None => self.fresh_block(what, len, class)?,
        };
        Ok(CudaBuffer { block: ManuallyDrop::new(block), ordinal: self.ordinal, len, pool: self.pool.clone() })
    }

    /// A block of `class` bytes from a fresh driver allocation; the other blocks carved from
    /// the same allocation go to the pool.
    fn fresh_block(&self, what: &str, len: usize, class: usize) -> Result<Block> {
        let oom = || Error::Driver {
            backend: "cuda",
            kernel: what.to_string(),
            msg: format!("out of device memory allocating {len} bytes (with the aprons around its block)"),
        };
        let place = placement(class).ok_or_else(oom)?;
        // SAFETY: the memory is uninitialised; every caller fills or overwrites a buffer before
        // reading it, and the aprons are only ever read by kernels that discard what they read.
        let memory = unsafe { self.stream.alloc::<u8>(place.bytes) }.map_err(|e| {
            if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                oom()
            } else {
                Error::Driver {
                    backend: "cuda",
                    kernel: what.to_string(),
                    msg: format!("allocating {len} bytes: {}", driver_error(e)),
                }
            }
        })?;
        let base = memory.device_ptr(&self.stream).0;
        let mut blocks = Block::carve(memory, base, class, place);
        let block = blocks.pop().ok_or_else(|| Error::invalid(what, "an allocation without blocks"))?;
        self.pool.give_all(blocks);
        Ok(block)
    }

    /// Copies `bytes` from the host to the start of `buf`.
    pub(super) fn write(&self, what: &str, step: &str, buf: &mut CudaBuffer, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if bytes.len() > buf.len {
            return Err(Error::invalid(what, format!("{} bytes do not fit a buffer of {}", bytes.len(), buf.len)));
        }
        self.ctx.bind_to_thread().map_err(|e| self.fail(what, step, e))?;
        // SAFETY: `buf` holds at least `bytes.len()` bytes of this context's memory; a copy from
        // pageable host memory has read `bytes` when the call returns.
        unsafe { drv::memcpy_htod_async(buf.address(), bytes, self.stream.cu_stream()) }
            .map_err(|e| self.fail(what, step, e))
    }

    /// A fresh row-contiguous device array holding `bytes`.
    pub(super) fn upload_bytes(&self, what: &str, dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Array> {
        let mut buf = self.alloc(what, bytes.len())?;
        self.write(what, "upload", &mut buf, bytes)?;
        Ok(Array::from_device_buffer(Box::new(buf), dtype, shape))
    }

    /// Fills `buf` with `count` copies of the element `one`.
    pub(super) fn fill(&self, what: &str, buf: &mut CudaBuffer, one: &[u8], count: usize) -> Result<()> {
        let n = one.len() * count;
        if n == 0 {
            return Ok(());
        }
        if one.iter().all(|&b| b == one[0]) {
            self.ctx.bind_to_thread().map_err(|e| self.fail(what, "fill", e))?;
            // SAFETY: `buf` addresses at least `n` bytes of this context's memory.
            return unsafe { drv::memset_d8_async(buf.address(), one[0], n, self.stream.cu_stream()) }
                .map_err(|e| self.fail(what, "fill", e));
        }
        let mut pattern = Vec::with_capacity(n);
        for _ in 0..count {
            pattern.extend_from_slice(one);
        }
        self.write(what, "fill", buf, &pattern)
    }

    /// A fresh output of `shape`/`dtype`, filled with `init`; without one its contents are
    /// unspecified (as in MLX), which costs no extra pass over memory.
    pub(super) fn output(&self, what: &str, shape: &[usize], dtype: DType, init: Option<f64>) -> Result<Array> {
        let count: usize = shape.iter().product();
        let mut buf = self.alloc(what, count * dtype.size())?;
        if let Some(v) = init {
            self.fill(what, &mut buf, &f64_to_element_bytes(v, dtype), count)?;
        }
        Ok(Array::from_device_buffer(Box::new(buf), dtype, shape))
    }

    /// The buffer of a device array of this backend.
    pub(super) fn buffer_of<'a>(&self, what: &str, array: &'a Array) -> Result<&'a CudaBuffer> {
        array
            .device_buffer()
            .and_then(|b| b.as_any().downcast_ref::<CudaBuffer>())
            .filter(|b| b.ordinal == self.ordinal)
            .ok_or_else(|| {
                Error::invalid(what, format!("array lives on {}, not on cuda:{}", array.device(), self.ordinal))
            })
    }

    /// Device address of element (0, ..., 0) of a device array (kiln's own or lent memory).
    pub(super) fn element_address(&self, what: &str, array: &Array) -> Result<u64> {
        let offset = (array.offset() * array.dtype().size()) as u64;
        let lent = array.device_buffer().and_then(|b| b.as_any().downcast_ref::<LentCudaMemory>());
        if let Some(m) = lent.filter(|m| m.device() == Device::Cuda(self.ordinal)) {
            return Ok(m.address() + offset);
        }
        let buf = self.buffer_of(what, array)?;
        Ok(buf.address() + offset)
    }

    /// Copies a row-contiguous device array (at its offset) to the host.
    pub(super) fn download(&self, what: &str, array: &Array) -> Result<Array> {
        let buf = self.buffer_of(what, array)?;
        let start = array.offset() * array.dtype().size();
        let n = array.nbytes();
        let mut host = HostBuffer::zeroed(n);
        if n > 0 {
            if start + n > buf.len {
                return Err(Error::invalid(
                    what,
                    format!("bytes {start}..{} outside a buffer of {}", start + n, buf.len),
                ));
            }
            self.ctx.bind_to_thread().map_err(|e| self.fail(what, "download", e))?;
            // SAFETY: the source lies within `buf` (checked above); the copy into pageable
            // memory has finished when the call returns, and the stream is synchronised next.
            unsafe { drv::memcpy_dtoh_async(host.bytes_mut(), buf.address() + start as u64, self.stream.cu_stream()) }
                .map_err(|e| self.fail(what, "download", e))?;
        }
        self.stream.synchronize().map_err(|e| self.fail(what, "download", e))?;
        Ok(Array::from_host(host, array.dtype(), array.shape()))
    }

    /// A dense copy of any device view, made on the device.
    pub(super) fn gather(&self, array: &Array) -> Result<Array> {
        let what = "row_contiguous";
        if array.ndim() > 10 {
            return Err(Error::invalid(what, format!("{} dimensions; at most 10 are supported", array.ndim())));
        }
        let out_buf = self.alloc(what, array.nbytes())?;
        let n = array.size() as u64;
        if n > 0 {
            let mut shape = [1i64; 10];
            let mut strides = [0i64; 10];
            for (d, (&s, &st)) in array.shape().iter().zip(array.strides()).enumerate() {
                shape[d] = s as i64;
                strides[d] = st as i64;
            }
            let mut args = GatherArgs {
                src: self.element_address(what, array)?,
                dst: out_buf.address(),
                n,
                elem: array.dtype().size() as u32,
                ndim: array.ndim() as u32,
                shape,
                strides,
            };
            let func = self.helper_function(what, GATHER_SOURCE, "kiln_gather")?;
            let blocks = n.div_ceil(256);
            if blocks > u32::MAX as u64 {
                return Err(Error::invalid(what, format!("{n} elements are too many for one copy")));
            }
            let mut params = [&mut args as *mut GatherArgs as *mut std::ffi::c_void];
            // SAFETY: `func` takes one `GatherArgs` by value, laid out as `#[repr(C)]` above; the
            // source is held by the caller's array and both buffers are freed stream-ordered.
            unsafe {
                drv::launch_kernel(
                    func.cu_function(),
                    (blocks as u32, 1, 1),
                    (256, 1, 1),
                    0,
                    self.stream.cu_stream(),
                    &mut params,
                )
            }
            .map_err(|e| self.fail(what, "launch", e))?;
        }
        Ok(Array::from_device_buffer(Box::new(out_buf), array.dtype(), array.shape()))
    }
}
