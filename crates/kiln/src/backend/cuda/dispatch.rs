//! Exact Metal dispatch on CUDA. A `dispatchThreads` grid that is not a multiple of the
//! threadgroup is split per dimension into the full region and the partial edge region, and each
//! region (up to 8 in 3-D) is launched with its real block size: exactly `grid` threads exist,
//! every thread reaches every barrier, and `threads_per_threadgroup` of an edge group is its
//! real size. Region counts beyond CUDA's grid limits are chunked by moving the region origin.
//! Each region is queued by `queue_launch` (graphs.rs: a one-node graph for a short launch
//! whose shape repeats, else `cuLaunchKernel`).

use cudarc::driver::{sys, DriverError};
use smallvec::{smallvec, SmallVec};

use super::external::is_lent;
use super::memory::CudaBuffer;
use super::programs::Resolved;
use super::CudaBackend;
use crate::array::Array;
use crate::backend::cuda::emit::{args_layout as L, MAX_THREADGROUP_BUFFERS};
use crate::backend::{Binding, Dispatch, Launch};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::program::{check_threadgroup, MAX_BUFFERS, MAX_THREADGROUP_MEMORY};

/// One CUDA launch: the first group's position, the group count and the block size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub origin: [u32; 3],
    pub groups: [u32; 3],
    pub block: [u32; 3],
}

/// CUDA's limits on grid dimensions.
const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// The launches of one dispatch (one, except for partial or oversized grids).
pub type Regions = SmallVec<[Region; 1]>;

/// The regions that realise a dispatch of `grid` threads in groups of `tg` (already clamped).
pub fn thread_regions(grid: [u32; 3], tg: [u32; 3]) -> Regions {
    // The common case, a grid of whole groups within CUDA's limits, is one region.
    let groups = [0, 1, 2].map(|d| grid[d] / tg[d].max(1));
    if (0..3).all(|d| grid[d] % tg[d].max(1) == 0 && groups[d] > 0 && groups[d] <= MAX_GRID[d]) {
        return smallvec![Region { origin: [0; 3], groups, block: tg }];
    }
    // Per dimension: (first group, group count, block size) of the full and the partial part.
    let parts: Vec<Vec<(u32, u32, u32)>> = (0..3)
        .map(|d| {
            let (g, t) = (grid[d], tg[d].max(1));
            let mut v = Vec::new();
            if g / t > 0 {
                v.push((0, g / t, t));
            }
            if g % t > 0 {
                v.push((g / t, 1, g % t));
            }
            v
        })
        .collect();
    let mut out = Regions::new();
    for &(ox, nx, bx) in &parts[0] {
        for &(oy, ny, by) in &parts[1] {
            for &(oz, nz, bz) in &parts[2] {
                chunk(Region { origin: [ox, oy, oz], groups: [nx, ny, nz], block: [bx, by, bz] }, &mut out);
            }
        }
    }
    out
}

/// Splits a region whose group counts exceed CUDA's grid limits.
fn chunk(r: Region, out: &mut Regions) {
    let steps = |d: usize| (0..r.groups[d]).step_by(MAX_GRID[d] as usize);
    for sx in steps(0) {
        for sy in steps(1) {
            for sz in steps(2) {
                let start = [sx, sy, sz];
                out.push(Region {
                    origin: [0, 1, 2].map(|d| r.origin[d] + start[d]),
                    groups: [0, 1, 2].map(|d| (r.groups[d] - start[d]).min(MAX_GRID[d])),
                    block: r.block,
                });
            }
        }
    }
}

/// The parameter block shared by every region of one dispatch (`KilnArgs`), on the stack: the
/// driver copies it at each launch. Every field of the layout starts on a 4-byte boundary, so
/// the block is kept as 32-bit words (little-endian, as the device reads them).
#[repr(C, align(16))]
struct ArgsBlock {
    words: [u32; L::SIZE / 4],
}

