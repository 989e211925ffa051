//! Barrier-free kernels through their direct loop (`prelude/cpu/runtime.h`, `run_direct`): the
//! builtins of every thread of partial 1-D, 2-D and 3-D groups, results bit for bit those of the
//! per-thread path (which checked launches keep), faults naming their thread (or, where running
//! the group again does not repeat the fault, their span of threads), no multiply-add contracted
//! in any math mode, and timeouts and cancellation stopping a kernel of many short threads or
//! one long one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::CheckedScope;
use crate::check::Rng;
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

/// The builtins a thread writes, in this order (`uint3` ones as three values).
const BUILTINS: [(&str, usize); 20] = [
    ("thread_position_in_grid", 3),
    ("threadgroup_position_in_grid", 3),
    ("thread_position_in_threadgroup", 3),
    ("threads_per_threadgroup", 3),
    ("dispatch_threads_per_threadgroup", 3),
    ("threadgroups_per_grid", 3),
    ("threads_per_grid", 3),
    ("grid_size", 3),
    ("grid_origin", 3),
    ("thread_index_in_threadgroup", 1),
    ("simdgroup_index_in_threadgroup", 1),
    ("thread_index_in_simdgroup", 1),
    ("threads_per_simdgroup", 1),
    ("thread_execution_width", 1),
    ("simdgroups_per_threadgroup", 1),
    ("dispatch_simdgroups_per_threadgroup", 1),
    ("quadgroup_index_in_threadgroup", 1),
    ("thread_index_in_quadgroup", 1),
    ("quadgroups_per_threadgroup", 1),
    ("dispatch_quadgroups_per_threadgroup", 1),
];
const VALUES: usize = 38;

/// What Metal gives each builtin of the thread at `pos` of a dispatch of `grid` threads in
/// groups of `tg`, in `BUILTINS` order.
fn metal_builtins(pos: [u32; 3], grid: [u32; 3], tg: [u32; 3]) -> Vec<u32> {
    let gid = [0, 1, 2].map(|d| pos[d] / tg[d]);
    let local = [0, 1, 2].map(|d| pos[d] % tg[d]);
    let size = [0, 1, 2].map(|d| tg[d].min(grid[d] - gid[d] * tg[d]));
    let groups = [0, 1, 2].map(|d| grid[d].div_ceil(tg[d]));
    let n = size.iter().product::<u32>();
    let nd = tg.iter().product::<u32>();
    let i = (local[2] * size[1] + local[1]) * size[0] + local[0];
    let mut v = Vec::with_capacity(VALUES);
    for three in [pos, gid, local, size, tg, groups, grid, grid, [0; 3]] {
        v.extend(three);
    }
    v.extend([i, i / 32, i % 32, 32, 32, n.div_ceil(32), nd.div_ceil(32), i / 4, i % 4, n.div_ceil(4), nd.div_ceil(4)]);
    v
}

fn builtins_kernel() -> MetalKernel {
    let mut src = format!(
        "uint3 p = thread_position_in_grid;\n\
         uint at = ((p.z * threads_per_grid.y + p.y) * threads_per_grid.x + p.x) * {VALUES};\n"
    );
    let mut k = 0;
    for (name, width) in BUILTINS {
        if width == 3 {
            for c in ["x", "y", "z"] {
                src.push_str(&format!("out[at + {k}] = uint({name}.{c});\n"));
                k += 1;
            }
        } else {
            src.push_str(&format!("out[at + {k}] = uint({name});\n"));
            k += 1;
        }
    }
    assert_eq!(k, VALUES);
    MetalKernel::new("cpu_direct_builtins", &[], &["out"], src).unwrap()
}

#[test]
fn barrier_free_builtins_have_metal_values_on_partial_1d_2d_and_3d_groups() {
    let kernel = builtins_kernel();
    for (grid, tg) in [
        ([1000, 1, 1], [256, 1, 1]),
        ([70, 1, 1], [32, 1, 1]),
        ([37, 11, 1], [16, 4, 1]),
        ([37, 11, 5], [8, 4, 3]),
        ([5, 9, 7], [1, 4, 2]),
        ([100, 3, 2], [40, 3, 1]),
    ] {
        let threads = grid.iter().map(|&g| g as usize).product::<usize>();
        let spec = LaunchSpec::new(grid, tg).output(&[threads * VALUES], DType::U32).device(Device::Cpu);
        let direct = kernel.call(&[], &spec).unwrap()[0].to_vec::<u32>().unwrap();
        let per_thread = {
            let _checked = CheckedScope::enter();
            kernel.call(&[], &spec).unwrap()[0].to_vec::<u32>().unwrap()
        };
        assert_eq!(direct, per_thread, "grid {grid:?} tg {tg:?}: direct loop against per-thread path");
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    let at = (((z * grid[1] + y) * grid[0] + x) as usize) * VALUES;
                    let want = metal_builtins([x, y, z], grid, tg);
                    assert_eq!(&direct[at..at + VALUES], &want[..], "thread ({x}, {y}, {z}) grid {grid:?} tg {tg:?}");
                }
            }
        }
    }
}

