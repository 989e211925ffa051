//! Emulator throughput: emulated threads per second for a barrier-free kernel (plain loop over
//! each group's threads), for a kernel with threadgroup barriers and a SIMD reduction
//! (cooperative threads: region loops, its barriers and call standing at the top level of its
//! body; coroutines or fibers for kernels that do not qualify), in groups
//! of 256 and of 1024 threads (and of 32, where the per-group cost of threadgroup memory shows
//! most), and for one with the barriers alone. Run with `cargo bench --bench
//! emulator`; compilation is excluded (one warm-up call), the timed region covers whole calls
//! including output allocation. Besides wall-clock throughput it prints threads per CPU-second
//! of the whole process (Linux), which stays comparable on a machine shared with other work.
//!
//! Then memory-bound work at NumPy's sizes (`bench/cpu_throughput.py` times NumPy beside it):
//! `ops::exp` and a body kernel `out[i] = exp(inp[i])` over 16M float32, `rms_norm` and
//! `softmax` over 4096x4096 float32, the seed's RMSNorm and softmax bodies (barriers and
//! SIMD-group reductions) over the same, a copy kernel, and the host's copy bandwidth (a 64 MiB
//! `copy_from_slice` into memory already touched). The rows take turns for `KILN_BENCH_ROUNDS`
//! rounds (default 7); each prints its median round with the fastest and slowest beside it.
//!
//! Arguments that are not flags keep only the rows whose name holds one of them, as criterion's
//! filter does: `cargo bench --bench emulator -- barriers same` runs the cooperative rows.

use std::time::Instant;

use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

/// A timed row: its name, the bytes one call reads and writes, and the call.
type Row<'a> = (&'a str, f64, Box<dyn Fn() + 'a>);

