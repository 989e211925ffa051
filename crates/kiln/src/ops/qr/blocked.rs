//! The blocked variant (m n > [`super::SHARED_MAX_ELEMS`]): Householder QR with the compact WY
//! representation, in place in a workspace, over the whole batch per launch (see
//! `blocked.metal`). Per panel of [`NB`] columns from k0:
//! 1. `qr_panel_regs{R}` (a threadgroup of 1024 threads per matrix; the panel in registers,
//!    R rows per thread, while m - k0 <= 32 R for R in 4, 8) or `qr_panel` (in device memory,
//!    taller panels): the unblocked steps of the shared variant on the panel's columns
//!    only, then `T` (upper triangular, `H_k0 ... H_k0+b-1 = I - V T Vᵀ`) from
//!    the Gram matrix `VᵀV`;
//! 2. `qr_vty` then `qr_apply`: the trailing columns get `C -= V (Tᵀ (Vᵀ C))` as two tiled FMA
//!    launches.
//!
//! Q is formed from the identity, panels last to first: `Q[k0:, k0:] -= V (T (Vᵀ Q[k0:, k0:]))`
//! (the columns left of k0 are still those of the identity, untouched by later reflectors).
//! R is the upper triangle of the workspace's first n rows.

use std::sync::OnceLock;

use crate::array::Array;
use crate::backend::{Dispatch, MetalProgram};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::{LibraryArg, LibraryLaunch, MetalLibrary};
use crate::ops::plan::{OpCall, OpPlan};

use super::OP;

/// Panel width (columns per reflector block).
pub const NB: usize = 32;
const PANEL_THREADS: u32 = 1024;
const TILE_THREADS: u32 = 256;
const TILE: usize = 64;

const SOURCE: &str = include_str!("blocked.metal");

fn library() -> &'static MetalLibrary {
    static LIB: OnceLock<MetalLibrary> = OnceLock::new();
    LIB.get_or_init(|| MetalLibrary::new("qr_blocked", SOURCE))
}

fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(OP, "batch too large"))
}

/// `[m, n, k0, c0, trans]` as the kernels' `Params`.
fn params(m: usize, n: usize, k0: usize, c0: usize, trans: bool) -> LibraryArg {
    LibraryArg::Bytes(
        [m as i32, n as i32, k0 as i32, c0 as i32, i32::from(trans)].iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

fn flat(function: &str, threads: usize) -> Result<LibraryLaunch> {
    Ok(LibraryLaunch::new(function, Dispatch::Threads([u32_of(threads)?, 1, 1]), [256, 1, 1]))
}

/// `qr_vty` and `qr_apply` over rows [k0, m) and columns [c0, n).
fn update_launches(m: usize, n: usize, k0: usize, c0: usize, batch: u32) -> Result<[LibraryLaunch; 2]> {
    let col_tiles = (n - c0).div_ceil(TILE);
    let row_tiles = (m - k0).div_ceil(TILE);
    Ok([
        LibraryLaunch::new("qr_vty", Dispatch::Threadgroups([batch, u32_of(col_tiles)?, 1]), [TILE_THREADS, 1, 1]),
        LibraryLaunch::new(
            "qr_apply",
            Dispatch::Threadgroups([batch, u32_of(row_tiles * col_tiles)?, 1]),
            [TILE_THREADS, 1, 1],
        ),
    ])
}

/// Rows per thread of the register panel kernels.
const PANEL_REGS: [usize; 2] = [4, 8];

/// The panel kernel for `rows = m - k0`: in registers (`rows` <= 32 R for the smallest listed
/// R), else in device memory.
fn panel_function(rows: usize) -> String {
    match PANEL_REGS.iter().find(|&&r| rows <= 32 * r) {
        Some(r) => format!("qr_panel_regs{r}"),
        None => "qr_panel".to_string(),
    }
}

fn panel_launch(rows: usize, batch: u32) -> LibraryLaunch {
    LibraryLaunch::new(panel_function(rows), Dispatch::Threadgroups([batch, 1, 1]), [PANEL_THREADS, 1, 1])
}

/// The plan giving `(Q, R)` of every matrix of `a` (batch, m, n): an init call (whose outputs
/// are the working matrix, Q, and the T and Y scratch), the panel and update calls on them in
/// place, then R from the working matrix.
pub fn plan(a: &Array, m: usize, n: usize, batch: usize) -> Result<OpPlan> {
    let device = a.device();
    let count = u32_of(batch)?;
    let lib = library();
    let a = if a.is_row_contiguous() { a.clone() } else { crate::backend::backend_for(device)?.row_contiguous(a)? };
    let panels = n.div_ceil(NB);
    let init_args = vec![
        LibraryArg::Array(a.clone()),
        LibraryArg::Output { shape: vec![batch, m, n], dtype: DType::F32, init_value: None },
        LibraryArg::Output { shape: a.shape().to_vec(), dtype: DType::F32, init_value: None },
        LibraryArg::Output { shape: vec![batch, panels * NB, NB], dtype: DType::F32, init_value: None },
        LibraryArg::Output { shape: vec![batch, NB, n], dtype: DType::F32, init_value: None },
        params(m, n, 0, 0, false),
    ];
    let mut calls = vec![OpCall::library(lib, flat("qr_init", batch * m * n)?, init_args, device)];
    // The init call's outputs, each updated in place by the calls after it.
    let (w, q, t, y) = ((0, 0), (0, 1), (0, 2), (0, 3));
    let update = |calls: &mut Vec<OpCall>, x: (usize, usize), k0: usize, c0: usize, trans: bool| -> Result<()> {
        let [vty, apply] = update_launches(m, n, k0, c0, count)?;
        calls.push(OpCall::library(lib, vty, vec![params(m, n, k0, c0, trans)], device).reads(&[w, x, y]));
        calls.push(OpCall::library(lib, apply, vec![params(m, n, k0, c0, trans)], device).reads(&[w, x, t, y]));
        Ok(())
    };
    for k0 in (0..n).step_by(NB) {
        let panel = panel_launch(m - k0, count);
        calls.push(OpCall::library(lib, panel, vec![params(m, n, k0, k0, true)], device).reads(&[w, t]));
        let c0 = k0 + NB.min(n - k0);
        if c0 < n {
            update(&mut calls, w, k0, c0, true)?;
        }
    }
    for k0 in (0..n).step_by(NB).rev() {
        update(&mut calls, q, k0, k0, false)?;
    }
    let mut r_shape = a.shape().to_vec();
    let last = r_shape.len() - 2;
    r_shape[last] = n;
    let r_args =
        vec![LibraryArg::Output { shape: r_shape, dtype: DType::F32, init_value: None }, params(m, n, 0, 0, false)];
    calls.push(OpCall::library(lib, flat("qr_r", batch * n * n)?, r_args, device).reads(&[w]));
    let r = (calls.len() - 1, 0);
    Ok(OpPlan::new(calls).outputs(&[q, r]))
}

/// The programs of every blocked kernel, for compile-only checks.
pub fn programs() -> Vec<MetalProgram> {
    let lib = library();
    let mut out: Vec<MetalProgram> = [100, 200, 2000].iter().map(|&rows| lib.program(&panel_launch(rows, 1))).collect();
    for function in ["qr_init", "qr_r"] {
        out.push(lib.program(&LibraryLaunch::new(function, Dispatch::Threads([1, 1, 1]), [256, 1, 1])));
    }
    if let Ok(steps) = update_launches(150, 70, 0, 32, 1) {
        out.extend(steps.iter().map(|l| lib.program(l)));
    }
    out
}
