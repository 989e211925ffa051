//! Arrays over memory lent by another framework (what the Python package binds NumPy arrays and
//! PyTorch tensors as), caller-allocated outputs and the caller's cancel flag, on the CPU
//! emulator. The CUDA forms (`LentCudaMemory`, `LaunchSpec::stream`) are exercised on a GPU by
//! the Python package's PyTorch tests (`python/tests/test_torch.py`).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Rng;
use kiln::backend::cpu::{lent_host_array, LentHostMemory};
use kiln::{Array, DType, Error, LaunchSpec, MetalKernel};

/// `values` lent to kiln as a host array of shape `[len]` (the Vec is the owner).
fn lent(mut values: Vec<f32>) -> Array {
    let ptr = values.as_mut_ptr() as *const u8;
    let len = values.len() * 4;
    // SAFETY: the Vec's heap buffer does not move when the Vec is moved into the owner, which
    // keeps it alive for as long as the array (and its views) live; nothing else touches it.
    let memory = unsafe { LentHostMemory::new(ptr, len, Box::new(values)) };
    let n = len / 4;
    lent_host_array(memory, DType::F32, 0, &[n], &[1]).expect("lent array")
}

#[test]
fn lent_views_with_negative_strides_are_read_in_place() {
    let mut rng = Rng::new(7);
    let values: Vec<f32> = rng.normals(6 * 10, 1.0).into_iter().map(|v| v as f32).collect();
    let whole = lent(values.clone());
    // The view x[1::2, ::-3] of a (6, 10) array: starts at (1, 9), strides (20, -3), shape (3, 4).
    let view = whole.as_strided(19, &[3, 4], &[20, -3]).expect("view inside the storage");
    let kernel = MetalKernel::new(
        "lent_strided_copy",
        &["inp"],
        &["out"],
        "uint i = thread_position_in_grid.x; out[i] = inp[elem_to_loc(int64_t(i), inp_shape, inp_strides, inp_ndim)];",
    )
    .unwrap()
    .ensure_row_contiguous(false);
    let spec = LaunchSpec::new([12, 1, 1], [8, 1, 1]).output(&[3, 4], DType::F32).init_value(f64::NAN);
    let out = kernel.call(&[(&view).into()], &spec).unwrap();
    let want: Vec<f64> =
        (0..3).flat_map(|r| (0..4).map(move |c| (r, c))).map(|(r, c)| values[19 + 20 * r - 3 * c] as f64).collect();
    assert_eq!(out[0].to_f64_vec().unwrap(), want);
    assert!(view.host_buffer().unwrap().is_lent(), "the view still borrows the caller's memory");
}

#[test]
fn outputs_into_are_written_in_place_and_returned() {
    let mut rng = Rng::new(11);
    let x: Vec<f32> = rng.normals(64, 1.0).into_iter().map(|v| v as f32).collect();
    let input = lent(x.clone());
    let output = lent(vec![f32::NAN; 64]);
    let kernel =
        MetalKernel::new("lent_double", &["x"], &["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] * 2.0f;")
            .unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).outputs_into(vec![output.clone()]);
    let out = kernel.call(&[(&input).into()], &spec).unwrap();
    assert_eq!(out.len(), 1);
    assert!(Arc::ptr_eq(out[0].storage(), output.storage()), "the caller's output comes back, not a copy");
    let want: Vec<f64> = x.iter().map(|&v| v as f64 * 2.0).collect();
    assert_eq!(output.to_f64_vec().unwrap(), want);
}

