//! Kernel objects: `MetalKernel` (the `mx.fast.metal_kernel` contract), `MetalLibrary` (whole
//! `.metal` files) and the launch spec.

mod cuda_kernel;
mod cuda_kernel_source;
mod dim3;
mod entry_contract;
mod function_constants;
mod launch;
mod marshal;
mod metal_kernel;
mod metal_library;
pub mod predefined;
mod signature_memo;

pub use dim3::Dim3;
pub use launch::IntoTemplateArg;

pub use cuda_kernel::{cuda_type, CudaKernel, CUDA_MAX_NDIM};
pub use cuda_kernel_source::{cuda_kernel_launch_limit, CudaKernelPlan, CudaKernelSource};
pub use launch::{KernelInput, LaunchSpec, OutputDTypes, OutputShapes, TemplateArgs, TemplateName};
pub use metal_kernel::{GeneratedSource, MetalKernel};
pub use metal_library::{LibraryArg, LibraryLaunch, MetalLibrary};
pub use predefined::PREDEFINED_MACROS;

/// The math mode and Metal's limits belong to the program layer; a kernel's options and the
/// limits its calls are held to are named here too.
pub use crate::program::{MathMode, MAX_BUFFERS, MAX_NDIM, MAX_THREADGROUP_MEMORY, MAX_THREADS_PER_THREADGROUP};
