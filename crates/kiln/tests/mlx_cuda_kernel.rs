//! Body-only Metal kernels in the form MLX's `mx.fast.cuda_kernel` runs them
//! (`MetalKernel::cuda_kernel_source`), built and compiled through kiln's own `CudaKernel`,
//! which reproduces MLX's wrapper around a `cuda_kernel` body and header. Compiling needs only
//! NVRTC (skipped without it unless `KILN_REQUIRE_BACKEND=nvrtc`); the runs need an NVIDIA GPU
//! (`cargo test --test mlx_cuda_kernel -- --include-ignored` with `KILN_REQUIRE_BACKEND=cuda`)
//! and compare every output with the same kernel on the CPU emulator: grids of whole and of
//! partial threadgroups in 1, 2 and 3 dimensions, with barriers, SIMD-group collectives, early
//! returns, scalars, shapes and strides, atomics and `init_value`.

mod common;

use kiln::backend::cuda;
use kiln::backend::cuda::emit_mlx;
use kiln::{
    Array, CudaKernel, CudaKernelPlan, CudaKernelSource, DType, Device, KernelInput, LaunchSpec, MathMode, MetalKernel,
    TemplateArg,
};

const ARCH: cuda::Arch = (9, 0);

/// One kernel call: the kernel, its inputs and its launch.
struct Case {
    kernel: MetalKernel,
    inputs: Vec<Array>,
    spec: LaunchSpec,
}

fn f32s(rng: &mut common::Rng, shape: &[usize]) -> Array {
    common::random_array(rng, DType::F32, shape)
}

/// A kernel that reports, per thread, every attribute a partial group changes (the grid
/// position, the position and index in the group, the SIMD lane and group and the group's size)
/// and a SIMD-group sum and a threadgroup reduction across a barrier.
const ATTRIBUTES: &str = r#"
    threadgroup float partial[32];
    uint3 p = thread_position_in_grid;
    uint i = p.x + threads_per_grid.x * (p.y + threads_per_grid.y * p.z);
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    float s = simd_sum(x[i]);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint k = 0; k < simdgroups_per_threadgroup; ++k) total += partial[k];
    uint3 tg = threads_per_threadgroup;
    uint3 t = thread_position_in_threadgroup;
    out[i * 8 + 0] = float(thread_index_in_threadgroup);
    out[i * 8 + 1] = float(t.x + 100 * t.y + 10000 * t.z);
    out[i * 8 + 2] = float(tg.x + 100 * tg.y + 10000 * tg.z);
    out[i * 8 + 3] = float(lane + 100 * sg);
    out[i * 8 + 4] = s;
    out[i * 8 + 5] = total;
    uint3 g = threadgroup_position_in_grid;
    out[i * 8 + 6] = float(g.x + 100 * g.y + 10000 * g.z);
    out[i * 8 + 7] = float(threadgroups_per_grid.x + 100 * threadgroups_per_grid.y);
"#;

fn attributes_case(rng: &mut common::Rng, grid: [u32; 3], tg: [u32; 3]) -> Case {
    let n = (grid[0] * grid[1] * grid[2]) as usize;
    let kernel = MetalKernel::new("attributes", &["x"], &["out"], ATTRIBUTES).unwrap();
    let spec = LaunchSpec::new(grid, tg).output(&[n * 8], DType::F32);
    Case { kernel, inputs: vec![f32s(rng, &[n])], spec }
}

