//! Plans run into caller-allocated outputs (`OpPlan::run_into`, `LibraryArg::OutputInto`): the
//! given arrays receive the op's results wherever its calls make them (the one-kernel and the
//! blocked Cholesky and QR), the returned arrays are those arrays, and outputs that do not fit
//! are typed errors naming the op.

#[macro_use]
mod common;

use std::sync::Arc;

use common::{rel_l2, tolerance, Rng};
use kiln::ops::{self, cholesky, qr, OpOutput};
use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch, MetalLibrary};

/// Caller outputs for `specs`, poisoned with NaN, on `device`.
fn poisoned_outputs(specs: &[OpOutput], device: Device) -> Vec<Array> {
    specs.iter().map(|s| Array::full(s.dtype, &s.shape, f64::NAN).unwrap().to_device(device).unwrap()).collect()
}

fn host_values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

#[track_caller]
fn assert_near(what: &str, got: &[f64], want: &[f64]) {
    let err = rel_l2(got, want);
    assert!(err <= tolerance(DType::F32), "{what}: relative L2 error {err:e}");
}

/// Runs `plan` into fresh poisoned caller arrays; checks the plan returns those very arrays.
fn run_into_given(plan: &ops::OpPlan, device: Device) -> Vec<Array> {
    let given = poisoned_outputs(&plan.output_specs().unwrap(), device);
    let got = plan.run_into(given.clone()).unwrap();
    assert_eq!(got.len(), given.len());
    for (g, o) in got.iter().zip(&given) {
        assert!(Arc::ptr_eq(g.storage(), o.storage()), "{}: a returned output is not the given array", plan.variant());
    }
    given
}

fn spd(rng: &mut Rng, n: usize) -> Vec<f64> {
    let m = rng.normals(n * n, 1.0);
    (0..n * n)
        .map(|e| {
            let (i, j) = (e / n, e % n);
            let dot: f64 = (0..n).map(|p| m[i * n + p] * m[j * n + p]).sum();
            dot / n as f64 + if i == j { 1.0 } else { 0.0 }
        })
        .collect()
}

fn cholesky_writes_into_given_outputs(device: Device) {
    // The register variant (its flags stay kiln's) and the blocked one (library dispatches
    // updating the first call's output in place).
    for (seed, n) in [(1u64, 24usize), (2, 100)] {
        let mut rng = Rng::new(900 + seed);
        let values: Vec<f64> = (0..2).flat_map(|_| spd(&mut rng, n)).collect();
        let host = Array::from_f64(DType::F32, &[2, n, n], &values).unwrap();
        let av = host.to_f64_vec().unwrap();
        let plan = cholesky::cholesky_plan(&host.to_device(device).unwrap()).unwrap();
        let specs = plan.output_specs().unwrap();
        assert_eq!(specs, [OpOutput { shape: vec![2, n, n], dtype: DType::F32, init_value: None }]);
        let given = run_into_given(&plan, device);
        let l = host_values(&given[0]);
        for b in 0..2 {
            let want = cholesky::reference(&av[b * n * n..][..n * n], n).unwrap();
            assert_near(&format!("cholesky {n} matrix {b}"), &l[b * n * n..][..n * n], &want);
        }
    }
}

fn cholesky_into_still_names_the_matrix_that_is_not_positive_definite(device: Device) {
    let n = 100;
    let mut values: Vec<f64> = (0..3).flat_map(|s| spd(&mut Rng::new(950 + s), n)).collect();
    values[n * n + 7 * n + 7] = -50.0;
    let a = Array::from_f64(DType::F32, &[3, n, n], &values).unwrap().to_device(device).unwrap();
    let plan = cholesky::cholesky_plan(&a).unwrap();
    let given = poisoned_outputs(&plan.output_specs().unwrap(), device);
    let msg = plan.run_into(given).unwrap_err().to_string();
    assert!(msg.starts_with("[cholesky]") && msg.contains("matrix 1 of the batch is not positive definite"), "{msg}");
}

