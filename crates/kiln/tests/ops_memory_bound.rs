//! The memory-bound ops (elementwise activations, RMSNorm, residual RMSNorm, softmax, RoPE,
//! scatter-add, overlap-add) against their plain-Rust references, on every backend: each dtype,
//! odd sizes, partial threadgroups, batch axes, non-contiguous inputs, every kernel variant the
//! rule can pick, and typed errors for bad input. Outputs are poisoned with NaN before each run.
//! The NVRTC test compiles every variant's CUDA translation for sm_90 without a GPU.

mod common;

use common::{assert_close, random_array, Rng};
use kiln::ops::elementwise::{self, Unary};
use kiln::ops::util::{OpCall, FLOAT_DTYPES};
use kiln::ops::{residual_rms_norm, rms_norm};
use kiln::{Array, DType, Device, Error, SliceArg};

/// Runs a prepared call with poisoned outputs and returns them on the host.
fn run_poisoned(call: OpCall) -> Vec<Array> {
    call.poisoned().run().unwrap().iter().map(|a| a.to_host().unwrap()).collect()
}

fn on(device: Device, a: &Array) -> Array {
    a.to_device(device).unwrap()
}

fn slice(text: &str) -> Vec<SliceArg> {
    SliceArg::parse_list(text).unwrap()
}

// ---------------------------------------------------------------------------------------------
// elementwise

fn unary_case(op: Unary, x: &Array, want_variant: &str) {
    let call = elementwise::unary_call(op, x).unwrap();
    assert_eq!(call.variant(), want_variant, "{} on {:?}", op.name(), x);
    let out = run_poisoned(call).remove(0);
    assert_eq!(out.shape(), x.shape());
    assert_eq!(out.dtype(), x.dtype());
    let xv = x.to_host().unwrap().to_f64_vec().unwrap();
    assert_close(&format!("{} {:?}", op.name(), x), &out, &elementwise::reference(op, &xv), x.dtype());
}

fn elementwise_matches_reference(device: Device) {
    let mut rng = Rng::new(11);
    for dtype in FLOAT_DTYPES {
        for op in Unary::ALL {
            // Contiguous: odd total (vector tail), an exact multiple of the vector width, batch
            // axes, and a row view at an offset that keeps the vector path.
            for shape in [&[3, 5, 67][..], &[2, 256], &[1031]] {
                let x = on(device, &random_array(&mut rng, dtype, shape).astype(dtype).unwrap());
                unary_case(op, &x, "kiln_unary_contiguous");
            }
            let base = on(device, &random_array(&mut rng, dtype, &[6, 20]));
            unary_case(op, &base.slice(&slice("1:4")).unwrap(), "kiln_unary_contiguous");
            // Strided, read in place: every other row, columns reversed, then transposed; an
            // unaligned contiguous row; a broadcast; a tiny input.
            let base = on(device, &random_array(&mut rng, dtype, &[9, 13, 7]));
            let view = base.slice(&slice("::2, ::-1")).unwrap().transpose(&[2, 0, 1]).unwrap();
            unary_case(op, &view, "kiln_unary_strided");
            unary_case(op, &base.slice(&slice("1:2, 1:2")).unwrap(), "kiln_unary_strided");
            let row = on(device, &random_array(&mut rng, dtype, &[1, 33]));
            unary_case(op, &row.broadcast_to(&[3, 4, 33]).unwrap(), "kiln_unary_strided");
            unary_case(op, &on(device, &random_array(&mut rng, dtype, &[5])), "kiln_unary_strided");
        }
    }
    // The erf tails: wide inputs, where 1 + erf(x/√2) cancels for negative x.
    let wide = Array::from_f64(DType::F32, &[400], &rng.normals(400, 4.0)).unwrap();
    unary_case(Unary::GeluErf, &on(device, &wide), "kiln_unary_contiguous");
    let tail: Vec<f64> = (0..64).map(|i| -3.0 - i as f64 * 0.1).collect();
    let tail = Array::from_f64(DType::F32, &[64], &tail).unwrap();
    unary_case(Unary::GeluErf, &on(device, &tail), "kiln_unary_contiguous");
}

fn elementwise_rejects_bad_input(device: Device) {
    let ints = on(device, &Array::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap());
    assert!(matches!(elementwise::exp(&ints), Err(Error::UnsupportedDType { ref op, .. }) if op == "exp"));
    let empty = on(device, &Array::from_f64(DType::F32, &[0, 3], &[]).unwrap());
    assert!(matches!(elementwise::silu(&empty), Err(Error::ShapeMismatch { ref op, .. }) if op == "silu"));
}

// ---------------------------------------------------------------------------------------------
// rms_norm and residual_rms_norm

/// (shape, variant) cases covering both row mappings, with and without vector loads.
const NORM_CASES: [(&[usize], &str); 6] = [
    (&[3, 5, 64], "simdgroup_vec4"),
    (&[7, 33], "simdgroup"),
    (&[2, 1], "simdgroup"),
    (&[9, 1024], "simdgroup_vec4"),
    (&[3, 1500], "threadgroup_vec4"),
    (&[2, 1031], "threadgroup"),
];

fn host_values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

