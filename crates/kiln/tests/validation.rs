//! Every MLX validation rule gives a typed error naming the kernel, before any backend work.

use kiln::backend::Dispatch;
use kiln::{
    Array, DType, Device, Error, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel,
    MetalLibrary, TemplateArg,
};

fn input(shape: &[usize]) -> KernelInput {
    let n: usize = shape.iter().product();
    Array::from_f64(DType::F32, shape, &(0..n).map(|i| i as f64 + 0.5).collect::<Vec<_>>()).unwrap().into()
}

fn copy_kernel() -> MetalKernel {
    MetalKernel::new("copy", &["a"], &["out"], "uint i = thread_position_in_grid.x; out[i] = a[i];").unwrap()
}

fn invalid_message(e: Error) -> String {
    match e {
        Error::InvalidArgument { op, msg } => {
            assert!(op.contains("copy") || op.contains("many") || op.contains("deep"), "op {op:?} names the kernel");
            msg
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn empty_output_names_rejected_at_definition() {
    let e = MetalKernel::new("noout", &["a"], &[], "").unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { op, msg } if op.contains("noout") && msg.contains("at least one output"))
    );
}

#[test]
fn wrong_input_count_is_reported_like_mlx() {
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).mlx_keywords(true);
    let msg = invalid_message(copy_kernel().call(&[input(&[4]), input(&[4])], &spec).unwrap_err());
    assert_eq!(msg, "Expected `inputs` to have size 1 but got size 2.");
}

#[test]
fn wrong_output_shape_and_dtype_counts_are_reported() {
    let mut spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).mlx_keywords(true);
    spec.output_shapes.push([4].as_slice().into());
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert_eq!(msg, "Expected `output_shapes` to have size 1 but got size 2.");
    let mut spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).mlx_keywords(true);
    spec.output_dtypes.clear();
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert_eq!(msg, "Expected `output_dtypes` to have size 1 but got size 0.");
}

#[test]
fn count_errors_from_rust_name_the_rust_api() {
    // Forgetting `.output(..)`: the message names the method, not MLX's `output_shapes` keyword.
    let spec = LaunchSpec::new(4usize, 4usize);
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert_eq!(
        msg,
        "the LaunchSpec describes 0 outputs for 1 output name: add one with LaunchSpec::output(shape, dtype) per output name"
    );
    let spec = LaunchSpec::new(4usize, 4usize).output(&[4], DType::F32);
    let msg = invalid_message(copy_kernel().generate(&[], &spec).unwrap_err());
    assert_eq!(msg, "0 inputs given for 1 input name (one input per name)");
    let mut spec = LaunchSpec::new(4usize, 4usize).output(&[4], DType::F32);
    spec.output_dtypes.clear();
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert!(msg.starts_with("LaunchSpec::output_dtypes holds 0 dtypes for 1 output name"), "{msg}");
}

#[test]
fn sizes_and_template_integers_out_of_range_fail_the_call_naming_them() {
    // usize sizes are accepted as given; one past u32 is an error, not a wrapped grid.
    let n: usize = 4;
    let ok = LaunchSpec::new((n, 1usize, 1usize), [n, 1, 1]).output(&[n], DType::F32).template("N", n);
    assert_eq!((ok.grid, ok.threadgroup), ([4, 1, 1], [4, 1, 1]));
    let kernel = copy_kernel();
    let spec = LaunchSpec::new(1usize << 32, n).output(&[n], DType::F32);
    let msg = invalid_message(kernel.call(&[input(&[4])], &spec).unwrap_err());
    assert!(msg.starts_with("grid [4294967296, 1, 1] has an extent outside 0..=4294967295"), "{msg}");
    let spec = LaunchSpec::new([4, 1, 1], [4, -1, 1]).output(&[n], DType::F32);
    let msg = invalid_message(kernel.call(&[input(&[4])], &spec).unwrap_err());
    assert!(msg.starts_with("threadgroup [4, -1, 1]"), "{msg}");
    let spec = LaunchSpec::new(n, n).output(&[n], DType::F32).template("N", 1usize << 31);
    let msg = invalid_message(kernel.generate(&[input(&[4]).to_array()], &spec).unwrap_err());
    assert_eq!(msg, "template argument \"N\" = 2147483648 does not fit the 32-bit int of a Metal template argument");
    assert!(TemplateArg::try_from(1u64 << 40).is_err());
    assert_eq!(TemplateArg::try_from(7usize).unwrap(), TemplateArg::Int(7));
    // A library launch sized past u32 fails the same way.
    let library = MetalLibrary::new("copy", "kernel void f(device float* a [[buffer(0)]]) {}");
    let launch = LibraryLaunch::threads("f", [1u64 << 40, 1, 1], 32usize);
    let msg = invalid_message(library.dispatch(Device::Cpu, &[], &launch).unwrap_err());
    assert!(msg.starts_with("grid [1099511627776, 1, 1]"), "{msg}");
}

