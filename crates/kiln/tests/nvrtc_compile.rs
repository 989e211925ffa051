//! Every representative kernel is lowered to CUDA and compiled by NVRTC to sm_90 cubin, with no
//! GPU and no CUDA toolkit headers. Skips with a message when NVRTC cannot be loaded, unless
//! `KILN_REQUIRE_BACKEND=nvrtc` (CI), which turns that into a failure. Point the tests at
//! NVRTC with `KILN_NVRTC_LIBRARY=$(scripts/install-nvrtc.sh)`.

mod common;

use kiln::backend::cuda;
use kiln::backend::{MetalProgram, ProgramKind};
use kiln::{Array, CudaKernel, DType, LaunchSpec, MathMode, MetalKernel, TemplateArg, TemplateName};

const ARCH: cuda::Arch = (9, 0);

fn assert_compiles(program: &MetalProgram) {
    let cubin = cuda::compile_cubin(program, ARCH).unwrap_or_else(|e| {
        let source = cuda::translate(program).unwrap_or_default();
        panic!("{e}\n---- generated CUDA ----\n{source}")
    });
    // An ELF image: NVRTC produced SASS for sm_90, not an empty or PTX result.
    assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
}

/// (name, inputs, outputs, body, header, template, input dtypes and shapes)
struct Body {
    name: &'static str,
    inputs: &'static [&'static str],
    outputs: &'static [&'static str],
    source: &'static str,
    header: &'static str,
    template: Vec<(TemplateName, TemplateArg)>,
    arrays: Vec<Array>,
    atomic: bool,
}

fn body(
    name: &'static str,
    inputs: &'static [&'static str],
    outputs: &'static [&'static str],
    source: &'static str,
) -> Body {
    Body { name, inputs, outputs, source, header: "", template: Vec::new(), arrays: Vec::new(), atomic: false }
}

fn f32s(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_f64(DType::F32, shape, &(0..n).map(|i| i as f64 * 0.25 - 1.0).collect::<Vec<_>>()).unwrap()
}

fn program_of(b: &Body, out_dtype: DType) -> MetalProgram {
    let k = MetalKernel::new(b.name, b.inputs, b.outputs, b.source).unwrap().header(b.header).atomic_outputs(b.atomic);
    let mut spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]);
    for _ in b.outputs {
        spec = spec.output(&[64], out_dtype);
    }
    spec.template = b.template.iter().cloned().collect();
    let generated = k.generate(&b.arrays, &spec).unwrap();
    k.program(&generated)
}

