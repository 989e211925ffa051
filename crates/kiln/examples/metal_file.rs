//! A whole `.metal` file through `MetalLibrary`: a parameter struct in `constant` memory,
//! `[[buffer(n)]]` slots, `[[threadgroup(0)]]` memory sized at dispatch, and a dispatch by
//! threadgroups (one per row). The kernel scales each row and writes its sum (a tree
//! reduction in threadgroup memory). Runs on the best device; exits non-zero on a mismatch.
//!
//! `cargo run -p kiln --example metal_file`

use kiln::check::{rel_l2, tolerance, Rng};
use kiln::{Array, DType, LibraryArg, LibraryLaunch, MetalLibrary};

const SOURCE: &str = r#"
#include <metal_stdlib>
using namespace metal;

struct Params { uint cols; float scale; };

kernel void scale_and_sum_rows(const device float* x [[buffer(0)]],
                               constant Params& p [[buffer(1)]],
                               device float* scaled [[buffer(2)]],
                               device float* sums [[buffer(3)]],
                               threadgroup float* partial [[threadgroup(0)]],
                               uint row [[threadgroup_position_in_grid]],
                               uint t [[thread_index_in_threadgroup]],
                               uint nt [[threads_per_threadgroup]]) {
    float acc = 0.0f;
    for (uint c = t; c < p.cols; c += nt) {
        float v = x[row * p.cols + c] * p.scale;
        scaled[row * p.cols + c] = v;
        acc += v;
    }
    partial[t] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint half_width = nt / 2; half_width > 0; half_width /= 2) {
        if (t < half_width) partial[t] += partial[t + half_width];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t == 0) sums[row] = partial[0];
}
"#;

fn main() -> kiln::Result<()> {
    run(kiln::best_device())
}

/// The example on `device` (public: tests/sanitizer_clean.rs runs it on the CPU under the
/// sanitizer).
pub fn run(device: kiln::Device) -> kiln::Result<()> {
    let library = MetalLibrary::new("rows.metal", SOURCE);

    let seed = fresh_seed();
    let (rows, cols, threads) = (24usize, 1000usize, 128usize);
    let mut rng = Rng::new(seed);
    let host: Vec<f32> = rng.normals(rows * cols, 1.0).into_iter().map(|v| v as f32).collect();
    let scale = rng.uniform(0.5, 2.0) as f32;
    let x = Array::from_slice(&[rows, cols], &host)?.to_device(device)?;

    // `struct Params { uint cols; float scale; }`, packed as C lays it out.
    let mut params = (cols as u32).to_le_bytes().to_vec();
    params.extend(scale.to_le_bytes());
    let args = [
        LibraryArg::Array(x),
        LibraryArg::Bytes(params),
        LibraryArg::Output { shape: vec![rows, cols], dtype: DType::F32, init_value: None },
        LibraryArg::Output { shape: vec![rows], dtype: DType::F32, init_value: None },
    ];
    let launch = LibraryLaunch::threadgroups("scale_and_sum_rows", rows, threads)
        .threadgroup_memory(&[threads * std::mem::size_of::<f32>()]);
    let out = library.dispatch(device, &args, &launch)?;
    let (scaled, sums) = (out[0].to_host()?.to_f64_vec()?, out[1].to_host()?.to_f64_vec()?);

    let want_scaled: Vec<f64> = host.iter().map(|&v| f64::from(v * scale)).collect();
    let want_sums: Vec<f64> = want_scaled.chunks(cols).map(|row| row.iter().sum()).collect();
    let errors = [rel_l2(&scaled, &want_scaled), rel_l2(&sums, &want_sums)];
    println!(
        "{}:scale_and_sum_rows on {device}: {rows} rows of {cols}, relative L2 errors {:.2e} (scaled) {:.2e} (sums) (seed {seed:#x})",
        library.name(),
        errors[0],
        errors[1]
    );
    if !errors.iter().all(|&e| e <= tolerance(DType::F32)) {
        eprintln!("metal_file: outside float32's tolerance");
        std::process::exit(1);
    }
    Ok(())
}

/// A seed that differs from run to run (printed, so a failure can be reproduced).
fn fresh_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