fn cases() -> Vec<Case> {
    let mut rng = common::Rng::new(7);
    let mut out = vec![
        // Whole groups; a padded 1-D grid; a padded 2-D grid whose edge groups' Metal SIMD groups
        // are not the block's rows; a padded 3-D grid; a threadgroup wider than the grid.
        attributes_case(&mut rng, [256, 1, 1], [64, 1, 1]),
        attributes_case(&mut rng, [100, 1, 1], [64, 1, 1]),
        attributes_case(&mut rng, [12, 10, 1], [8, 8, 1]),
        // Edge groups of fewer threads than a warp, in blocks of more warps than they fill.
        attributes_case(&mut rng, [70, 3, 1], [64, 2, 1]),
        attributes_case(&mut rng, [40, 3, 1], [32, 2, 1]),
        attributes_case(&mut rng, [5, 7, 1], [4, 4, 1]),
        attributes_case(&mut rng, [5, 6, 7], [4, 4, 4]),
        attributes_case(&mut rng, [40, 1, 1], [256, 1, 1]),
    ];
    // MLX's docs: exp with a dtype template, on float16.
    let myexp = MetalKernel::new(
        "myexp",
        &["inp"],
        &["out"],
        "uint elem = thread_position_in_grid.x;\nT tmp = inp[elem];\nout[elem] = metal::exp(tmp);\n",
    )
    .unwrap();
    let a = common::random_array(&mut rng, DType::F16, &[4, 16]);
    let spec = LaunchSpec::new([64, 1, 1], [256, 1, 1]).output(&[4, 16], DType::F16).template("T", DType::F32);
    out.push(Case { kernel: myexp, inputs: vec![a], spec });
    // MLX's test_custom_kernel_args: a constant reference, small constant inputs, templates of
    // every kind, two outputs of different dtypes.
    let args = MetalKernel::new(
        "arg_test",
        &["a", "b", "c", "d"],
        &["out1", "out2"],
        "uint elem = thread_position_in_grid.x;\nT tmp = a[0];\nif (e) {\n  out1[elem] = a[1] + b[2] + c[3] + d + f;\n} else {\n  out1[elem] = 1;\n}\nout2[elem] = a[1] + b[2] + c[1] - d;\n",
    )
    .unwrap();
    let spec = LaunchSpec::new([6, 1, 1], [2, 1, 1])
        .output(&[3, 2], DType::F32)
        .output(&[3, 2], DType::I32)
        .template("e", true)
        .template("f", 3)
        .template("T", DType::F16);
    let inputs = vec![
        f32s(&mut rng, &[3, 6]),
        Array::from_vec(&[3], vec![3i32, 4, 5]).unwrap(),
        common::random_array(&mut rng, DType::BF16, &[2, 2]),
        Array::scalar(7.3f32),
    ];
    out.push(Case { kernel: args, inputs, spec });
    // Strided reads through shape and strides (no copy), with a padded grid.
    let strided = MetalKernel::new(
        "strided",
        &["inp"],
        &["out"],
        "uint elem = thread_position_in_grid.x;\nuint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);\nout[elem] = metal::exp(inp[loc]) * threads_per_simdgroup;\n",
    )
    .unwrap()
    .ensure_row_contiguous(false);
    let t = f32s(&mut rng, &[6, 16]).transpose(&[1, 0]).unwrap();
    let spec = LaunchSpec::new([96, 1, 1], [64, 1, 1]).output(&[16, 6], DType::F32);
    out.push(Case { kernel: strided, inputs: vec![t], spec });
    // Atomic outputs, init_value, a padded grid and an early return.
    let atomic = MetalKernel::new(
        "bucket_sums",
        &["a", "n"],
        &["sums"],
        "uint i = thread_position_in_grid.x;\nif (i >= uint(n)) return;\natomic_fetch_add_explicit(&sums[i % 17], a[i], memory_order_relaxed);\n",
    )
    .unwrap()
    .atomic_outputs(true);
    let mut spec = LaunchSpec::new([1000, 1, 1], [256, 1, 1]).output(&[17], DType::F32);
    spec.init_value = Some(1.0);
    out.push(Case { kernel: atomic, inputs: vec![f32s(&mut rng, &[1000]), Array::scalar(990i32)], spec });
    out
}

/// The plan's source, which every case has.
fn source_of(case: &Case) -> CudaKernelSource {
    match case.kernel.cuda_kernel_source(&case.inputs, &case.spec).unwrap() {
        CudaKernelPlan::Source(s) => s,
        CudaKernelPlan::Unsupported(why) => panic!("{}: {why}", case.kernel.name()),
    }
}

