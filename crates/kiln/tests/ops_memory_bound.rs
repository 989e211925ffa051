//! The memory-bound ops (elementwise activations, RMSNorm, residual RMSNorm, softmax, RoPE,
//! scatter-add, overlap-add) against their plain-Rust references, on every backend: each dtype,
//! odd sizes, partial threadgroups, batch axes, non-contiguous inputs, every kernel variant the
//! rule can pick, and typed errors for bad input. Outputs are poisoned with NaN before each run.
//! The NVRTC test compiles every variant's CUDA translation for sm_90 without a GPU.

mod common;

use common::{assert_close, random_array, Rng};
use kiln::ops::elementwise::{self, Unary};
use kiln::ops::{overlap_add, residual_rms_norm, rms_norm, rope, scatter_add, softmax};
use kiln::ops::{OpCall, FLOAT_DTYPES};
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

fn unary_case(op: Unary, x: &Array, plan: Device, want_variant: &str) {
    let call = elementwise::unary_call_planned_for(op, x, plan).unwrap();
    assert_eq!(call.variant(), want_variant, "{} on {:?} planned for {plan}", op.name(), x);
    let out = run_poisoned(call).remove(0);
    assert_eq!(out.shape(), x.shape());
    assert_eq!(out.dtype(), x.dtype());
    let xv = x.to_host().unwrap().to_f64_vec().unwrap();
    assert_close(
        &format!("{} {:?} planned for {plan}", op.name(), x),
        &out,
        &elementwise::reference(op, &xv),
        x.dtype(),
    );
}

/// The plans checked on `device`: its own, and on the CPU a GPU's too (run by the emulator).
fn plans_on(device: Device) -> Vec<Device> {
    if device == Device::Cpu {
        vec![Device::Cpu, GPU]
    } else {
        vec![device]
    }
}

fn elementwise_matches_reference(device: Device) {
    let mut rng = Rng::new(11);
    for plan in plans_on(device) {
        // On the CPU a row-contiguous input takes one element per thread.
        let cpu = plan == Device::Cpu;
        let vector = if cpu { "kiln_unary_flat" } else { "kiln_unary_contiguous" };
        for dtype in FLOAT_DTYPES {
            for op in Unary::ALL {
                // Contiguous: odd total (vector tail), an exact multiple of the vector width,
                // batch axes, and a row view at an offset that keeps the vector path.
                // 16-bit inputs at an 8-element-aligned offset take 16-byte units.
                let whole = match (cpu, dtype.size()) {
                    (true, _) => "kiln_unary_flat",
                    (false, 2) => "kiln_unary_contiguous16",
                    (false, _) => "kiln_unary_contiguous",
                };
                // Several threadgroups (the unchecked ones and a last one), with and without a tail.
                for shape in [&[3, 5, 67][..], &[2, 256], &[1031], &[17], &[4109], &[3, 2048]] {
                    let x = on(device, &random_array(&mut rng, dtype, shape).astype(dtype).unwrap());
                    unary_case(op, &x, plan, whole);
                }
                let base = on(device, &random_array(&mut rng, dtype, &[5, 24]));
                unary_case(op, &base.slice(&slice("1:5")).unwrap(), plan, whole);
                let base = on(device, &random_array(&mut rng, dtype, &[6, 20]));
                unary_case(op, &base.slice(&slice("1:4")).unwrap(), plan, vector);
                let base = on(device, &random_array(&mut rng, dtype, &[3, 4100]));
                unary_case(op, &base.slice(&slice("1:3")).unwrap(), plan, vector);
                // Strided, read in place: every other row, columns reversed, then transposed; a
                // broadcast. An unaligned contiguous row and a tiny input: strided on a GPU.
                let base = on(device, &random_array(&mut rng, dtype, &[9, 13, 7]));
                let view = base.slice(&slice("::2, ::-1")).unwrap().transpose(&[2, 0, 1]).unwrap();
                unary_case(op, &view, plan, "kiln_unary_strided");
                let short = if cpu { "kiln_unary_flat" } else { "kiln_unary_strided" };
                unary_case(op, &base.slice(&slice("1:2, 1:2")).unwrap(), plan, short);
                let row = on(device, &random_array(&mut rng, dtype, &[1, 33]));
                unary_case(op, &row.broadcast_to(&[3, 4, 33]).unwrap(), plan, "kiln_unary_strided");
                unary_case(op, &on(device, &random_array(&mut rng, dtype, &[5])), plan, short);
            }
        }
        // The erf tails: wide inputs, where 1 + erf(x/√2) cancels for negative x.
        let wide = Array::from_f64(DType::F32, &[400], &rng.normals(400, 4.0)).unwrap();
        unary_case(Unary::GeluErf, &on(device, &wide), plan, vector);
        let tail: Vec<f64> = (0..64).map(|i| -3.0 - i as f64 * 0.1).collect();
        let tail = Array::from_f64(DType::F32, &[64], &tail).unwrap();
        unary_case(Unary::GeluErf, &on(device, &tail), plan, vector);
    }
}

