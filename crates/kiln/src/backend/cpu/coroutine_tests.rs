//! Kernels whose threads run as coroutines (`lower::coroutines`, prelude/cpu/runtime.h): each
//! runs beside the same kernel with its barriers and SIMD-group calls moved into helper
//! functions (which keeps fibers), over groups that fill SIMD-groups, leave one partial, and a
//! last group cut short; results bit for bit alike and matching a plain Rust reference where
//! one is cheap. Also: which kernels qualify, a kernel GCC refuses as a coroutine built with
//! fibers instead, and a compile error still named on the user's line.

use crate::check::Rng;
use crate::source::lower::{lower, LowerTarget};
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

/// Helpers that keep fibers: a barrier, SIMD-group calls, in functions the kernel calls.
const FIBER_HELPERS: &str = "inline void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }\n\
    template <class T> T lanesum(T v) { return simd_sum(v); }\n\
    template <class T> T lanedown(T v, ushort d) { return simd_shuffle_down(v, d); }\n\
    template <class T> T lanescan(T v) { return simd_prefix_exclusive_sum(v); }\n\
    inline simd_vote::vote_t laneballot(bool b) { return (simd_vote::vote_t)simd_ballot(b); }\n\
    inline void sync_lanes() { simdgroup_barrier(mem_flags::mem_none); }\n";

/// `body` written with the helpers' names, as called directly (coroutines).
fn direct(body: &str) -> String {
    body.replace("sync_all()", "threadgroup_barrier(mem_flags::mem_threadgroup)")
        .replace("lanesum(", "simd_sum(")
        .replace("lanedown(", "simd_shuffle_down(")
        .replace("lanescan(", "simd_prefix_exclusive_sum(")
        .replace("laneballot(", "(simd_vote::vote_t)simd_ballot(")
        .replace("sync_lanes()", "simdgroup_barrier(mem_flags::mem_none)")
}

/// Runs `body` both ways over `n` floats in groups of `tg`; returns (coroutines, fibers), after
/// checking that exactly the first lowers to coroutines.
fn both(name: &str, body: &str, x: &[f32], tg: u32) -> (Vec<f32>, Vec<f32>) {
    let n = x.len();
    let input = Array::from_vec(&[n], x.to_vec()).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [tg, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);
    let run = |kernel: MetalKernel, coroutines: bool| {
        let generated = kernel.generate(std::slice::from_ref(&input), &spec).unwrap();
        let module = lower(&kernel.program(&generated), LowerTarget::Cpu).unwrap();
        assert_eq!(module.coroutines, coroutines, "{name}: lowered with coroutines {}", module.coroutines);
        kernel.call(&[(&input).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap()
    };
    let co = run(MetalKernel::new(format!("{name}_co"), &["x"], &["out"], direct(body)).unwrap(), true);
    let fibers = MetalKernel::new(format!("{name}_fibers"), &["x"], &["out"], body).unwrap().header(FIBER_HELPERS);
    (co, run(fibers, false))
}

fn same_bits(name: &str, tg: u32, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert_eq!(p.to_bits(), q.to_bits(), "{name}, groups of {tg}: element {i}: coroutines {p}, fibers {q}");
    }
}

/// Text no earlier run wrote (the time and this process).
fn fresh_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos} {}", std::process::id())
}

fn inputs(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.normal() as f32).collect()
}

/// Group sizes: whole SIMD-groups, a partial one, one thread, and with `n` a last group cut
/// short.
const GROUPS: [u32; 5] = [32, 96, 100, 256, 1];

#[test]
fn a_tree_reduction_with_a_barrier_in_its_loop_matches_fibers_and_the_reference() {
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
        threadgroup float buf[256];
        buf[t] = x[i];
        sync_all();
        uint width = 1;
        while (width < n) width <<= 1;
        for (uint s = width / 2; s > 0; s >>= 1) {
            if (t < s && t + s < n) buf[t] += buf[t + s];
            sync_all();
        }
        out[i] = buf[0] + float(t);
    "#;
    let x = inputs(1, 1000);
    for tg in GROUPS {
        let (co, fibers) = both("cpu_co_tree", body, &x, tg);
        same_bits("cpu_co_tree", tg, &co, &fibers);
        for (g, chunk) in x.chunks(tg as usize).enumerate() {
            let mut buf = chunk.to_vec();
            let width = chunk.len().next_power_of_two();
            let mut s = width / 2;
            while s > 0 {
                for t in 0..s.min(chunk.len()) {
                    if t + s < chunk.len() {
                        buf[t] += buf[t + s];
                    }
                }
                s /= 2;
            }
            for t in 0..chunk.len() {
                let got = co[g * tg as usize + t];
                assert_eq!(got.to_bits(), (buf[0] + t as f32).to_bits(), "group {g} of {tg}, thread {t}");
            }
        }
    }
}

