//! Device-side timing for benchmarks: CUDA events around work queued on the backend's stream,
//! an L2 flush before each timed run (the L2's persisting lines reset to normal, then a fill
//! kernel writing a buffer larger than the L2, as PyTorch's benchmark helpers do, so both sides
//! start from the same state), and the device-to-device copy that gives the memory roofline.
//!
//! Why the reset: lines read with an evict-last policy (the row kernels' loads, Triton's too)
//! stay in the L2 through a write of four times its size, so without it a run would start with
//! part of the L2 held by the previous run's lines. Measured on the H100 (16384 × 1024 bf16
//! rows): a 32 MiB copy timed after such a kernel took 0.0246 ms without the reset and
//! 0.0273 ms with it; the row kernels themselves, kiln's and torch.compile's alike, 0.3–4 %
//! less with it.

use cudarc::driver::{result as drv, sys, CudaEvent, CudaFunction};

use super::memory::CudaBuffer;
use super::CudaBackend;
use crate::error::Result;

/// Times queued device work with events. Holds the flush buffer and its fill kernel.
pub struct DeviceTimer<'a> {
    backend: &'a CudaBackend,
    flush: Option<(CudaBuffer, CudaFunction)>,
}

/// Writes `words` 16-byte words of `p`: the L2 flush.
const FLUSH_SOURCE: &str = r#"
extern "C" __global__ void kiln_l2_flush(uint4* p, unsigned long long words, unsigned value) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
    p[i] = make_uint4(value, value, value, value);
  }
}
"#;
/// Threads per block and blocks of the flush kernel.
const FLUSH_BLOCK: u32 = 256;
const FLUSH_BLOCKS: u32 = 4096;

impl CudaBackend {
    /// Waits for every queued launch and copy; reports a fault of any of them.
    pub fn synchronize_all(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| self.fail("synchronize", "synchronize", e))
    }

    /// The device's name as the driver reports it.
    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// Bytes of L2 cache.
    pub fn l2_bytes(&self) -> usize {
        self.ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).unwrap_or(0).max(0) as usize
    }

    /// Mean host microseconds of one bare launch of an empty 1-block kernel, over `calls`
    /// launches: the driver's floor under a kernel call. `param_bytes` is 0, 368 (a body
    /// kernel's `KilnArgs`) or 1376 (the largest, a full-file kernel's); `through_graph` queues
    /// through kiln's launch path, which gives such a short launch a one-node graph, instead of
    /// calling `cuLaunchKernel` directly.
    pub fn bare_launch_us(&self, calls: usize, param_bytes: usize, through_graph: bool) -> Result<f64> {
        const SOURCE: &str = r#"
template <int N> struct KilnNopArgs { unsigned long long w[N]; };
template <int N> __device__ void nop(const KilnNopArgs<N>& a) { if (a.w[0] == 1ull) *(int*)a.w[1] = 1; }
extern "C" __global__ void kiln_nop() {}
extern "C" __global__ void kiln_nop_args_368(const __grid_constant__ KilnNopArgs<46> a) { nop(a); }
extern "C" __global__ void kiln_nop_args_1376(const __grid_constant__ KilnNopArgs<172> a) { nop(a); }
"#;
        let entry = match param_bytes {
            0 => "kiln_nop",
            368 => "kiln_nop_args_368",
            1376 => "kiln_nop_args_1376",
            other => {
                return Err(crate::error::Error::invalid(
                    "bare launch",
                    format!("parameter blocks of 0, 368 or 1376 bytes are measured, not {other}"),
                ))
            }
        };
        let func = self.helper_function("bare launch", SOURCE, entry)?;
        self.ctx.bind_to_thread().map_err(|e| self.fail("bare launch", "binding the context", e))?;
        let mut words = [0u64; 172];
        let base = words.as_mut_ptr();
        let mut params: Vec<*mut std::ffi::c_void> =
            if param_bytes > 0 { vec![base as *mut std::ffi::c_void] } else { Vec::new() };
        let mut launch = || {
            if through_graph {
                // SAFETY: the entry takes no parameter, or one struct of `param_bytes` bytes,
                // which `words` covers; the driver copies it at the call.
                return unsafe { self.queue_launch(&func, [1; 3], [1; 3], 0, &mut params) }
                    .map_err(|e| self.fail("bare launch", "launch", e));
            }
            // SAFETY: as above.
            unsafe {
                drv::launch_kernel(func.cu_function(), (1, 1, 1), (1, 1, 1), 0, self.stream.cu_stream(), &mut params)
            }
            .map_err(|e| self.fail("bare launch", "launch", e))
        };
        for _ in 0..100 {
            launch()?;
        }
        self.synchronize_all()?;
        let t = std::time::Instant::now();
        for i in 0..calls {
            // Each launch passes other arguments, as kernel calls do (the kernel ignores them).
            // SAFETY: `base` points at `words`, alive and not otherwise borrowed here.
            unsafe { base.add(2).write(i as u64) };
            launch()?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / calls.max(1) as f64;
        self.synchronize_all()?;
        Ok(us)
    }

    /// Mean host microseconds of one stream-ordered allocation of `bytes` and its free, over
    /// `calls` pairs after a warm-up (the pool keeps its memory, so this is the steady cost of a
    /// block the cache does not hold). With `bytes` and `bytes + 2 * APRON_BYTES` it shows what
    /// the aprons add to a fresh block.
    pub fn driver_alloc_us(&self, bytes: usize, calls: usize) -> Result<f64> {
        self.ctx.bind_to_thread().map_err(|e| self.fail("allocation", "binding the context", e))?;
        let stream = self.stream.cu_stream();
        let pair = || -> Result<()> {
            // SAFETY: the memory is never accessed and is freed at once, stream-ordered.
            let ptr =
                unsafe { drv::malloc_async(stream, bytes) }.map_err(|e| self.fail("allocation", "allocate", e))?;
            // SAFETY: `ptr` came from `malloc_async` on this stream and is freed once.
            unsafe { drv::free_async(ptr, stream) }.map_err(|e| self.fail("allocation", "free", e))
        };
        for _ in 0..10 {
            pair()?;
        }
        self.synchronize_all()?;
        let t = std::time::Instant::now();
        for _ in 0..calls {
            pair()?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / calls.max(1) as f64;
        self.synchronize_all()?;
        Ok(us)
    }

    /// Waits for the queued work, then turns the L2's persisting (evict-last) lines into normal
    /// ones, which a flush can evict. The reset is not ordered on a stream, hence the wait.
    /// Devices without persisting lines report the call unsupported: nothing to reset.
    fn reset_persisting_lines(&self) -> Result<()> {
        self.synchronize_all()?;
        self.ctx.bind_to_thread().map_err(|e| self.fail("timer", "binding the context", e))?;
        // SAFETY: the context is current on this thread and no work is queued on it.
        match unsafe { sys::cuCtxResetPersistingL2Cache() } {
            sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_SUPPORTED => Ok(()),
            err => Err(self.fail("timer", "resetting the L2's persisting lines", drv::DriverError(err))),
        }
    }

    /// A timer whose runs start from a cold L2 when `flush` is set.
    pub fn timer(&self, flush: bool) -> Result<DeviceTimer<'_>> {
        let flush = if flush {
            // Four times the L2 (at least 256 MiB) evicts every line the previous run left.
            let bytes = (4 * self.l2_bytes()).max(256 << 20).next_multiple_of(16);
            let func = self.helper_function("l2 flush", FLUSH_SOURCE, "kiln_l2_flush")?;
            Some((self.alloc("l2 flush", bytes)?, func))
        } else {
            None
        };
        Ok(DeviceTimer { backend: self, flush })
    }
}

