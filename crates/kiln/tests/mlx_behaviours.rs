//! MLX's own custom-kernel tests (spec §5, T1–T10) as kiln tests, run on every backend. Where
//! MLX hard-codes values from its random seed, the expectation is computed from the inputs.

mod common;

use common::{assert_close, on, random_array, Rng};
use kiln::{Array, DType, Device, Error, KernelInput, LaunchSpec, MathMode, MetalKernel};

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

// T1: a copy over two threadgroups, the input small enough to sit in `constant` space.
fn t1_basic_copy(device: Device) {
    let mut rng = Rng::new(1);
    let a = random_array(&mut rng, DType::F32, &[2, 2]);
    let k =
        MetalKernel::new("basic", &["a"], &["out1"], "uint elem = thread_position_in_grid.x;\nout1[elem] = a[elem];")
            .unwrap();
    let spec = LaunchSpec::new([4, 1, 1], [2, 1, 1]).output(&[2, 2], DType::F32).device(device);
    let out = k.call(&[on(device, &a)], &spec).unwrap();
    assert_close("T1 copy", &out[0], &values(&a), DType::F32);
}

// T2: every argument kind (device, constant pointer, bfloat constant, 0-d scalar) and bool, int
// and dtype templates; one float and one int32 output.
fn t2_args(device: Device) {
    let mut rng = Rng::new(2);
    let a = random_array(&mut rng, DType::F32, &[3, 6]);
    let b = Array::from_vec(&[3], vec![3i32, 4, 5]).unwrap();
    let c = random_array(&mut rng, DType::BF16, &[2, 2]);
    let d = 7.3f64;
    let src = r#"
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) {
          out1[elem] = a[1] + b[2] + c[3] + d + f;
        } else {
          out1[elem] = 1;
        }
        out2[elem] = a[1] + b[2] + c[1] - d;
    "#;
    let k = MetalKernel::new("arg_test", &["a", "b", "c", "d"], &["out1", "out2"], src).unwrap();
    let spec = LaunchSpec::new([6, 1, 1], [2, 1, 1])
        .output(&[3, 2], DType::F32)
        .output(&[3, 2], DType::I32)
        .template("e", true)
        .template("f", 3)
        .template("T", DType::F16)
        .device(device);
    let inputs: Vec<KernelInput> = vec![on(device, &a), on(device, &b), on(device, &c), d.into()];
    let out = k.call(&inputs, &spec).unwrap();
    let (av, cv) = (values(&a), values(&c));
    let d32 = d as f32 as f64;
    // out1 is a float sum; the Metal evaluation order is ((a1 + b2) + c3) + d + f in float.
    let o1 = ((((av[1] as f32) + 5.0) + cv[3] as f32) + d32 as f32 + 3.0) as f64;
    let o2 = ((((av[1] as f32) + 5.0) + cv[1] as f32) - d32 as f32).trunc() as f64;
    assert_close("T2 out1", &out[0], &[o1; 6], DType::F32);
    assert_eq!(values(&out[1]), vec![o2; 6], "T2 out2 (float stored into int32 truncates)");
}

// T3: exp(x) * threads_per_simdgroup, contiguous and through elem_to_loc with a truly strided
// view (a transpose of a [::2] slice) when ensure_row_contiguous is off.
fn t3_strides(device: Device) {
    let mut rng = Rng::new(3);
    let base = random_array(&mut rng, DType::F32, &[12, 8]);
    let a = base.slice(&[kiln::SliceArg { start: None, stop: None, step: 2 }]).unwrap().transpose(&[1, 0]).unwrap();
    assert!(!a.is_row_contiguous());
    let want: Vec<f64> = values(&a).iter().map(|v| ((*v as f32).exp() * 32.0) as f64).collect();
    for contiguous in [true, false] {
        let read = if contiguous {
            "T x = inp[elem];"
        } else {
            "int64_t loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);\n T x = inp[loc];"
        };
        let src = format!(
            "uint elem = thread_position_in_grid.x;\n{read}\nout[elem] = metal::exp(x) * threads_per_simdgroup;"
        );
        let k = MetalKernel::new(format!("myexp{contiguous}"), &["inp"], &["out"], src)
            .unwrap()
            .ensure_row_contiguous(contiguous);
        let spec = LaunchSpec::new([a.size() as u32, 1, 1], [256, 1, 1])
            .output(a.shape(), DType::F32)
            .template("T", DType::F32)
            .device(device);
        let out = k.call(&[on(device, &a)], &spec).unwrap();
        assert_close(&format!("T3 contiguous={contiguous}"), &out[0], &want, DType::F32);
    }
}

// T4: a templated helper from the header.
fn t4_helper(device: Device) {
    let mut rng = Rng::new(4);
    let a = random_array(&mut rng, DType::F32, &[2, 2]);
    let header = "template <typename T>\nT do_exp(T x) {\n  return metal::precise::exp(x);\n}\n";
    let k = MetalKernel::new(
        "helper",
        &["a"],
        &["out1"],
        "uint elem = thread_position_in_grid.x;\nout1[elem] = do_exp(a[elem]);",
    )
    .unwrap()
    .header(header);
    let spec = LaunchSpec::new([4, 1, 1], [2, 1, 1]).output(&[2, 2], DType::F32).device(device);
    let out = k.call(&[on(device, &a)], &spec).unwrap();
    let want: Vec<f64> = values(&a).iter().map(|v| (*v as f32).exp() as f64).collect();
    assert_close("T4 helper", &out[0], &want, DType::F32);
}

