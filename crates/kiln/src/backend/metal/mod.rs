//! Apple Metal. The generated Metal text is what this backend compiles; on machines without an
//! Apple GPU it reports itself unavailable.

use std::sync::Arc;

use super::{unavailable, Backend, BackendStatus};
use crate::error::Result;

const REASON: &str = "the Metal backend needs macOS on Apple silicon; this build has no Metal support";

/// The Metal backend; always fails with an unavailable error in this build.
pub fn backend(_ordinal: usize) -> Result<Arc<dyn Backend>> {
    Err(unavailable("metal", REASON))
}

/// What `kiln devices` reports for Metal: unavailable, with the reason.
pub fn status() -> BackendStatus {
    BackendStatus { backend: "metal", devices: Vec::new(), unavailable: Some(REASON.to_string()) }
}