fn qr_writes_into_given_outputs(device: Device) {
    // One kernel (both outputs of the last call), and blocked: Q from the first call, updated
    // in place, R from the last.
    for (seed, (m, n)) in [(1u64, (16usize, 16usize)), (2, (100, 100)), (3, (150, 70))] {
        let mut rng = Rng::new(970 + seed);
        let mut values = rng.normals(2 * m * n, 1.0);
        for b in 0..2 {
            for j in 0..n {
                values[b * m * n + j * n + j] += 2.0 * (m as f64).sqrt();
            }
        }
        let host = Array::from_f64(DType::F32, &[2, m, n], &values).unwrap();
        let av = host.to_f64_vec().unwrap();
        let plan = qr::qr_plan(&host.to_device(device).unwrap()).unwrap();
        let shapes: Vec<Vec<usize>> = plan.output_specs().unwrap().into_iter().map(|s| s.shape).collect();
        assert_eq!(shapes, [vec![2, m, n], vec![2, n, n]]);
        let given = run_into_given(&plan, device);
        let (q, r) = (host_values(&given[0]), host_values(&given[1]));
        for b in 0..2 {
            let (want_q, want_r) = qr::reference(&av[b * m * n..][..m * n], m, n);
            assert_near(&format!("qr {m}x{n} matrix {b} Q"), &q[b * m * n..][..m * n], &want_q);
            assert_near(&format!("qr {m}x{n} matrix {b} R"), &r[b * n * n..][..n * n], &want_r);
        }
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(what: &str, op: &str, result: kiln::Result<T>) {
    match result {
        Err(e @ kiln::Error::InvalidArgument { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(op), "{what}: error does not name {op}: {msg}");
        }
        other => panic!("{what}: expected an invalid-argument error, got {other:?}"),
    }
}

fn run_into_refuses_outputs_that_do_not_fit(device: Device) {
    let a = Array::from_f64(DType::F32, &[100, 100], &spd(&mut Rng::new(990), 100)).unwrap().to_device(device).unwrap();
    let plan = cholesky::cholesky_plan(&a).unwrap();
    let out = |dtype: DType, shape: &[usize]| Array::full(dtype, shape, 0.5).unwrap().to_device(device).unwrap();
    assert_refused("shape", "cholesky", plan.run_into(vec![out(DType::F32, &[100, 99])]));
    assert_refused("dtype", "cholesky", plan.run_into(vec![out(DType::F16, &[100, 100])]));
    assert_refused("count", "cholesky", plan.run_into(vec![out(DType::F32, &[100, 100]); 2]));
    let strided = out(DType::F32, &[100, 100]).as_strided(0, &[100, 100], &[1, 100]).unwrap();
    assert_refused("column-major", "cholesky", plan.run_into(vec![strided]));
    if device != Device::Cpu {
        let host = Array::full(DType::F32, &[100, 100], 0.5).unwrap();
        assert_refused("device", "cholesky", plan.run_into(vec![host]));
    }
    // A finishing step that returns arrays of its own cannot hand back the caller's.
    let x = Array::from_f64(DType::F32, &[8], &Rng::new(991).normals(8, 1.0)).unwrap().to_device(device).unwrap();
    let copying = ops::OpPlan::from(ops::unary_call(ops::Unary::Exp, &x).unwrap()).finish(&[], |outs, _| {
        outs.iter().map(|o| Array::from_f64(o.dtype(), o.shape(), &o.to_host()?.to_f64_vec()?)).collect()
    });
    let given = poisoned_outputs(&copying.output_specs().unwrap(), device);
    assert_refused("finish", "kiln_unary", copying.run_into(given));
}

const SCALE: &str = r#"
#include <metal_stdlib>
using namespace metal;
kernel void scale2(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   device float* z [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    y[i] = 2.0f * x[i];
    z[i] = x[i] + 1.0f;
}
"#;

fn library_output_into_is_written_and_returned_in_slot_order(device: Device) {
    let library = MetalLibrary::new("scale2.metal", SCALE);
    let xs = Rng::new(992).normals(64, 1.0);
    let x = Array::from_f64(DType::F32, &[64], &xs).unwrap();
    let xv = x.to_f64_vec().unwrap();
    let x = x.to_device(device).unwrap();
    let given = Array::full(DType::F32, &[64], f64::NAN).unwrap().to_device(device).unwrap();
    let args = [
        LibraryArg::Array(x.clone()),
        LibraryArg::OutputInto(given.clone()),
        LibraryArg::Output { shape: vec![64], dtype: DType::F32, init_value: None },
    ];
    let launch = LibraryLaunch::threads("scale2", 64usize, 32usize);
    let outs = library.dispatch(device, &args, &launch).unwrap();
    assert_eq!(outs.len(), 2);
    assert!(Arc::ptr_eq(outs[0].storage(), given.storage()));
    let want_y: Vec<f64> = xv.iter().map(|v| 2.0 * v).collect();
    let want_z: Vec<f64> = xv.iter().map(|v| v + 1.0).collect();
    assert_near("given y", &host_values(&given), &want_y);
    assert_near("fresh z", &host_values(&outs[1]), &want_z);

    let strided = Array::full(DType::F32, &[128], 0.0).unwrap().to_device(device).unwrap();
    let strided = strided.as_strided(0, &[64], &[2]).unwrap();
    let args = [LibraryArg::Array(x.clone()), LibraryArg::OutputInto(strided), LibraryArg::OutputInto(given.clone())];
    assert_refused("strided", "scale2", library.dispatch(device, &args, &launch));
    if device != Device::Cpu {
        let host = Array::full(DType::F32, &[64], 0.0).unwrap();
        let args = [LibraryArg::Array(x), LibraryArg::OutputInto(host), LibraryArg::OutputInto(given)];
        assert_refused("device", "scale2", library.dispatch(device, &args, &launch));
    }
}

backend_tests!(
    cholesky_writes_into_given_outputs,
    cholesky_into_still_names_the_matrix_that_is_not_positive_definite,
    qr_writes_into_given_outputs,
    run_into_refuses_outputs_that_do_not_fit,
    library_output_into_is_written_and_returned_in_slot_order,
);