/// The `CudaKernel` MLX's factory would build from `s`, and its inputs: the call's, then the
/// grid where the source asks for it.
fn as_cuda_kernel(s: &CudaKernelSource, case: &Case) -> (CudaKernel, Vec<Array>) {
    let inputs: Vec<&str> = s.input_names.iter().map(String::as_str).collect();
    let outputs: Vec<&str> = s.output_names.iter().map(String::as_str).collect();
    let k = CudaKernel::new(s.name.clone(), &inputs, &outputs, s.source.clone())
        .unwrap()
        .header(s.header.clone())
        .ensure_row_contiguous(s.ensure_row_contiguous)
        .shared_memory(s.shared_memory);
    let mut arrays = case.inputs.clone();
    if s.grid_input.is_some() {
        arrays.push(Array::from_vec(&[3], case.spec.grid.to_vec()).unwrap());
    }
    (k, arrays)
}

#[test]
fn sources_compile_through_cuda_kernel_for_sm90() {
    if !common::nvrtc_or_skip() {
        return;
    }
    for case in cases() {
        let s = source_of(&case);
        let (k, arrays) = as_cuda_kernel(&s, &case);
        let program = k.program(&arrays, &case.spec).unwrap();
        let cubin = cuda::compile_cubin(&program, ARCH).unwrap_or_else(|e| {
            panic!("{}: {e}\n---- body ----\n{}", case.kernel.name(), s.source);
        });
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", case.kernel.name());
    }
}

/// The program MLX's `cuda_kernel` builds from `s`, without kiln's own wrapper (which compiles
/// after kiln's prelude): the header, then a `__global__` function in MLX's namespace with a
/// parameter per input (its shape, strides and rank where the body names them) and output,
/// the template's integer and bool values as `constexpr` locals, and the body.
fn as_mlx_compiles_it(s: &CudaKernelSource, case: &Case) -> String {
    let mut params = Vec::new();
    for name in &s.input_names {
        params.push(format!("const void* {name}"));
        if s.source.contains(&format!("{name}_shape")) {
            params.push(format!("const __grid_constant__ kiln_test_axes<int> {name}_shape"));
        }
        if s.source.contains(&format!("{name}_strides")) {
            params.push(format!("const __grid_constant__ kiln_test_axes<long long> {name}_strides"));
        }
        if s.source.contains(&format!("{name}_ndim")) {
            params.push(format!("const int {name}_ndim"));
        }
    }
    params.extend(s.output_names.iter().map(|n| format!("void* {n}")));
    let mut locals = String::new();
    for (name, arg) in &case.spec.template {
        match arg {
            TemplateArg::Int(v) => locals.push_str(&format!("  constexpr int {name} = {v};\n")),
            TemplateArg::Bool(b) => locals.push_str(&format!("  constexpr bool {name} = {b};\n")),
            TemplateArg::DType(_) => {}
        }
    }
    format!(
        "{}\nnamespace mlx::core::cu {{\ntemplate <class T> struct kiln_test_axes {{\n  T v[10];\n  __device__ const T* \
         data() const {{ return v; }}\n}};\nextern \"C\" __global__ void kiln_test_kernel({}) {{\n{locals}{}\n}}\n}}\n",
        s.header,
        params.join(", "),
        s.source
    )
}

#[test]
fn headers_include_the_prelude_and_compile_as_mlx_compiles_them() {
    if !common::nvrtc_or_skip() {
        return;
    }
    for case in cases() {
        let name = case.kernel.name().to_string();
        let s = source_of(&case);
        // The prelude is a file the header includes, so the header MLX copies per call is small.
        let include = s.header.lines().find(|l| l.starts_with("#include \"")).expect("an include of the prelude");
        let path = include.trim_start_matches("#include \"").trim_end_matches('"');
        assert_eq!(std::fs::read_to_string(path).unwrap(), emit_mlx::prelude_file_text(), "{name}");
        assert!(s.header.len() < 32 * 1024, "{name}: header of {} bytes", s.header.len());
        let text = as_mlx_compiles_it(&s, &case);
        let (cubin, _) = cuda::compile_source_with_log(&name, &text, ARCH, MathMode::Safe, false, false)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{name}: not a cubin");
    }
}