/// Times each row's call once per round, rows taking turns, and prints medians (min..max) with
/// the bytes each moves per second.
fn throughput(rows: &[Row<'_>], rounds: usize) {
    for (_, _, f) in rows {
        f();
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    for _ in 0..rounds {
        for (k, (_, _, f)) in rows.iter().enumerate() {
            let start = Instant::now();
            f();
            times[k].push(start.elapsed().as_secs_f64());
        }
    }
    for ((name, bytes, _), t) in rows.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        let median = t[t.len() / 2];
        println!(
            "{name:<34} {:>8.2} ms ({:>7.2} .. {:>7.2})  {:>6.2} GB/s",
            median * 1e3,
            t[0] * 1e3,
            t[t.len() - 1] * 1e3,
            bytes / median / 1e9
        );
    }
}

fn memory_bound() {
    let rounds = std::env::var("KILN_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let n = 1usize << 24;
    let data: Vec<f32> = (0..n).map(|i| ((i % 1999) as f32 - 999.0) * 0.01).collect();
    let x = Array::from_vec(&[n], data.clone()).expect("input");
    let square = Array::from_vec(&[4096, 4096], data.clone()).expect("input");
    let w = Array::from_vec(&[4096], (0..4096).map(|i| 1.0 + (i % 7) as f32 * 0.1).collect()).expect("weight");
    let body = |name: &str, expr: &str| {
        MetalKernel::new(
            name,
            &["inp"],
            &["out"],
            format!("uint elem = thread_position_in_grid.x;\nout[elem] = {expr};"),
        )
        .expect("kernel")
    };
    let exp_body = body("bench_exp_body", "metal::exp(inp[elem])");
    let copy_body = body("bench_copy_body", "inp[elem]");
    let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    // The seed's RMSNorm and softmax bodies (a row per 256-thread group: strided partial sums,
    // `simd_sum`/`simd_max`, a fold across SIMD-groups through threadgroup memory between
    // barriers), over the same 4096x4096 float32.
    let seed_norm = MetalKernel::new("bench_seed_rms_norm", &["x", "w"], &["out"], SEED_RMS_NORM).expect("kernel");
    let seed_softmax = MetalKernel::new("bench_seed_softmax", &["x"], &["out"], SEED_SOFTMAX).expect("kernel");
    let rows_spec = LaunchSpec::new([4096 * 256, 1, 1], [256, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    let mut dst = vec![0f32; n];
    dst.copy_from_slice(&data);
    let dst = std::cell::RefCell::new(dst);
    let bytes = (2 * n * 4) as f64;
    let rows: Vec<Row<'_>> = vec![
        ("ops::exp 16M f32", bytes, Box::new(|| drop(kiln::ops::exp(&x).expect("exp")))),
        ("body exp 16M f32", bytes, Box::new(|| drop(exp_body.call(&[(&x).into()], &spec).expect("exp")))),
        ("ops::rms_norm 4096x4096 f32", bytes, Box::new(|| drop(kiln::ops::rms_norm(&square, &w, 1e-5).expect("rms")))),
        ("ops::softmax 4096x4096 f32", bytes, Box::new(|| drop(kiln::ops::softmax(&square).expect("softmax")))),
        (
            "body seed rms_norm 4096x4096 f32",
            bytes,
            Box::new(|| drop(seed_norm.call(&[(&square).into(), (&w).into()], &rows_spec).expect("seed rms_norm"))),
        ),
        (
            "body seed softmax 4096x4096 f32",
            bytes,
            Box::new(|| drop(seed_softmax.call(&[(&square).into()], &rows_spec).expect("seed softmax"))),
        ),
        ("body copy 16M f32", bytes, Box::new(|| drop(copy_body.call(&[(&x).into()], &spec).expect("copy")))),
        ("host copy_from_slice 64 MiB", bytes, Box::new(|| dst.borrow_mut().copy_from_slice(&data))),
    ];
    // `KILN_BENCH_ONLY=copy` keeps the rows whose name holds that text (for profiling one).
    let only = std::env::var("KILN_BENCH_ONLY").unwrap_or_default();
    let rows: Vec<Row<'_>> = rows.into_iter().filter(|r| r.0.contains(&only)).collect();
    println!(
        "memory-bound calls, {rounds} rounds taking turns: median (fastest .. slowest), read + write bytes / median"
    );
    throughput(&rows, rounds);
}

/// The seed's RMSNorm and softmax bodies (float, D = 4096).
const SEED_RMS_NORM: &str = include_str!("../../../bench/kernels/seed_rms_norm.body");
const SEED_SOFTMAX: &str = include_str!("../../../bench/kernels/seed_softmax.body");

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
    // Two barriers around an exchange through threadgroup memory, then `LAST`.
    let barriers = |name: &str, last: &str| {
        let src = r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        threadgroup float buf[1024];
        buf[t] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = buf[(t + 1) % threads_per_threadgroup.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        LAST
        "#;
        MetalKernel::new(name, &["x"], &["out"], src.replace("LAST", last)).expect("kernel")
    };
    let barrier = barriers("bench_barrier", "out[i] = simd_sum(v);");
    let barriers_only = barriers("bench_barriers_only", "out[i] = v * 2.0f;");
    if std::env::var_os("KILN_BENCH_ONLY").is_some() {
        memory_bound();
        return;
    }
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    println!("kiln CPU emulator on {} threads", rayon::current_num_threads());
    let rows: [(&str, &MetalKernel, u32, u32); 5] = [
        ("no barriers (plain loop)", &plain, n, 256),
        ("2 barriers + simd_sum (cooperative)", &barrier, n / 4, 256),
        ("2 barriers, no simd_sum", &barriers_only, n / 4, 256),
        ("same, 1024-thread groups", &barrier, n / 4, 1024),
        ("same, 32-thread groups", &barrier, n / 4, 32),
    ];
    for (name, kernel, threads, tg) in rows {
        if filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())) {
            measure(name, kernel, &x, threads, tg);
        }
    }
    if filters.is_empty() {
        memory_bound();
    }
}