#[test]
fn scalar_inputs_take_any_integer_type_by_mlx_rule() {
    assert!(matches!(KernelInput::from(7u32), KernelInput::Int(7)));
    assert!(matches!(KernelInput::from(7usize), KernelInput::Int(7)));
    let big = KernelInput::from(usize::MAX).to_array();
    assert_eq!((big.dtype(), big.to_vec::<u64>().unwrap()), (DType::U64, vec![u64::MAX]));
    assert_eq!(KernelInput::from(1usize << 40).to_array().dtype(), DType::I64);
    assert_eq!(KernelInput::from(5u32).to_array().dtype(), DType::I32);
}

#[test]
fn threadgroup_over_1024_is_rejected_before_clamping() {
    // Grid (4,1,1) would clamp the group to 4 threads; MLX checks the requested size first.
    let spec = LaunchSpec::new([4, 1, 1], [2048, 1, 1]).output(&[4], DType::F32);
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert!(msg.contains("thread group size (2048)") && msg.contains("(1024)"), "{msg}");
    let spec = LaunchSpec::new([4, 1, 1], [32, 8, 8]).output(&[4], DType::F32);
    assert!(copy_kernel().call(&[input(&[4])], &spec).is_err());
    let spec = LaunchSpec::new([4, 1, 1], [0, 1, 1]).output(&[4], DType::F32);
    assert!(copy_kernel().call(&[input(&[4])], &spec).is_err());
}

#[test]
fn more_than_31_buffers_is_rejected() {
    let names: Vec<String> = (0..16).map(|i| format!("x{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Each input also passes its shape: 32 input buffers + 1 output.
    let source: String = names.iter().map(|n| format!("// {n}_shape\n")).collect();
    let kernel = MetalKernel::new("many", &refs, &["out"], source).unwrap();
    let inputs: Vec<KernelInput> = (0..16).map(|_| input(&[8])).collect();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32);
    let msg = invalid_message(kernel.call(&inputs, &spec).unwrap_err());
    assert!(msg.contains("33 buffers") && msg.contains("31"), "{msg}");
}

#[test]
fn ndim_over_10_with_shapes_is_rejected_but_fine_without() {
    let shape = [1usize; 11];
    let kernel = MetalKernel::new("deep", &["a"], &["out"], "out[0] = a_shape[0];").unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32);
    let msg = invalid_message(kernel.call(&[input(&shape)], &spec).unwrap_err());
    assert!(msg.contains("ndim can not be larger than 10"), "{msg}");
    let plain = MetalKernel::new("deep", &["a"], &["out"], "out[0] = a[0];").unwrap();
    let arrays = [input(&shape).to_array()];
    assert!(plain.generate(&arrays, &spec).is_ok());
}

#[test]
fn bad_math_mode_is_rejected() {
    let e = "precise".parse::<MathMode>().unwrap_err();
    assert!(e.to_string().contains("expected math_mode 'safe', 'relaxed' or 'fast'"), "{e}");
    assert_eq!("relaxed".parse::<MathMode>().unwrap(), MathMode::Relaxed);
}

#[test]
fn atomic_outputs_need_an_atomic_capable_dtype() {
    let kernel = MetalKernel::new("atomics", &["a"], &["out"], "out[0] = a[0];").unwrap().atomic_outputs(true);
    for dtype in [DType::F16, DType::BF16, DType::I64, DType::U8] {
        let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], dtype);
        match kernel.call(&[input(&[4])], &spec).unwrap_err() {
            Error::UnsupportedDType { op, dtype: d, .. } => {
                assert!(op.contains("atomics"));
                assert_eq!(d, dtype.name());
            }
            other => panic!("expected UnsupportedDType for {dtype}, got {other:?}"),
        }
    }
}

#[test]
fn scalars_follow_mlx_conversion_rules() {
    assert_eq!(KernelInput::from(true).to_array().dtype(), DType::Bool);
    assert_eq!(KernelInput::from(7i64).to_array().dtype(), DType::I32);
    assert_eq!(KernelInput::from(5_000_000_000i64).to_array().dtype(), DType::I64);
    assert_eq!(KernelInput::from(-5_000_000_000i64).to_array().to_vec::<i64>().unwrap(), vec![-5_000_000_000]);
    assert_eq!(KernelInput::from(7.3f64).to_array().dtype(), DType::F32);
    assert_eq!(KernelInput::from(7.3f64).to_array().ndim(), 0);
}

