//! kiln runs MLX-style Metal kernels anywhere: on NVIDIA GPUs (translated to CUDA, compiled with
//! NVRTC), on any CPU (an exact emulator) and on Apple Metal.
//!
//! ```no_run
//! use kiln::{Array, DType, LaunchSpec, MetalKernel};
//!
//! let kernel = MetalKernel::new("myexp", &["inp"], &["out"], r#"
//!     uint elem = thread_position_in_grid.x;
//!     T tmp = inp[elem];
//!     out[elem] = metal::exp(tmp);
//! "#)?;
//! let a = Array::from_f64(DType::F16, &[4, 16], &vec![0.5; 64])?;
//! let spec = LaunchSpec::new([64, 1, 1], [256, 1, 1])
//!     .output(&[4, 16], DType::F16)
//!     .template("T", DType::F32);
//! let out = kernel.call(&[(&a).into()], &spec)?;
//! # Ok::<(), kiln::Error>(())
//! ```

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod array;
pub mod backend;
pub mod bench;
pub mod check;
pub mod config;
pub mod device;
pub mod dtype;
pub mod error;
pub mod gallery;
pub mod kernel;
pub mod ops;
pub mod sanitize;
pub mod source;
pub mod spec;

pub use array::{Array, SliceArg};
pub use device::Device;
pub use dtype::DType;
pub use error::{Error, Result};
pub use kernel::{CudaKernel, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel, MetalLibrary};
pub use source::mangle::{TemplateArg, TemplateName};