fn elementwise_rejects_bad_input(device: Device) {
    let ints = on(device, &Array::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap());
    assert!(matches!(elementwise::exp(&ints), Err(Error::UnsupportedDType { ref op, .. }) if op == "exp"));
    let empty = on(device, &Array::from_f64(DType::F32, &[0, 3], &[]).unwrap());
    assert!(matches!(elementwise::silu(&empty), Err(Error::ShapeMismatch { ref op, .. }) if op == "silu"));
}

// ---------------------------------------------------------------------------------------------
// rms_norm and residual_rms_norm

/// (shape, variant for f16/bf16, variant for f32) cases covering both row mappings, with and
/// without vector loads. Short f32 rows kept in registers take a threadgroup per row where the
/// op's units per thread need more than 32 threads (rms_norm: 4 units, 64 threads at D = 1024
/// and 48 at D = 768; residual_rms_norm: 2 units, 128 and 96 threads).
const NORM_CASES: [(&[usize], &str, &str); 8] = [
    (&[3, 5, 64], "simdgroup_vec4", "simdgroup_vec4"),
    (&[7, 33], "simdgroup", "simdgroup"),
    (&[2, 1], "simdgroup", "simdgroup"),
    (&[9, 1024], "simdgroup_vec4", "threadgroup_vec4"),
    (&[5, 768], "simdgroup_vec4", "threadgroup_vec4"),
    (&[3, 1500], "threadgroup_vec4", "threadgroup_vec4"),
    (&[3, 2048], "threadgroup_vec4", "threadgroup_vec4"),
    (&[2, 1031], "threadgroup", "threadgroup"),
];

fn norm_variant(dtype: DType, short: &'static str, f32: &'static str) -> &'static str {
    if dtype == DType::F32 {
        f32
    } else {
        short
    }
}

/// Rows of `d` elements that start 4 elements past an 8-element boundary: 16-bit rows then take
/// 8-byte accesses, not 16-byte units.
fn rows_at_offset_4(device: Device, rng: &mut Rng, dtype: DType, rows: usize, d: usize) -> Array {
    let flat = on(device, &random_array(rng, dtype, &[4 + rows * d]));
    flat.slice(&slice("4:")).unwrap().reshape(&[rows, d]).unwrap()
}

fn host_values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

/// The device whose row plans (a row per simdgroup or threadgroup) the variant tables name; on
/// CPU arrays they run on the CPU emulator, which checks them without a GPU.
const GPU: Device = Device::Cuda(0);

/// The CPU's row-per-thread variant of a row op for a row of `d` (vector loads where D % 4 == 0
/// and D ≥ 8, the rows being aligned).
fn thread_variant(d: usize) -> &'static str {
    if d % 4 == 0 && d >= 8 {
        "thread_vec4"
    } else {
        "thread"
    }
}

