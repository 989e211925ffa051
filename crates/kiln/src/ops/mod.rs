//! The kernel library: the ops every model needs, each a kiln Metal kernel (so the same source
//! runs on the CPU emulator, CUDA and Metal), validated against a plain-Rust reference.
//!
//! One file per op: its header states the maths, the layouts and dtypes, the reference it is
//! checked against and its tolerance. Each op validates its inputs with a typed error, picks its
//! kernel variant by a deterministic rule on shape, dtype and device, and has a `reference`
//! function (the test oracle).

pub mod attention;
pub mod cholesky;
pub mod elementwise;
pub mod gdn_kkt;
pub mod grid_sample;
pub mod overlap_add;
pub mod qr;
pub mod residual_rms_norm;
pub mod rms_norm;
pub mod rope;
pub mod scatter_add;
pub mod softmax;
pub mod util;
