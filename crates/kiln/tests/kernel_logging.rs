//! Metal's `os_log` from kernels: on the CPU emulator the lines are exact, tagged with the thread,
//! in threadgroup order, captured with `kiln::kernel_log::capture` or printed to stderr; for
//! CUDA the same calls become device `printf` (compiled by NVRTC here; printed on a GPU by the
//! ignored test, which reads the child process's stdout); conversions Metal does not allow are
//! compile errors naming the kernel and line.

mod common;

use std::process::Command;

use common::Rng;
use kiln::backend::cuda;
use kiln::backend::Dispatch;
use kiln::{Array, DType, Device, Error, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};

const BODY: &str = r#"
    uint i = thread_position_in_grid.x;
    uint t = thread_position_in_threadgroup.x;
    os_log_default.log("i=%u x=%.5f h=%.4f neg=%d", i, x[i], h[i], -int(i));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
        os_log_default.log_debug("group %u done", threadgroup_position_in_grid.x);
    }
    out[i] = 2.0f * x[i];
"#;

fn body_kernel() -> MetalKernel {
    MetalKernel::new("log_body", &["x", "h"], &["out"], BODY).unwrap()
}

/// Runs the body kernel over `n` threads in groups of 4; returns (out, x, h).
fn run_body(device: Device, rng: &mut Rng, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let x = Array::from_f64(DType::F32, &[n], &rng.normals(n, 1.0)).unwrap();
    let h = Array::from_f64(DType::F16, &[n], &rng.normals(n, 1.0)).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [4, 1, 1]).output(&[n], DType::F32).device(device);
    let out = body_kernel().call(&[common::on(device, &x), common::on(device, &h)], &spec).unwrap();
    let out = out[0].to_host().unwrap().to_f64_vec().unwrap();
    (out, x.to_f64_vec().unwrap(), h.to_f64_vec().unwrap())
}

/// The lines of the body kernel, group by group: every thread's line, then (after the barrier)
/// the group's debug line.
fn body_lines(x: &[f64], h: &[f64]) -> Vec<String> {
    let mut lines = Vec::new();
    for g in 0..x.len() / 4 {
        for t in 0..4 {
            let i = g * 4 + t;
            lines.push(format!(
                "[log_body tg({g},0,0) t({t},0,0)] i={i} x={:.5} h={:.4} neg={}",
                x[i],
                h[i],
                -(i as i64)
            ));
        }
        lines.push(format!("[log_body tg({g},0,0) t(0,0,0)] debug: group {g} done"));
    }
    lines
}

#[test]
fn cpu_lines_are_exact_and_in_group_order() {
    let mut rng = Rng::new(0x05_1065);
    // 64 groups, so the launch is split over workers and their lines are put back in order.
    let ((out, x, h), text) = kiln::kernel_log::capture(|| run_body(Device::Cpu, &mut rng, 256));
    let want: Vec<f64> = x.iter().map(|v| 2.0 * v).collect();
    assert_eq!(out, want);
    let got: Vec<&str> = text.lines().collect();
    let want = body_lines(&x, &h);
    assert_eq!(got, want);
    assert!(text.ends_with('\n'));
}

const FILE: &str = r#"
#include <metal_stdlib>
#include <metal_logging>
using namespace metal;

constant os_log logger("com.kiln.test", "reduce");

void report(constant os_log& log, float4 v) {
    log.log_info("v=%v4hlf", v);
}

kernel void log_kinds(device const float4* v [[buffer(0)]],
                      device const long* big [[buffer(1)]],
                      device float* out [[buffer(2)]],
                      uint i [[thread_position_in_grid]],
                      uint3 g [[threadgroup_position_in_grid]]) {
    if (i == 1) {
        logger.log_error("big=%ld neg=%x small=%hhu c=%c s=%s pct=100%% w=[%5d|%-4u]", big[0], -2, 300, 'k', "const", 42, 7u);
        short2 s = short2(short(-3), short(i));
        os_log_default.log_with_type(os_log_type_fault,
                                     "s=%v2hd e=%.2e g=%g", s,
                                     v[i].x, 0.5f);
        metal::os_log_default.log("%s", "plain");
    }
    if (i == 2) {
        report(logger, v[i]);
        logger.log("z=%u", g.z);
    }
    out[i] = v[i].x + v[i].y + v[i].z + v[i].w;
}
"#;

