//! NVIDIA GPUs through cudarc: MSL lowered to CUDA C++, compiled by NVRTC, dispatched with exact
//! Metal semantics.

use std::sync::Arc;

use super::{unavailable, Backend, BackendStatus, MetalProgram};
use crate::error::Result;

const REASON: &str = "the CUDA backend cannot execute kernels in this build yet";

pub fn backend(_ordinal: usize) -> Result<Arc<dyn Backend>> {
    Err(unavailable("cuda", REASON))
}

pub fn status() -> BackendStatus {
    BackendStatus { backend: "cuda", devices: Vec::new(), unavailable: Some(REASON.to_string()) }
}

pub fn translate(_program: &MetalProgram) -> Result<String> {
    Err(unavailable("cuda", "MSL to CUDA lowering is not available in this build yet"))
}
