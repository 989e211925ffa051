//! Several callers at once: threads calling one kernel (and one library op) on the CPU, and two
//! GPUs driven from two threads, each launch on the device its inputs live on. Every call
//! checks its own fresh inputs against an f64 reference. The two-GPU test is ignored without
//! `--include-ignored` and skips (with a message) on a machine with fewer than two devices:
//! `KILN_REQUIRE_BACKEND=cuda cargo test -p kiln --test multi_device -- --include-ignored`.

mod common;

use common::{assert_close, device_or_skip, random_array, Rng};
use kiln::{DType, Device, LaunchSpec, MetalKernel};

const ROWS: usize = 24;
const D: usize = 256;

/// `out = exp(x) * a + b` with scalar `a` and `b`.
fn exp_axpb() -> MetalKernel {
    let body = "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(x[i]) * a + b;\n";
    MetalKernel::new("exp_axpb", &["x", "a", "b"], &["out"], body).unwrap()
}

/// `calls` rounds of the body kernel and `rms_norm` on `device`, each on fresh inputs of its own
/// seed and checked against the reference; the outputs must live on `device`.
fn run_calls(kernel: &MetalKernel, device: Device, seed: u64, calls: usize) {
    let mut rng = Rng::new(seed);
    for c in 0..calls {
        let n = ROWS * D;
        let x = random_array(&mut rng, DType::F32, &[ROWS, D]);
        let w = random_array(&mut rng, DType::F32, &[D]);
        let (a, b) = (0.5 + seed as f32 + c as f32 * 0.25, c as f32 - 3.0 * seed as f32);
        let spec = LaunchSpec::new([n as u32, 1, 1], [128, 1, 1]).output(&[ROWS, D], DType::F32).device(device);
        let x_dev = x.to_device(device).unwrap();
        let out = kernel.call(&[x_dev.clone().into(), a.into(), b.into()], &spec).unwrap();
        assert_eq!(out[0].device(), device, "the output lives on the inputs' device");
        let xv = x.to_f64_vec().unwrap();
        let want: Vec<f64> = xv.iter().map(|v| (*v as f32).exp() as f64 * a as f64 + b as f64).collect();
        let what = format!("{device} caller {seed} call {c}");
        assert_close(&format!("{what}: exp_axpb"), &out[0], &want, DType::F32);

        let normed = kiln::ops::rms_norm::rms_norm(&x_dev, &w.to_device(device).unwrap(), 1e-5).unwrap();
        assert_eq!(normed.device(), device);
        let want = kiln::ops::rms_norm::reference(&xv, &w.to_f64_vec().unwrap(), D, 1e-5);
        assert_close(&format!("{what}: rms_norm"), &normed, &want, DType::F32);
    }
}

#[test]
fn cpu_threads_call_one_kernel_at_once() {
    let Some(cpu) = device_or_skip("cpu") else { return };
    let kernel = exp_axpb();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let kernel = &kernel;
            scope.spawn(move || run_calls(kernel, cpu, t, 6));
        }
    });
}

#[test]
#[ignore = "needs two NVIDIA GPUs (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn two_gpus_from_two_threads() {
    if device_or_skip("cuda").is_none() {
        return;
    }
    let count = kiln::backend::cuda::status().devices.len();
    if count < 2 {
        eprintln!("skipping: two CUDA devices needed, {count} found");
        return;
    }
    let kernel = exp_axpb();
    std::thread::scope(|scope| {
        for ordinal in 0..2usize {
            let kernel = &kernel;
            // Two threads per device, so that each device also sees concurrent callers.
            for t in 0..2u64 {
                scope.spawn(move || run_calls(kernel, Device::Cuda(ordinal), 10 * ordinal as u64 + t, 40));
            }
        }
    });
}
