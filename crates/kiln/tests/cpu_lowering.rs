//! The MSL lowering and the CPU backend on full `.metal` files (mlx-native style): explicit
//! `[[buffer(n)]]` slots, `constant Params&` structs, dynamic `[[threadgroup(n)]]` memory,
//! file-scope `constant` tables, `template [[host_name]]` instantiations and function
//! constants; plus the typed errors (invalid MSL with the user's line, a missing compiler).

mod common;

use common::{assert_close, random_array, Rng};
use kiln::backend::cpu::CpuBackend;
use kiln::backend::{
    backend_for, Binding, ConstantKey, ConstantValue, Dispatch, Launch, MetalProgram, OutputSpec, ProgramKind,
};
use kiln::source::lower::{lower, AddressSpace, EntryParam, LowerTarget};
use kiln::{DType, Device, Error, MathMode};

const SCALED_ROWSUM: &str = r#"
#include <metal_stdlib>
using namespace metal;

struct Params {
    uint rows;
    uint cols;
    float scale;
};

constant float kBias[4] = {0.5f, -1.0f, 2.0f, 0.25f};
constant bool kUseBias [[function_constant(0)]];

// One threadgroup per row: strided partial sums in dynamic threadgroup memory, then a tree.
template <typename T>
kernel void row_sum(
    device const T* x [[buffer(0)]],
    device float* out [[buffer(1)]],
    constant Params& p [[buffer(2)]],
    threadgroup float* partial [[threadgroup(0)]],
    uint row [[threadgroup_position_in_grid]],
    uint t [[thread_position_in_threadgroup]],
    uint n [[threads_per_threadgroup]]) {
  float acc = 0.0f;
  for (uint c = t; c < p.cols; c += n) {
    acc += float(x[row * p.cols + c]);
  }
  partial[t] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (t < s) {
      partial[t] += partial[t + s];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (t == 0) {
    float bias = is_function_constant_defined(kUseBias) && kUseBias ? kBias[row % 4] : 0.0f;
    out[row] = partial[0] * p.scale + bias;
  }
}

template [[host_name("row_sum_f32")]] kernel void row_sum<float>(
    device const float*, device float*, constant Params&, threadgroup float*, uint, uint, uint);
template [[host_name("row_sum_f16")]] [[kernel]] decltype(row_sum<half>) row_sum<half>;
"#;

fn program(function: &str, constants: Vec<(ConstantKey, ConstantValue)>) -> MetalProgram {
    MetalProgram {
        kernel: "row_sum".into(),
        source: SCALED_ROWSUM.into(),
        kind: ProgramKind::FullFile,
        function: function.into(),
        math_mode: MathMode::Safe,
        constants,
    }
}

#[test]
fn lowering_describes_full_file_entries() {
    // A whole file's unit describes only the entry it dispatches; each host name has its own.
    let f32_unit = lower(&program("row_sum_f32", vec![]), LowerTarget::Cpu).unwrap();
    let names: Vec<&str> = f32_unit.entries.iter().map(|e| e.host_name.as_str()).collect();
    assert_eq!(names, vec!["row_sum_f32"]);
    assert_eq!(f32_unit.entry("row_sum_f32").unwrap().callee, "row_sum<float>");
    let m = lower(&program("row_sum_f16", vec![]), LowerTarget::Cpu).unwrap();
    let names: Vec<&str> = m.entries.iter().map(|e| e.host_name.as_str()).collect();
    assert_eq!(names, vec!["row_sum_f16"]);
    let e = m.entry("row_sum_f16").unwrap();
    assert_eq!(e.callee, "row_sum<half>");
    assert_eq!(
        e.params[2],
        EntryParam::Buffer {
            name: "p".into(),
            index: 2,
            pointee: "Params".into(),
            space: AddressSpace::Constant,
            is_const: true,
            by_ref: true
        }
    );
    assert!(matches!(&e.params[3], EntryParam::Threadgroup { index: 0, pointee, .. } if pointee == "float"));
    assert!(
        matches!(&e.params[4], EntryParam::Builtin { attribute, .. } if attribute == "threadgroup_position_in_grid")
    );
    assert!(m.needs_cooperative_threads);
    // Lines stay where they were, so compiler messages point at the user's text.
    assert_eq!(m.code.lines().count(), SCALED_ROWSUM.lines().count());
    assert!(!m.code.contains("[[") && !m.code.contains("device "));
}

fn run_row_sum(dtype: DType, function: &str, use_bias: bool) {
    let (rows, cols, scale) = (6usize, 100usize, 0.75f32);
    let mut rng = Rng::new(21);
    let x = random_array(&mut rng, dtype, &[rows, cols]);
    let mut params = Vec::new();
    params.extend((rows as u32).to_le_bytes());
    params.extend((cols as u32).to_le_bytes());
    params.extend(scale.to_le_bytes());
    let constants = if use_bias { vec![(ConstantKey::Index(0), ConstantValue::Bool(true))] } else { vec![] };
    let prog = program(function, constants);
    let backend = backend_for(Device::Cpu).unwrap();
    let out = backend
        .launch(&Launch {
            program: &prog,
            bindings: vec![
                Binding::Array(x.clone()),
                Binding::Output(OutputSpec { shape: vec![rows].into(), dtype: DType::F32, init_value: None }),
                Binding::Bytes(params.into()),
            ],
            dispatch: Dispatch::Threadgroups([rows as u32, 1, 1]),
            threadgroup: [32, 1, 1],
            threadgroup_memory: vec![32 * 4],
            timeout: None,
            cancel: None,
            stream: None,
            memo: None,
        })
        .unwrap();
    let xv = x.to_f64_vec().unwrap();
    let bias = [0.5, -1.0, 2.0, 0.25];
    let want: Vec<f64> = (0..rows)
        .map(|r| {
            let s: f64 = xv[r * cols..(r + 1) * cols].iter().sum();
            s * scale as f64 + if use_bias { bias[r % 4] } else { 0.0 }
        })
        .collect();
    assert_close(function, &out[0], &want, DType::F32);
}

#[test]
fn full_file_template_instantiations_run_with_params_and_threadgroup_memory() {
    run_row_sum(DType::F32, "row_sum_f32", false);
    run_row_sum(DType::F16, "row_sum_f16", false);
}

#[test]
fn function_constants_take_their_values_from_the_program() {
    run_row_sum(DType::F32, "row_sum_f32", true);
}

#[test]
fn invalid_msl_reports_the_users_line() {
    let src = "#include <metal_stdlib>\nusing namespace metal;\n\nkernel void f(device float* o [[buffer(0)]],\n uint i [[thread_position_in_grid]]) {\n  o[i] = undefined_name;\n}\n";
    let prog = MetalProgram {
        kernel: "broken".into(),
        source: src.into(),
        kind: ProgramKind::FullFile,
        function: "f".into(),
        math_mode: MathMode::Safe,
        constants: vec![],
    };
    let err = launch_one_output(&prog).unwrap_err();
    match err {
        Error::Compile { kernel, log, .. } => {
            assert_eq!(kernel, "broken");
            // The message names the user's line with an excerpt and a caret, not the generated unit's.
            assert!(log.contains("source line 6, column 10:"), "log should name line 6 of the user's file: {log}");
            assert!(log.contains("o[i] = undefined_name;"), "log should quote the line: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// Runs function `f` of `prog` on the CPU: four threads writing one output of four floats.
fn launch_one_output(prog: &MetalProgram) -> kiln::Result<Vec<kiln::Array>> {
    backend_for(Device::Cpu).unwrap().launch(&Launch {
        program: prog,
        bindings: vec![Binding::Output(OutputSpec { shape: vec![4].into(), dtype: DType::F32, init_value: None })],
        dispatch: Dispatch::Threads([4, 1, 1]),
        threadgroup: [4, 1, 1],
        threadgroup_memory: vec![],
        timeout: None,
        cancel: None,
        stream: None,
        memo: None,
    })
}

#[test]
fn a_function_declared_but_never_defined_is_an_error_at_load() {
    // The host compiler accepts the call (a shared library may leave symbols to others); the
    // library is loaded with every symbol bound, so the launch fails instead of the process
    // dying at the call.
    let src = "#include <metal_stdlib>\nusing namespace metal;\nfloat only_declared(float x);\n\
               kernel void f(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n\
               o[i] = only_declared(float(i));\n}\n";
    let prog = MetalProgram {
        kernel: "undefined_symbol".into(),
        source: src.into(),
        kind: ProgramKind::FullFile,
        function: "f".into(),
        math_mode: MathMode::Safe,
        constants: vec![],
    };
    let err = launch_one_output(&prog).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("undefined symbol") && text.contains("only_declared"), "{text}");
}

#[test]
fn missing_compiler_is_a_typed_error() {
    match CpuBackend::with_compiler("/nonexistent/kiln-test-c++") {
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "cpu");
            assert!(reason.contains("kiln-test-c++"));
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
}

#[test]
fn translate_emits_the_lowered_cpp() {
    let text = kiln::backend::cpu::translate(&program("row_sum_f32", vec![])).unwrap();
    assert!(text.contains("#line 1 \"row_sum.metal\""));
    assert!(text.contains("kiln_run"));
    assert!(text.contains("row_sum<float>"));
}