/// Bodies over `x` (f32) and `k` (i32) writing `out` (f32), each a different mix of rounding,
/// conversions, libm calls, integer arithmetic and threadgroup memory without barriers.
const BODIES: [&str; 6] = [
    "out[i] = metal::exp(x[i]);",
    "out[i] = x[i] / (1.0f + metal::abs(x[(i * 7) % n])) + metal::sqrt(metal::abs(x[i])) * 0.1f;",
    "out[i] = metal::fmin(x[i], 0.5f) * metal::fmax(x[i], -0.25f) - metal::rsqrt(1.0f + x[i] * x[i]);",
    "int a = k[i]; out[i] = float(a / 3 + (a % 5)) + float(int(x[i] * 100.0f)) + float(uint(a) >> 3) * 1e-3f;",
    "threadgroup float t[256]; uint l = thread_index_in_threadgroup; t[l] = x[i] * 3.0f; out[i] = t[l] + metal::tanh(x[i]) + float(half(x[i]));",
    "float s = 0.0f; for (uint j = 0; j < (i % 17); ++j) { s += x[(i + j) % n] * float(j); } out[i] = s + metal::log(1.0f + metal::abs(x[i]));",
];

#[test]
fn barrier_free_results_are_bit_exact_against_the_per_thread_path() {
    let mut rng = Rng::new(43);
    let n = 4099usize;
    let x: Vec<f32> = (0..n).map(|_| (rng.normal() * 4.0) as f32).collect();
    let k: Vec<i32> = (0..n).map(|_| (rng.normal() * 1e6) as i32).collect();
    let xa = Array::from_vec(&[n], x).unwrap();
    let ka = Array::from_vec(&[n], k).unwrap();
    for (b, body) in BODIES.iter().enumerate() {
        let src = format!("uint i = thread_position_in_grid.y * 64 + thread_position_in_grid.x;\nuint n = {n};\nif (i < n) {{ {body} }}");
        let kernel = MetalKernel::new(format!("cpu_direct_exact_{b}"), &["x", "k"], &["out"], src).unwrap();
        // 2-D: 64 wide, partial groups in both dimensions; outputs past `n` keep their init value.
        let rows = n.div_ceil(64) as u32;
        for tg in [[64, 4, 1], [16, 3, 1], [256, 1, 1]] {
            let spec = LaunchSpec::new([64, rows, 1], tg).output(&[n], DType::F32).init_value(-7.0).device(Device::Cpu);
            let inputs = [(&xa).into(), (&ka).into()];
            let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
            let direct = bits(&kernel.call(&inputs, &spec).unwrap()[0]);
            let per_thread = {
                let _checked = CheckedScope::enter();
                bits(&kernel.call(&inputs, &spec).unwrap()[0])
            };
            assert_eq!(direct, per_thread, "body {b} tg {tg:?}");
        }
    }
}

