//! How much slower a checked run (`kiln check`) is than the plain CPU run of the same call:
//! `cargo test -p kiln --test sanitizer_slowdown -- --ignored --nocapture` prints one row per
//! kernel (the numbers in `bench/results/check-slowdown.md`). Compiles are excluded (each
//! kernel runs once first in both modes); the plain run uses every core, the checked run one.

use std::time::{Duration, Instant};

use kiln::{sanitize, Array, DType, LaunchSpec, MetalKernel};

fn best_of(n: usize, mut f: impl FnMut()) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

/// A kernel to time: name, body, grid, threadgroup, output shape.
type Case = (&'static str, &'static str, [u32; 3], [u32; 3], Vec<usize>);

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn checked_runs_against_plain_runs() {
    let rows = 256usize;
    let cols = 1024usize;
    let n = rows * cols;
    let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 1000) as f64 / 500.0 - 1.0).collect();
    let a = Array::from_f64(DType::F32, &[rows, cols], &x).unwrap();
    let cases: [Case; 3] = [
        (
            "exp (elementwise)",
            "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(inp[i]);",
            [n as u32, 1, 1],
            [256, 1, 1],
            vec![rows, cols],
        ),
        (
            "row sum (threadgroup tree reduction, barriers)",
            "uint lid = thread_position_in_threadgroup.x;\nuint row = threadgroup_position_in_grid.y;\n\
             threadgroup float part[256];\nfloat acc = 0.0f;\n\
             for (uint c = lid; c < 1024; c += 256) acc += inp[row * 1024 + c];\npart[lid] = acc;\n\
             threadgroup_barrier(mem_flags::mem_threadgroup);\n\
             for (uint s = 128; s > 0; s >>= 1) {\n  if (lid < s) part[lid] += part[lid + s];\n  \
             threadgroup_barrier(mem_flags::mem_threadgroup);\n}\nif (lid == 0) out[row] = part[0];",
            [256, rows as u32, 1],
            [256, 1, 1],
            vec![rows],
        ),
        (
            "row norm (simd_sum across SIMD groups)",
            "uint lid = thread_position_in_threadgroup.x;\nuint row = threadgroup_position_in_grid.y;\n\
             uint sg = simdgroup_index_in_threadgroup;\nthreadgroup float part[8];\nfloat acc = 0.0f;\n\
             for (uint c = lid; c < 1024; c += 256) { float v = inp[row * 1024 + c]; acc += v * v; }\n\
             acc = simd_sum(acc);\nif (thread_index_in_simdgroup == 0) part[sg] = acc;\n\
             threadgroup_barrier(mem_flags::mem_threadgroup);\n\
             float total = 0.0f;\nfor (uint k = 0; k < 8; ++k) total += part[k];\n\
             for (uint c = lid; c < 1024; c += 256) out[row * 1024 + c] = inp[row * 1024 + c] * metal::rsqrt(total / 1024.0f + 1e-5f);",
            [256, rows as u32, 1],
            [256, 1, 1],
            vec![rows, cols],
        ),
    ];
    println!("| kernel | plain CPU run | checked run | slowdown |\n|---|---|---|---|");
    for (name, body, grid, tg, shape) in cases {
        let kernel = MetalKernel::new("slowdown", &["inp"], &["out"], body).unwrap();
        let spec = LaunchSpec::new(grid, tg).output(&shape, DType::F32);
        let call = || kernel.call(&[(&a).into()], &spec).unwrap();
        call();
        let (_, found) = sanitize::check(call);
        assert!(found.is_empty(), "{name}: {found:?}");
        let plain = best_of(5, || {
            call();
        });
        let checked = best_of(3, || {
            let (_, found) = sanitize::check(call);
            assert!(found.is_empty());
        });
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1}x |",
            plain.as_secs_f64() * 1e3,
            checked.as_secs_f64() * 1e3,
            checked.as_secs_f64() / plain.as_secs_f64()
        );
    }
}
