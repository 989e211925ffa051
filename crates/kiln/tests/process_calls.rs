//! Calls that would end, signal or leave the process that runs a kernel (`exit`, `abort`,
//! `raise`, `longjmp`, ...) are refused when the kernel is translated, on every target, with an
//! error naming the call on the user's own line: on the CPU the kernel runs inside the caller's
//! process, which such a call would end. Names the program defines itself (a helper, a method)
//! are the program's and run.

mod common;

use kiln::backend::{translate, Dispatch, MetalProgram, ProgramKind, Target};
use kiln::{Array, DType, Error, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel, MetalLibrary};

/// Asserts `r` is the translator's error for `kernel` whose log names `call` at `at`
/// (`body line 2, column 5`, say).
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: kiln::Result<T>, kernel: &str, call: &str, at: &str) {
    match r {
        Err(Error::Compile { backend, kernel: k, log }) => {
            assert_eq!((backend, k.as_str()), ("translate", kernel), "{log}");
            assert!(log.contains(&format!("{at}: `{call}` ")), "{call} at {at}:\n{log}");
            assert!(log.contains("a kernel cannot use it"), "{log}");
        }
        other => panic!("expected `{call}` to be refused, got {other:?}"),
    }
}

fn call_body(name: &str, body: &str) -> kiln::Result<Vec<Array>> {
    let device = common::device_or_skip("cpu").expect("the CPU backend");
    let kernel = MetalKernel::new(name, &["inp"], &["out"], body)?;
    let inp = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0])?;
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    kernel.call(&[common::on(device, &inp)], &spec)
}

fn dispatch_file(name: &str, source: &str) -> kiln::Result<Vec<Array>> {
    let device = common::device_or_skip("cpu").expect("the CPU backend");
    let library = MetalLibrary::new(name, source);
    let x = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0])?;
    let args = [LibraryArg::Array(x), LibraryArg::Output { shape: vec![4], dtype: DType::F32, init_value: None }];
    library.dispatch(device, &args, &LibraryLaunch::new("k", Dispatch::Threads([4, 1, 1]), [4, 1, 1]))
}

/// A file whose kernel `k` runs `body` (after `header`) over `x` and `y`; the body starts on
/// line 4 plus the header's lines.
fn file(header: &str, body: &str) -> String {
    format!(
        "#include <metal_stdlib>\nusing namespace metal;\n{header}\nkernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],\n                uint i [[thread_position_in_grid]]) {{\n{body}\n}}\n"
    )
}

fn program(source: &str) -> MetalProgram {
    MetalProgram {
        kernel: "calls".into(),
        source: source.into(),
        kind: ProgramKind::FullFile,
        function: "k".into(),
        math_mode: MathMode::Safe,
        constants: vec![],
    }
}

#[test]
fn body_kernels_that_end_the_process_are_refused_on_the_cpu() {
    for (body, call, at) in [
        (
            "  uint i = thread_position_in_grid.x;\n  if (inp[i] > 3.0f) exit(7);\n  out[i] = inp[i];",
            "exit",
            "body line 2, column 22",
        ),
        ("  abort();", "abort", "body line 1, column 3"),
        ("  out[0] = 1.0f;\n  __builtin_abort();", "__builtin_abort", "body line 2, column 3"),
        ("  std::terminate();", "std::terminate", "body line 1, column 8"),
        ("  raise(9);", "raise", "body line 1, column 3"),
        ("  kill(0, 9);", "kill", "body line 1, column 3"),
        ("  system(\"rm -rf /tmp/x\");", "system", "body line 1, column 3"),
        ("  __builtin_trap();", "__builtin_trap", "body line 1, column 3"),
        ("  out[0] = 0.0f; throw 1;", "throw", "body line 1, column 18"),
    ] {
        assert_refused(call_body("ends", body), "ends", call, at);
    }
    // A macro that expands to such a call is refused where it is used.
    let kernel = MetalKernel::new("by_macro", &["inp"], &["out"], "  out[0] = inp[0];\n  STOP;")
        .unwrap()
        .header("#define STOP _Exit(3)\n");
    let inp = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32);
    assert_refused(
        kernel.call(&[common::on(kiln::Device::Cpu, &inp)], &spec),
        "by_macro",
        "_Exit",
        "body line 2, column 3",
    );
}

