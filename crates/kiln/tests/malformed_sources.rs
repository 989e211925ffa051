//! Sources cut short or left open (a `/*` comment, a string or character literal, a bracket, a
//! `#if` group) are refused by the translator with an error that names the user's own line, on
//! every path a kernel takes: `MetalKernel::call` and `MetalLibrary::dispatch` on the CPU,
//! `backend::translate` for host C++ and CUDA (`kiln translate`), and a spec file's run (`kiln
//! run`). None of them panics.

mod common;

use std::path::Path;

use kiln::backend::{translate, Dispatch, MetalProgram, ProgramKind, Target};
use kiln::{Array, DType, Error, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel, MetalLibrary};
use kiln_tools::spec::KernelSpec;

/// Asserts `r` is the translator's error for `kernel` whose log holds `message`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: kiln::Result<T>, kernel: &str, message: &str) {
    match r {
        Err(Error::Compile { backend, kernel: k, log }) => {
            assert_eq!((backend, k.as_str()), ("translate", kernel), "{log}");
            assert!(log.contains(message), "expected {message:?} in:\n{log}");
        }
        other => panic!("expected {message:?}, got {other:?}"),
    }
}

/// Open things in a body, with the message the translator gives.
const OPEN_IN_BODIES: [(&str, &str); 9] = [
    ("  out[0] = inp[0]; /* left open", "body line 1, column 20: this `/*` comment is never closed by `*/`"),
    (
        "  out[0] = inp[0];\n  if (inp[0] > 0.0f) {\n    out[0] = 2.0f;",
        "body line 2, column 22: this `{` is never closed",
    ),
    ("  out[0] = inp[0]; }\n  out[1] = 1.0f;", "body line 1, column 20: this `}` closes no `{`"),
    ("  out[0] = metal::exp(inp[0];", "body line 1, column 22: this `(` is never closed"),
    ("  out[0] = inp[0 + (1];", "body line 1, column 20: this `(` is not closed before a `]`"),
    (
        "  os_log_default.log(\"x = %f, inp[0]);\n  out[0] = 1.0f;",
        "body line 1, column 22: this string literal is never closed",
    ),
    ("  char c = 'a;\n  out[0] = c;", "body line 1, column 12: this character literal is never closed"),
    ("#if 1\n  out[0] = inp[0];", "body line 1: `#if` without `#endif`"),
    ("  out[0] = inp[0];\n#endif", "body line 2: `#endif` without `#if`"),
];

#[test]
fn body_kernels_left_open_are_refused_with_the_body_line_on_the_cpu() {
    let device = common::device_or_skip("cpu").expect("the CPU backend");
    let inp = Array::from_vec(&[4], vec![1.5f32, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[2], DType::F32);
    for (body, message) in OPEN_IN_BODIES {
        let kernel = MetalKernel::new("open", &["inp"], &["out"], body).unwrap();
        assert_refused(kernel.call(&[common::on(device, &inp)], &spec), "open", message);
    }
    // A header's bracket left open is the header's line, not the body's.
    let kernel = MetalKernel::new("open_header", &["inp"], &["out"], "  out[0] = inp[0];")
        .unwrap()
        .header("inline float twice(float v) {\n  return v * 2.0f;\n");
    assert_refused(
        kernel.call(&[common::on(device, &inp)], &spec),
        "open_header",
        "header line 1, column 29: this `{` is never closed",
    );
}

/// A file whose kernel `k` holds `body` (from line 5).
fn file(body: &str) -> String {
    format!(
        "#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* y [[buffer(0)]],\n              uint i [[thread_position_in_grid]]) {{\n{body}\n}}\n"
    )
}

const OPEN_IN_FILES: [(&str, &str); 6] = [
    ("  /* y[i] = 1.0f;", "source line 5, column 3: this `/*` comment is never closed by `*/`"),
    ("  y[i] = 1.0f; /*/", "source line 5, column 16: this `/*` comment is never closed"),
    ("  y[i] = \"x;", "source line 5, column 10: this string literal is never closed"),
    ("  if (i < 4) {\n    y[i] = 1.0f;", "source line 5, column 14: this `{` is never closed"),
    ("  y[i] = 1.0f;\n  }\n  }", "source line 7, column 3: this `}` closes no `{`"),
    ("#if __METAL_VERSION__ >= 300\n  y[i] = 1.0f;", "source line 5: `#if` without `#endif`"),
];

#[test]
fn full_files_left_open_are_refused_with_their_line_on_every_path() {
    let device = common::device_or_skip("cpu").expect("the CPU backend");
    for (body, message) in OPEN_IN_FILES {
        let source = file(body);
        let library = MetalLibrary::new("open", source.as_str());
        let launch = LibraryLaunch::new("k", Dispatch::Threads([4, 1, 1]), [4, 1, 1]);
        let out = [LibraryArg::Output { shape: vec![4], dtype: DType::F32, init_value: None }];
        assert_refused(library.dispatch(device, &out, &launch), "open:k", message);
        let program = MetalProgram {
            kernel: "open".into(),
            source,
            kind: ProgramKind::FullFile,
            function: "k".into(),
            math_mode: MathMode::Safe,
            constants: vec![],
        };
        for target in [Target::Cpu, Target::Cuda] {
            assert_refused(translate(&program, target), "open", message);
        }
    }
}

#[test]
fn spec_files_left_open_are_refused_when_run_and_translated() {
    let text = "[kernel]\nname = \"open\"\ninput_names = []\noutput_names = [\"out\"]\nsource = '''\n  out[0] = 1.0f; /* left open\n'''\n\n[call]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\noutput_shapes = [[1]]\noutput_dtypes = [\"float32\"]\n";
    let spec = KernelSpec::parse(Path::new("open.toml"), text).unwrap();
    let message = "body line 1, column 18: this `/*` comment is never closed";
    assert_refused(spec.run(kiln::Device::Cpu), "open", message);
    for target in [Target::Cpu, Target::Cuda] {
        assert_refused(spec.translate(target), "open", message);
    }
}
