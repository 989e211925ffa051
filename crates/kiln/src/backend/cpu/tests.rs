//! Emulator behaviours around stopping a group early: a fault or a timeout while other fibers
//! of the group are suspended unwinds them, and the same kernel then runs cleanly on the
//! reused fiber stacks; an access outside every mapping, an integer division by zero or a
//! compiler trap in a kernel is an `Error::KernelFault`, not the end of the process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rayon::prelude::*;

use crate::check::Rng;
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

fn values(a: &Array) -> Vec<f64> {
    a.to_f64_vec().unwrap()
}

#[test]
fn fault_with_suspended_fibers_leaves_the_kernel_runnable() {
    let mut rng = Rng::new(21);
    let x = rng.uniform(0.5, 2.0) as f32;
    let src = r#"
        threadgroup float buf[64];
        buf[thread_index_in_threadgroup] = x[0];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(buf[0]), p;
        simdgroup_multiply(p, m, m);
        simdgroup_store(p, out, 8);
    "#;
    let k = MetalKernel::new("cpu_fault_then_run", &["x"], &["out"], src).unwrap();
    let input = Array::from_vec(&[1], vec![x]).unwrap();
    // 48 threads: the second simdgroup has 16 lanes, so its multiply faults in its first lane
    // while the other 15 are still suspended at the collective.
    let partial = LaunchSpec::new([48, 1, 1], [48, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    match k.call(&[(&input).into()], &partial) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "cpu_fault_then_run");
            assert!(msg.contains("all 32 lanes"), "{msg}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    let full = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let out = values(&k.call(&[(&input).into()], &full).unwrap()[0]);
    let want = 8.0 * (x as f64) * (x as f64);
    for v in out {
        assert!((v - want).abs() <= 1e-6 * want, "{v} vs {want}");
    }
}

#[test]
fn timeout_with_fibers_at_a_barrier_leaves_the_kernel_runnable() {
    let mut rng = Rng::new(22);
    let xs: Vec<f32> = (0..8).map(|_| rng.uniform(0.5, 2.0) as f32).collect();
    // Thread 0 spins while x[0] > 0; the others wait at the barrier meanwhile.
    let src = r#"
        uint t = thread_index_in_threadgroup;
        threadgroup float buf[128];
        uint n = 0;
        if (t == 0) { while (x[0] > 0.0f) { n++; } }
        buf[t] = x[t % 8] + float(n);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = buf[(t + 1) % threads_per_threadgroup.x];
    "#;
    let k = MetalKernel::new("cpu_timeout_then_run", &["x"], &["out"], src).unwrap();
    let spin = Array::from_vec(&[8], xs.clone()).unwrap();
    let spec = LaunchSpec::new([256, 1, 1], [128, 1, 1])
        .output(&[256], DType::F32)
        .timeout(Duration::from_millis(200))
        .device(Device::Cpu);
    match k.call(&[(&spin).into()], &spec) {
        Err(Error::Timeout { kernel, .. }) => assert_eq!(kernel, "cpu_timeout_then_run"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let mut neg = xs.clone();
    neg[0] = -neg[0];
    let run = Array::from_vec(&[8], neg.clone()).unwrap();
    let out = values(&k.call(&[(&run).into()], &spec).unwrap()[0]);
    let want: Vec<f64> = (0..256).map(|i| neg[((i % 128 + 1) % 128) % 8] as f64).collect();
    assert_eq!(out, want);
}

/// Runs `src` (reading `x`, writing `out`, both f32 of `n` elements) in checked mode.
fn run_checked(name: &str, src: &str, x: &[f32]) -> crate::Result<Vec<f64>> {
    let _checked = super::CheckedScope::enter();
    let k = MetalKernel::new(name, &["x"], &["out"], src).unwrap();
    let n = x.len();
    let input = Array::from_vec(&[n], x.to_vec()).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [32, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    Ok(values(&k.call(&[(&input).into()], &spec)?[0]))
}

fn random_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.normal() as f32).collect()
}

#[test]
fn checked_mode_runs_in_bounds_kernels_unchanged() {
    let x = random_f32(23, 64);
    let src = "uint i = thread_position_in_grid.x;\nout[i] = 2.0f * x[63 - i] + x[i];";
    let out = run_checked("cpu_checked_ok", src, &x).unwrap();
    let want: Vec<f64> = (0..64).map(|i| (2.0f32 * x[63 - i] + x[i]) as f64).collect();
    assert_eq!(out, want);
}

#[test]
fn checked_mode_reports_an_out_of_bounds_read_naming_the_input() {
    let x = random_f32(24, 64);
    let src = "uint i = thread_position_in_grid.x;\nout[i] = x[i + 1];";
    match run_checked("cpu_checked_read", src, &x) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "cpu_checked_read");
            assert!(msg.contains("input `x`") && msg.contains("byte 0 past the end"), "{msg}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // Without checked mode the same read goes unnoticed.
    let k = MetalKernel::new("cpu_checked_read", &["x"], &["out"], src).unwrap();
    let input = Array::from_vec(&[64], x).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    assert!(k.call(&[(&input).into()], &spec).is_ok());
}

#[test]
fn checked_mode_reports_writes_far_outside_an_output() {
    let x = random_f32(25, 64);
    for (name, index, side) in [
        ("cpu_checked_far_before", "int(i) - 20000", "before the start"),
        ("cpu_checked_far_after", "int(i) + 5000", "past the end"),
    ] {
        let src = format!("uint i = thread_position_in_grid.x;\nout[{index}] = x[i];");
        match run_checked(name, &src, &x) {
            Err(Error::KernelFault { kernel, msg }) => {
                assert_eq!(kernel, name);
                assert!(msg.contains("output `out`") && msg.contains(side), "{msg}");
            }
            other => panic!("{name}: expected a kernel fault, got {other:?}"),
        }
    }
}

/// Runs `src` over `n` threads in groups of 64 (reading `x`, writing `out`, f32 of `n`).
fn run_plain(name: &str, src: &str, x: &[f32]) -> crate::Result<Vec<f64>> {
    let k = MetalKernel::new(name, &["x"], &["out"], src).unwrap();
    let n = x.len();
    let input = Array::from_vec(&[n], x.to_vec()).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [64, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    Ok(values(&k.call(&[(&input).into()], &spec)?[0]))
}

fn expect_fault(name: &str, result: crate::Result<Vec<f64>>, wants: &[&str]) {
    match result {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, name);
            for want in wants {
                assert!(msg.contains(want), "{name}: {msg}");
            }
        }
        other => panic!("{name}: expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn wild_accesses_are_kernel_faults_and_the_kernels_run_again() {
    let x = random_f32(26, 4096);
    // `far` is 0 in the clean runs; 1 << 40 elements (4 TiB) past `x` is mapped by nothing.
    let barrier = r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        threadgroup float buf[64];
        int64_t far = int64_t(x[0] != x[0]) << 40;
        buf[t] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = buf[63 - t];
        if (i == 4037) { v += x[far + int64_t(FAR)]; }
        out[i] = v;
    "#;
    let plain = r#"
        uint i = thread_position_in_grid.x;
        out[i] = 2.0f * x[i] + (i % 7 == 3 ? x[int64_t(i) * int64_t(FAR)] : 0.0f);
    "#;
    // In the clean runs (FAR = 0) the marked threads add x[0].
    let want_barrier: Vec<f64> = (0..4096)
        .map(|i| {
            let v = x[(i / 64) * 64 + 63 - i % 64];
            (if i == 4037 { v + x[0] } else { v }) as f64
        })
        .collect();
    let want_plain: Vec<f64> =
        (0..4096).map(|i| (2.0f32 * x[i] + if i % 7 == 3 { x[0] } else { 0.0 }) as f64).collect();
    for round in 0..8 {
        // One thread of a cooperative group faults while the others are suspended at a barrier.
        let name = "cpu_wild_read_barrier";
        let far = barrier.replace("FAR", "1099511627776");
        expect_fault(name, run_plain(name, &far, &x), &["thread (4037, 0, 0)", "outside every buffer"]);
        assert_eq!(run_plain(name, &barrier.replace("FAR", "0"), &x).unwrap(), want_barrier, "round {round}");
        // Hundreds of threads fault at once on every worker of the pool.
        let name = "cpu_wild_read_plain";
        expect_fault(name, run_plain(name, &plain.replace("FAR", "1099511627776"), &x), &["outside every buffer"]);
        assert_eq!(run_plain(name, &plain.replace("FAR", "0"), &x).unwrap(), want_plain, "round {round}");
    }
    // In checked mode too: the access is outside every guard.
    let name = "cpu_wild_read_checked";
    let src = "uint i = thread_position_in_grid.x;\nout[i] = x[int64_t(i) << 40];";
    expect_fault(name, run_checked(name, src, &x[..64]), &["outside every buffer"]);
}

#[test]
fn integer_division_by_zero_and_traps_are_kernel_faults() {
    let x = random_f32(27, 256);
    // The divisor is 0 at run time only (x * 0 does not fold under IEEE maths).
    let name = "cpu_integer_division_by_zero";
    let src = "uint i = thread_position_in_grid.x;\nint d = int(x[i] * 0.0f);\nout[i] = float(int(i) / d);";
    expect_fault(name, run_plain(name, src, &x), &["arithmetic exception"]);
    // A division by a constant zero, which the compiler replaces with a trap.
    let name = "cpu_constant_division_by_zero";
    let src = "uint i = thread_position_in_grid.x;\nint d = 0;\nout[i] = x[i] + float(int(i) / d);";
    match run_plain(name, src, &x) {
        // Whether the compiler traps, divides or folds the quotient away is its choice.
        Err(Error::KernelFault { msg, .. }) => {
            assert!(msg.contains("trap") || msg.contains("arithmetic exception"), "{msg}")
        }
        Ok(out) => assert_eq!(out.len(), 256),
        Err(other) => panic!("{name}: {other}"),
    }
    // The pool's threads still run kernels afterwards.
    let name = "cpu_after_division_faults";
    let src = "uint i = thread_position_in_grid.x;\nout[i] = x[i] * 3.0f;";
    let want: Vec<f64> = x.iter().map(|&v| (v * 3.0) as f64).collect();
    assert_eq!(run_plain(name, src, &x).unwrap(), want);
}

#[test]
fn a_fiber_stack_overflow_is_named() {
    let x = random_f32(28, 128);
    // 400 KB of private floats in a kernel with a barrier: more than a fiber's 256 KiB stack.
    let name = "cpu_fiber_stack_overflow";
    let src = r#"
        uint i = thread_position_in_grid.x;
        float tmp[100000];
        for (uint k = 0; k < 100000; ++k) { tmp[k] = x[(i + k) % 128] * float(k); }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = tmp[(i * 7919) % 100000];
    "#;
    // Threads run as fibers overflow their stack; as coroutines (where the compiler has them)
    // their frames would pass the same size.
    let msg = match run_plain(name, src, &x) {
        Err(Error::KernelFault { kernel, msg }) if kernel == name => msg,
        other => panic!("{name}: expected a kernel fault, got {other:?}"),
    };
    assert!(
        msg.contains("overflowed its fiber stack (256 KiB")
            || msg.contains(
                "needs 390 KiB of private memory per thread, over the 256 KiB a thread of a kernel with barriers"
            ),
        "{msg}"
    );
    // A barrier in a function the kernel calls keeps fibers everywhere.
    let name = "cpu_fiber_stack_overflow_in_fibers";
    let src = r#"
        uint i = thread_position_in_grid.x;
        float tmp[100000];
        for (uint k = 0; k < 100000; ++k) { tmp[k] = x[(i + k) % 128] * float(k); }
        wait_all();
        out[i] = tmp[(i * 7919) % 100000];
    "#;
    let k = MetalKernel::new(name, &["x"], &["out"], src)
        .unwrap()
        .header("void wait_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }");
    let input = Array::from_vec(&[128], x.clone()).unwrap();
    let spec = LaunchSpec::new([128, 1, 1], [64, 1, 1]).output(&[128], DType::F32).device(Device::Cpu);
    let result = k.call(&[(&input).into()], &spec).map(|out| values(&out[0]));
    expect_fault(name, result, &["overflowed its fiber stack (256 KiB"]);
}

#[test]
fn a_worker_stack_overflow_is_named_and_the_kernel_runs_again() {
    let x = random_f32(30, 128);
    // 16 MB of private floats in a kernel without barriers: its threads run on the worker
    // threads' own stacks (a few MiB), and the frame's first access lies far below them.
    let name = "cpu_worker_stack_overflow";
    let src = r#"
        uint i = thread_position_in_grid.x;
        float tmp[N];
        for (uint k = 0; k < N; ++k) { tmp[k] = x[(i + k) % 128] * float(k % 5); }
        out[i] = tmp[(i * 7919) % N];
    "#;
    for _ in 0..3 {
        expect_fault(
            name,
            run_plain(name, &src.replace('N', "4000000"), &x),
            &["overflowed its worker thread's stack"],
        );
    }
    let fits = run_plain(name, &src.replace('N', "1000"), &x).unwrap();
    let want: Vec<f64> = (0..128)
        .map(|i| {
            let k = (i * 7919) % 1000;
            (x[(i + k) % 128] * (k % 5) as f32) as f64
        })
        .collect();
    assert_eq!(fits, want);
}

#[test]
fn wide_groups_on_many_workers_share_a_bounded_set_of_fiber_stacks() {
    // 48 workers each running 1024-thread groups with a barrier would need 48 * 1024 fiber
    // stacks of two mappings each, more than Linux's default limit of 65 530 mappings: the
    // stacks are lent per call from a pool within that limit instead.
    let groups = 48 * 8;
    let x = random_f32(31, 1024 * groups);
    let src = r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        threadgroup float buf[1024];
        buf[t] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = buf[1023 - t];
    "#;
    let k = MetalKernel::new("cpu_wide_groups", &["x"], &["out"], src).unwrap();
    let input = Array::from_vec(&[x.len()], x.clone()).unwrap();
    let spec = LaunchSpec::new([x.len() as u32, 1, 1], [1024, 1, 1]).output(&[x.len()], DType::F32).device(Device::Cpu);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(48).build().unwrap();
    for _ in 0..2 {
        let out = pool.install(|| k.call(&[(&input).into()], &spec)).unwrap();
        let want: Vec<f64> = (0..x.len()).map(|i| x[i - i % 1024 + 1023 - i % 1024] as f64).collect();
        assert_eq!(values(&out[0]), want);
    }
}

#[test]
fn writes_past_an_output_are_faults_on_unchecked_launches() {
    let x = random_f32(29, 64);
    // 4096 threads write an output of 64 elements: the first write past its end touches the
    // guard after it (the writes reach 16 KB past the end, beyond where canaries alone reach).
    let k = MetalKernel::new(
        "cpu_write_past_output",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nout[i] = x[i % 64];",
    )
    .unwrap();
    let input = Array::from_vec(&[64], x.clone()).unwrap();
    let spec = LaunchSpec::new([4096, 1, 1], [64, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    for _ in 0..4 {
        match k.call(&[(&input).into()], &spec) {
            Err(Error::KernelFault { kernel, msg }) => {
                assert_eq!(kernel, "cpu_write_past_output");
                assert!(msg.contains("output `out`") && msg.contains("past the end"), "{msg}");
            }
            other => panic!("expected a kernel fault, got {other:?}"),
        }
    }
    let fits = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let out = values(&k.call(&[(&input).into()], &fits).unwrap()[0]);
    assert_eq!(out, x.iter().map(|&v| v as f64).collect::<Vec<_>>());
}

#[test]
fn small_outputs_from_the_pool_are_poisoned_afresh_and_guarded_on_both_sides() {
    // Writes the even elements only: the odd ones must hold the poison (all bits set) at every
    // launch, never what an earlier launch of the pooled buffer left there.
    let k = MetalKernel::new(
        "cpu_pooled_half",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nif (i % 2 == 0) out[i] = x[i];",
    )
    .unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    for seed in 0..6 {
        let x = random_f32(40 + seed, 64);
        let input = Array::from_vec(&[64], x.clone()).unwrap();
        let out = k.call(&[(&input).into()], &spec).unwrap()[0].to_host().unwrap().to_vec::<f32>().unwrap();
        for (i, v) in out.iter().enumerate() {
            if i % 2 == 0 {
                assert_eq!(v.to_bits(), x[i].to_bits(), "element {i} of launch {seed}");
            } else {
                assert_eq!(v.to_bits(), u32::MAX, "element {i} of launch {seed} is not the poison");
            }
        }
    }
    // Far before and just past a pooled output, on unchecked launches, again and again (a
    // launch whose guard was opened does not hand its buffer back to the pool).
    let x = random_f32(47, 64);
    for _ in 0..3 {
        for (name, index, side) in [
            ("cpu_pooled_far_before", "int(i) - 20000", "before the start"),
            ("cpu_pooled_past", "int(i) + 64", "past the end"),
        ] {
            let src = format!("uint i = thread_position_in_grid.x;\nout[{index}] = x[i];");
            expect_fault(name, run_plain(name, &src, &x), &["output `out`", side]);
        }
    }
    let clean =
        run_plain("cpu_pooled_clean", "uint i = thread_position_in_grid.x;\nout[i] = 2.0f * x[i];", &x).unwrap();
    assert_eq!(clean, x.iter().map(|&v| 2.0 * v as f64).collect::<Vec<_>>());
}

#[test]
fn concurrent_launches_of_every_kind_stay_independent() {
    // 24 workers launching at once: cooperative kernels of random group sizes (some faulting
    // in one thread), plain kernels (some writing past their output) and spinning kernels
    // stopped by their timeout. Each launch gets exactly its own result or error.
    let rounds = 4;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(24).build().unwrap();
    let src = r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        uint n = threads_per_threadgroup.x;
        threadgroup float buf[1024];
        buf[t] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = buf[n - 1 - t];
        if (x[0] < 0.0f && i == 777) { v += x[int64_t(i) << 40]; }
        out[i] = v + float(KSALT);
    "#;
    let kernels: Vec<MetalKernel> = (0..6)
        .map(|k| {
            MetalKernel::new(format!("stress{k}"), &["x"], &["out"], src.replace("KSALT", &k.to_string())).unwrap()
        })
        .collect();
    let mut seed = 12345u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut jobs = Vec::new();
    for _ in 0..rounds * 8 {
        let tg = [32u32, 64, 96, 128, 256, 512, 768, 1024][(next() % 8) as usize];
        let groups = 1 + (next() % 64) as u32;
        let fault = next() % 5 == 0;
        let k = (next() % 6) as usize;
        jobs.push((tg, groups, fault, k));
    }
    let failures = AtomicUsize::new(0);
    pool.install(|| {
        jobs.par_iter().for_each(|&(tg, groups, fault, k)| {
            let n = (tg * groups) as usize;
            let mut x: Vec<f32> = (0..n).map(|i| 1.0 + (i % 97) as f32).collect();
            if fault {
                x[0] = -1.0;
            }
            let input = Array::from_vec(&[n], x.clone()).unwrap();
            let spec = LaunchSpec::new([n as u32, 1, 1], [tg, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
            let r = kernels[k].call(&[(&input).into()], &spec);
            let ok = match (fault && n > 777, r) {
                (true, Err(Error::KernelFault { msg, .. })) => msg.contains("thread (777, 0, 0)"),
                (false, Ok(out)) => {
                    let v = out[0].to_f64_vec().unwrap();
                    (0..n).all(|i| {
                        let g = i - i % tg as usize;
                        v[i] == (x[g + tg as usize - 1 - i % tg as usize] + k as f32) as f64
                    })
                }
                (_, other) => {
                    eprintln!("tg {tg} groups {groups} fault {fault}: {:?}", other.map(|_| ()));
                    false
                }
            };
            if !ok {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    // Plain kernels writing past their output now and then (up to 16 KB past it, within the
    // guard: writes further out land in whatever is mapped there, as on a GPU), and spinning
    // kernels stopped by their timeout, all at once.
    let plain = MetalKernel::new(
        "stress_plain",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nuint j = x[0] < 0.0f ? i + 4096 : i;\nout[j] = 2.0f * x[i];",
    )
    .unwrap();
    let spin = MetalKernel::new(
        "stress_spin",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nuint n = 0;\nwhile (x[0] > 0.0f) { n++; }\nthreadgroup_barrier(mem_flags::mem_threadgroup);\nout[i] = float(n);",
    )
    .unwrap();
    pool.install(|| {
        (0..rounds * 8).into_par_iter().for_each(|j| {
            let n = 4096usize;
            let mut x: Vec<f32> = (0..n).map(|i| 1.0 + (i % 13) as f32).collect();
            let bad = j % 3 == 0;
            if bad {
                x[0] = -1.0;
            }
            let input = Array::from_vec(&[n], x.clone()).unwrap();
            let ok = if j % 4 == 1 {
                let spec = LaunchSpec::new([256, 1, 1], [64, 1, 1])
                    .output(&[256], DType::F32)
                    .device(Device::Cpu)
                    .timeout(Duration::from_millis(50));
                let x1: Vec<f32> = vec![1.0; 4];
                let i1 = Array::from_vec(&[4], x1).unwrap();
                matches!(spin.call(&[(&i1).into()], &spec), Err(Error::Timeout { .. }))
            } else {
                let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
                match (bad, plain.call(&[(&input).into()], &spec)) {
                    (true, Err(Error::KernelFault { msg, .. })) => msg.contains("past the end"),
                    (false, Ok(out)) => {
                        out[0].to_f64_vec().unwrap().iter().zip(&x).all(|(&v, &w)| v == (2.0 * w) as f64)
                    }
                    (_, other) => {
                        eprintln!("plain {j}: {:?}", other.map(|_| ()));
                        false
                    }
                }
            };
            if !ok {
                eprintln!("job {j} failed");
                failures.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    let f = failures.load(Ordering::Relaxed);
    assert_eq!(f, 0, "{f} of {} launches went wrong", jobs.len() + rounds * 8);
}