#[test]
fn outputs_given_in_part_are_written_in_place_and_the_others_allocated() {
    let mut rng = Rng::new(12);
    let x: Vec<f32> = rng.normals(64, 1.0).into_iter().map(|v| v as f32).collect();
    let input = lent(x.clone());
    let given = lent(vec![f32::NAN; 64]);
    let kernel = MetalKernel::new(
        "lent_double_and_negate",
        &["x"],
        &["y", "z"],
        "uint i = thread_position_in_grid.x; y[i] = x[i] * 2.0f; z[i] = -x[i];",
    )
    .unwrap();
    // The second output given, the first allocated (and filled with NaN first) by kiln.
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1])
        .output(&[64], DType::F32)
        .output(&[64], DType::F32)
        .init_value(f64::NAN)
        .outputs_partly_into(vec![None, Some(given.clone())]);
    let out = kernel.call(&[(&input).into()], &spec).unwrap();
    assert_eq!(out.len(), 2);
    assert!(Arc::ptr_eq(out[1].storage(), given.storage()), "the caller's output comes back, not a copy");
    assert!(!Arc::ptr_eq(out[0].storage(), given.storage()));
    let doubled: Vec<f64> = x.iter().map(|&v| v as f64 * 2.0).collect();
    let negated: Vec<f64> = x.iter().map(|&v| -(v as f64)).collect();
    assert_eq!(out[0].to_f64_vec().unwrap(), doubled);
    assert_eq!(given.to_f64_vec().unwrap(), negated);
    // A given output of the wrong shape is still refused.
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1])
        .output(&[64], DType::F32)
        .output(&[64], DType::F32)
        .outputs_partly_into(vec![None, Some(lent(vec![0.0; 8]))]);
    assert!(matches!(kernel.call(&[(&input).into()], &spec), Err(Error::InvalidArgument { .. })));
}

#[test]
fn outputs_into_must_match_the_declared_outputs() {
    let kernel = MetalKernel::new("lent_mismatch", &["x"], &["y"], "y[0] = x[0];").unwrap();
    let x = Array::from_f64(DType::F32, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let wrong = Array::full(DType::F32, &[3], 0.0).unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[4], DType::F32).outputs_into(vec![wrong]);
    match kernel.call(&[(&x).into()], &spec) {
        Err(Error::InvalidArgument { op, msg }) => {
            assert!(op.contains("lent_mismatch"), "{op}");
            assert!(msg.contains("output 0"), "{msg}");
        }
        other => panic!("expected an invalid argument, got {other:?}"),
    }
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[4], DType::F32).outputs_into(vec![]);
    assert!(matches!(kernel.call(&[(&x).into()], &spec), Err(Error::InvalidArgument { .. })));
}

#[test]
fn views_outside_the_storage_are_refused() {
    let whole = lent(vec![0.5; 10]);
    assert!(whole.as_strided(0, &[10], &[1]).is_ok());
    assert!(whole.as_strided(9, &[10], &[-1]).is_ok());
    assert!(matches!(whole.as_strided(1, &[10], &[1]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(whole.as_strided(8, &[10], &[-1]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(whole.as_strided(0, &[2], &[1, 1]), Err(Error::ShapeMismatch { .. })));
    assert!(whole.as_strided(50, &[0, 3], &[1, 1]).is_ok(), "an empty view reaches nothing");
}

#[test]
fn writing_a_lent_host_buffer_through_kiln_copies_it_first() {
    let a = lent(vec![1.5; 4]);
    let mut buffer = a.host_buffer().unwrap().clone();
    buffer.bytes_mut()[..4].copy_from_slice(&2.5f32.to_le_bytes());
    assert!(!buffer.is_lent());
    assert_eq!(a.to_f64_vec().unwrap(), vec![1.5; 4], "the lender's memory is untouched");
}

#[test]
fn a_set_cancel_flag_stops_a_cpu_kernel_and_the_kernel_runs_again() {
    let source = r#"
        uint i = thread_position_in_grid.x;
        float v = x[i];
        if (stop_after < 0) { while (v == v) { v = v * 0.5f + 1.0f; } }
        out[i] = v + 1.0f;
    "#;
    let kernel = MetalKernel::new("cancel_forever", &["x", "stop_after"], &["out"], source).unwrap();
    let x = Array::from_f64(DType::F32, &[64], &(0..64).map(|i| i as f64 * 0.25).collect::<Vec<_>>()).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::SeqCst);
    });
    let start = Instant::now();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).cancel(cancel);
    match kernel.call(&[(&x).into(), (-1).into()], &spec) {
        Err(Error::Interrupted { kernel }) => assert_eq!(kernel, "cancel_forever"),
        other => panic!("expected an interruption, got {other:?}"),
    }
    setter.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(20), "stopped soon after the flag was set");
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).cancel(Arc::default());
    let out = kernel.call(&[(&x).into(), 1.into()], &spec).unwrap();
    let want: Vec<f64> = (0..64).map(|i| i as f64 * 0.25 + 1.0).collect();
    assert_eq!(out[0].to_f64_vec().unwrap(), want);
}

