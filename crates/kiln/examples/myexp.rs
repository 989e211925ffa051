//! The MLX docs' `myexp` (`mx.fast.metal_kernel`), in Rust, on the best device here: an NVIDIA
//! GPU, else the CPU emulator. Exits non-zero when the result is outside float16's tolerance.
//!
//! `cargo run -p kiln --example myexp`

use kiln::check::{rel_l2, tolerance, Rng};
use kiln::{f16, Array, DType, LaunchSpec, MetalKernel};

fn main() -> kiln::Result<()> {
    run(kiln::best_device())
}

/// The example on `device` (public: tests/sanitizer_clean.rs runs it on the CPU under the
/// sanitizer).
pub fn run(device: kiln::Device) -> kiln::Result<()> {
    let kernel = MetalKernel::new(
        "myexp",
        &["inp"],
        &["out"],
        r#"
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    "#,
    )?;

    let seed = fresh_seed();
    let (rows, cols) = (37usize, 129usize);
    let host: Vec<f16> = Rng::new(seed).normals(rows * cols, 2.0).into_iter().map(f16::from_f64).collect();
    let a = Array::from_slice(&[rows, cols], &host)?.to_device(device)?;

    // The grid counts threads (MLX's rule); 37·129 is not a multiple of 256, as MLX allows.
    let spec = LaunchSpec::new(a.size(), 256usize).output(a.shape(), DType::F16).template("T", DType::F32);
    let out = kernel.call(&[(&a).into()], &spec)?;

    let got = out[0].to_host()?.to_f64_vec()?;
    let want: Vec<f64> = host.iter().map(|x| x.to_f64().exp()).collect();
    let err = rel_l2(&got, &want);
    println!("myexp on {device}: {} elements, relative L2 error {err:.2e} (seed {seed:#x})", got.len());
    if err > tolerance(DType::F16) {
        eprintln!("myexp: error {err:.3e} above float16's tolerance {:.0e}", tolerance(DType::F16));
        std::process::exit(1);
    }
    Ok(())
}

/// A seed that differs from run to run (printed, so a failure can be reproduced).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