#[test]
fn full_files_that_end_the_process_are_refused_on_the_cpu() {
    let cases = [
        (file("", "  if (x[i] < 0.0f) quick_exit(1);\n  y[i] = x[i];"), "quick_exit", "source line 6, column 20"),
        (file("void stop() { std::exit(2); }", "  stop();"), "std::exit", "source line 3, column 20"),
        (file("", "  pthread_kill(pthread_self(), 11);"), "pthread_kill", "source line 6, column 3"),
        (file("", "  signal(11, nullptr);"), "signal", "source line 6, column 3"),
        (file("", "  sigaction(11, nullptr, nullptr);"), "sigaction", "source line 6, column 3"),
        (file("", "  atexit(nullptr);"), "atexit", "source line 6, column 3"),
        (file("", "  fork();"), "fork", "source line 6, column 3"),
        (file("", "  execl(\"/bin/sh\", \"sh\", nullptr);"), "execl", "source line 6, column 3"),
        (file("", "  jmp_buf b;\n  if (setjmp(b)) return;\n  longjmp(b, 1);"), "setjmp", "source line 7, column 7"),
        (file("extern \"C\" int _exit(int);", "  _exit(0);"), "_exit", "source line 6, column 3"),
    ];
    for (source, call, at) in cases {
        assert_refused(dispatch_file("calls", &source), "calls:k", call, at);
    }
}

#[test]
fn every_target_refuses_them_when_translating() {
    let source = file("", "  y[i] = x[i];\n  at_quick_exit(nullptr);");
    for target in [Target::Cpu, Target::Cuda] {
        assert_refused(translate(&program(&source), target), "calls", "at_quick_exit", "source line 7, column 3");
    }
    let trap = file("", "  __trap();");
    assert_refused(translate(&program(&trap), Target::Cuda), "calls", "__trap", "source line 6, column 3");
    let assembly = file("", "  asm volatile(\"trap;\");");
    assert_refused(translate(&program(&assembly), Target::Cuda), "calls", "asm", "source line 6, column 3");
}

#[test]
fn the_programs_own_functions_members_and_macros_of_those_names_run() {
    // A helper, a method, a variable holding a lambda and a namespaced function, each named
    // like a refused call, and a macro that renames one.
    let header = r#"
float raise(float v) { return v * 2.0f; }
struct Stop { float k; float kill() const { return k + 1.0f; } };
namespace mine { inline float exit(float v) { return v - 1.0f; } }
#define abort(v) ((v) * 10.0f)
"#;
    let body = "  Stop s = {x[i]};\n  auto signal = [](float v) { return v + 100.0f; };\n  y[i] = raise(x[i]) + s.kill() + mine::exit(x[i]) + signal(0.0f) + abort(1.0f);";
    let out = dispatch_file("own", &file(header, body)).unwrap();
    let got = out[0].to_host().unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f32> =
        [1.5f32, 2.0, 3.0, 4.0].iter().map(|x| 2.0 * x + (x + 1.0) + (x - 1.0) + 100.0 + 10.0).collect();
    assert_eq!(got, want);
    // The same names in a body kernel's header and body.
    let kernel = MetalKernel::new(
        "own_body",
        &["inp"],
        &["out"],
        "  uint i = thread_position_in_grid.x;\n  Stop s = {inp[i]};\n  out[i] = raise(inp[i]) + s.kill();",
    )
    .unwrap()
    .header(header);
    let inp = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    let out = kernel.call(&[common::on(kiln::Device::Cpu, &inp)], &spec).unwrap();
    let got = out[0].to_host().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(got, [1.5f32, 2.0, 3.0, 4.0].map(|x| 2.0 * x + x + 1.0));
}