#[test]
fn cpu_custom_logs_levels_vectors_and_lengths() {
    let mut rng = Rng::new(0x10_6f11e);
    let v = rng.normals(16, 1.0);
    let big: i64 = -(1i64 << 40) - 12345;
    let args = [
        LibraryArg::Array(Array::from_f64(DType::F32, &[4, 4], &v).unwrap()),
        LibraryArg::Array(Array::from_vec(&[1], vec![big]).unwrap()),
        LibraryArg::Output { shape: vec![4], dtype: DType::F32, init_value: None },
    ];
    let launch = LibraryLaunch::new("log_kinds", Dispatch::Threads([4, 1, 1]), [2, 1, 1]);
    let lib = MetalLibrary::new("log_file", FILE);
    let (out, text) = kiln::kernel_log::capture(|| lib.dispatch(Device::Cpu, &args, &launch));
    let out = out.unwrap()[0].to_f64_vec().unwrap();
    let sums: Vec<f64> = (0..4).map(|i| v[4 * i..4 * i + 4].iter().map(|&a| a as f32).sum::<f32>() as f64).collect();
    for (o, s) in out.iter().zip(&sums) {
        assert!((o - s).abs() <= 1e-5 * s.abs().max(1.0), "{out:?} vs {sums:?}");
    }
    let tag1 = "[log_file:log_kinds tg(0,0,0) t(1,0,0)]";
    let tag2 = "[log_file:log_kinds tg(1,0,0) t(0,0,0)]";
    let want = vec![
        format!(
            "{tag1} error: com.kiln.test/reduce: big={big} neg=fffffffe small=44 c=k s=const pct=100% w=[   42|7   ]"
        ),
        format!("{tag1} fault: s=-3,1 e={} g=0.5", c_exp(v[4])),
        format!("{tag1} plain"),
        format!(
            "{tag2} info: com.kiln.test/reduce: v={:.6},{:.6},{:.6},{:.6}",
            v[8] as f32, v[9] as f32, v[10] as f32, v[11] as f32
        ),
        format!("{tag2} com.kiln.test/reduce: z=0"),
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}

/// C's `%.2e` of `x` (as a float).
fn c_exp(x: f64) -> String {
    let s = format!("{:.2e}", x as f32 as f64);
    let (mantissa, exp) = s.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// Asserts `r` is kiln's compile error for `kernel` naming `at` (e.g. `body line 2, column 1`)
/// with the line's text `text` and a caret under column `column`, and saying `what`.
#[track_caller]
fn assert_names_the_line<T: std::fmt::Debug>(
    r: kiln::Result<T>,
    kernel: &str,
    at: &str,
    text: &str,
    column: usize,
    what: &str,
) {
    match r {
        Err(Error::Compile { kernel: k, log, .. }) => {
            assert_eq!(k, kernel);
            assert!(log.contains(&format!("{at}: ")), "names {at}: {log}");
            let gutter = at.split(',').next().unwrap();
            let caret = format!("  {} | {}^", " ".repeat(gutter.len()), " ".repeat(column - 1));
            assert!(log.contains(&format!("  {gutter} | {text}\n{caret}")), "quotes the line with a caret: {log}");
            assert!(log.contains(what), "{log} lacks {what}");
        }
        other => panic!("{at}: expected a compile error, got {other:?}"),
    }
}

#[test]
fn unsupported_conversions_are_compile_errors_with_the_line() {
    let cases = [
        ("os_log_default.log(\"%n\", 1);", "%n"),
        ("os_log_default.log(\"%*d\", 3, 1);", "`*`"),
        ("os_log_default.log(\"%v4d\", int4(1));", "length"),
        ("os_log_default.log(\"%d %d\", 1);", "2 conversion(s) but 1 argument(s)"),
        ("os_log_default.log(\"%Lf\", 1.0f);", "%Lf"),
    ];
    for (call, what) in cases {
        // The call is the body's second line, indented by two spaces.
        let body = format!("uint i = thread_position_in_grid.x;\n  {call}\nout[i] = x[i];\n");
        let k = MetalKernel::new("bad_log", &["x"], &["out"], &body).unwrap();
        let x = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).device(Device::Cpu);
        let program = k.program(&k.generate(std::slice::from_ref(&x), &spec).unwrap());
        let text = format!("  {call}");
        assert_names_the_line(k.call(&[(&x).into()], &spec), "bad_log", "body line 2, column 3", &text, 3, what);
        // CUDA refuses it while lowering, before NVRTC runs.
        assert_names_the_line(
            cuda::compile_cubin(&program, (9, 0)),
            "bad_log",
            "body line 2, column 3",
            &text,
            3,
            what,
        );
    }
}

#[test]
fn refused_conversions_in_a_header_or_a_metal_file_name_that_line() {
    let header = "inline void note(uint i) {\n    os_log_default.log(\"%n\", i);\n}\n";
    let body = "uint i = thread_position_in_grid.x;\nnote(i);\nout[i] = x[i];\n";
    let k = MetalKernel::new("bad_header_log", &["x"], &["out"], body).unwrap().header(header);
    let x = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).device(Device::Cpu);
    let program = k.program(&k.generate(std::slice::from_ref(&x), &spec).unwrap());
    let text = "    os_log_default.log(\"%n\", i);";
    let at = "header line 2, column 5";
    assert_names_the_line(k.call(&[(&x).into()], &spec), "bad_header_log", at, text, 5, "%n");
    assert_names_the_line(cuda::compile_cubin(&program, (9, 0)), "bad_header_log", at, text, 5, "%n");

    let file = "#include <metal_stdlib>\nusing namespace metal;\n\nkernel void k(device float* y [[buffer(0)]],\n              uint i [[thread_position_in_grid]]) {\n    os_log_default.log(\"%d %d\", 1);\n    y[i] = 1.0f;\n}\n";
    let library = MetalLibrary::new("bad_file_log", file);
    let launch = LibraryLaunch::new("k", Dispatch::Threads([4, 1, 1]), [4, 1, 1]);
    let out = LibraryArg::Output { shape: vec![4], dtype: DType::F32, init_value: None };
    let text = "    os_log_default.log(\"%d %d\", 1);";
    let at = "source line 6, column 5";
    let what = "2 conversion(s) but 1 argument(s)";
    assert_names_the_line(library.dispatch(Device::Cpu, &[out], &launch), "bad_file_log:k", at, text, 5, what);
    assert_names_the_line(cuda::compile_cubin(&library.program(&launch), (9, 0)), "bad_file_log:k", at, text, 5, what);
}

