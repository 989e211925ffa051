//! Launching CUDA programs (`ProgramKind::Cuda`, what `CudaKernel` builds): the text is compiled
//! after the CUDA prelude as it is, each binding is one kernel parameter (an address, or
//! constant bytes by value, as MLX's `cuda_kernel` passes `Shape`/`Strides`/`ndim`), and the
//! grid is covered by ceil-div blocks of the threadgroup clamped to it, as in MLX.

use std::sync::Arc;

use super::{Arch, CudaBackend, LoadedModule};
use crate::array::Array;
use crate::backend::cuda::emit as cuda_source;
use crate::backend::{Binding, Dispatch, Launch};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::program::{check_threadgroup, MathMode, MetalProgram};

impl CudaBackend {
    /// The loaded module of a CUDA program's text: looked up by that text (without the prelude),
    /// so a call neither rebuilds nor hashes the whole translation unit; a launch that carries
    /// a resolved slot (a `CudaKernel`'s memoised program) finds the module there instead.
    fn custom_module(&self, kernel: &str, user_source: &str, specific: bool) -> Result<Arc<LoadedModule>> {
        let hash = crate::program::fx(specific as u64, user_source.as_bytes());
        let poisoned = || Error::invalid(kernel, "CudaKernel module table lock poisoned");
        if let Some(bucket) = self.custom_modules.lock().map_err(|_| poisoned())?.get(&hash) {
            if let Some((_, _, m)) = bucket.iter().find(|(s, a, _)| *a == specific && s == user_source) {
                return Ok(m.clone());
            }
        }
        let source = with_prelude(user_source);
        let module = self.module_for(kernel, &source, MathMode::Safe, specific)?;
        let mut table = self.custom_modules.lock().map_err(|_| poisoned())?;
        table.entry(hash).or_default().push((user_source.to_string(), specific, module.clone()));
        Ok(module)
    }

    /// Compiles (cached) and loads a CUDA program without running it.
    pub(super) fn prepare_cuda_program(&self, program: &MetalProgram, arch_specific: Option<Arch>) -> Result<()> {
        let kernel = program.kernel.as_str();
        self.check_arch(kernel, arch_specific)?;
        let module = self.custom_module(kernel, &program.source, arch_specific.is_some())?;
        self.entry(kernel, &module, &program.function, 0).map(|_| ())
    }

    /// A program compiled for an architecture-specific target runs only on that architecture.
    fn check_arch(&self, kernel: &str, arch_specific: Option<Arch>) -> Result<()> {
        match arch_specific {
            Some(arch) if arch != self.arch => Err(Error::invalid(
                kernel,
                format!(
                    "compiled for the sm_{}{}a target, which needs compute capability {}.{}; device {} has {}.{}",
                    arch.0, arch.1, arch.0, arch.1, self.ordinal, self.arch.0, self.arch.1
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Compiles (cached) and queues one launch of a CUDA program; returns without waiting.
    pub(super) fn run_cuda_program(&self, launch: &Launch<'_>, arch_specific: Option<Arch>) -> Result<Vec<Array>> {
        let program = launch.program;
        let kernel = program.kernel.as_str();
        let block = launch.effective_threadgroup();
        check_threadgroup(kernel, block)?;
        self.check_arch(kernel, arch_specific)?;
        let shared_memory: usize = launch.threadgroup_memory.iter().sum();
        let device = Device::Cuda(self.ordinal);
        let fresh;
        let module = match launch.memo.and_then(|memo| memo.resolved().get::<LoadedModule>(device)) {
            Some(module) => module,
            None => {
                fresh = self.custom_module(kernel, &program.source, arch_specific.is_some())?;
                if let Some(memo) = launch.memo {
                    memo.resolved().set(device, fresh.clone());
                }
                &*fresh
            }
        };
        let func = self.entry(kernel, module, &program.function, shared_memory)?;
        let stream = self.launch_stream(launch)?;
        let mut params: Vec<Vec<u8>> = Vec::with_capacity(launch.bindings.len());
        let mut outputs = Vec::new();
        // Uploaded inputs are freed stream-ordered after the launch, so they outlive the kernel.
        let mut keep: Vec<Array> = Vec::new();
        // Whether memory of the backend's own stream is bound (fresh outputs, temporaries).
        let mut own_memory = false;
        for (slot, binding) in launch.bindings.iter().enumerate() {
            let address = match binding {
                Binding::Bytes(bytes) => {
                    params.push(bytes.to_vec());
                    continue;
                }
                memory => self.bind_memory(kernel, slot, memory, &mut outputs, &mut keep, &mut own_memory)?,
            };
            params.push(address.to_le_bytes().to_vec());
        }
        // MLX's geometry: ceil(grid / threadgroup) blocks of the threadgroup clamped to the grid.
        let blocks = match launch.dispatch {
            Dispatch::Threads(grid) => [0, 1, 2].map(|d| grid[d].div_ceil(block[d])),
            Dispatch::Threadgroups(groups) => groups,
        };
        if blocks.contains(&0) {
            return Ok(outputs);
        }
        own_memory |= !keep.is_empty();
        let foreign = stream != self.stream.cu_stream();
        if foreign && own_memory {
            // The caller's stream waits for the backend's allocations and copies.
            self.order_after(kernel, stream, self.stream.cu_stream())?;
        }
        // Word-aligned copies so the driver reads each argument from aligned storage.
        let mut words: Vec<Vec<u64>> = params
            .iter()
            .map(|p| {
                let mut w = vec![0u64; p.len().div_ceil(8)];
                bytemuck::cast_slice_mut::<u64, u8>(&mut w)[..p.len()].copy_from_slice(p);
                w
            })
            .collect();
        let mut ptrs: Vec<*mut std::ffi::c_void> = words.iter_mut().map(|w| w.as_mut_ptr() as *mut _).collect();
        // SAFETY: one pointer per kernel parameter, in declaration order, each to storage of the
        // parameter's size (copied by the driver at the call); buffers are freed stream-ordered,
        // after the kernel (on a caller's stream, the backend's stream waits for it first);
        // `stream` is the backend's or a caller's stream of this device.
        unsafe { self.queue_launch_on(stream, &func, blocks, block, shared_memory as u32, &mut ptrs) }
            .map_err(|e| self.fail(kernel, "launch", e))?;
        if foreign && own_memory {
            // Frees and later work on the backend's stream wait for the kernel.
            self.order_after(kernel, self.stream.cu_stream(), stream)?;
        }
        drop(keep);
        Ok(outputs)
    }
}

/// The text NVRTC compiles for a CUDA program's `source`: the CUDA prelude (built once), then
/// the program.
pub(super) fn with_prelude(source: &str) -> String {
    static PRELUDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    format!("{}\n{}", PRELUDE.get_or_init(cuda_source::prelude), source)
}