// T5: threads_per_threadgroup.x with no thread index, a uint32 output, an unused input.
fn t5_attributes(device: Device) {
    let a = Array::full(DType::F32, &[1, 1], 0.5).unwrap();
    let k = MetalKernel::new("test_fun", &["a"], &["out"], "out[0] = threads_per_threadgroup.x;").unwrap();
    let spec = LaunchSpec::new([2, 1, 1], [2, 1, 1]).output(&[1, 1], DType::U32).device(device);
    let out = k.call(&[on(device, &a)], &spec).unwrap();
    assert_eq!(values(&out[0]), vec![2.0]);
}

// T6: the same name with a new source in a later call runs the new source.
fn t6_caching(device: Device) {
    let mut rng = Rng::new(6);
    let a = random_array(&mut rng, DType::F32, &[32]);
    for value in [0.0, 1.0] {
        let src = format!("out[thread_position_in_grid.x] = {value:.1};");
        let k = MetalKernel::new("my_kernel", &["inp"], &["out"], src).unwrap();
        let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[32], DType::F32).device(device);
        let out = k.call(&[on(device, &a)], &spec).unwrap();
        assert_eq!(values(&out[0]), vec![value; 32]);
    }
}

// T7: two kernels with one name and different sources, called back to back.
fn t7_same_name_different_source(device: Device) {
    let a = Array::from_vec(&[32], (0..32).map(|i| i as f32 * 1.25 + 0.5).collect()).unwrap();
    let k1 =
        MetalKernel::new("dup_name", &["inp"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 2;")
            .unwrap();
    let k2 =
        MetalKernel::new("dup_name", &["inp"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = inp[i] + 100;")
            .unwrap();
    let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[32], DType::F32).device(device);
    let o1 = k1.call(&[on(device, &a)], &spec).unwrap();
    let o2 = k2.call(&[on(device, &a)], &spec).unwrap();
    let av = values(&a);
    assert_eq!(values(&o1[0]), av.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    assert_eq!(values(&o2[0]), av.iter().map(|v| v + 100.0).collect::<Vec<_>>());
}

// T9: bad math modes are rejected; `__FAST_MATH__` is defined only in fast mode.
fn t9_math_mode(device: Device) {
    assert!(matches!("precise".parse::<MathMode>(), Err(Error::InvalidArgument { .. })));
    let a = Array::full(DType::F32, &[4], 0.25).unwrap();
    let src = "#if defined(__FAST_MATH__) && __FAST_MATH__\n  out[thread_position_in_grid.x] = 1.0;\n#else\n  out[thread_position_in_grid.x] = 0.0;\n#endif";
    for (mode, want) in [(MathMode::Safe, 0.0), (MathMode::Fast, 1.0)] {
        let k = MetalKernel::new("math_mode", &["a"], &["out"], src).unwrap().math_mode(mode);
        let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).device(device);
        let out = k.call(&[on(device, &a)], &spec).unwrap();
        assert_eq!(values(&out[0]), vec![want; 4], "math mode {mode:?}");
    }
}

// T10: one kernel called with float16 and float32 inputs; both specialisations coexist.
fn t10_mixed_dtypes(device: Device) {
    let k = MetalKernel::new(
        "mixed_dtypes",
        &["inp"],
        &["out"],
        "uint i = thread_position_in_grid.x;\nout[i] = inp[i] + inp[i];",
    )
    .unwrap();
    let h = Array::full(DType::F16, &[32], 1.5).unwrap();
    let f = Array::full(DType::F32, &[32], 2.5).unwrap();
    let oh = k
        .call(&[on(device, &h)], &LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[32], DType::F16).device(device))
        .unwrap();
    let of = k
        .call(&[on(device, &f)], &LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[32], DType::F32).device(device))
        .unwrap();
    let sum: Vec<f64> = values(&oh[0]).iter().zip(values(&of[0])).map(|(a, b)| a + b).collect();
    assert_eq!(sum, vec![8.0; 32]);
}

// T11: an invalid body is a compile error, and the backend keeps working afterwards.
fn t11_invalid_source_is_an_error(device: Device) {
    let bad = MetalKernel::new("bad", &["a"], &["out"], "out[0] = this is not metal;").unwrap();
    let a = Array::full(DType::F32, &[4], 1.0).unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(device);
    match bad.call(&[on(device, &a)], &spec) {
        Err(Error::Compile { log, .. }) => assert!(!log.is_empty()),
        other => panic!("expected a compile error, got {other:?}"),
    }
    let good = MetalKernel::new("good", &["a"], &["out"], "out[0] = a[0] * 6;").unwrap();
    assert_eq!(values(&good.call(&[on(device, &a)], &spec).unwrap()[0]), vec![6.0]);
}

backend_tests!(
    t1_basic_copy,
    t2_args,
    t3_strides,
    t4_helper,
    t5_attributes,
    t6_caching,
    t7_same_name_different_source,
    t9_math_mode,
    t10_mixed_dtypes,
    t11_invalid_source_is_an_error,
);

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
sanitizer_clean_tests!(t3_strides);
