//! The kernel library: the ops every model needs, each a kiln Metal kernel (so the same source
//! runs on the CPU emulator, CUDA and Metal), validated against a plain-Rust reference.
//!
//! The ops are functions here (`kiln::ops::rms_norm(&x, &w, 1e-5)`). The op's work for given
//! inputs has one shape, an [`OpPlan`]: the kernel calls its rule picked, with the variant's
//! name; `*_call` forms return the one validated [`OpCall`] of a single-kernel op, and `*_plan`
//! forms the plan of an op of several launches (attention, cholesky, qr, grid_sample_vjp,
//! scatter_add), without running them. One file
//! per op: its header states the maths, the layouts and dtypes, the reference it is checked
//! against and its tolerance. Each op validates its inputs with a typed error, picks its kernel
//! variant by a deterministic rule on shape, dtype and device, and has a `reference` function
//! (the test oracle) in its module. [`registry`] lists every op with its plan and its reference
//! over host values, for the bindings and tools that run any op by name.

// The op modules stay reachable for tests and tools (variant rules, references, constants);
// the API is the flat functions below.
#[doc(hidden)]
pub mod attention;
#[doc(hidden)]
pub mod cholesky;
#[doc(hidden)]
pub mod elementwise;
#[doc(hidden)]
pub mod gdn_kkt;
#[doc(hidden)]
pub mod grid_sample;
mod host_input;
mod kernel_cache;
#[doc(hidden)]
pub mod overlap_add;
mod plan;
#[doc(hidden)]
pub mod qr;
mod registry;
#[doc(hidden)]
pub mod residual_rms_norm;
#[doc(hidden)]
pub mod rms_norm;
#[doc(hidden)]
pub mod rope;
mod rows;
#[doc(hidden)]
pub mod scatter_add;
#[doc(hidden)]
pub mod softmax;
#[doc(hidden)]
pub mod util;

pub use attention::{
    scaled_dot_product_attention, scaled_dot_product_attention_plan, scaled_dot_product_attention_with, Mask,
};
pub use cholesky::{cholesky, cholesky_plan, cholesky_with};
pub use elementwise::{exp, gelu, gelu_erf, silu, unary, unary_call, unary_call_planned_for, Unary};
pub use gdn_kkt::{gdn_chunk_scaled_dot_kkt, gdn_chunk_scaled_dot_kkt_call, gdn_chunk_scaled_dot_kkt_with};
pub use grid_sample::{grid_sample, grid_sample_call, grid_sample_vjp, grid_sample_vjp_plan, grid_sample_with};
pub use host_input::HostInput;
pub use kernel_cache::KernelCache;
pub use overlap_add::{overlap_add, overlap_add_call};
pub use plan::{OpCall, OpFinish, OpKernel, OpOutput, OpPlan};
pub use qr::{qr, qr_plan, qr_with};
pub use registry::{registry, OpEntry};
pub use residual_rms_norm::{residual_rms_norm, residual_rms_norm_call, residual_rms_norm_call_planned_for};
pub use rms_norm::{rms_norm, rms_norm_call, rms_norm_call_planned_for};
pub use rope::{rope, rope_call};
pub use scatter_add::{scatter_add, scatter_add_call, scatter_add_plan};
pub use softmax::{softmax, softmax_call, softmax_call_planned_for};
pub use util::FLOAT_DTYPES;