fn rms_norm_matches_reference(device: Device) {
    let mut rng = Rng::new(21);
    for dtype in FLOAT_DTYPES {
        for (shape, variant16, variant32) in NORM_CASES {
            let variant = norm_variant(dtype, variant16, variant32);
            let d = shape[shape.len() - 1];
            let x = on(device, &random_array(&mut rng, dtype, shape));
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let want = rms_norm::reference(&host_values(&x), &host_values(&w), d, 1e-5);
            let call = rms_norm::rms_norm_call_planned_for(&x, &w, 1e-5, GPU).unwrap();
            assert_eq!(call.variant(), format!("kiln_rms_norm_{variant}"));
            let out = run_poisoned(call).remove(0);
            assert_eq!(out.shape(), shape);
            assert_close(&format!("rms_norm {dtype} {shape:?}"), &out, &want, dtype);
            let call = rms_norm::rms_norm_call_planned_for(&x, &w, 1e-5, Device::Cpu).unwrap();
            assert_eq!(call.variant(), format!("kiln_rms_norm_{}", thread_variant(d)));
            let out = run_poisoned(call).remove(0);
            assert_close(&format!("rms_norm {dtype} {shape:?}, a row per thread"), &out, &want, dtype);
        }
        // A transposed (non-contiguous) input and a large eps.
        let base = on(device, &random_array(&mut rng, dtype, &[40, 6]));
        let x = base.t();
        let w = on(device, &random_array(&mut rng, dtype, &[40]));
        let out = rms_norm::rms_norm(&x, &w, 0.5).unwrap();
        let want = rms_norm::reference(&host_values(&x), &host_values(&w), 40, 0.5);
        assert_close(&format!("rms_norm {dtype} transposed"), &out, &want, dtype);
        // Rows at offset 4 (8-byte accesses for 16-bit types): a row per simdgroup and per
        // threadgroup.
        for d in [1024, 2048] {
            let x = rows_at_offset_4(device, &mut rng, dtype, 3, d);
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let out = rms_norm::rms_norm(&x, &w, 1e-5).unwrap();
            let want = rms_norm::reference(&host_values(&x), &host_values(&w), d, 1e-5);
            assert_close(&format!("rms_norm {dtype} offset 4, D = {d}"), &out, &want, dtype);
        }
    }
}

