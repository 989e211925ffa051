//! Criterion benchmarks of the kernel library on the best device here (an NVIDIA GPU, else the
//! CPU emulator at small shapes): each iteration queues one op and waits for its output, so
//! the time covers the whole call. `kiln bench` gives device-only times with CUDA events and
//! L2 flushes; this is the library user's view. The ops and shapes are the tools' table's
//! (`kiln_tools::op_table`); on the CPU, the elementwise and row-wise ops at smaller sizes.
//! Run with `cargo bench -p kiln-tools --bench ops` (a criterion filter selects cases by id).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln::backend::best_device;
use kiln::Device;
use kiln_tools::bench::cases;
use kiln_tools::op_table::{self, Op};

/// The sizes to run a bench shape at on `device`: as listed on a GPU; on the CPU emulator, ops
/// over elements on 64 Ki of them and ops over rows on 256 rows of at most 1024, others not.
fn sizes(device: Device, op: Op, dims: &[usize]) -> Option<Vec<usize>> {
    if device != Device::Cpu {
        return Some(dims.to_vec());
    }
    match (op.hooks.dims, dims) {
        (op_table::UNARY_DIMS, [_]) => Some(vec![1 << 16]),
        (op_table::ROW_DIMS, [_, d]) => Some(vec![256, (*d).min(1024)]),
        _ => None,
    }
}

fn benches(c: &mut Criterion) {
    let device = best_device();
    let mut g = c.benchmark_group(format!("ops on {device}"));
    for &op in op_table::ops() {
        for shape in op.hooks.bench {
            let Some(case) = sizes(device, op, shape.dims).map(|d| cases::case_at(op, shape, &d)) else {
                continue;
            };
            let mut prepared = (case.prepare)(device, 7).expect("inputs");
            g.throughput(Throughput::Bytes(case.bytes as u64));
            g.bench_function(case.id(), |b| {
                b.iter(|| {
                    for out in (prepared.run)().expect("run") {
                        out.to_host().expect("reading the output");
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = ops_benches;
    config = Criterion::default().sample_size(20);
    targets = benches
}
criterion_main!(ops_benches);