#[test]
fn a_fault_in_a_barrier_free_kernel_names_its_thread() {
    let x = Array::from_vec(&[64], vec![1.0f32; 64]).unwrap();
    let src = "uint2 p = thread_position_in_grid.xy;\n\
               int64_t far = (p.x == 37 && p.y == 5) ? (int64_t(1) << 40) : 0;\n\
               out[p.y * 64 + p.x] = x[far + (p.x % 64)];";
    let kernel = MetalKernel::new("cpu_direct_fault", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([64, 8, 1], [16, 4, 1]).output(&[512], DType::F32).device(Device::Cpu);
    for _ in 0..3 {
        match kernel.call(&[(&x).into()], &spec) {
            Err(Error::KernelFault { msg, .. }) => {
                assert!(msg.starts_with("thread (37, 5, 0)") && msg.contains("outside every buffer"), "{msg}")
            }
            other => panic!("expected a kernel fault, got {other:?}"),
        }
    }
    let ok = LaunchSpec::new([64, 8, 1], [16, 4, 1]).output(&[512], DType::F32).device(Device::Cpu);
    let clean =
        MetalKernel::new("cpu_direct_fault_clean", &["x"], &["out"], "out[thread_position_in_grid.x] = x[0];").unwrap();
    assert!(clean.call(&[(&x).into()], &ok).is_ok());
}

#[test]
fn a_fault_the_threads_rerun_does_not_repeat_names_their_span() {
    // The 41st thread to count faults; when the group runs again thread by thread to name it,
    // the count has moved on and nothing faults: the message names the span of 32 threads the
    // fault came from (thread 40 is the 41st to run, in index order; one group, one OS thread).
    let x = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    let src = "uint i = thread_position_in_grid.x;\n\
               uint n = c[0];\n\
               c[0] = n + 1u;\n\
               ulong far = n == 40u ? (1ul << 40) : 0ul;\n\
               c[1] += uint(x[far + i % 4u]);";
    let kernel = MetalKernel::new("cpu_direct_fault_once", &["x"], &["c"], src).unwrap();
    let spec = LaunchSpec::new([256, 1, 1], [256, 1, 1]).output(&[2], DType::U32).init_value(0.0).device(Device::Cpu);
    match kernel.call(&[(&x).into()], &spec) {
        Err(Error::KernelFault { msg, .. }) => {
            assert!(msg.starts_with("one of threads (32..63, 0, 0)") && msg.contains("outside every buffer"), "{msg}")
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // The same with an atomic counter: such kernels run a thread per iteration, and the fault
    // names its thread.
    let src = "uint i = thread_position_in_grid.x;\n\
               uint n = atomic_fetch_add_explicit(&c[0], 1u, memory_order_relaxed);\n\
               ulong far = n == 40u ? (1ul << 40) : 0ul;\n\
               atomic_fetch_add_explicit(&c[1], uint(x[far + i % 4u]), memory_order_relaxed);";
    let kernel = MetalKernel::new("cpu_direct_fault_atomic", &["x"], &["c"], src).unwrap().atomic_outputs(true);
    match kernel.call(&[(&x).into()], &spec) {
        Err(Error::KernelFault { msg, .. }) => assert!(msg.starts_with("thread (40, 0, 0)"), "{msg}"),
        other => panic!("expected a kernel fault, got {other:?}"),
    }
}

#[test]
fn no_math_mode_contracts_a_multiply_and_an_add() {
    // (1 + 2^-12)^2 - 1: 2^-11 with the product rounded first, 2^-11 + 2^-24 fused. Kernels are
    // built for this machine's CPU, which may have fused multiply-adds; no mode uses them.
    let a = Array::from_vec(&[64], vec![1.0 + 2f32.powi(-12); 64]).unwrap();
    let src = "uint i = thread_position_in_grid.x;\nout[i] = a[i] * a[i] + c;";
    for mode in [crate::MathMode::Safe, crate::MathMode::Relaxed, crate::MathMode::Fast] {
        let kernel = MetalKernel::new(format!("cpu_no_contraction_{}", mode.name()), &["a", "c"], &["out"], src)
            .unwrap()
            .math_mode(mode);
        let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
        let out = kernel.call(&[(&a).into(), crate::KernelInput::Float(-1.0)], &spec).unwrap();
        let got = out[0].to_vec::<f32>().unwrap();
        assert!(got.iter().all(|&v| v == 2f32.powi(-11)), "{}: {:?}", mode.name(), &got[..4]);
    }
}

#[test]
fn timeouts_and_cancellation_stop_long_barrier_free_kernels() {
    let x = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    // 2^34 threads without loops: stopped between chunks of threads.
    let many = MetalKernel::new(
        "cpu_direct_many_threads",
        &["x"],
        &["out"],
        "uint3 p = thread_position_in_grid;\nout[(p.x ^ p.y) & 1023u] = x[p.y & 3u] + float(p.x);",
    )
    .unwrap();
    // One thread that never ends: stopped by the poll in its loop.
    let spin = MetalKernel::new(
        "cpu_direct_spin",
        &["x"],
        &["out"],
        "uint n = 0;\nwhile (x[0] > 0.0f) { n++; }\nout[thread_position_in_grid.x] = float(n);",
    )
    .unwrap();
    let grid = [1u32 << 17, 1 << 17, 1];
    for (kernel, grid) in [(&many, grid), (&spin, [64, 1, 1])] {
        let spec = LaunchSpec::new(grid, [256.min(grid[0]), 1, 1])
            .output(&[1024], DType::F32)
            .timeout(Duration::from_millis(100))
            .device(Device::Cpu);
        let start = Instant::now();
        match kernel.call(&[(&x).into()], &spec) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(10), "stopped after {:?}", start.elapsed());
        let flag = Arc::new(AtomicBool::new(false));
        let spec = LaunchSpec::new(grid, [256.min(grid[0]), 1, 1])
            .output(&[1024], DType::F32)
            .cancel(flag.clone())
            .device(Device::Cpu);
        let start = Instant::now();
        let result = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                flag.store(true, Ordering::SeqCst);
            });
            kernel.call(&[(&x).into()], &spec)
        });
        assert!(matches!(result, Err(Error::Interrupted { .. })), "expected an interruption, got {result:?}");
        assert!(start.elapsed() < Duration::from_secs(10), "stopped after {:?}", start.elapsed());
    }
}

