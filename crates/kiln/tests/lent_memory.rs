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
