//! kiln runs MLX-style Metal kernels anywhere: on NVIDIA GPUs (translated to CUDA, compiled with
//! NVRTC), on any CPU (an exact emulator) and on Apple Metal.
//!
//! A kernel is written as for `mx.fast.metal_kernel` ([`MetalKernel`]: a body, input and output
//! names) or as a whole `.metal` file ([`MetalLibrary`]); [`Array`]s hold the data on a
//! [`Device`]; a [`LaunchSpec`] says what one call makes and how many threads run it. The MLX
//! docs' `myexp`, on the best device here (an NVIDIA GPU, else the CPU):
//!
//! ```
//! use kiln::{Array, DType, LaunchSpec, MetalKernel};
//!
//! fn main() -> kiln::Result<()> {
//!     let kernel = MetalKernel::new("myexp", &["inp"], &["out"], r#"
//!         uint elem = thread_position_in_grid.x;
//!         T tmp = inp[elem];
//!         out[elem] = metal::exp(tmp);
//!     "#)?;
//!     let host: Vec<f32> = (0..64).map(|i| i as f32 / 32.0).collect();
//!     let a = Array::from_slice(&[4, 16], &host)?.to_device(kiln::best_device())?;
//!     let spec = LaunchSpec::new(a.size(), 256usize)   // threads, not threadgroups
//!         .output(a.shape(), DType::F32)
//!         .template("T", DType::F32);
//!     let out = kernel.call(&[(&a).into()], &spec)?;  // runs where `a` lives
//!     let values = out[0].to_host()?.to_vec::<f32>()?;
//!     assert!(values.iter().zip(&host).all(|(y, x)| (y - x.exp()).abs() <= 1e-5 * x.exp()));
//!     Ok(())
//! }
//! ```
//!
//! The kernel library is [`ops`]; `examples/` in the crate holds whole programs (a strided view,
//! atomics, a `.metal` file, an op chain on the GPU).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod array;
pub mod backend;
pub mod check;
pub mod config;
pub mod device;
pub mod dtype;
pub mod error;
pub mod finding;
pub mod kernel;
pub mod kernel_log;
pub mod ops;
pub mod program;
pub mod sanitize;
pub mod source;

pub use array::{Array, SliceArg};
pub use backend::best_device;
pub use device::Device;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use kernel::{
    CudaKernel, CudaKernelPlan, CudaKernelSource, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel,
    MetalLibrary,
};
pub use program::MathMode;
pub use source::mangle::{TemplateArg, TemplateName};

/// The `half` crate, whose `f16` and `bf16` are kiln's float16 and bfloat16 elements.
pub use half;
pub use half::{bf16, f16};
pub use kernel::{Dim3, IntoTemplateArg};

/// The README's Rust examples, compiled and run as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The Rust guide's examples (docs/rust.md), run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RustGuideDoctests;

/// The sanitizer page's Rust example (docs/check.md), run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/check.md")]
pub struct CheckDoctests;

/// The kernel-logging page's Rust example (docs/logging.md), run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/logging.md")]
pub struct LoggingDoctests;
