//! Criterion benchmarks of the kernel library on the best device here (an NVIDIA GPU, else the
//! CPU emulator at small shapes): each iteration queues one op and waits for its output, so
//! the time covers the whole call. `kiln bench` gives device-only times with CUDA events and
//! L2 flushes; this is the library user's view. Run with `cargo bench --bench ops`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln::backend::best_device;
use kiln::check::Rng;
use kiln::{ops, Array, DType, Device};
use kiln_tools::bench::cases::device_input;

fn sizes(device: Device) -> (usize, usize, usize) {
    match device {
        Device::Cpu => (1 << 16, 256, 1024),
        _ => (64 << 20, 16384, 4096),
    }
}

fn wait(a: &Array) {
    a.to_host().expect("reading the output");
}

fn benches(c: &mut Criterion) {
    let device = best_device();
    let (n, rows, d) = sizes(device);
    let mut rng = Rng::new(7);
    let mut g = c.benchmark_group(format!("ops on {device}"));
    for dtype in [DType::F32, DType::BF16] {
        let x = device_input(device, dtype, &[n], &mut rng, -4.0, 4.0).expect("input");
        g.throughput(Throughput::Bytes((2 * n * dtype.size()) as u64));
        g.bench_function(format!("silu {n} {}", dtype.name()), |b| b.iter(|| wait(&ops::silu(&x).expect("silu"))));
        let x = device_input(device, dtype, &[rows, d], &mut rng, -2.0, 2.0).expect("input");
        let w = device_input(device, dtype, &[d], &mut rng, 0.5, 1.5).expect("input");
        g.throughput(Throughput::Bytes((2 * rows * d * dtype.size()) as u64));
        g.bench_function(format!("rms_norm {rows}x{d} {}", dtype.name()), |b| {
            b.iter(|| wait(&ops::rms_norm(&x, &w, 1e-5).expect("rms_norm")))
        });
        g.bench_function(format!("softmax {rows}x{d} {}", dtype.name()), |b| {
            b.iter(|| wait(&ops::softmax(&x).expect("softmax")))
        });
    }
    g.finish();
}

criterion_group! {
    name = ops_benches;
    config = Criterion::default().sample_size(20);
    targets = benches
}
criterion_main!(ops_benches);