#[test]
fn nested_captures_take_their_own_launches() {
    let mut rng = Rng::new(7);
    let ((_, inner), outer) = kiln::kernel_log::capture(|| {
        let _ = run_body(Device::Cpu, &mut rng, 4);
        kiln::kernel_log::capture(|| run_body(Device::Cpu, &mut rng, 8))
    });
    assert_eq!(outer.lines().count(), 5);
    assert_eq!(inner.lines().count(), 10);
}

/// The name of this test binary's test `name`, run alone in a child process; returns its
/// (stdout, stderr).
fn run_child(name: &str) -> (String, String) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", name, "--include-ignored", "--nocapture", "--test-threads=1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{name} failed: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Prints the body kernel's lines (run by `cpu_lines_reach_stderr` in a child process).
#[test]
#[ignore = "a child process of cpu_lines_reach_stderr"]
fn child_cpu_prints() {
    let mut rng = Rng::new(0xc41d);
    let (_, x, h) = run_body(Device::Cpu, &mut rng, 8);
    println!("expected-lines:{}", body_lines(&x, &h).join("|"));
}

#[test]
fn cpu_lines_reach_stderr() {
    let (stdout, stderr) = run_child("child_cpu_prints");
    let want = stdout
        .lines()
        .find_map(|l| l.split_once("expected-lines:").map(|(_, w)| w))
        .unwrap_or_else(|| panic!("{stdout}"));
    let got: Vec<&str> = stderr.lines().filter(|l| l.starts_with("[log_body ")).collect();
    assert_eq!(got.join("|"), want);
}

