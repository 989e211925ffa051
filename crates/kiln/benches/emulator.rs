//! Emulator throughput: emulated threads per second for a barrier-free kernel (plain loop over
//! each group's threads) and for a kernel with threadgroup barriers and a SIMD reduction
//! (cooperative fibers), in groups of 256 and of 1024 threads (and of 32, where the per-group
//! cost of threadgroup memory shows most). Run with `cargo bench --bench
//! emulator`; compilation is excluded (one warm-up call), the timed region covers whole calls
//! including output allocation. Besides wall-clock throughput it prints threads per CPU-second
//! of the whole process (Linux), which stays comparable on a machine shared with other work.

use std::time::Instant;

use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

fn measure(name: &str, kernel: &MetalKernel, x: &Array, threads: u32, tg: u32) {
    let spec = LaunchSpec::new([threads, 1, 1], [tg, 1, 1]).output(&[threads as usize], DType::F32).device(Device::Cpu);
    let inputs = [x.into()];
    kernel.call(&inputs, &spec).expect("warm-up run");
    let mut iters = 0u32;
    let start = Instant::now();
    let cpu_start = process_cpu_seconds();
    while iters < 3 || start.elapsed().as_secs_f64() < 2.0 {
        kernel.call(&inputs, &spec).expect("run");
        iters += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let done = threads as f64 * iters as f64;
    let per_cpu = match (cpu_start, process_cpu_seconds()) {
        (Some(a), Some(b)) if b > a => format!(", {:>7.2} M threads/CPU-s", done / (b - a) / 1e6),
        _ => String::new(),
    };
    println!("{name:<34} {threads:>8} threads x {iters:>4} runs: {:>7.2} M threads/s{per_cpu}", done / secs / 1e6);
}

/// User plus system time of this process from /proc/self/stat (clock ticks of 1/100 s).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() {
    let n = 1u32 << 20;
    let x = Array::from_vec(&[n as usize], (0..n).map(|i| (i % 97) as f32 * 0.01).collect()).expect("input");
    let plain = MetalKernel::new(
        "bench_axpy",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(x[i]) * 2.0f + 1.0f;",
    )
    .expect("kernel");
    let barrier = MetalKernel::new(
        "bench_barrier",
        &["x"],
        &["out"],
        r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        threadgroup float buf[1024];
        buf[t] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = buf[(t + 1) % threads_per_threadgroup.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = simd_sum(v);
        "#,
    )
    .expect("kernel");
    println!("kiln CPU emulator on {} threads", rayon::current_num_threads());
    measure("no barriers (plain loop)", &plain, &x, n, 256);
    measure("2 barriers + simd_sum (fibers)", &barrier, &x, n / 4, 256);
    measure("same, 1024-thread groups", &barrier, &x, n / 4, 1024);
    measure("same, 32-thread groups", &barrier, &x, n / 4, 32);
}