fn rms_norm_matches_reference(device: Device) {
    let mut rng = Rng::new(21);
    for dtype in FLOAT_DTYPES {
        for (shape, variant) in NORM_CASES {
            let d = shape[shape.len() - 1];
            let x = on(device, &random_array(&mut rng, dtype, shape));
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let call = rms_norm::rms_norm_call(&x, &w, 1e-5).unwrap();
            assert_eq!(call.variant(), format!("kiln_rms_norm_{variant}"));
            let out = run_poisoned(call).remove(0);
            assert_eq!(out.shape(), shape);
            let want = rms_norm::reference(&host_values(&x), &host_values(&w), d, 1e-5);
            assert_close(&format!("rms_norm {dtype} {shape:?}"), &out, &want, dtype);
        }
        // A transposed (non-contiguous) input and a large eps.
        let base = on(device, &random_array(&mut rng, dtype, &[40, 6]));
        let x = base.t();
        let w = on(device, &random_array(&mut rng, dtype, &[40]));
        let out = rms_norm::rms_norm(&x, &w, 0.5).unwrap();
        let want = rms_norm::reference(&host_values(&x), &host_values(&w), 40, 0.5);
        assert_close(&format!("rms_norm {dtype} transposed"), &out, &want, dtype);
    }
}

fn residual_rms_norm_matches_reference(device: Device) {
    let mut rng = Rng::new(22);
    for dtype in FLOAT_DTYPES {
        for (shape, variant) in NORM_CASES {
            let d = shape[shape.len() - 1];
            let x = on(device, &random_array(&mut rng, dtype, shape));
            let r = on(device, &random_array(&mut rng, dtype, shape));
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let call = residual_rms_norm::residual_rms_norm_call(&x, &r, &w, 1e-6).unwrap();
            assert_eq!(call.variant(), format!("kiln_residual_rms_norm_{variant}"));
            let outs = run_poisoned(call);
            let (want_y, want_h) =
                residual_rms_norm::reference(&host_values(&x), &host_values(&r), &host_values(&w), d, 1e-6);
            assert_close(&format!("residual_rms_norm y {dtype} {shape:?}"), &outs[0], &want_y, dtype);
            assert_close(&format!("residual_rms_norm h {dtype} {shape:?}"), &outs[1], &want_h, dtype);
        }
        // A residual read through a reversed view, x broadcast over the batch.
        let x = on(device, &random_array(&mut rng, dtype, &[1, 48])).broadcast_to(&[5, 48]).unwrap();
        let r = on(device, &random_array(&mut rng, dtype, &[5, 48])).slice(&slice("::-1")).unwrap();
        let w = on(device, &random_array(&mut rng, dtype, &[48]));
        let (y, h) = residual_rms_norm::residual_rms_norm(&x, &r, &w, 1e-5).unwrap();
        let (want_y, want_h) =
            residual_rms_norm::reference(&host_values(&x), &host_values(&r), &host_values(&w), 48, 1e-5);
        assert_close("residual_rms_norm y views", &y, &want_y, dtype);
        assert_close("residual_rms_norm h views", &h, &want_h, dtype);
    }
}

fn norms_reject_bad_input(device: Device) {
    let mut rng = Rng::new(23);
    let x = on(device, &random_array(&mut rng, DType::F32, &[4, 8]));
    let w = on(device, &random_array(&mut rng, DType::F32, &[8]));
    let w7 = on(device, &random_array(&mut rng, DType::F32, &[7]));
    let w16 = on(device, &random_array(&mut rng, DType::F16, &[8]));
    let shape_err = |r: Result<Array, Error>| matches!(r, Err(Error::ShapeMismatch { ref op, .. }) if op == "rms_norm");
    assert!(shape_err(rms_norm::rms_norm(&x, &w7, 1e-5)));
    assert!(matches!(rms_norm::rms_norm(&x, &w16, 1e-5), Err(Error::UnsupportedDType { .. })));
    assert!(matches!(rms_norm::rms_norm(&x, &w, -1.0), Err(Error::InvalidArgument { .. })));
    assert!(matches!(rms_norm::rms_norm(&x, &w, f32::NAN), Err(Error::InvalidArgument { .. })));
    let scalar = on(device, &Array::scalar(1.0f32));
    assert!(shape_err(rms_norm::rms_norm(&scalar, &w, 1e-5)));
    let empty = on(device, &Array::from_f64(DType::F32, &[0, 8], &[]).unwrap());
    assert!(shape_err(rms_norm::rms_norm(&empty, &w, 1e-5)));
    let ints = on(device, &Array::from_vec(&[1, 8], vec![1i32; 8]).unwrap());
    assert!(matches!(rms_norm::rms_norm(&ints, &w, 1e-5), Err(Error::UnsupportedDType { .. })));
    let r = on(device, &random_array(&mut rng, DType::F32, &[4, 4]));
    let res = residual_rms_norm::residual_rms_norm(&x, &r, &w, 1e-5);
    assert!(matches!(res, Err(Error::ShapeMismatch { ref op, .. }) if op == "residual_rms_norm"));
}

backend_tests!(
    elementwise_matches_reference,
    elementwise_rejects_bad_input,
    rms_norm_matches_reference,
    residual_rms_norm_matches_reference,
    norms_reject_bad_input,
);