#[test]
fn only_barrier_free_entries_get_a_direct_loop() {
    let plain = MetalKernel::new("cpu_direct_unit", &["x"], &["out"], "out[0] = x[0];").unwrap();
    // (A SIMD-group call in a loop: no region form either.)
    let collective = MetalKernel::new(
        "cpu_direct_unit_simd",
        &["x"],
        &["out"],
        "float v = 0.0f;\nfor (int k = 0; k < 2; ++k) v += simd_sum(x[k]);\nout[0] = v;",
    )
    .unwrap();
    let x = Array::from_vec(&[1], vec![1.0f32]).unwrap();
    let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[1], DType::F32).device(Device::Cpu);
    let unit = |k: &MetalKernel| {
        let generated = k.generate(std::slice::from_ref(&x), &spec).unwrap();
        super::translate(&k.program(&generated)).unwrap()
    };
    let (plain, collective) = (unit(&plain), unit(&collective));
    assert!(plain.contains("run_groups(kiln_body_0, kiln_direct_0, false,"));
    assert!(collective.contains("run_groups(kiln_body_0, kiln_regions_0, true,"));
    assert!(collective.contains("#define kiln_regions_0 nullptr"));
    // Only the barrier-free kernel's code is compiled as by -O3 and without semantic
    // interposition.
    let pragma = "#pragma GCC optimize (\"O3\", \"no-semantic-interposition\")";
    assert!(plain.contains(pragma) && !collective.contains(pragma));
}

#[test]
fn large_outputs_keep_their_guards_and_their_aprons_read_as_zeros() {
    let n = 1usize << 20;
    let x = Array::from_vec(&[n], (0..n).map(|i| i as f32).collect()).unwrap();
    // A write past the end of a 4 MiB output reaches its guard (which lies in the apron).
    let past = MetalKernel::new(
        "cpu_direct_large_past",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nout[i + (x[0] == 0.0f ? 64u : 0u)] = x[i];",
    )
    .unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    match past.call(&[(&x).into()], &spec) {
        Err(Error::KernelFault { msg, .. }) => {
            assert!(msg.contains("output `out`") && msg.contains("past the end"), "{msg}")
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // A clean run's output is the host array itself; the bytes around it read as zeros.
    let copy = MetalKernel::new(
        "cpu_direct_large_copy",
        &["x"],
        &["out"],
        "out[thread_position_in_grid.x] = x[thread_position_in_grid.x] + 1.0f;",
    )
    .unwrap();
    let y = copy.call(&[(&x).into()], &spec).unwrap().remove(0);
    assert_eq!(y.to_vec::<f32>().unwrap(), (0..n).map(|i| i as f32 + 1.0).collect::<Vec<_>>());
    let edges = MetalKernel::new(
        "cpu_direct_large_edges",
        &["y"],
        &["out"],
        "int64_t far = int64_t(thread_position_in_grid.x) * 4096 + 1;\nout[thread_position_in_grid.x * 2] = y[-far];\nout[thread_position_in_grid.x * 2 + 1] = y[int64_t(y_shape[0]) - 1 + far];",
    )
    .unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[128], DType::F32).device(Device::Cpu);
    assert_eq!(edges.call(&[(&y).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap(), vec![0.0; 128]);
}