#[test]
fn early_returns_divergent_and_looped_collectives_match_fibers() {
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup, lane = thread_index_in_simdgroup;
        threadgroup float buf[256];
        if (x[i] > 1.5f) { out[i] = -7.0f; return; }
        float v = x[i];
        if (lane < 20) v = lanesum(v);
        for (uint k = 0; k < lane % 3 + 1; ++k) v += lanedown(v, ushort(k + 1));
        v += lanescan(x[i]);
        uint votes = uint(laneballot(x[i] > 0.0f));
        sync_lanes();
        buf[t] = v;
        sync_all();
        out[i] = buf[(t + 5) % threads_per_threadgroup.x] + float(popcount(votes));
    "#;
    let x = inputs(2, 1000);
    for tg in GROUPS {
        let (co, fibers) = both("cpu_co_divergent", body, &x, tg);
        same_bits("cpu_co_divergent", tg, &co, &fibers);
        for (i, &v) in x.iter().enumerate() {
            if v > 1.5 {
                assert_eq!(co[i], -7.0, "element {i}");
            }
        }
    }
}

#[test]
fn a_row_norm_with_simd_sums_and_threadgroup_memory_matches_fibers_and_the_reference() {
    // The seed's RMSNorm shape: a strided sum per thread, simd_sum, partial sums through
    // threadgroup memory between barriers, then every element scaled.
    let body = r#"
        uint row = threadgroup_position_in_grid.x, t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
        uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
        threadgroup float partial[32];
        const uint D = 64;
        float acc = 0.0f;
        for (uint j = t; j < D; j += n) { float v = x[row * D + j]; acc += v * v; }
        acc = lanesum(acc);
        if (lane == 0) partial[sg] = acc;
        sync_all();
        if (sg == 0) {
            float p = lane < (n + 31) / 32 ? partial[lane] : 0.0f;
            p = lanesum(p);
            if (lane == 0) partial[0] = p;
        }
        sync_all();
        float scale = 1.0f / sqrt(partial[0] / float(D) + 1e-5f);
        for (uint j = t; j < D; j += n) out[row * D + j] = x[row * D + j] * scale;
    "#;
    let x = inputs(3, 64 * 12);
    for tg in [64u32, 96] {
        let rows = 12usize;
        let input = Array::from_vec(&[64 * rows], x.clone()).unwrap();
        let spec =
            LaunchSpec::new([tg * rows as u32, 1, 1], [tg, 1, 1]).output(&[64 * rows], DType::F32).device(Device::Cpu);
        let call = |k: MetalKernel| {
            let generated = k.generate(std::slice::from_ref(&input), &spec).unwrap();
            let coroutines = lower(&k.program(&generated), LowerTarget::Cpu).unwrap().coroutines;
            assert_eq!(coroutines, k.name().ends_with("_co"), "{}", k.name());
            k.call(&[(&input).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap()
        };
        let co = call(MetalKernel::new("cpu_co_norm_co", &["x"], &["out"], direct(body)).unwrap());
        let fibers =
            call(MetalKernel::new("cpu_co_norm_fibers", &["x"], &["out"], body).unwrap().header(FIBER_HELPERS));
        same_bits("cpu_co_norm", tg, &co, &fibers);
        let (mut err, mut norm) = (0f64, 0f64);
        for r in 0..rows {
            let row = &x[r * 64..(r + 1) * 64];
            let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / 64.0;
            for (j, &v) in row.iter().enumerate() {
                let want = v as f64 / (ms + 1e-5).sqrt();
                err += (co[r * 64 + j] as f64 - want).powi(2);
                norm += want * want;
            }
        }
        assert!((err / norm).sqrt() < 1e-6, "relative L2 error {}", (err / norm).sqrt());
    }
}

#[test]
fn a_kernel_the_compiler_refuses_as_a_coroutine_runs_with_fibers() {
    // `co_await` may not stand in an unevaluated operand: the unit is built again with fibers.
    // A fresh source each run, so that it is built here rather than found in the disk cache.
    let body = format!(
        "uint i = thread_position_in_grid.x; // {}\nthreadgroup_barrier(mem_flags::mem_threadgroup);\n\
         out[i] = x[i] + float(sizeof(simd_sum(x[i])));",
        fresh_tag()
    );
    let k = MetalKernel::new("cpu_co_refused", &["x"], &["out"], body).unwrap();
    let x = inputs(4, 64);
    let input = Array::from_vec(&[64], x.clone()).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let generated = k.generate(std::slice::from_ref(&input), &spec).unwrap();
    assert!(lower(&k.program(&generated), LowerTarget::Cpu).unwrap().coroutines);
    let refused = super::compile::built_with_fibers_instead_on_this_thread();
    let out = k.call(&[(&input).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap();
    for (o, v) in out.iter().zip(&x) {
        assert_eq!(*o, v + 4.0);
    }
    // Refused as coroutines only where the compiler has them (else built with fibers at once).
    let has_coroutines = super::toolchain::host_compiler(&crate::config::host_cxx()).unwrap().coroutines;
    let again = super::compile::built_with_fibers_instead_on_this_thread() - refused;
    assert_eq!(again, u64::from(has_coroutines), "built again {again} times");
    // A kernel that does not compile either way is reported on its own line.
    let broken = "uint i = thread_position_in_grid.x;\nthreadgroup_barrier(mem_flags::mem_threadgroup);\nout[i] = x[i] + no_such_name;";
    match MetalKernel::new("cpu_co_broken", &["x"], &["out"], broken).unwrap().call(&[(&input).into()], &spec) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("no_such_name") && log.contains("line 3"), "{log}"),
        other => panic!("expected a compile error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_kernel_template_instantiated_by_host_name_runs_as_coroutines() {
    use crate::kernel::{LibraryArg, LibraryLaunch, MetalLibrary};
    let source = format!("// {}\n", fresh_tag())
        + r#"
        #include <metal_stdlib>
        using namespace metal;
        template <typename T>
        [[kernel]] void reverse_groups(device const T* x [[buffer(0)]], device T* out [[buffer(1)]],
                                       uint i [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                                       uint n [[threads_per_threadgroup]]) {
            threadgroup T buf[256];
            buf[t] = x[i];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            out[i] = buf[n - 1 - t] + simd_sum(T(1));
        }
        template [[host_name("reverse_groups_float")]] [[kernel]] void reverse_groups<float>(
            device const float* x [[buffer(0)]], device float* out [[buffer(1)]], uint i [[thread_position_in_grid]],
            uint t [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]);
    "#;
    let library = MetalLibrary::new("cpu_co_template", source);
    let launch = LibraryLaunch::threads("reverse_groups_float", [128u32, 1, 1], [64u32, 1, 1]);
    let module = lower(&library.program(&launch), LowerTarget::Cpu).unwrap();
    assert!(module.coroutines);
    let x = inputs(5, 128);
    let args = [
        LibraryArg::Array(Array::from_vec(&[128], x.clone()).unwrap()),
        LibraryArg::Output { shape: vec![128], dtype: DType::F32, init_value: None },
    ];
    let (refused, opened) =
        (super::compile::built_with_fibers_instead_on_this_thread(), super::compile::libraries_opened_on_this_thread());
    let out = library.dispatch(Device::Cpu, &args, &launch).unwrap()[0].to_vec::<f32>().unwrap();
    for (i, o) in out.iter().enumerate() {
        let g = i - i % 64;
        assert_eq!(*o, x[g + 63 - i % 64] + 32.0, "element {i}");
    }
    // Built here, as coroutines (where the compiler has them), not again with fibers.
    assert!(super::compile::libraries_opened_on_this_thread() > opened);
    assert_eq!(super::compile::built_with_fibers_instead_on_this_thread(), refused);
}
