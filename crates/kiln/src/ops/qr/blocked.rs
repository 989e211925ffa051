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

/// `(Q, R)` of every matrix of `a` (batch, m, n) (row-contiguous), outputs filled with `init`
/// first.
pub fn factor(a: &Array, m: usize, n: usize, batch: usize, init: Option<f64>) -> Result<(Array, Array)> {
    let device = a.device();
    let count = u32_of(batch)?;
    let lib = library();
    let a = if a.is_row_contiguous() { a.clone() } else { crate::backend::backend_for(device)?.row_contiguous(a)? };
    let panels = n.div_ceil(NB);
    let outs = lib.dispatch(
        device,
        &[
            LibraryArg::Array(a.clone()),
            LibraryArg::Output { shape: vec![batch, m, n], dtype: DType::F32, init_value: None },
            LibraryArg::Output { shape: a.shape().to_vec(), dtype: DType::F32, init_value: init },
            LibraryArg::Output { shape: vec![batch, panels * NB, NB], dtype: DType::F32, init_value: None },
            LibraryArg::Output { shape: vec![batch, NB, n], dtype: DType::F32, init_value: None },
            params(m, n, 0, 0, false),
        ],
        &flat("qr_init", batch * m * n)?,
    )?;
    let [w, q, t, y] = &outs[..] else {
        return Err(Error::invalid(OP, "the init kernel returned the wrong number of outputs"));
    };
    let arr = |x: &Array| LibraryArg::Array(x.clone());
    let update = |x: &Array, k0: usize, c0: usize, trans: bool| -> Result<()> {
        let [vty, apply] = update_launches(m, n, k0, c0, count)?;
        lib.dispatch(device, &[arr(w), arr(x), arr(y), params(m, n, k0, c0, trans)], &vty)?;
        lib.dispatch(device, &[arr(w), arr(x), arr(t), arr(y), params(m, n, k0, c0, trans)], &apply)?;
        Ok(())
    };
    for k0 in (0..n).step_by(NB) {
        lib.dispatch(device, &[arr(w), arr(t), params(m, n, k0, k0, true)], &panel_launch(m - k0, count))?;
        let c0 = k0 + NB.min(n - k0);
        if c0 < n {
            update(w, k0, c0, true)?;
        }
    }
    for k0 in (0..n).step_by(NB).rev() {
        update(q, k0, k0, false)?;
    }
    let mut r_shape = a.shape().to_vec();
    let last = r_shape.len() - 2;
    r_shape[last] = n;
    let mut r = lib.dispatch(
        device,
        &[
            arr(w),
            LibraryArg::Output { shape: r_shape, dtype: DType::F32, init_value: init },
            params(m, n, 0, 0, false),
        ],
        &flat("qr_r", batch * n * n)?,
    )?;
    let r = r.pop().ok_or_else(|| Error::invalid(OP, "the R kernel returned no output"))?;
    Ok((q.clone(), r))
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
