//! A histogram with atomics: every thread adds one to its value's bin with
//! `atomic_fetch_add_explicit` on an output declared atomic (`atomic_outputs(true)`), the bins
//! zeroed first (`init_value`). Many threads hit the same bin, so a lost update would show.
//! Runs on the best device and exits non-zero unless every count is exact.
//!
//! `cargo run -p kiln --example histogram_atomics`

use kiln::check::Rng;
use kiln::{Array, DType, LaunchSpec, MetalKernel};

fn main() -> kiln::Result<()> {
    run(kiln::best_device())
}

/// The example on `device` (public: tests/sanitizer_clean.rs runs it on the CPU under the
/// sanitizer).
pub fn run(device: kiln::Device) -> kiln::Result<()> {
    let kernel = MetalKernel::new(
        "histogram",
        &["values"],
        &["counts"],
        r#"
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&counts[values[i]], 1u, memory_order_relaxed);
    "#,
    )?
    .atomic_outputs(true);

    let seed = fresh_seed();
    let (n, bins) = (100_000usize, 37usize);
    let mut rng = Rng::new(seed);
    // Skewed towards the low bins, so some bins are much hotter than others.
    let values: Vec<u32> = (0..n).map(|_| (rng.uniform(0.0, 1.0).powi(2) * bins as f64) as u32).collect();
    let a = Array::from_slice(&[n], &values)?.to_device(device)?;

    let spec = LaunchSpec::new(n, 256usize).output(&[bins], DType::U32).init_value(0.0);
    let out = kernel.call(&[(&a).into()], &spec)?;
    let got = out[0].to_host()?.to_vec::<u32>()?;

    let mut want = vec![0u32; bins];
    for &v in &values {
        want[v as usize] += 1;
    }
    println!("histogram of {n} values into {bins} bins on {device} (seed {seed:#x}): {got:?}");
    if got != want {
        eprintln!("histogram_atomics: counts differ from the reference {want:?}");
        std::process::exit(1);
    }
    Ok(())
}

/// A seed that differs from run to run (printed, so a failure can be reproduced).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