fn mlx_bodies() -> Vec<Body> {
    let t = |name: &'static str, d: DType| (TemplateName::from(name), TemplateArg::DType(d));
    vec![
        // T1: elementwise exp with a dtype template.
        Body {
            template: vec![t("T", DType::F16)],
            arrays: vec![Array::from_f64(DType::F16, &[4, 16], &[0.5; 64]).unwrap()],
            ..body("t1_exp", &["inp"], &["out"], "uint elem = thread_position_in_grid.x;\nT tmp = inp[elem];\nout[elem] = metal::exp(tmp);\n")
        },
        // T2: strided access through shape/strides.
        Body {
            arrays: vec![f32s(&[4, 16])],
            ..body(
                "t2_strided",
                &["inp"],
                &["out"],
                "uint elem = thread_position_in_grid.x;\nint64_t loc = 0;\nuint rest = elem;\nfor (int d = inp_ndim - 1; d >= 0; --d) { loc += (rest % inp_shape[d]) * inp_strides[d]; rest /= inp_shape[d]; }\nout[elem] = inp[loc] * 2.0f;\n",
            )
        },
        // T3: simd reductions and threadgroup memory with barriers.
        Body {
            arrays: vec![f32s(&[64])],
            ..body(
                "t3_reduce",
                &["x"],
                &["out"],
                "threadgroup float partial[32];\nuint lane = thread_index_in_simdgroup;\nuint sg = simdgroup_index_in_threadgroup;\nfloat v = simd_sum(x[thread_position_in_grid.x]);\nif (lane == 0) partial[sg] = v;\nthreadgroup_barrier(mem_flags::mem_threadgroup);\nfloat m = simd_max(partial[lane % 2]);\nout[thread_position_in_grid.x] = v + m;\n",
            )
        },
        // T4: atomic outputs with init_value.
        Body {
            atomic: true,
            arrays: vec![f32s(&[64])],
            ..body(
                "t4_atomic",
                &["x"],
                &["out"],
                "atomic_fetch_add_explicit(&out[thread_position_in_grid.x % 4], x[thread_position_in_grid.x], memory_order_relaxed);\n",
            )
        },
        // T5: scalar (constant reference) input and an integer template.
        Body {
            template: vec![("N".into(), TemplateArg::Int(4))],
            arrays: vec![f32s(&[64]), Array::scalar(3.5f32)],
            ..body(
                "t5_scalar",
                &["x", "s"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nfloat acc = 0;\nfor (int k = 0; k < N; ++k) acc += x[i] * s;\nout[i] = acc;\n",
            )
        },
        // T6: bfloat arithmetic, as_type and a header helper.
        Body {
            header: "template <typename U> U twice(U v) { return v + v; }\n",
            template: vec![t("T", DType::BF16)],
            arrays: vec![Array::from_f64(DType::BF16, &[64], &[1.5; 64]).unwrap()],
            ..body(
                "t6_bf16",
                &["x"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nT v = twice(x[i]);\nuint bits = as_type<uint>(float(v));\nout[i] = T(float(v) + float(bits & 1u));\n",
            )
        },
        // T7: shuffles and prefix sums.
        Body {
            arrays: vec![f32s(&[64])],
            ..body(
                "t7_shuffle",
                &["x"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nfloat v = x[i];\nout[i] = simd_shuffle_down(v, 1u) + simd_shuffle_xor(v, 2u) + simd_prefix_exclusive_sum(v) + simd_broadcast(v, 0);\n",
            )
        },
        // T8: early return and threads_per_threadgroup.
        Body {
            arrays: vec![f32s(&[64])],
            ..body(
                "t8_return",
                &["x"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nif (i >= 60) return;\nout[i] = x[i] + float(threads_per_threadgroup.x) + float(threadgroup_position_in_grid.x);\n",
            )
        },
        // T9: 8- and 64-bit integers and static_cast.
        Body {
            arrays: vec![Array::from_vec(&[64], (0..64).map(|i| i as i8).collect::<Vec<i8>>()).unwrap()],
            ..body(
                "t9_ints",
                &["x"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nint64_t wide = static_cast<int64_t>(x[i]) * 3;\nout[i] = static_cast<float>(wide) + static_cast<float>(uint8_t(x[i]));\n",
            )
        },
        // T10: fast:: and precise:: maths, float4 vectors.
        Body {
            arrays: vec![f32s(&[64])],
            ..body(
                "t10_vec",
                &["x"],
                &["out"],
                "uint i = thread_position_in_grid.x;\nfloat4 v = float4(x[i], 1.0f, 2.0f, 3.0f);\nout[i] = fast::exp(v.x) + precise::exp(v.y) + metal::max(v.z, v.w) + dot(v, v);\n",
            )
        },
    ]
}

#[test]
fn mlx_bodies_compile_to_sm90_cubin() {
    if !common::nvrtc_or_skip() {
        return;
    }
    for b in mlx_bodies() {
        let out = if b.template.iter().any(|(_, a)| matches!(a, TemplateArg::DType(DType::BF16))) {
            DType::BF16
        } else {
            DType::F32
        };
        assert_compiles(&program_of(&b, out));
    }
}

#[test]
fn fast_math_programs_compile() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let mut p = program_of(&mlx_bodies().remove(0), DType::F32);
    p.math_mode = MathMode::Fast;
    assert_compiles(&p);
}

#[test]
fn full_file_kernel_with_dynamic_threadgroup_memory_compiles() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let source = r#"#include <metal_stdlib>
using namespace metal;

struct Params { uint n; float scale; };

template <typename T>
kernel void scale_sum(device const T* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      constant Params& p [[buffer(2)]],
                      threadgroup float* scratch [[threadgroup(0)]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint gid [[thread_position_in_grid]],
                      uint tg [[threads_per_threadgroup]]) {
    scratch[tid] = gid < p.n ? float(x[gid]) * p.scale : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float s = 0.0f;
        for (uint i = 0; i < tg; ++i) s += scratch[i];
        out[gid / tg] = s;
    }
}

template [[host_name("scale_sum_f16")]] kernel void scale_sum<half>(device const half*, device float*, constant Params&, threadgroup float*, uint, uint, uint);
"#;
    let program = MetalProgram {
        kernel: "scale_sum".into(),
        source: source.into(),
        kind: ProgramKind::FullFile,
        function: "scale_sum_f16".into(),
        math_mode: MathMode::Safe,
        constants: Vec::new(),
    };
    assert_compiles(&program);
}

#[test]
fn cuda_kernel_bodies_compile() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let k = CudaKernel::new(
        "scaled_copy",
        &["a"],
        &["out"],
        "auto i = cooperative_groups_thread_rank();\nif (i < a_shape[0]) out[i] = T(float(a[elem_to_loc(int64_t(i), a_shape.data(), a_strides.data(), a_ndim)]) * SCALE);\n",
    )
    .unwrap()
    .header("__device__ unsigned cooperative_groups_thread_rank() { return blockIdx.x * blockDim.x + threadIdx.x; }\n");
    let a = Array::from_f64(DType::F16, &[8], &[1.0; 8]).unwrap();
    let mut spec = LaunchSpec::new([8, 1, 1], [4, 1, 1]).output(&[8], DType::F16);
    spec.template =
        smallvec::smallvec![("T".into(), TemplateArg::DType(DType::F16)), ("SCALE".into(), TemplateArg::Int(3))];
    let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), k.generate(&[a], &spec).unwrap());
    let cubin = cuda::compile_source("scaled_copy", &source, ARCH, MathMode::Safe).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF");
}

