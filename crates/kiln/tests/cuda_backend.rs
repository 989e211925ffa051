//! The CUDA backend on a real GPU: Metal-exact dispatch (partial edge groups, builtins, barriers,
//! SIMD collectives over partial warps), init_value, CudaKernel, and typed errors for bad
//! input. Every test needs an NVIDIA GPU and is ignored otherwise; run with
//! `KILN_REQUIRE_BACKEND=cuda cargo test --test cuda_backend -- --include-ignored`.

mod common;

use common::{assert_close, device_or_skip, random_array, Rng};
use kiln::backend::Backend;
use kiln::{Array, CudaKernel, DType, Device, Error, LaunchSpec, MetalKernel};

fn gpu() -> Option<Device> {
    device_or_skip("cuda")
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn exp_f16_matches_reference_on_a_partial_grid() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(1);
    let x = random_array(&mut rng, DType::F16, &[1000]);
    let k = MetalKernel::new(
        "myexp",
        &["inp"],
        &["out"],
        "uint e = thread_position_in_grid.x;\nout[e] = metal::exp(inp[e]);\n",
    )
    .unwrap();
    let spec = LaunchSpec::new([1000, 1, 1], [256, 1, 1]).output(&[1000], DType::F16).device(dev);
    let out = k.call(&[x.to_device(dev).unwrap().into()], &spec).unwrap();
    let reference: Vec<f64> = x.to_f64_vec().unwrap().iter().map(|v| v.exp()).collect();
    assert_close("exp", &out[0], &reference, DType::F16);
}

/// `out = x * a + b` with scalar `a`, `b`: the kernel of the launch-argument tests.
fn axpb(name: &str) -> MetalKernel {
    let body = "uint i = thread_position_in_grid.x;\nout[i] = x[i] * a + b;\n";
    MetalKernel::new(name, &["x", "a", "b"], &["out"], body).unwrap()
}

/// One `axpb` call of `n` fresh random elements in threadgroups of `tg`, queued without a
/// wait: its input, scalars and output.
type AxpbCall = (Array, f32, f32, Vec<Array>);
fn queue_axpb(k: &MetalKernel, dev: Device, rng: &mut Rng, n: usize, tg: u32, a: f32, b: f32) -> AxpbCall {
    let x = random_array(rng, DType::F32, &[n]);
    let spec = LaunchSpec::new([n as u32, 1, 1], [tg, 1, 1]).output(&[n], DType::F32).device(dev);
    let out = k.call(&[x.to_device(dev).unwrap().into(), a.into(), b.into()], &spec).unwrap();
    (x, a, b, out)
}

/// Checks every queued call against its own arguments.
fn check_axpb(what: &str, calls: &[AxpbCall]) {
    for (c, (x, a, b, out)) in calls.iter().enumerate() {
        let reference: Vec<f64> = x.to_f64_vec().unwrap().iter().map(|v| (*v as f32 * a + b) as f64).collect();
        assert_close(&format!("{what} call {c}"), &out[0], &reference, DType::F32);
    }
}

/// Repeated launches of one shape go through a cached graph whose parameters change at every
/// call: each call must still see its own inputs, scalar and output, with no wait in between.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn repeated_launches_keep_their_own_arguments() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(11);
    let k = axpb("axpb");
    // Short launches (the graph path) of whole groups in two sizes and of a partial grid (two
    // regions), and a grid too large for graphs (launched directly), in turn.
    let shapes = [(1024usize, 256u32), (4096, 128), (1000, 256), (65536, 256)];
    let calls: Vec<AxpbCall> = (0..320)
        .map(|c| {
            let (n, tg) = shapes[c % shapes.len()];
            queue_axpb(&k, dev, &mut rng, n, tg, 1.0 + c as f32 * 0.25, c as f32 - 100.0)
        })
        .collect();
    check_axpb("one thread", &calls);
}

