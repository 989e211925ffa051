//! The CPU emulator: MSL lowered to host C++, compiled by the host compiler, run with exact
//! Metal semantics.

use std::sync::Arc;

use super::{unavailable, Backend, BackendStatus, MetalProgram};
use crate::error::Result;

const REASON: &str = "the CPU emulator cannot execute kernels in this build yet";

pub fn backend() -> Result<Arc<dyn Backend>> {
    Err(unavailable("cpu", REASON))
}

pub fn status() -> BackendStatus {
    BackendStatus { backend: "cpu", devices: Vec::new(), unavailable: Some(REASON.to_string()) }
}

pub fn translate(_program: &MetalProgram) -> Result<String> {
    Err(unavailable("cpu", "MSL to host C++ lowering is not available in this build yet"))
}