impl ArgsBlock {
    fn new() -> Self {
        ArgsBlock { words: [0; L::SIZE / 4] }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.words)
    }
    fn put_u32s(&mut self, at: usize, v: &[u32]) {
        self.words[at / 4..at / 4 + v.len()].copy_from_slice(v);
    }
    fn put_u64(&mut self, at: usize, v: u64) {
        self.put_u32s(at, &[v as u32, (v >> 32) as u32]);
    }
    fn as_param(&mut self) -> *mut std::ffi::c_void {
        self.words.as_mut_ptr().cast()
    }
}

impl CudaBackend {
    /// Queues one dispatch of a resolved program on the stream; returns without waiting.
    pub(super) fn run(&self, launch: &Launch<'_>, resolved: &Resolved) -> Result<Vec<Array>> {
        let kernel = launch.program.kernel.as_str();
        if launch.bindings.len() > MAX_BUFFERS {
            return Err(Error::invalid(
                kernel,
                format!("{} buffer slots bound; at most {MAX_BUFFERS}", launch.bindings.len()),
            ));
        }
        if launch.threadgroup_memory.len() > MAX_THREADGROUP_BUFFERS {
            return Err(Error::invalid(
                kernel,
                format!(
                    "{} threadgroup buffers bound; at most {MAX_THREADGROUP_BUFFERS}",
                    launch.threadgroup_memory.len()
                ),
            ));
        }
        let tg = launch.effective_threadgroup();
        check_threadgroup(kernel, tg)?;
        let stream = self.launch_stream(launch)?;
        let (grid, regions) = match launch.dispatch {
            Dispatch::Threads(grid) => (grid, thread_regions(grid, tg)),
            Dispatch::Threadgroups(groups) => {
                let mut regions = Regions::new();
                if !groups.contains(&0) {
                    chunk(Region { origin: [0; 3], groups, block: tg }, &mut regions);
                }
                let grid = [0, 1, 2].map(|d| groups[d].saturating_mul(tg[d]));
                (grid, regions)
            }
        };
        let groups = [0, 1, 2].map(|d| grid[d].div_ceil(tg[d]));

        // Threadgroup memory: each buffer rounded to 16 bytes, packed in slot order.
        let mut tg_offsets = [0u32; MAX_THREADGROUP_BUFFERS];
        let mut dyn_smem = 0usize;
        for (i, &n) in launch.threadgroup_memory.iter().enumerate() {
            tg_offsets[i] = dyn_smem as u32;
            dyn_smem += n.div_ceil(16) * 16;
        }
        // Metal kernels keep Metal's threadgroup memory limit on every backend (the kernel layer
        // checks what it can tell from the source; this is the compiled kernel's own count).
        let total_smem = resolved.static_smem + dyn_smem;
        if total_smem > MAX_THREADGROUP_MEMORY {
            return Err(Error::invalid(
                kernel,
                format!(
                    "kernel {} uses {total_smem} bytes of threadgroup memory ({} static + {dyn_smem} dynamic); Metal \
                     allows at most {MAX_THREADGROUP_MEMORY} bytes (32 KiB) per threadgroup",
                    launch.program.function, resolved.static_smem
                ),
            ));
        }
        let func = self.resolved_function(kernel, resolved, dyn_smem)?;
        let max_threads = resolved.max_threads;
        let requested = launch.threadgroup.iter().map(|&t| t as u64).product::<u64>();
        if requested > max_threads {
            return Err(Error::invalid(
                kernel,
                format!(
                    "thread group size ({requested}) is greater than the maximum allowed threads per threadgroup ({max_threads})"
                ),
            ));
        }

        let mut args = ArgsBlock::new();
        args.put_u32s(L::GRID, &grid);
        args.put_u32s(L::THREADGROUP, &tg);
        args.put_u32s(L::GROUPS, &groups);
        args.put_u32s(L::TG_OFFSETS, &tg_offsets);
        let mut inline_mask = 0u32;
        let mut inline_used = 0usize;
        let mut outputs = Vec::new();
        // Temporaries (uploaded inputs, large constant data) are freed stream-ordered after the
        // launch, so they outlive the kernel without a wait.
        let mut keep: Vec<Array> = Vec::new();
        let mut keep_bufs: Vec<CudaBuffer> = Vec::new();
        // Whether memory of the backend's own stream is bound (fresh outputs, temporaries).
        let mut own_memory = false;
        for (slot, binding) in launch.bindings.iter().enumerate() {
            let address = match binding {
                Binding::Bytes(bytes) => {
                    let padded = bytes.len().div_ceil(16) * 16;
                    if inline_used + padded <= resolved.inline_bytes {
                        args.bytes_mut()[L::INLINE + inline_used..L::INLINE + inline_used + bytes.len()]
                            .copy_from_slice(bytes);
                        inline_mask |= 1 << slot;
                        let offset = inline_used as u64;
                        inline_used += padded.max(16);
                        offset
                    } else {
                        let mut buf = self.alloc(kernel, bytes.len())?;
                        self.write(kernel, "upload", &mut buf, bytes)?;
                        let addr = buf.address();
                        keep_bufs.push(buf);
                        addr
                    }
                }
                memory => self.bind_memory(kernel, slot, memory, &mut outputs, &mut keep, &mut own_memory)?,
            };
            args.put_u64(L::SLOTS + 8 * slot, address);
        }
        args.put_u32s(L::INLINE_MASK, &[inline_mask]);
        own_memory |= !keep.is_empty() || !keep_bufs.is_empty();
        let foreign = stream != self.stream.cu_stream();
        if foreign && own_memory {
            // The caller's stream waits for the backend's allocations and copies.
            self.order_after(kernel, stream, self.stream.cu_stream())?;
        }

        for r in regions {
            args.put_u32s(L::ORIGIN, &r.origin);
            args.put_u32s(L::REGION, &r.block);
            let mut params = [args.as_param()];
            // SAFETY: the entry takes one `KilnArgs` by value whose layout `args_layout`
            // mirrors; the driver copies it at the call. Every address in it stays valid until
            // the kernel ends: buffers are freed stream-ordered, after this launch (on a
            // caller's stream, the backend's stream waits for it first); `stream` is the
            // backend's or a caller's stream of this device (`ExternalStream`'s contract).
            let launched =
                unsafe { self.queue_launch_on(stream, &func, r.groups, r.block, dyn_smem as u32, &mut params) };
            launched.map_err(|e| self.launch_error(kernel, &r, e))?;
        }
        if foreign && own_memory {
            // Frees and later work on the backend's stream wait for the kernel.
            self.order_after(kernel, self.stream.cu_stream(), stream)?;
        }
        drop(keep);
        drop(keep_bufs);
        Ok(outputs)
    }