fn residual_rms_norm_matches_reference(device: Device) {
    let mut rng = Rng::new(22);
    for dtype in FLOAT_DTYPES {
        for (shape, variant16, variant32) in NORM_CASES {
            let variant = norm_variant(dtype, variant16, variant32);
            let d = shape[shape.len() - 1];
            let x = on(device, &random_array(&mut rng, dtype, shape));
            let r = on(device, &random_array(&mut rng, dtype, shape));
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let (want_y, want_h) =
                residual_rms_norm::reference(&host_values(&x), &host_values(&r), &host_values(&w), d, 1e-6);
            for (plan, variant) in [(GPU, variant), (Device::Cpu, thread_variant(d))] {
                let call = residual_rms_norm::residual_rms_norm_call_planned_for(&x, &r, &w, 1e-6, plan).unwrap();
                assert_eq!(call.variant(), format!("kiln_residual_rms_norm_{variant}"));
                let outs = run_poisoned(call);
                assert_close(&format!("residual_rms_norm y {dtype} {shape:?} {variant}"), &outs[0], &want_y, dtype);
                assert_close(&format!("residual_rms_norm h {dtype} {shape:?} {variant}"), &outs[1], &want_h, dtype);
            }
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
        for d in [1024, 2048] {
            let x = rows_at_offset_4(device, &mut rng, dtype, 3, d);
            let r = on(device, &random_array(&mut rng, dtype, &[3, d]));
            let w = on(device, &random_array(&mut rng, dtype, &[d]));
            let (y, h) = residual_rms_norm::residual_rms_norm(&x, &r, &w, 1e-5).unwrap();
            let (want_y, want_h) =
                residual_rms_norm::reference(&host_values(&x), &host_values(&r), &host_values(&w), d, 1e-5);
            assert_close(&format!("residual_rms_norm y offset 4, D = {d}"), &y, &want_y, dtype);
            assert_close(&format!("residual_rms_norm h offset 4, D = {d}"), &h, &want_h, dtype);
        }
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

// ---------------------------------------------------------------------------------------------
// softmax

/// The GPU plan `variant` of `x` and the CPU's row-per-thread plan (one source for every row).
fn softmax_case(x: &Array, variant: &str) {
    let d = x.shape()[x.ndim() - 1];
    let want = softmax::reference(&host_values(x), d);
    for (plan, variant) in [(GPU, variant), (Device::Cpu, "thread")] {
        let call = softmax::softmax_call_planned_for(x, plan).unwrap();
        assert_eq!(call.variant(), format!("kiln_softmax_{variant}"), "{x:?}");
        let out = run_poisoned(call).remove(0);
        assert_close(&format!("softmax {x:?} {variant}"), &out, &want, x.dtype());
    }
}

fn softmax_matches_reference(device: Device) {
    let mut rng = Rng::new(31);
    for dtype in FLOAT_DTYPES {
        // 16-bit rows of whole 16-byte units, 8-element aligned, of 1024 < D ≤ 65536 are packed.
        let packed = |v: &str| if dtype.size() == 2 { format!("packed_{v}") } else { v.to_string() };
        let cases: [(&[usize], String); 11] = [
            (&[3, 5, 64], "simdgroup_vec4".into()),
            (&[3, 1024], "simdgroup_vec4".into()),
            (&[7, 33], "simdgroup".into()),
            (&[2, 1], "simdgroup".into()),
            (&[3, 1500], "threadgroup_vec4".into()),
            (&[3, 2048], packed("threadgroup_vec4")),
            (&[2, 1031], "threadgroup".into()),
            (&[2, 33000], packed("threadgroup_vec4")),
            (&[1, 32771], "threadgroup".into()),
            (&[1, 65536], packed("threadgroup_vec4")),
            (&[1, 65544], "threadgroup_vec4".into()),
        ];
        for (shape, variant) in cases {
            let variant = variant.as_str();
            // A spread of 8 makes the max subtraction matter (exp(±24) would lose f32 range).
            let n: usize = shape.iter().product();
            let x = Array::from_f64(dtype, shape, &rng.normals(n, 8.0)).unwrap();
            softmax_case(&on(device, &x), variant);
        }
        // Masked positions (−∞) in every row, and a transposed input.
        let mut v = rng.normals(4 * 40, 3.0);
        for (i, x) in v.iter_mut().enumerate() {
            if i % 3 == 0 {
                *x = f64::NEG_INFINITY;
            }
        }
        softmax_case(&on(device, &Array::from_f64(dtype, &[4, 40], &v).unwrap()), "simdgroup_vec4");
        let mut v = rng.normals(2 * 1200, 3.0);
        v[..600].fill(f64::NEG_INFINITY);
        softmax_case(&on(device, &Array::from_f64(dtype, &[2, 1200], &v).unwrap()), &packed("threadgroup_vec4"));
        let base = on(device, &random_array(&mut rng, dtype, &[24, 5]));
        softmax_case(&base.t(), "simdgroup_vec4");
        softmax_case(&rows_at_offset_4(device, &mut rng, dtype, 3, 2048), "threadgroup_vec4");
    }
}

fn softmax_rejects_bad_input(device: Device) {
    let scalar = on(device, &Array::scalar(1.0f32));
    assert!(matches!(softmax::softmax(&scalar), Err(Error::ShapeMismatch { ref op, .. }) if op == "softmax"));
    let empty = on(device, &Array::from_f64(DType::F16, &[3, 0], &[]).unwrap());
    assert!(matches!(softmax::softmax(&empty), Err(Error::ShapeMismatch { .. })));
    let ints = on(device, &Array::from_vec(&[2], vec![1u32, 2]).unwrap());
    assert!(matches!(softmax::softmax(&ints), Err(Error::UnsupportedDType { .. })));
}

// ---------------------------------------------------------------------------------------------
// rope

/// (shape, dims, traditional, base, scale, offset, two pairs per thread)
type RopeCase = (&'static [usize], usize, bool, f32, f32, i32, bool);

fn rope_matches_reference(device: Device) {
    let mut rng = Rng::new(41);
    for dtype in FLOAT_DTYPES {
        // (shape, dims, traditional, base, scale, offset, two pairs per thread): batch and head
        // axes, odd L, a rotated prefix with a copied tail (odd D, and even D with dims % 4 ==
        // 2), a batch count that leaves a partial run of rows.
        let cases: [RopeCase; 10] = [
            (&[2, 3, 7, 64], 64, false, 10000.0, 1.0, 0, true),
            (&[2, 3, 7, 64], 64, true, 10000.0, 1.0, 5, true),
            (&[5, 9, 37], 16, false, 500.0, 0.5, 3, false),
            (&[5, 9, 37], 20, true, 10000.0, 2.0, 1, false),
            (&[11, 2], 2, false, 10000.0, 1.0, 40, false),
            (&[3, 1, 8, 128], 128, false, 1e6, 1.0, 70, true),
            (&[5, 3, 24], 16, true, 10000.0, 1.0, 2, true),
            (&[5, 3, 24], 18, false, 10000.0, 1.0, 2, false),
            // 16-bit 16-byte chunks with a copied tail, an odd row count (a partial run of rows).
            (&[5, 3, 24], 16, false, 10000.0, 1.0, 2, true),
            (&[3, 5, 40], 16, false, 10000.0, 0.5, 7, true),
        ];
        for (shape, dims, traditional, base, scale, offset, pairs) in cases {
            let nd = shape.len();
            let x = on(device, &random_array(&mut rng, dtype, shape));
            let call = rope::rope_call(&x, dims, traditional, base, scale, offset).unwrap();
            let d = shape[nd - 1];
            let wide16 = dtype.size() == 2 && !traditional && dims % 16 == 0 && d % 8 == 0;
            let variant = if wide16 {
                "kiln_rope_wide16".to_string()
            } else {
                format!(
                    "kiln_rope{}{}",
                    if traditional { "_traditional" } else { "" },
                    if pairs { "_pairs" } else { "" }
                )
            };
            assert_eq!(call.variant(), variant);
            let out = run_poisoned(call).remove(0);
            let want = rope::reference(
                &host_values(&x),
                shape[nd - 2],
                shape[nd - 1],
                dims,
                traditional,
                base as f64,
                scale as f64,
                offset,
            );
            assert_close(&format!("rope {dtype} {shape:?} dims {dims} trad {traditional}"), &out, &want, dtype);
        }
        // (B, L, H, D) read as (B, H, L, D) through a transpose.
        let base = on(device, &random_array(&mut rng, dtype, &[2, 6, 3, 32]));
        let x = base.transpose(&[0, 2, 1, 3]).unwrap();
        let out = rope::rope(&x, 32, false, 10000.0, 1.0, 2).unwrap();
        let want = rope::reference(&host_values(&x), 6, 32, 32, false, 10000.0, 1.0, 2);
        assert_close(&format!("rope {dtype} transposed"), &out, &want, dtype);
    }
}

fn rope_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(42);
    let x = on(device, &random_array(&mut rng, DType::F32, &[2, 4, 8]));
    let invalid = |r: Result<Array, Error>| matches!(r, Err(Error::InvalidArgument { ref op, .. }) if op == "rope");
    assert!(invalid(rope::rope(&x, 7, false, 1e4, 1.0, 0)));
    assert!(invalid(rope::rope(&x, 10, false, 1e4, 1.0, 0)));
    assert!(invalid(rope::rope(&x, 0, false, 1e4, 1.0, 0)));
    assert!(invalid(rope::rope(&x, 8, false, 0.0, 1.0, 0)));
    assert!(invalid(rope::rope(&x, 8, false, 1e4, f32::INFINITY, 0)));
    let flat = on(device, &random_array(&mut rng, DType::F32, &[8]));
    assert!(matches!(rope::rope(&flat, 8, false, 1e4, 1.0, 0), Err(Error::ShapeMismatch { .. })));
}

// ---------------------------------------------------------------------------------------------
// scatter_add

fn index_array(device: Device, dtype: DType, idx: &[i64]) -> Array {
    let v: Vec<f64> = idx.iter().map(|&i| i as f64).collect();
    on(device, &Array::from_f64(dtype, &[idx.len()], &v).unwrap())
}

fn scatter_add_matches_reference(device: Device) {
    let mut rng = Rng::new(51);
    // (values shape, bins, variant): few bins so most indices repeat; a trailing row; two
    // trailing axes; flat values long enough for the threadgroup histograms, with one bin range
    // and with three (the last one partial).
    let cases: [(&[usize], usize, &str); 5] = [
        (&[1000], 7, "kiln_scatter_add"),
        (&[300, 5], 11, "kiln_scatter_add"),
        (&[77, 3, 2], 1, "kiln_scatter_add"),
        (&[70000], 7, "kiln_scatter_add_hist"),
        (&[140000], 20000, "kiln_scatter_add_hist"),
    ];
    for (shape, bins, variant) in cases {
        let n = shape[0];
        let m = shape.iter().product::<usize>() / n;
        let mut idx: Vec<i64> = (0..n).map(|_| (rng.next_u64() % bins as u64) as i64).collect();
        // Out-of-range entries are skipped.
        idx[0] = -1;
        idx[n - 1] = bins as i64;
        for idx_dtype in [DType::I32, DType::I64] {
            let indices = index_array(device, idx_dtype, &idx);
            for dtype in FLOAT_DTYPES {
                let values = on(device, &random_array(&mut rng, dtype, shape));
                let call = scatter_add::scatter_add_call(&values, &indices, bins).unwrap();
                assert_eq!(call.variant(), variant);
                let out = call.run_one().unwrap();
                let mut want_shape = shape.to_vec();
                want_shape[0] = bins;
                assert_eq!((out.shape(), out.dtype()), (&want_shape[..], DType::F32));
                let want = scatter_add::reference(&host_values(&values), &idx, m, bins);
                assert_close(&format!("scatter_add {dtype} {shape:?}"), &out, &want, DType::F32);
            }
            // Integers are exact, wrap-around included.
            let ints: Vec<i32> = (0..n * m).map(|i| (rng.next_u64() as i32) >> (i % 3 * 8)).collect();
            let values = on(device, &Array::from_vec(shape, ints.clone()).unwrap());
            let out = scatter_add::scatter_add(&values, &indices, bins).unwrap().to_host().unwrap();
            assert_eq!(out.to_vec::<i32>().unwrap(), scatter_add::reference_i32(&ints, &idx, m, bins));
            let uints: Vec<u32> = (0..n * m).map(|_| (rng.next_u64() % 1000) as u32).collect();
            let values = on(device, &Array::from_vec(shape, uints.clone()).unwrap());
            let out = scatter_add::scatter_add(&values, &indices, bins).unwrap().to_host().unwrap();
            let as_i32: Vec<i32> = uints.iter().map(|&u| u as i32).collect();
            let want: Vec<u32> = scatter_add::reference_i32(&as_i32, &idx, m, bins).iter().map(|&v| v as u32).collect();
            assert_eq!(out.to_vec::<u32>().unwrap(), want);
        }
    }
    // Non-contiguous values (every other row) with uint32 indices.
    let base = on(device, &random_array(&mut rng, DType::BF16, &[40, 3]));
    let values = base.slice(&slice("::2")).unwrap();
    let idx: Vec<i64> = (0..20).map(|i| (i * 7 % 5) as i64).collect();
    let out = scatter_add::scatter_add(&values, &index_array(device, DType::U32, &idx), 5).unwrap();
    assert_close("scatter_add strided", &out, &scatter_add::reference(&host_values(&values), &idx, 3, 5), DType::F32);
}

fn scatter_add_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(52);
    let values = on(device, &random_array(&mut rng, DType::F32, &[6, 2]));
    let idx = index_array(device, DType::I32, &[0, 1, 2, 0, 1, 2]);
    let short = index_array(device, DType::I32, &[0, 1]);
    let float_idx = on(device, &random_array(&mut rng, DType::F32, &[6]));
    let is_op = |e: &Error| e.to_string().starts_with("[scatter_add]");
    assert!(
        matches!(scatter_add::scatter_add(&values, &short, 3), Err(ref e @ Error::ShapeMismatch { .. }) if is_op(e))
    );
    assert!(matches!(scatter_add::scatter_add(&values, &float_idx, 3), Err(Error::UnsupportedDType { .. })));
    assert!(matches!(scatter_add::scatter_add(&values, &idx, 0), Err(Error::InvalidArgument { .. })));
    let bytes = on(device, &Array::from_vec(&[6], vec![1u8; 6]).unwrap());
    assert!(matches!(scatter_add::scatter_add(&bytes, &idx, 3), Err(Error::UnsupportedDType { .. })));
}

// ---------------------------------------------------------------------------------------------
// overlap_add

fn overlap_add_matches_reference(device: Device) {
    let mut rng = Rng::new(61);
    for dtype in FLOAT_DTYPES {
        // (shape, hop): 75 % overlap, hop = frame_len, gaps (hop > frame_len), one frame, batch axes.
        let cases: [(&[usize], usize); 5] =
            [(&[2, 9, 64], 16), (&[3, 5, 7], 7), (&[4, 3], 5), (&[1, 33], 4), (&[2, 2, 6, 10], 3)];
        for (shape, hop) in cases {
            let nd = shape.len();
            let frames = on(device, &random_array(&mut rng, dtype, shape));
            let call = overlap_add::overlap_add_call(&frames, hop).unwrap();
            assert_eq!(call.variant(), "kiln_overlap_add");
            let out = run_poisoned(call).remove(0);
            let out_len = overlap_add::output_len(shape[nd - 2], shape[nd - 1], hop);
            assert_eq!(out.shape().last(), Some(&out_len));
            assert_eq!(&out.shape()[..nd - 2], &shape[..nd - 2]);
            let want = overlap_add::reference(&host_values(&frames), shape[nd - 2], shape[nd - 1], hop);
            assert_close(&format!("overlap_add {dtype} {shape:?} hop {hop}"), &out, &want, dtype);
        }
        // Frames read through a transpose of (frame_len, n_frames).
        let base = on(device, &random_array(&mut rng, dtype, &[3, 12, 8]));
        let frames = base.transpose(&[0, 2, 1]).unwrap();
        let out = overlap_add::overlap_add(&frames, 6).unwrap();
        assert_close("overlap_add transposed", &out, &overlap_add::reference(&host_values(&frames), 8, 12, 6), dtype);
    }
}

fn overlap_add_rejects_bad_input(device: Device) {
    let mut rng = Rng::new(62);
    let frames = on(device, &random_array(&mut rng, DType::F32, &[4, 8]));
    let invalid = matches!(overlap_add::overlap_add(&frames, 0), Err(Error::InvalidArgument { ref op, .. }) if op == "overlap_add");
    assert!(invalid);
    let flat = on(device, &random_array(&mut rng, DType::F32, &[8]));
    assert!(matches!(overlap_add::overlap_add(&flat, 2), Err(Error::ShapeMismatch { .. })));
    let empty = on(device, &Array::from_f64(DType::F32, &[0, 8], &[]).unwrap());
    assert!(matches!(overlap_add::overlap_add(&empty, 2), Err(Error::ShapeMismatch { .. })));
    let ints = on(device, &Array::from_vec(&[2, 2], vec![1i32; 4]).unwrap());
    assert!(matches!(overlap_add::overlap_add(&ints, 1), Err(Error::UnsupportedDType { .. })));
}

backend_tests!(
    elementwise_matches_reference,
    elementwise_rejects_bad_input,
    rms_norm_matches_reference,
    residual_rms_norm_matches_reference,
    norms_reject_bad_input,
    softmax_matches_reference,
    softmax_rejects_bad_input,
    rope_matches_reference,
    rope_rejects_bad_input,
    scatter_add_matches_reference,
    scatter_add_rejects_bad_input,
    overlap_add_matches_reference,
    overlap_add_rejects_bad_input,
);

// ---------------------------------------------------------------------------------------------
// NVRTC: every variant of every op, in every dtype, compiles to sm_90 cubin without a GPU.

/// One call per kernel variant for `dtype`, built on host arrays.
fn every_variant(dtype: DType) -> Vec<OpCall> {
    let mut rng = Rng::new(71);
    let mut arr = |shape: &[usize]| random_array(&mut rng, dtype, shape);
    let mut calls = Vec::new();
    for op in Unary::ALL {
        for plan in [GPU, Device::Cpu] {
            calls.push(elementwise::unary_call_planned_for(op, &arr(&[64]), plan).unwrap());
            let row = arr(&[6, 20]).slice(&slice("1:4")).unwrap();
            calls.push(elementwise::unary_call_planned_for(op, &row, plan).unwrap());
            calls.push(elementwise::unary_call_planned_for(op, &arr(&[8, 6]).t(), plan).unwrap());
        }
    }
    for d in [64, 33, 2048, 2047] {
        let (x, r, w) = (arr(&[4, d]), arr(&[4, d]), arr(&[d]));
        for plan in [GPU, Device::Cpu] {
            calls.push(rms_norm::rms_norm_call_planned_for(&x, &w, 1e-5, plan).unwrap());
            calls.push(residual_rms_norm::residual_rms_norm_call_planned_for(&x, &r, &w, 1e-5, plan).unwrap());
            calls.push(softmax::softmax_call_planned_for(&x, plan).unwrap());
        }
    }
    for traditional in [false, true] {
        calls.push(rope::rope_call(&arr(&[2, 4, 64]), 32, traditional, 1e4, 1.0, 0).unwrap());
        calls.push(rope::rope_call(&arr(&[2, 4, 64]), 28, traditional, 1e4, 1.0, 0).unwrap());
        calls.push(rope::rope_call(&arr(&[2, 4, 66]), 30, traditional, 1e4, 1.0, 0).unwrap());
    }
    calls.push(overlap_add::overlap_add_call(&arr(&[2, 5, 16]), 4).unwrap());
    let idx = Array::from_vec(&[16], (0..16).map(|i| i % 3).collect::<Vec<i32>>()).unwrap();
    calls.push(scatter_add::scatter_add_call(&arr(&[16, 4]), &idx, 3).unwrap());
    let idx = Array::from_vec(&[1 << 16], (0..1 << 16).map(|i| i % 9000).collect::<Vec<i32>>()).unwrap();
    calls.push(scatter_add::scatter_add_call(&arr(&[1 << 16]), &idx, 9000).unwrap());
    calls
}

#[test]
fn every_op_variant_compiles_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let mut calls: Vec<OpCall> = FLOAT_DTYPES.iter().flat_map(|&d| every_variant(d)).collect();
    let idx = Array::from_vec(&[4], vec![0i64, 1, 1, 0]).unwrap();
    for values in [Array::from_vec(&[4], vec![1i32, 2, 3, 4]).unwrap(), Array::from_vec(&[4], vec![1u32; 4]).unwrap()] {
        calls.push(scatter_add::scatter_add_call(&values, &idx, 2).unwrap());
    }
    let mut variants = std::collections::BTreeSet::new();
    for call in &calls {
        let program = call.program().unwrap();
        let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| {
            let source = kiln::backend::cuda::translate(&program).unwrap_or_default();
            panic!("{}: {e}\n---- generated CUDA ----\n{source}", call.variant())
        });
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", call.variant());
        variants.insert(call.variant().to_string());
    }
    // 3 GPU elementwise + 1 CPU elementwise + 4 × 3 GPU row kernels + 5 row-per-thread kernels
    // (2 for each norm, 1 for softmax) + 1 packed softmax + 5 rope + overlap-add + 2 scatter-add.
    assert_eq!(variants.len(), 30, "{variants:?}");
}