#[test]
fn template_arguments_render_in_order() {
    let kernel = MetalKernel::new("tmpl", &["a"], &["out"], "out[0] = a[0];").unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1])
        .output(&[1], DType::F32)
        .template("B", false)
        .template("N", -7)
        .template("T", DType::BF16);
    let g = kernel.generate(&[input(&[2]).to_array()], &spec).unwrap();
    assert!(g.source.starts_with("template <bool B, int N, typename T>\n"), "{}", g.source);
    assert!(g.source.contains("custom_kernel_tmpl__0__7_bfloat16_t_floatc_float<0, -7, bfloat16_t>;"), "{}", g.source);
    assert_eq!(spec.template[2].1, TemplateArg::DType(DType::BF16));
}

#[test]
fn inputs_on_another_device_are_not_moved_silently() {
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).device(kiln::Device::Cuda(0));
    let msg = invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err());
    assert!(msg.contains("lives on cpu") && msg.contains("cuda:0"), "{msg}");
}

#[test]
fn several_outputs_after_shape_parameters_form_a_valid_signature() {
    let kernel = MetalKernel::new("sig", &["a"], &["o1", "o2"], "o1[0] = a_shape[0]; o2[0] = 1;").unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).output(&[1], DType::I32);
    let g = kernel.generate(&[input(&[9]).to_array()], &spec).unwrap();
    assert_eq!(g.source.matches(") {").count(), 1, "{}", g.source);
    assert!(g.source.contains("device float* o1 [[buffer(2)]],\n  device int32_t* o2 [[buffer(3)]]) {\n"));
}

#[test]
fn cuda_translation_restricts_pointers_unless_asked_not_to() {
    use kiln::backend::{translate, Target};
    let a = Array::from_f64(DType::F32, &[4], &[0.5, 1.5, 2.5, 3.5]).unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    let cuda_of = |kernel: MetalKernel| {
        let generated = kernel.generate(std::slice::from_ref(&a), &spec).unwrap();
        translate(&kernel.program(&generated), Target::Cuda).unwrap()
    };
    let restricted = cuda_of(copy_kernel());
    assert!(restricted.contains("const void* __restrict__"), "read-only slots are __restrict__ by default");
    assert!(restricted.contains("global_slot(a, "), "device slots are global by default");
    let generic = cuda_of(copy_kernel().restrict_pointers(false));
    assert!(!generic.contains("__restrict__ kiln_b"), "restrict_pointers(false) keeps generic pointers");
    assert!(!generic.contains("global_slot(a, "), "restrict_pointers(false) keeps generic pointers");
}

#[test]
fn shapes_whose_bytes_overflow_are_errors_not_wrapped_sizes() {
    // 2^62 float32 elements are 2^64 bytes; [2^63, 2] wraps to 0 elements.
    let huge = [1usize << 62];
    let wraps = [1usize << 63, 2];
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&huge, DType::F32);
    let e = copy_kernel().call(&[input(&[4])], &spec).unwrap_err();
    let msg = invalid_message(e);
    assert!(msg.contains("output 0") && msg.contains("more bytes than an address space holds"), "{msg}");
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&wraps, DType::F32);
    assert!(invalid_message(copy_kernel().call(&[input(&[4])], &spec).unwrap_err()).contains("output 0"));
    for shape in [&huge[..], &wraps[..]] {
        assert!(matches!(Array::full(DType::F32, shape, 1.0), Err(Error::InvalidArgument { .. })), "{shape:?}");
        assert!(matches!(Array::from_bytes(DType::F32, shape, &[]), Err(Error::InvalidArgument { .. })), "{shape:?}");
    }
    // A full Metal file's output buffers too.
    let library = MetalLibrary::new("big", "kernel void k(device float* o [[buffer(0)]]) { o[0] = 1.0f; }");
    let args = [LibraryArg::Output { shape: wraps.to_vec(), dtype: DType::F32, init_value: None }];
    let launch = LibraryLaunch::new("k", Dispatch::Threads([1, 1, 1]), [1, 1, 1]);
    match library.dispatch(Device::Cpu, &args, &launch) {
        Err(Error::InvalidArgument { op, msg }) => {
            assert!(op.contains("big:k") && msg.contains("output buffer 0"), "{op}: {msg}")
        }
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
    let empty = Array::from_vec::<f32>(&[0], vec![]).unwrap();
    assert!(matches!(empty.reshape(&wraps), Err(Error::ShapeMismatch { .. })));
    assert_eq!(empty.reshape(&[0, 7]).unwrap().shape(), &[0, 7]);
}