#[test]
fn cuda_kernel_programs_compile_as_the_backend_compiles_them() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let body = "unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
                if (i < 35) {\n\
                  int64_t loc = elem_to_loc<int64_t>(i, a_shape.data(), a_strides.data(), a_ndim);\n\
                  out[i] = a[loc] * s[0] + float(a_ndim);\n\
                }\n";
    let a = Array::from_f64(DType::F32, &[5, 7], &[0.5; 35]).unwrap();
    let s = Array::scalar(2.0f32);
    let spec = LaunchSpec::new([35, 1, 1], [16, 1, 1]).output(&[35], DType::F32);
    for arch_specific in [false, true] {
        let mut k = CudaKernel::new("strided_scale", &["a", "s"], &["out"], body).unwrap();
        if arch_specific {
            k = k.arch_specific(ARCH);
        }
        let program = k.program(&[a.clone(), s.clone()], &spec).unwrap();
        assert_eq!(program.kind, ProgramKind::Cuda { arch_specific: arch_specific.then_some(ARCH) });
        assert_eq!(program.function, "custom_kernel_strided_scale");
        let text = cuda::translate(&program).unwrap();
        assert!(text.starts_with(&kiln::backend::cuda::emit::prelude()) && text.ends_with(&program.source));
        assert_compiles(&program);
    }
}