impl DeviceTimer<'_> {
    fn event(&self) -> Result<CudaEvent> {
        let b = self.backend;
        b.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| b.fail("timer", "creating an event", e))
    }

    /// Runs `body` `reps` times, each between two events (after an L2 flush when the timer has
    /// one), and returns each run's device time in milliseconds. `body` must only queue work on
    /// this backend (kernel calls do); the host time it spends is hidden behind the flush.
    pub fn time(&mut self, reps: usize, body: &mut dyn FnMut() -> Result<()>) -> Result<Vec<f64>> {
        let b = self.backend;
        let mut marks = Vec::with_capacity(reps);
        for _ in 0..reps {
            marks.push((self.event()?, self.event()?));
        }
        for (start, end) in &marks {
            if let Some((buf, func)) = self.flush.as_mut() {
                b.reset_persisting_lines()?;
                let mut ptr = buf.address();
                let mut words = (buf.len / 16) as u64;
                let mut value = 0x5a5a_5a5au32;
                let mut params = [
                    &mut ptr as *mut u64 as *mut std::ffi::c_void,
                    &mut words as *mut u64 as *mut std::ffi::c_void,
                    &mut value as *mut u32 as *mut std::ffi::c_void,
                ];
                // SAFETY: the entry takes (uint4*, u64, u32), which `params` points at; `ptr`
                // addresses `len` bytes owned by the timer, 16-byte aligned, `words` of them.
                unsafe {
                    drv::launch_kernel(
                        func.cu_function(),
                        (FLUSH_BLOCKS, 1, 1),
                        (FLUSH_BLOCK, 1, 1),
                        0,
                        b.stream.cu_stream(),
                        &mut params,
                    )
                }
                .map_err(|e| b.fail("timer", "l2 flush", e))?;
            }
            start.record(&b.stream).map_err(|e| b.fail("timer", "recording an event", e))?;
            body()?;
            end.record(&b.stream).map_err(|e| b.fail("timer", "recording an event", e))?;
        }
        b.synchronize_all()?;
        marks
            .iter()
            .map(|(s, e)| s.elapsed_ms(e).map(f64::from).map_err(|err| b.fail("timer", "reading an event", err)))
            .collect()
    }

    /// Device-to-device copies of `bytes` between two fresh buffers, timed like [`Self::time`].
    pub fn copy(&mut self, bytes: usize, reps: usize) -> Result<Vec<f64>> {
        let b = self.backend;
        let src = b.alloc("copy roofline", bytes)?;
        let dst = b.alloc("copy roofline", bytes)?;
        let (s, d) = (src.address(), dst.address());
        // SAFETY: `s` addresses `bytes` bytes owned here; non-zero contents for the copy.
        unsafe { drv::memset_d8_async(s, 0x3c, bytes, b.stream.cu_stream()) }
            .map_err(|e| b.fail("copy roofline", "fill", e))?;
        let stream = b.stream.cu_stream();
        let times = self.time(reps, &mut || {
            // SAFETY: both buffers hold `bytes` bytes and live until after the synchronisation
            // at the end of `time`.
            unsafe { drv::memcpy_dtod_async(d, s, bytes, stream) }.map_err(|e| b.fail("copy roofline", "copy", e))
        })?;
        drop((src, dst));
        Ok(times)
    }
}
