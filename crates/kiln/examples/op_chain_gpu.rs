//! A chain of library ops on the best device here (an NVIDIA GPU, else the CPU): RMS norm,
//! SiLU, softmax, each taking the previous result where it lives (no copy back between ops),
//! one copy to the host at the end. Checked against the same chain in plain Rust (f64); exits
//! non-zero when outside float32's tolerance.
//!
//! `cargo run -p kiln --example op_chain_gpu`

use kiln::check::{rel_l2, tolerance, Rng};
use kiln::ops::{elementwise::silu, rms_norm::rms_norm, softmax::softmax};
use kiln::{Array, DType};

fn main() -> kiln::Result<()> {
    run(kiln::best_device())
}

/// The example on `device` (public: tests/sanitizer_clean.rs runs it on the CPU under the
/// sanitizer).
pub fn run(device: kiln::Device) -> kiln::Result<()> {
    let seed = fresh_seed();
    let (rows, d) = (64usize, 512usize);
    let eps = 1e-5f32;
    let mut rng = Rng::new(seed);
    let x_host: Vec<f32> = rng.normals(rows * d, 1.5).into_iter().map(|v| v as f32).collect();
    let w_host: Vec<f32> = rng.uniforms(d, 0.5, 1.5).into_iter().map(|v| v as f32).collect();

    let x = Array::from_slice(&[rows, d], &x_host)?.to_device(device)?;
    let w = Array::from_slice(&[d], &w_host)?.to_device(device)?;

    let y = softmax(&silu(&rms_norm(&x, &w, eps)?)?)?;
    assert_eq!(y.device(), device);
    let got = y.to_host()?.to_f64_vec()?;

    let want = reference(&x_host, &w_host, d, f64::from(eps));
    let err = rel_l2(&got, &want);
    println!("rms_norm → silu → softmax on {device}: {rows}×{d}, relative L2 error {err:.2e} (seed {seed:#x})");
    if err > tolerance(DType::F32) {
        eprintln!("op_chain_gpu: error {err:.3e} above float32's tolerance");
        std::process::exit(1);
    }
    Ok(())
}

/// softmax(silu(rms_norm(x) · w)) per row, in f64.
fn reference(x: &[f32], w: &[f32], d: usize, eps: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(d) {
        let row: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        let rms = (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
        let act: Vec<f64> = row
            .iter()
            .zip(w)
            .map(|(v, &wi)| {
                let n = v / rms * f64::from(wi);
                n / (1.0 + (-n).exp())
            })
            .collect();
        let max = act.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = act.iter().map(|v| (v - max).exp()).sum();
        out.extend(act.iter().map(|v| (v - max).exp() / sum));
    }
    out
}

/// A seed that differs from run to run (printed, so a failure can be reproduced).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
