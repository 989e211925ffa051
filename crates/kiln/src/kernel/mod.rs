//! Kernel objects: `MetalKernel` (the `mx.fast.metal_kernel` contract), `MetalLibrary` (whole
//! `.metal` files) and the launch spec.

mod const_eval;
mod cuda_kernel;
mod dim3;
mod entry_contract;
mod function_constants;
mod launch;
mod metal_kernel;
mod metal_library;
mod msl_outline;
pub mod predefined;

pub use dim3::Dim3;
pub use launch::IntoTemplateArg;

pub use cuda_kernel::{cuda_type, CudaKernel, CUDA_MAX_NDIM};
pub use entry_contract::MAX_THREADGROUP_MEMORY;
pub use launch::{KernelInput, LaunchSpec, MathMode, OutputDTypes, OutputShapes, TemplateArgs, TemplateName};
pub use metal_kernel::{GeneratedSource, MetalKernel, MAX_BUFFERS, MAX_NDIM, MAX_THREADS_PER_THREADGROUP};
pub use metal_library::{LibraryArg, LibraryLaunch, MetalLibrary};
pub use predefined::PREDEFINED_MACROS;