#[test]
fn a_write_past_a_lent_output_is_a_fault_and_leaves_the_callers_memory_as_it_was() {
    let mut rng = Rng::new(13);
    let x: Vec<f32> = rng.normals(64, 1.0).into_iter().map(|v| v as f32).collect();
    let input = lent(x);
    // The caller's output is the first half of a larger allocation: a write past it would land
    // in the second half, the caller's own memory.
    let whole = lent(vec![7.0f32; 128]);
    let output = whole.as_strided(0, &[64], &[1]).unwrap();
    let kernel =
        MetalKernel::new("lent_past_end", &["x"], &["y"], "uint i = thread_position_in_grid.x; y[i + 1] = x[i];")
            .unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).outputs_into(vec![output]);
    let err = kernel.call(&[(&input).into()], &spec).unwrap_err();
    match &err {
        Error::KernelFault { kernel, msg } => {
            assert_eq!(kernel, "lent_past_end");
            assert!(msg.contains("output `y`") && msg.contains("left as they were"), "{msg}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    assert!(whole.to_f64_vec().unwrap().iter().all(|&v| v == 7.0), "no byte of the caller's memory changed");
}

#[test]
fn in_place_library_buffers_are_updated_not_returned_and_guarded() {
    use kiln::{LibraryArg, LibraryLaunch, MetalLibrary};
    let library = MetalLibrary::new(
        "in_place.metal",
        "#include <metal_stdlib>\nusing namespace metal;\n\
         kernel void add(device float* b [[buffer(0)]], constant float& k [[buffer(1)]],\n\
                         device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n\
             b[i] += k; out[i] = -b[i];\n}\n",
    );
    let mut rng = Rng::new(14);
    let x: Vec<f32> = rng.normals(32, 1.0).into_iter().map(|v| v as f32).collect();
    let buffer = lent(x.clone());
    let args = [
        LibraryArg::InPlace(buffer.clone()),
        LibraryArg::Bytes(0.5f32.to_le_bytes().to_vec()),
        LibraryArg::Output { shape: vec![32], dtype: DType::F32, init_value: None },
    ];
    let out = library.dispatch(kiln::Device::Cpu, &args, &LibraryLaunch::threads("add", 32usize, 32usize)).unwrap();
    assert_eq!(out.len(), 1, "only the fresh output comes back");
    let updated: Vec<f64> = x.iter().map(|&v| (v + 0.5) as f64).collect();
    assert_eq!(buffer.to_f64_vec().unwrap(), updated);
    assert_eq!(out[0].to_f64_vec().unwrap(), updated.iter().map(|v| -v).collect::<Vec<_>>());
    // A grid larger than the buffer writes past it: a fault, and the buffer is as it was.
    let err =
        library.dispatch(kiln::Device::Cpu, &args, &LibraryLaunch::threads("add", 4096usize, 64usize)).unwrap_err();
    assert!(matches!(&err, Error::KernelFault { msg, .. } if msg.contains("slot 0")), "{err:?}");
    assert_eq!(buffer.to_f64_vec().unwrap(), updated);
}

#[test]
fn a_grid_without_threads_is_refused_while_an_output_would_stay_uninitialised() {
    let kernel = MetalKernel::new("no_threads", &["x"], &["y"], "y[0] = x[0];").unwrap();
    let x = Array::from_slice(&[4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([0, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
    let err = kernel.call(&[(&x).into()], &spec).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { msg, .. } if msg.contains("zero dimension") && msg.contains("\"y\"")),
        "{err:?}"
    );
    let out = kernel.call(&[(&x).into()], &spec.clone().init_value(2.0)).unwrap();
    assert_eq!(out[0].to_f64_vec().unwrap(), [2.0; 4]);
}

#[test]
fn input_and_output_names_must_be_distinct_identifiers() {
    for (inputs, outputs, what) in [
        (vec!["inp) { } void f(int x"], vec!["out"], "not an identifier"),
        (vec!["x"], vec!["2y"], "not an identifier"),
        (vec!["x"], vec!["x"], "given twice"),
    ] {
        let err = MetalKernel::new("names", &inputs, &outputs, "out[0] = 1;").unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument { msg, .. } if msg.contains(what)), "{err:?}");
    }
}