/// Threads calling one kernel of one launch shape at once share its graph: each call must
/// still see its own arguments.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn concurrent_callers_keep_their_own_arguments() {
    let Some(dev) = gpu() else { return };
    let k = axpb("axpb_threads");
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let k = &k;
            scope.spawn(move || {
                let mut rng = Rng::new(100 + t);
                let calls: Vec<AxpbCall> = (0..100)
                    .map(|c| {
                        let (a, b) = (1.0 + t as f32 + c as f32 * 0.5, c as f32 - 7.0 * t as f32);
                        queue_axpb(k, dev, &mut rng, 2048, 256, a, b)
                    })
                    .collect();
                check_axpb(&format!("thread {t}"), &calls);
            });
        }
    });
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn builtins_have_metal_values_in_partial_2d_groups() {
    let Some(dev) = gpu() else { return };
    // Each thread writes its threads_per_threadgroup and linear index at its grid position.
    let body = "uint2 p = thread_position_in_grid.xy;\nuint i = p.y * 10 + p.x;\nout[i * 3 + 0] = threads_per_threadgroup.x;\nout[i * 3 + 1] = threads_per_threadgroup.y;\nout[i * 3 + 2] = thread_index_in_threadgroup;\n";
    let k = MetalKernel::new("builtins", &[], &["out"], body).unwrap();
    let spec = LaunchSpec::new([10, 7, 1], [4, 4, 1]).output(&[7 * 10 * 3], DType::U32).device(dev);
    let out = k.call(&[], &spec).unwrap()[0].to_host().unwrap().to_vec::<u32>().unwrap();
    for y in 0..7u32 {
        for x in 0..10u32 {
            let (w, h) = (if x >= 8 { 2 } else { 4 }, if y >= 4 { 3 } else { 4 });
            let i = ((y * 10 + x) * 3) as usize;
            assert_eq!(&out[i..i + 3], &[w, h, (y % 4) * w + x % 4], "thread ({x}, {y})");
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn simd_sum_and_barriers_are_exact_on_partial_groups() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(2);
    let n = 300;
    let x = random_array(&mut rng, DType::F32, &[n]);
    // Per threadgroup: sum of x over the group via simd_sum + threadgroup memory.
    let body = "threadgroup float part[32];\nuint lane = thread_index_in_simdgroup;\nuint sg = simdgroup_index_in_threadgroup;\nfloat s = simd_sum(x[thread_position_in_grid.x]);\nif (lane == 0) part[sg] = s;\nthreadgroup_barrier(mem_flags::mem_threadgroup);\nif (thread_index_in_threadgroup == 0) {\n  float t = 0;\n  for (uint i = 0; i < simdgroups_per_threadgroup; ++i) t += part[i];\n  out[threadgroup_position_in_grid.x] = t;\n}\n";
    let k = MetalKernel::new("group_sum", &["x"], &["out"], body).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [128, 1, 1]).output(&[3], DType::F32).device(dev);
    let out = k.call(&[x.to_device(dev).unwrap().into()], &spec).unwrap();
    let xs = x.to_f64_vec().unwrap();
    let reference: Vec<f64> = xs.chunks(128).map(|c| c.iter().sum()).collect();
    assert_close("group sums", &out[0], &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn atomic_outputs_accumulate_onto_init_value() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(3);
    let x = random_array(&mut rng, DType::F32, &[512]);
    let body =
        "uint i = thread_position_in_grid.x;\natomic_fetch_add_explicit(&out[i % 4], x[i], memory_order_relaxed);\n";
    let k = MetalKernel::new("atomic_sum", &["x"], &["out"], body).unwrap().atomic_outputs(true);
    let spec = LaunchSpec::new([512, 1, 1], [64, 1, 1]).output(&[4], DType::F32).init_value(1.5).device(dev);
    let out = k.call(&[x.to_device(dev).unwrap().into()], &spec).unwrap();
    let xs = x.to_f64_vec().unwrap();
    let reference: Vec<f64> = (0..4).map(|j| 1.5 + xs.iter().skip(j).step_by(4).sum::<f64>()).collect();
    assert_close("atomic sums", &out[0], &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn strided_inputs_are_made_row_contiguous_on_device() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(4);
    let x = random_array(&mut rng, DType::F32, &[6, 8]);
    let xt = x.to_device(dev).unwrap().transpose(&[1, 0]).unwrap();
    let k = MetalKernel::new("copy", &["x"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = x[i] * 2.0f;\n")
        .unwrap();
    let spec = LaunchSpec::new([48, 1, 1], [32, 1, 1]).output(&[8, 6], DType::F32).device(dev);
    let out = k.call(&[xt.into()], &spec).unwrap();
    let reference: Vec<f64> = x.transpose(&[1, 0]).unwrap().to_f64_vec().unwrap().iter().map(|v| v * 2.0).collect();
    assert_close("transposed copy", &out[0], &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cuda_kernel_runs_with_template_and_shape() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(5);
    let a = random_array(&mut rng, DType::F32, &[100]);
    let k = CudaKernel::new(
        "scale",
        &["a"],
        &["out"],
        "unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < a_shape[0]) out[i] = a[i] * T(S);\n",
    )
    .unwrap();
    let mut spec = LaunchSpec::new([100, 1, 1], [32, 1, 1]).output(&[100], DType::F32).device(dev);
    spec = spec.template("T", DType::F32).template("S", 3);
    let out = k.call(&[a.to_device(dev).unwrap().into()], &spec).unwrap();
    let reference: Vec<f64> = a.to_f64_vec().unwrap().iter().map(|v| v * 3.0).collect();
    assert_close("cuda_kernel scale", &out[0], &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cuda_kernel_with_launch_bounds_runs_whole_threadgroups() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(6);
    let a = random_array(&mut rng, DType::F32, &[3000]);
    let k = CudaKernel::new(
        "bounded_scale",
        &["a"],
        &["out"],
        "unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < a_shape[0]) out[i] = a[i] * 2.0f;\n",
    )
    .unwrap()
    .launch_bounds(1024, 1);
    let spec = LaunchSpec::new([3000, 1, 1], [1024, 1, 1]).output(&[3000], DType::F32).device(dev);
    let out = k.call(&[a.to_device(dev).unwrap().into()], &spec).unwrap();
    let reference: Vec<f64> = a.to_f64_vec().unwrap().iter().map(|v| v * 2.0).collect();
    assert_close("cuda_kernel bounded scale", &out[0], &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cuda_kernel_reads_strided_views_and_scalars_and_writes_given_outputs() {
    let Some(dev) = gpu() else { return };
    let mut rng = Rng::new(8);
    let a = random_array(&mut rng, DType::F32, &[7, 5]);
    // A (5, 7) view of strides (1, 5): passed as it is, with its shape, strides and rank.
    let view = a.to_device(dev).unwrap().transpose(&[1, 0]).unwrap();
    let body = "unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
                if (i < 35) {\n\
                  int64_t loc = elem_to_loc<int64_t>(i, a_shape.data(), a_strides.data(), a_ndim);\n\
                  out[i] = a[loc] * s[0] + float(a_ndim);\n\
                }\n";
    let k = CudaKernel::new("strided_scale", &["a", "s"], &["out"], body).unwrap().ensure_row_contiguous(false);
    let given = Array::from_vec(&[35], vec![f32::NAN; 35]).unwrap().to_device(dev).unwrap();
    let spec =
        LaunchSpec::new([35, 1, 1], [16, 1, 1]).output(&[35], DType::F32).device(dev).outputs_into(vec![given.clone()]);
    let s = rng.uniform(0.5, 2.0) as f32;
    let out = k.call(&[view.into(), s.into()], &spec).unwrap();
    let values = a.to_f64_vec().unwrap();
    let reference: Vec<f64> = (0..35).map(|i| values[(i % 7) * 5 + i / 7] * s as f64 + 2.0).collect();
    assert_close("cuda_kernel strided view", &out[0], &reference, DType::F32);
    assert_close("cuda_kernel given output", &given, &reference, DType::F32);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn capabilities_answer_what_the_cuda_backend_reads() {
    let Some(dev) = gpu() else { return };
    let Device::Cuda(ordinal) = dev else { unreachable!() };
    let caps = kiln::backend::capabilities(dev).unwrap();
    let backend = kiln::backend::cuda::cuda_backend(ordinal).unwrap();
    assert_eq!(caps.device, dev);
    assert_eq!(caps.compute_capability, Some(backend.arch()));
    assert_eq!(caps.multiprocessors, backend.multiprocessors());
    assert!(caps.memory_bytes >= 1 << 30 && !caps.name.is_empty(), "{caps:?}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bad_input_gives_typed_errors_and_the_device_stays_usable() {
    let Some(dev) = gpu() else { return };
    let backend = kiln::backend::backend_for(dev).unwrap();
    // Out of memory: one terabyte.
    let big = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1usize << 38], DType::F32).device(dev);
    let k = MetalKernel::new("noop", &[], &["out"], "out[0] = 1.0f;\n").unwrap();
    let err = k.call(&[], &big).unwrap_err();
    assert!(matches!(err, Error::Driver { .. }), "{err}");
    // A compile error is a Compile error naming the kernel.
    let bad = MetalKernel::new("bad", &[], &["out"], "out[0] = nope;\n").unwrap();
    let err = bad.call(&[], &LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(dev)).unwrap_err();
    assert!(matches!(err, Error::Compile { .. }), "{err}");
    // The device still runs kernels.
    let out = k.call(&[], &LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(dev)).unwrap();
    assert_eq!(backend.to_host(&out[0]).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tensor_maps_describe_only_contiguous_16_bit_device_arrays() {
    let Some(dev) = gpu() else { return };
    let Device::Cuda(ordinal) = dev else { unreachable!() };
    let backend = kiln::backend::cuda::cuda_backend(ordinal).unwrap();
    let mut rng = Rng::new(77);
    let a = random_array(&mut rng, DType::BF16, &[2, 3, 100, 128]).to_device(dev).unwrap();
    let map = backend.tensor_map_16bit("test", &a, [128, 100, 6], [64, 128, 1]).unwrap();
    assert_eq!(map.len(), kiln::backend::TENSOR_MAP_BYTES);
    assert!(map.iter().any(|&b| b != 0), "an encoded map is not all zeros");
    let refused = [
        backend.tensor_map_16bit("test", &a, [128, 100, 5], [64, 128, 1]).unwrap_err(),
        backend.tensor_map_16bit("test", &a, [128, 100, 6], [128, 128, 1]).unwrap_err(),
        backend.tensor_map_16bit("test", &a.transpose(&[0, 2, 1, 3]).unwrap(), [128, 3, 200], [64, 3, 1]).unwrap_err(),
        backend
            .tensor_map_16bit(
                "test",
                &random_array(&mut rng, DType::F32, &[4, 64]).to_device(dev).unwrap(),
                [64, 4, 1],
                [32, 4, 1],
            )
            .unwrap_err(),
        backend
            .tensor_map_16bit("test", &random_array(&mut rng, DType::BF16, &[4, 64]), [64, 4, 1], [64, 4, 1])
            .unwrap_err(),
    ];
    for err in refused {
        assert!(
            matches!(err, Error::InvalidArgument { .. } | Error::ShapeMismatch { .. } | Error::UnsupportedDType { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("test"), "the error names its caller: {err}");
    }
}

/// A faulting kernel poisons the CUDA context for the whole process; run this test in its own
/// process (`--exact kernel_faults_are_typed_errors`).
#[test]
#[ignore = "needs an NVIDIA GPU; leaves the process's CUDA context faulted"]
fn kernel_faults_are_typed_errors() {
    let Some(dev) = gpu() else { return };
    let fault = MetalKernel::new(
        "fault",
        &[],
        &["out"],
        "device float* p = (device float*)0x10;\np[thread_position_in_grid.x] = 1.0f;\nout[0] = p[1];\n",
    )
    .unwrap();
    // Launches are asynchronous: the fault surfaces at the call or when the output is read.
    let err = fault
        .call(&[], &LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[1], DType::F32).device(dev))
        .and_then(|outs| outs[0].to_host())
        .unwrap_err();
    assert!(matches!(err, Error::KernelFault { .. }), "{err}");
    // Where CUDA allows it (a reset primary context), the next call runs on a fresh context.
    let k = MetalKernel::new("noop", &[], &["out"], "out[0] = 1.0f;\n").unwrap();
    match k.call(&[], &LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(dev)) {
        Ok(out) => assert_eq!(out[0].to_host().unwrap().to_vec::<f32>().unwrap(), vec![1.0]),
        Err(e) => eprintln!("after a fault the device is not usable in this process: {e}"),
    }
}