#[test]
fn scatter_add_shared_histogram_compiles_for_every_index_dtype() {
    if !common::nvrtc_or_skip() {
        return;
    }
    use kiln::ops::scatter_add::cuda as smem;
    let values = f32s(&[1 << 16]);
    for index in [DType::I32, DType::U32, DType::I64] {
        let indices = Array::from_f64(index, &[1 << 16], &vec![1.0; 1 << 16]).unwrap();
        let spec = smem::spec(index, 32771, smem::Launch::DEFAULT).unwrap();
        let k = smem::kernel(32771).unwrap();
        let entry = k.kernel_name(&spec.template);
        let source = format!(
            "{}\n{}",
            kiln::backend::cuda::emit::prelude(),
            k.generate(&[values.clone(), indices], &spec).unwrap()
        );
        let cubin =
            cuda::compile_source(&entry, &source, ARCH, MathMode::Safe).unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{entry}: not a cubin");
    }
}

#[test]
fn attention_tensor_core_prefill_compiles_for_every_variant() {
    if !common::nvrtc_or_skip() {
        return;
    }
    for dtype in [DType::BF16, DType::F16] {
        for d in kiln::ops::attention::prefill_cuda::HEAD_DIMS {
            for causal in [false, true] {
                let (entry, body) = kiln::ops::attention::prefill_cuda::cuda_source(dtype, d, causal).unwrap();
                let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), body);
                let cubin = cuda::compile_source(&entry, &source, ARCH, MathMode::Safe)
                    .unwrap_or_else(|e| panic!("{entry}: {e}"));
                assert_eq!(&cubin[..4], b"\x7fELF", "{entry}: not a cubin");
                assert!(
                    cubin.windows(entry.len()).any(|w| w == entry.as_bytes()),
                    "{entry}: entry missing from the cubin"
                );
            }
        }
    }
}

/// Every variant compiles for sm_90a, and the compiler keeps its `wgmma` products
/// asynchronous: ptxas serialises products it cannot prove safe to overlap (accumulators or A
/// fragments touched while a product is in flight, a product on a divergent path) and says so
/// in the compile log. Neither side spills within its `setmaxnreg` budget, and ptxas gives
/// a thread at the launch the registers that budget is computed from.
#[test]
fn attention_warpgroup_prefill_compiles_for_sm90a() {
    if !common::nvrtc_or_skip() {
        return;
    }
    // Every dtype, head dimension and mask kind with a positive scale; the negative- and
    // zero-scale variants once each.
    let mut variants = Vec::new();
    for dtype in [DType::BF16, DType::F16] {
        for d in kiln::ops::attention::prefill_wgmma::HEAD_DIMS {
            for causal in [false, true] {
                variants.push((dtype, d, causal, 0.125f32));
            }
        }
    }
    variants.push((DType::BF16, 128, true, -0.125));
    variants.push((DType::BF16, 64, true, 0.0));
    for (dtype, d, causal, scale) in variants {
        let (entry, body) = kiln::ops::attention::prefill_wgmma::cuda_source(dtype, d, causal, scale).unwrap();
        let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), body);
        let (cubin, log) = cuda::compile_source_with_log(&entry, &source, ARCH, MathMode::Safe, true, true)
            .unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{entry}: not a cubin");
        assert!(cubin.windows(entry.len()).any(|w| w == entry.as_bytes()), "{entry}: entry missing from the cubin");
        assert!(!log.contains("Potential Performance Loss"), "{entry}: {log}");
        assert!(log.contains("0 bytes spill stores, 0 bytes spill loads"), "{entry}: {log}");
        // The registers a thread starts with, from which the producer's `setmaxnreg`
        // returns what the consumers take.
        let regs = kiln::ops::attention::prefill_wgmma::launch_registers(d);
        assert!(log.contains(&format!("Used {regs} registers")), "{entry}: {log}");
    }
    // wgmma exists only on the architecture-specific target: plain sm_90 rejects the source.
    let (entry, body) = kiln::ops::attention::prefill_wgmma::cuda_source(DType::BF16, 128, true, 0.125).unwrap();
    let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), body);
    assert!(cuda::compile_source(&entry, &source, ARCH, MathMode::Safe).is_err(), "{entry}: compiled for sm_90");
}