#[test]
fn padded_grids_ask_for_the_grid_and_whole_groups_do_not() {
    let mut rng = common::Rng::new(1);
    let whole = source_of(&attributes_case(&mut rng, [256, 1, 1], [64, 1, 1]));
    assert_eq!(whole.grid_input, None);
    assert_eq!(whole.input_names, ["x"]);
    assert!(!whole.header.contains("counted_barrier"));
    let padded = source_of(&attributes_case(&mut rng, [100, 1, 1], [64, 1, 1]));
    assert_eq!(padded.grid_input.as_deref(), Some("kiln_grid"));
    assert_eq!(padded.input_names, ["x", "kiln_grid"]);
    // Threads of a block beyond its partial group end at once; barriers stay block barriers.
    assert!(padded.header.contains("if (lin >= ntg) return;"), "{}", padded.header);
    assert!(!padded.header.contains("barrier.red"), "no barrier of the shim's own");
    assert_eq!(padded.source, "  ::kiln_metal::kiln_user::kiln_mlx_entry(kiln_grid, x, out);\n");
    assert_eq!(padded.shared_memory, 0);
}

#[test]
fn grids_beyond_one_cuda_launch_are_unsupported() {
    let k = MetalKernel::new("tall", &["x"], &["out"], "out[thread_position_in_grid.y] = x[0];").unwrap();
    let x = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    let spec = LaunchSpec::new([1, 100_000, 1], [1, 1, 1]).output(&[100_000], DType::F32);
    let plan = k.cuda_kernel_source(&[x], &spec).unwrap();
    assert!(matches!(plan, CudaKernelPlan::Unsupported(ref why) if why.contains("65535")), "{plan:?}");
}

#[test]
fn call_errors_are_the_kernels_own() {
    let k = MetalKernel::new("errs", &["x"], &["out"], "out[0] = x[0];").unwrap();
    let x = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    let too_big = LaunchSpec::new([2048, 1, 1], [2048, 1, 1]).output(&[4], DType::F32);
    let err = k.cuda_kernel_source(std::slice::from_ref(&x), &too_big).unwrap_err();
    assert!(err.to_string().contains("metal_kernel errs") && err.to_string().contains("2048"), "{err}");
    let no_outputs = LaunchSpec::new([4, 1, 1], [4, 1, 1]);
    assert!(k.cuda_kernel_source(&[x], &no_outputs).is_err());
}

/// The CPU emulator's outputs for a case.
fn on_the_emulator(case: &Case) -> Vec<Vec<f64>> {
    let inputs: Vec<KernelInput> = case.inputs.iter().map(KernelInput::from).collect();
    let mut spec = case.spec.clone();
    spec.device = Some(Device::Cpu);
    let outs = case.kernel.call(&inputs, &spec).unwrap();
    outs.iter().map(|o| o.to_host().unwrap().to_f64_vec().unwrap()).collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test --test mlx_cuda_kernel -- --include-ignored"]
fn sources_run_through_cuda_kernel_as_metal_kernels_do() {
    let Some(device) = common::device_or_skip("cuda") else { return };
    for case in cases() {
        let s = source_of(&case);
        let (k, arrays) = as_cuda_kernel(&s, &case);
        let inputs: Vec<Array> = arrays.iter().map(|a| a.to_device(device).unwrap()).collect();
        let inputs: Vec<KernelInput> = inputs.iter().map(KernelInput::from).collect();
        let got = k.call(&inputs, &case.spec).unwrap();
        let want = on_the_emulator(&case);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let dtype = case.spec.output_dtypes[k];
            common::assert_close(&format!("{} output {k}", case.kernel.name()), g, w, dtype);
        }
    }
}