    /// The stream `launch` queues on (the caller's, else the backend's own), with the context
    /// bound to this thread.
    pub(super) fn launch_stream(&self, launch: &Launch<'_>) -> Result<sys::CUstream> {
        let kernel = launch.program.kernel.as_str();
        let stream = match launch.stream {
            None => self.stream.cu_stream(),
            Some(s) if s.device() == Device::Cuda(self.ordinal) => super::external::cu_stream(&s),
            Some(s) => {
                return Err(Error::invalid(
                    kernel,
                    format!("a stream of {} was given for a launch on cuda:{}", s.device(), self.ordinal),
                ))
            }
        };
        self.ctx.bind_to_thread().map_err(|e| self.fail(kernel, "binding the context", e))?;
        Ok(stream)
    }

    /// The error of a rejected or failed launch of region `r`.
    fn launch_error(&self, kernel: &str, r: &Region, e: DriverError) -> Error {
        match e.0 {
            sys::CUresult::CUDA_ERROR_INVALID_VALUE | sys::CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
                Error::invalid(
                    kernel,
                    format!(
                        "launch of {:?} groups of {:?} threads rejected: {}",
                        r.groups,
                        r.block,
                        super::driver_error(e)
                    ),
                )
            }
            _ => self.fail(kernel, "launch", e),
        }
    }

    /// Copies a host view to this device, keeping only its elements (row-contiguous).
    /// The device address a memory binding (an array, a fresh or given output, an in/out
    /// buffer) passes to a kernel: host arrays are uploaded (kept in `keep` until the launch is
    /// queued), fresh outputs join `outputs`, and `own_memory` records memory of the backend's
    /// own stream. Shared by Metal and CUDA-source launches.
    pub(super) fn bind_memory(
        &self,
        kernel: &str,
        slot: usize,
        binding: &Binding,
        outputs: &mut Vec<Array>,
        keep: &mut Vec<Array>,
        own_memory: &mut bool,
    ) -> Result<u64> {
        Ok(match binding {
            Binding::Bytes(_) => {
                return Err(Error::invalid(kernel, format!("slot {slot} holds constant bytes, not memory")))
            }
            Binding::Array(a) if a.device() == Device::Cuda(self.ordinal) => {
                // kiln's own memory (an earlier call's output, an uploaded table) was written, and
                // is freed, in the order of the backend's stream: a launch on a caller's stream
                // must wait for it and be waited for. Memory lent by the caller is ordered by the
                // caller's stream already.
                *own_memory |= !is_lent(a);
                self.element_address(kernel, a)?
            }
            Binding::Array(a) => {
                let uploaded = self.upload_view(kernel, a)?;
                let addr = self.element_address(kernel, &uploaded)?;
                keep.push(uploaded);
                addr
            }
            Binding::Output(spec) => {
                let out = self.output(kernel, &spec.shape, spec.dtype, spec.init_value)?;
                let addr = self.element_address(kernel, &out)?;
                outputs.push(out);
                *own_memory = true;
                addr
            }
            Binding::InOut(a) => {
                let fresh = if a.device() == Device::Cpu { self.upload_view(kernel, a)? } else { self.gather(a)? };
                let addr = self.element_address(kernel, &fresh)?;
                outputs.push(fresh);
                *own_memory = true;
                addr
            }
            Binding::OutputInto(a) if a.device() == Device::Cuda(self.ordinal) => {
                *own_memory |= !is_lent(a);
                outputs.push(a.clone());
                self.element_address(kernel, a)?
            }
            Binding::OutputInto(a) => {
                return Err(Error::invalid(
                    kernel,
                    format!("output {slot} lives on {}, not on cuda:{}", a.device(), self.ordinal),
                ))
            }
        })
    }

    pub(super) fn upload_view(&self, kernel: &str, a: &Array) -> Result<Array> {
        if a.device() != Device::Cpu {
            return Err(Error::invalid(kernel, format!("input lives on {}, not on cuda:{}", a.device(), self.ordinal)));
        }
        let bytes = a.to_contiguous_bytes()?;
        self.upload_bytes(kernel, a.dtype(), a.shape(), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(regions: &[Region]) -> u64 {
        regions.iter().map(|r| (0..3).map(|d| r.groups[d] as u64 * r.block[d] as u64).product::<u64>()).sum()
    }

    #[test]
    fn partial_grids_split_into_exact_regions() {
        let regions = thread_regions([10, 7, 3], [4, 4, 2]);
        assert_eq!(regions.len(), 8);
        assert_eq!(threads(&regions), 10 * 7 * 3);
        assert!(regions.contains(&Region { origin: [2, 1, 1], groups: [1, 1, 1], block: [2, 3, 1] }));
    }

    #[test]
    fn exact_grids_need_one_region() {
        assert_eq!(
            thread_regions([64, 1, 1], [32, 1, 1]).as_slice(),
            [Region { origin: [0; 3], groups: [2, 1, 1], block: [32, 1, 1] }]
        );
    }

    #[test]
    fn large_group_counts_are_chunked() {
        let regions = thread_regions([1, 70000, 1], [1, 1, 1]);
        assert_eq!(regions.len(), 2);
        assert_eq!(regions[1].origin, [0, 65535, 0]);
        assert_eq!(threads(&regions), 70000);
    }
}
