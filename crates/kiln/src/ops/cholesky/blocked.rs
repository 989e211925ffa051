//! The blocked variant (N > [`super::SIMD_MAX_N`]): right-looking, block width [`NB`], in place
//! in the output, two launches per block column over the whole batch (see `blocked.metal`):
//! 1. `chol_panel`: the diagonal block `L11` factored in threadgroup memory (by every
//!    threadgroup, so no launch waits on it), then the panel `L21 = A21 L11^-T`, one row per
//!    thread in registers. The first threadgroup of a matrix writes `L11` to a scratch and,
//!    when the matrix has no flag yet, the flag `k0 + j + 1` of its first pivot that is not > 0.
//! 2. `chol_update`: the trailing lower triangle `A22 -= L21 L21^T` in 64 x 64 output tiles
//!    (256 threads of 4 x 4, both panel slices staged in threadgroup memory), plus one
//!    threadgroup per matrix that copies `L11` into place.
//!
//! The output holds the lower triangle of A (zeros above) after a first copy launch. Flags
//! keep the first failing column because a later block only writes a flag that is still 0.

use std::sync::OnceLock;

use crate::array::Array;
use crate::backend::{Dispatch, MetalProgram};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LibraryArg, LibraryLaunch, MetalLibrary};
use crate::ops::plan::OpCall;

use super::OP;

/// Block width (columns factored per step).
pub const NB: usize = 64;
/// Threads (and panel rows) per `chol_panel` threadgroup.
const PANEL_ROWS: usize = 128;
/// Output tile edge of `chol_update` (256 threads of 4 x 4).
const TILE: usize = 64;
const UPDATE_THREADS: u32 = 256;

const SOURCE: &str = include_str!("blocked.metal");

fn library() -> &'static MetalLibrary {
    static LIB: OnceLock<MetalLibrary> = OnceLock::new();
    LIB.get_or_init(|| MetalLibrary::new("cholesky_blocked", SOURCE))
}

fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(OP, "batch too large"))
}

fn params(n: usize, k0: usize) -> LibraryArg {
    LibraryArg::Bytes([n as i32, k0 as i32].iter().flat_map(|v| v.to_le_bytes()).collect())
}

/// The launches of one block column starting at `k0`: (function, groups, threads).
fn step_launches(n: usize, k0: usize, batch: u32) -> Result<[LibraryLaunch; 2]> {
    let b = NB.min(n - k0);
    let rest = n - k0 - b;
    let chunks = u32_of(rest.div_ceil(PANEL_ROWS).max(1))?;
    let tiles = rest.div_ceil(TILE);
    let pairs = u32_of(tiles * (tiles + 1) / 2 + 1)?;
    Ok([
        LibraryLaunch::new("chol_panel", Dispatch::Threadgroups([batch, chunks, 1]), [PANEL_ROWS as u32, 1, 1]),
        LibraryLaunch::new("chol_update", Dispatch::Threadgroups([batch, pairs, 1]), [UPDATE_THREADS, 1, 1]),
    ])
}

/// The calls that factor every matrix of `a` (batch, n, n): a copy into the output (whose
/// outputs are L, the flags (one i32 per matrix) and the diagonal block's scratch), then two
/// calls per block column that update them in place.
pub fn calls(a: &Array, n: usize, batch: usize) -> Result<Vec<OpCall>> {
    let device = a.device();
    let total = u32_of(batch * n * n)?;
    let count = u32_of(batch)?;
    let lib = library();
    let a = if a.is_row_contiguous() { a.clone() } else { crate::backend::backend_for(device)?.row_contiguous(a)? };
    let copy = LibraryLaunch::new("chol_copy", Dispatch::Threads([total, 1, 1]), [256, 1, 1]);
    let args = vec![
        LibraryArg::Array(a.clone()),
        LibraryArg::Output { shape: a.shape().to_vec(), dtype: DType::F32, init_value: None },
        LibraryArg::Output { shape: vec![batch], dtype: DType::I32, init_value: None },
        LibraryArg::Output { shape: vec![batch, NB, NB], dtype: DType::F32, init_value: None },
        params(n, 0),
        LibraryArg::Bytes(count.to_le_bytes().to_vec()),
    ];
    let mut calls = vec![OpCall::library(lib, copy, args, device)];
    // The copy's outputs: L, the flags and the scratch, each updated in place by every step.
    let (w, info, d) = ((0, 0), (0, 1), (0, 2));
    for k0 in (0..n).step_by(NB) {
        let [panel, update] = step_launches(n, k0, count)?;
        calls.push(OpCall::library(lib, panel, vec![params(n, k0)], device).reads(&[w, info, d]));
        calls.push(OpCall::library(lib, update, vec![params(n, k0)], device).reads(&[w, d]));
    }
    Ok(calls)
}

/// The programs of every blocked kernel, for compile-only checks.
pub fn programs() -> Vec<MetalProgram> {
    let lib = library();
    let copy = LibraryLaunch::new("chol_copy", Dispatch::Threads([1, 1, 1]), [256, 1, 1]);
    let mut out = vec![lib.program(&copy)];
    if let Ok(steps) = step_launches(130, 64, 1) {
        out.extend(steps.iter().map(|l| lib.program(l)));
    }
    out
}