#[test]
fn compile_errors_point_at_the_users_lines() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let b = body("broken", &["x"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = x[i] + undefined_name;\n");
    let b = Body { arrays: vec![f32s(&[64])], ..b };
    let err = cuda::compile_cubin(&program_of(&b, DType::F32), ARCH).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("undefined_name"), "{text}");
    assert!(text.contains("broken"), "the log names the kernel's own source: {text}");
}

/// kiln's own lowering refuses the call before NVRTC runs; its error names the body's line, as
/// NVRTC's errors do.
#[test]
fn lowering_errors_point_at_the_users_lines() {
    let b = body(
        "bad_log",
        &["x"],
        &["out"],
        "uint i = thread_position_in_grid.x;\n  os_log_default.log(\"%n\", i);\nout[i] = x[i];\n",
    );
    let b = Body { arrays: vec![f32s(&[64])], ..b };
    let err = cuda::compile_cubin(&program_of(&b, DType::F32), ARCH).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("body line 2, column 3: log(\"%n\")"), "{text}");
    assert!(text.contains("  body line 2 |   os_log_default.log(\"%n\", i);\n              |   ^"), "{text}");
}

#[test]
fn every_golden_spec_compiles_to_sm90_cubin() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let root = common::test_data("golden/metal");
    let mut count = 0;
    for dir in std::fs::read_dir(&root).unwrap() {
        let spec_path = dir.unwrap().path().join("kernel.toml");
        if !spec_path.exists() {
            continue;
        }
        let spec = kiln_tools::spec::KernelSpec::load(&spec_path).unwrap();
        assert_compiles(&spec.program().unwrap());
        count += 1;
    }
    assert!(count >= 20, "only {count} golden specs found");
}

/// Every kernel the demo runs (the gallery and the library, at the demo's shapes and dtypes) is
/// recorded while the demo runs on the CPU, then lowered to CUDA and compiled for sm_90.
#[test]
fn every_demo_kernel_compiles_to_sm90_cubin() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let (report, programs) = kiln::backend::cpu::record_programs(|| kiln_tools::gallery::run_demo(kiln::Device::Cpu));
    let report = report.unwrap();
    assert!(report.all_passed(), "{report}");
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&MetalProgram> =
        programs.iter().filter(|p| seen.insert((p.function.clone(), p.source.clone()))).collect();
    assert!(unique.len() >= 25, "only {} distinct demo kernels were recorded", unique.len());
    for program in unique {
        assert_compiles(program);
    }
}

/// Compiles two kernels never seen before (the second starts this process's precompiled CUDA
/// prelude on a thread of its own) and returns at once, so the process exits while that build
/// may still run (the child of `a_process_exiting_during_the_prelude_build_exits_cleanly`).
#[test]
#[ignore = "a child process of a_process_exiting_during_the_prelude_build_exits_cleanly"]
fn child_compiles_two_kernels_and_exits() {
    let tag = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    for i in 0..2 {
        let source: &'static str = Box::leak(
            format!("uint i = thread_position_in_grid.x;\nout[i] = inp[i] * {i}.5f + {}.0f;", tag % 1000)
                .into_boxed_str(),
        );
        let mut b = body("exit_during_build", &["inp"], &["out"], source);
        b.arrays = vec![f32s(&[64])];
        assert_compiles(&program_of(&b, DType::F32));
    }
}

#[test]
fn a_process_exiting_during_the_prelude_build_exits_cleanly() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let cache = std::env::temp_dir().join(format!("kiln-exit-during-build-{}", std::process::id()));
    let start = std::time::Instant::now();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_compiles_two_kernels_and_exits", "--include-ignored", "--test-threads=1"])
        .env("KILN_CACHE_DIR", &cache)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    assert!(
        out.status.success(),
        "the child ended with {:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child ran its test");
    assert!(start.elapsed() < std::time::Duration::from_secs(120), "the child took {:?}", start.elapsed());
}
