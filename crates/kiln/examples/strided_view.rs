//! A kernel that reads a NumPy-style view in place: every other row, columns reversed in steps
//! of three (`a[::2, ::-3]`), passed without a copy (`ensure_row_contiguous(false)`) with its
//! shape and strides, which the kernel uses through MLX's `elem_to_loc`. Runs on the best
//! device (a view moved to a GPU keeps its offset and strides) and exits non-zero on a mismatch.
//!
//! `cargo run -p kiln --example strided_view`

use kiln::check::{rel_l2, tolerance, Rng};
use kiln::{Array, DType, LaunchSpec, MetalKernel, SliceArg};

fn main() -> kiln::Result<()> {
    run(kiln::best_device())
}

/// The example on `device` (public: tests/sanitizer_clean.rs runs it on the CPU under the
/// sanitizer).
pub fn run(device: kiln::Device) -> kiln::Result<()> {
    let kernel = MetalKernel::new(
        "myexp_strided",
        &["inp"],
        &["out"],
        r#"
        uint elem = thread_position_in_grid.x;
        // Signed: a view may step backwards through its storage.
        int64_t loc = elem_to_loc(int64_t(elem), inp_shape, inp_strides, inp_ndim);
        out[elem] = metal::exp(inp[loc]);
    "#,
    )?
    .ensure_row_contiguous(false);

    let seed = fresh_seed();
    let (rows, cols) = (16usize, 25usize);
    let host: Vec<f32> = Rng::new(seed).normals(rows * cols, 1.0).into_iter().map(|v| v as f32).collect();
    let full = Array::from_slice(&[rows, cols], &host)?;
    let view = full.slice(&SliceArg::parse_list("::2, ::-3")?)?;
    assert!(!view.is_row_contiguous());
    let view = view.to_device(device)?;

    let spec = LaunchSpec::new(view.size(), 64usize).output(view.shape(), DType::F32);
    let out = kernel.call(&[(&view).into()], &spec)?;
    let got = out[0].to_host()?.to_f64_vec()?;

    // The same view by hand: rows 0, 2, 4, ...; columns cols-1, cols-4, ...
    let mut want = Vec::new();
    for r in (0..rows).step_by(2) {
        for c in (0..cols).rev().step_by(3) {
            want.push(f64::from(host[r * cols + c]).exp());
        }
    }
    let err = rel_l2(&got, &want);
    println!(
        "strided view {:?} (strides {:?}) on {device}: relative L2 error {err:.2e} (seed {seed:#x})",
        view.shape(),
        view.strides()
    );
    if err > tolerance(DType::F32) {
        eprintln!("strided_view: error {err:.3e} above float32's tolerance");
        std::process::exit(1);
    }
    Ok(())
}

/// A seed that differs from run to run (printed, so a failure can be reproduced).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
