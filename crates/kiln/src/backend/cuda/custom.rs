//! Launching `CudaKernel` bodies: MLX's `cuda_kernel` argument marshalling (pointers, then
//! `Shape`/`Strides`/`ndim` by value) and its ceil-div launch geometry.

use std::sync::Arc;

use super::{CudaBackend, LoadedModule};
use crate::array::Array;
use crate::backend::Backend;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::program::MathMode;
use crate::source::cuda as cuda_source;
use crate::source::scan::ShapeInfo;

/// One call of a `CudaKernel`, as the backend needs it.
pub struct CudaKernelCall<'a> {
    pub kernel: &'a str,
    pub entry: String,
    /// The generated kernel text (helpers, header, kernel), without the prelude.
    pub source: String,
    pub inputs: Vec<Array>,
    pub shape_info: Vec<ShapeInfo>,
    pub ensure_row_contiguous: bool,
    pub outputs: Vec<(Vec<usize>, DType)>,
    pub init_value: Option<f64>,
    pub grid: [u32; 3],
    pub threadgroup: [u32; 3],
    pub shared_memory: usize,
    /// The compute capability whose architecture-specific target (`sm_90a`) the kernel needs;
    /// the call fails on any other device.
    pub arch_specific: Option<super::Arch>,
}

impl CudaBackend {
    /// The loaded module of a `CudaKernel` source: looked up by the user's text (a few KB), so
    /// a repeated call neither rebuilds nor rehashes the ~100 KB translation unit.
    fn custom_module(&self, kernel: &str, user_source: &str, specific: bool) -> Result<Arc<LoadedModule>> {
        let hash = super::programs::fx(specific as u64, user_source.as_bytes());
        let poisoned = || Error::invalid(kernel, "CudaKernel module table lock poisoned");
        if let Some(bucket) = self.custom_modules.lock().map_err(|_| poisoned())?.get(&hash) {
            if let Some((_, _, m)) = bucket.iter().find(|(s, a, _)| *a == specific && s == user_source) {
                return Ok(m.clone());
            }
        }
        let source = format!("{}\n{}", prelude(), user_source);
        let module = self.module_for(kernel, &source, MathMode::Safe, specific)?;
        let mut table = self.custom_modules.lock().map_err(|_| poisoned())?;
        table.entry(hash).or_default().push((user_source.to_string(), specific, module.clone()));
        Ok(module)
    }

    /// Compiles (cached) and runs a `CudaKernel` call.
    pub fn run_cuda_kernel(&self, call: &CudaKernelCall<'_>) -> Result<Vec<Array>> {
        let kernel = call.kernel;
        if call.threadgroup.contains(&0) {
            return Err(Error::invalid(kernel, format!("threadgroup {:?} has a zero dimension", call.threadgroup)));
        }
        if let Some(arch) = call.arch_specific {
            if arch != self.arch {
                return Err(Error::invalid(
                    kernel,
                    format!(
                        "compiled for the sm_{}{}a target, which needs compute capability {}.{}; device {} has {}.{}",
                        arch.0, arch.1, arch.0, arch.1, self.ordinal, self.arch.0, self.arch.1
                    ),
                ));
            }
        }
        let module = self.custom_module(kernel, &call.source, call.arch_specific.is_some())?;
        let func = self.entry(kernel, &module, &call.entry, call.shared_memory)?;
        let mut params: Vec<Vec<u8>> = Vec::new();
        let mut keep = Vec::new();
        for (a, info) in call.inputs.iter().zip(&call.shape_info) {
            let mut a = if a.device() == Device::Cuda(self.ordinal) { a.clone() } else { self.upload(a)? };
            if call.ensure_row_contiguous && !a.is_row_contiguous() {
                a = self.row_contiguous(&a)?;
            }
            params.push(self.element_address(kernel, &a)?.to_le_bytes().to_vec());
            if a.ndim() > 0 {
                if info.shape {
                    let mut v = vec![0u8; 40];
                    for (i, &n) in a.shape().iter().take(10).enumerate() {
                        v[4 * i..4 * i + 4].copy_from_slice(&(n as i32).to_le_bytes());
                    }
                    params.push(v);
                }
                if info.strides {
                    let mut v = vec![0u8; 80];
                    for (i, &s) in a.strides().iter().take(10).enumerate() {
                        v[8 * i..8 * i + 8].copy_from_slice(&(s as i64).to_le_bytes());
                    }
                    params.push(v);
                }
                if info.ndim {
                    params.push((a.ndim() as i32).to_le_bytes().to_vec());
                }
            }
            keep.push(a);
        }
        let mut outputs = Vec::new();
        for (shape, dtype) in &call.outputs {
            let out = self.output(kernel, shape, *dtype, call.init_value)?;
            params.push(self.element_address(kernel, &out)?.to_le_bytes().to_vec());
            outputs.push(out);
        }
        // MLX's geometry: blocks of min(tg, grid), ceil(grid / tg) of them with the unclamped tg.
        let block = [0, 1, 2].map(|d| call.threadgroup[d].min(call.grid[d].max(1)));
        let blocks = [0, 1, 2].map(|d| call.grid[d].div_ceil(call.threadgroup[d]));
        if !blocks.contains(&0) {
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
            // SAFETY: one pointer per kernel parameter, in declaration order, each to storage of
            // the parameter's size (copied by the driver at the call); buffers are freed
            // stream-ordered, after the kernel.
            unsafe { self.queue_launch(&func, blocks, block, call.shared_memory as u32, &mut ptrs) }
                .map_err(|e| self.fail(kernel, "launch", e))?;
        }
        drop(keep);
        Ok(outputs)
    }
}

/// The CUDA prelude text, built once.
fn prelude() -> &'static str {
    static PRELUDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PRELUDE.get_or_init(cuda_source::prelude)
}
