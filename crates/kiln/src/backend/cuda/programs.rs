//! What the CUDA backend keeps for a program it compiled and loaded (in its
//! [`ProgramTable`](crate::backend::program_table::ProgramTable)).

use std::sync::Arc;

use cudarc::driver::CudaFunction;

use super::LoadedModule;

/// A program ready to launch: its module, entry symbol and function.
pub(super) struct Resolved {
    pub module: Arc<LoadedModule>,
    pub symbol: String,
    pub func: CudaFunction,
    pub max_threads: u64,
    /// Bytes of the entry's inline data area (constant bindings beyond it go to device memory).
    pub inline_bytes: usize,
    /// Bytes of the entry's static shared memory (its `threadgroup` declarations).
    pub static_smem: usize,
}

impl Resolved {
    pub fn new(
        module: Arc<LoadedModule>,
        symbol: String,
        func: CudaFunction,
        max_threads: u64,
        inline_bytes: usize,
        static_smem: usize,
    ) -> Self {
        Resolved { module, symbol, func, max_threads, inline_bytes, static_smem }
    }
}