#[test]
fn nvrtc_compiles_logging_calls() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let x = Array::from_f64(DType::F32, &[8], &[0.5; 8]).unwrap();
    let h = Array::from_f64(DType::F16, &[8], &[0.5; 8]).unwrap();
    let spec = LaunchSpec::new([8, 1, 1], [4, 1, 1]).output(&[8], DType::F32);
    let k = body_kernel();
    let generated = k.generate(&[x, h], &spec).unwrap();
    let body = k.program(&generated);
    let mut file = MetalLibrary::new("log_file", FILE).program(&LibraryLaunch::new(
        "log_kinds",
        Dispatch::Threads([4, 1, 1]),
        [2, 1, 1],
    ));
    file.function = "log_kinds".into();
    for program in [body, file] {
        let source = cuda::translate(&program).unwrap();
        assert!(source.contains("kiln::oslog::set_group(gx, gy, gz);"), "{}", program.kernel);
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}\n{source}"));
        assert_eq!(&cubin[..4], b"\x7fELF");
    }
    let source = cuda::translate(&k.program(&generated)).unwrap();
    assert!(source.contains(r#"i=%llu x=%.5f h=%.4f neg=%lld\n""#), "formats widen for printf");
    assert!(source.contains("kiln::oslog::float_arg(kiln_log_2)"), "a half goes through float to double");
}

/// Prints the body kernel's lines from the GPU (run by `cuda_lines_reach_stdout`).
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn child_cuda_prints() {
    let Some(device) = common::device_or_skip("cuda") else { return };
    let mut rng = Rng::new(0xc0da);
    let (out, x, h) = run_body(device, &mut rng, 16);
    assert_eq!(out, x.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    eprintln!("expected-lines:{}", body_lines(&x, &h).join("|"));
}

/// Device printf writes to the process's stdout (fd 1) at synchronisation, out of reach of an
/// in-process capture: the kernel runs in a child process whose stdout is read here. The GPU
/// orders lines between threads as it likes, so they are compared as sets; each is whole.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_lines_reach_stdout() {
    if common::device_or_skip("cuda").is_none() {
        return;
    }
    let (stdout, stderr) = run_child("child_cuda_prints");
    let want = stderr.lines().find_map(|l| l.split_once("expected-lines:").map(|(_, w)| w)).unwrap();
    let mut want: Vec<&str> = want.split('|').collect();
    // The test harness prints "test child_cuda_prints ... " on stdout before the test runs, so
    // the first line the GPU prints may share that line.
    let mut got: Vec<&str> = stdout.lines().filter_map(|l| l.find("[log_body ").map(|at| &l[at..])).collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
}

/// A stand-in log type (as MLX's logging shim for Metal before 3.2 declares) logs through the default
/// log.
#[test]
fn cpu_stand_in_log_types_log_as_the_default() {
    let header = r#"
namespace mlx {
struct os_log {
  constexpr os_log(constant char*, constant char*) {}
  template <typename... Args>
  void log_debug(constant char*, Args...) const constant {}
};
}
constant mlx::os_log logger("mlx", "shim");
"#;
    let body = "uint i = thread_position_in_grid.x;\nlogger.log_debug(\"v=%d\", int(i) - 7);\nout[i] = x[i];\n";
    let k = MetalKernel::new("shim", &["x"], &["out"], body).unwrap().header(header);
    let x = Array::from_f64(DType::F32, &[2], &[0.5, -1.5]).unwrap();
    let spec = LaunchSpec::new([2, 1, 1], [2, 1, 1]).output(&[2], DType::F32).device(Device::Cpu);
    let (out, text) = kiln::kernel_log::capture(|| k.call(&[(&x).into()], &spec));
    assert_eq!(out.unwrap()[0].to_f64_vec().unwrap(), vec![0.5, -1.5]);
    assert_eq!(text, "[shim tg(0,0,0) t(0,0,0)] debug: v=-7\n[shim tg(0,0,0) t(1,0,0)] debug: v=-6\n");
}
