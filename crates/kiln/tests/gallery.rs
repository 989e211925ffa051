//! Every gallery kernel against its plain-Rust reference at several shapes (odd sizes,
//! partial threadgroups and simdgroups, unaligned tails) and in every dtype it accepts, on each
//! backend. Outputs are poisoned with NaN before each run by the gallery's `check` functions
//! (atomic accumulators start from zero instead), and inputs are fresh seeded random values.

mod common;

use kiln::{DType, Device};
use kiln_tools::gallery::{self, Outcome};

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Asserts every output of a run is within the tolerance table's entry for its dtype.
#[track_caller]
fn assert_outcome(what: &str, outcome: kiln::Result<Outcome>) {
    let outcome = outcome.unwrap_or_else(|e| panic!("{what}: {e}"));
    let tol = common::tolerance(outcome.tolerance_dtype);
    assert!(!outcome.parts.is_empty(), "{what}: no outputs checked");
    for part in &outcome.parts {
        assert!(part.reference.iter().any(|&v| v != 0.0), "{what}/{}: the reference is all zeros", part.name);
        let err = common::rel_l2(&part.output, &part.reference);
        assert!(
            err <= tol,
            "{what}/{}: relative L2 error {err:e} exceeds {tol:e} (first values got {:?}, want {:?})",
            part.name,
            &part.output[..part.output.len().min(6)],
            &part.reference[..part.reference.len().min(6)]
        );
    }
}

fn exp(device: Device) {
    for (i, shape) in [vec![1], vec![37, 129], vec![4, 16], vec![3, 5, 7]].iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("exp {shape:?} {dtype}");
            assert_outcome(&what, gallery::exp::check(device, dtype, shape, i as u64));
        }
    }
}

fn exp_strided(device: Device) {
    for (i, base) in [[4, 6, 5], [9, 13, 21], [3, 1, 40]].into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("exp_strided base {base:?} {dtype}");
            assert_outcome(&what, gallery::exp::check_strided(device, dtype, base, 10 + i as u64));
        }
    }
}

fn silu(device: Device) {
    for (i, shape) in [vec![1001], vec![2, 3], vec![256]].iter().enumerate() {
        for dtype in DTYPES {
            assert_outcome(&format!("silu {shape:?} {dtype}"), gallery::silu::check(device, dtype, shape, i as u64));
        }
    }
}

fn gelu(device: Device) {
    for (i, shape) in [vec![7, 333], vec![5], vec![2, 256]].iter().enumerate() {
        for dtype in DTYPES {
            assert_outcome(&format!("gelu {shape:?} {dtype}"), gallery::gelu::check(device, dtype, shape, i as u64));
        }
    }
}

fn rms_norm(device: Device) {
    for (i, (rows, d)) in [(1, 1), (5, 32), (37, 300), (6, 77)].into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("rms_norm ({rows}, {d}) {dtype}");
            assert_outcome(&what, gallery::rms_norm::check(device, dtype, rows, d, None, i as u64));
        }
    }
}

fn rms_norm_multi_simdgroup(device: Device) {
    for (i, (rows, d, threads)) in
        [(3, 1000, 256), (5, 77, 80), (2, 33, 32), (4, 1, 48), (2, 300, 1024)].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("rms_norm_multi_sg ({rows}, {d}) x{threads} {dtype}");
            assert_outcome(&what, gallery::rms_norm::check(device, dtype, rows, d, Some(threads), i as u64));
        }
    }
}

fn residual_rms_norm(device: Device) {
    for (i, (rows, d, threads)) in [(7, 700, 128), (3, 50, 80), (1, 5, 32)].into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("residual_rms_norm ({rows}, {d}) x{threads} {dtype}");
            assert_outcome(&what, gallery::residual_rms_norm::check(device, dtype, rows, d, threads, i as u64));
        }
    }
}

fn softmax(device: Device) {
    for (i, (rows, d, threads)) in [(17, 1000, 96), (3, 5, 32), (4, 333, 80), (1, 1, 64)].into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("softmax ({rows}, {d}) x{threads} {dtype}");
            assert_outcome(&what, gallery::softmax::check(device, dtype, rows, d, threads, i as u64));
        }
    }
}

fn rope(device: Device) {
    for (i, (l, h, d, offset, threads)) in
        [(13, 5, 96, 7, 32), (3, 2, 10, 0, 8), (5, 1, 130, 20, 64), (2, 3, 2, 1, 32)].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("rope ({l}, {h}, {d}) offset {offset} x{threads} {dtype}");
            assert_outcome(&what, gallery::rope::check(device, dtype, l, h, d, offset, threads, i as u64));
        }
    }
}

fn attention(device: Device) {
    for (i, (lq, lk, d, sg)) in
        [(9, 77, 48, 4), (3, 2, 32, 4), (5, 37, 64, 2), (2, 50, 100, 3), (1, 1, 1, 1)].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("attention lq {lq} lk {lk} d {d} sg {sg} {dtype}");
            assert_outcome(&what, gallery::attention::check(device, dtype, lq, lk, d, sg, i as u64));
        }
    }
}

fn scatter_add(device: Device) {
    for (i, (n, m, bins)) in [(1500, 7, 23), (10, 1, 3), (257, 33, 5)].into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("scatter_add n {n} m {m} bins {bins} {dtype}");
            assert_outcome(&what, gallery::scatter_add::check(device, dtype, n, m, bins, i as u64));
        }
    }
}

fn overlap_add(device: Device) {
    // The last case has hop > frame_len, leaving samples no frame covers.
    for (i, (b, frames, len, hop)) in
        [(3, 40, 100, 37), (1, 1, 5, 3), (2, 7, 16, 16), (5, 5, 4, 6)].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("overlap_add b {b} frames {frames} len {len} hop {hop} {dtype}");
            assert_outcome(&what, gallery::overlap_add::check(device, dtype, b, frames, len, hop, i as u64));
        }
    }
}

const GRID_SAMPLE_DIMS: [[usize; 6]; 3] = [[2, 17, 23, 13, 11, 9], [1, 1, 1, 1, 3, 3], [3, 5, 7, 40, 4, 5]];

fn grid_sample(device: Device) {
    for (i, dims) in GRID_SAMPLE_DIMS.into_iter().enumerate() {
        for dtype in DTYPES {
            let what = format!("grid_sample {dims:?} {dtype}");
            assert_outcome(&what, gallery::grid_sample::check(device, dtype, dims, i as u64));
        }
    }
}

fn grid_sample_vjp(device: Device) {
    for (i, dims) in GRID_SAMPLE_DIMS.into_iter().chain([[2, 13, 15, 64, 7, 5]]).enumerate() {
        for dtype in DTYPES {
            let what = format!("grid_sample_vjp {dims:?} {dtype}");
            assert_outcome(&what, gallery::grid_sample_vjp::check(device, dtype, dims, i as u64));
        }
    }
}

fn cholesky(device: Device) {
    for (i, (b, n, block, threads)) in
        [(3, 37, 8, 64), (2, 16, 16, 32), (1, 1, 4, 1), (2, 64, 16, 128), (1, 50, 7, 33)].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("cholesky b {b} n {n} block {block} x{threads} {dtype}");
            assert_outcome(&what, gallery::cholesky::check(device, dtype, b, n, block, threads, i as u64));
        }
    }
}

fn gdn_kkt(device: Device) {
    // [B, T, Hg, H, K]: partial last chunks, K not a multiple of the tile, grouped heads.
    for (i, dims) in [[2, 77, 2, 4, 80], [1, 32, 1, 1, 32], [1, 5, 1, 3, 7], [1, 65, 3, 3, 33]].into_iter().enumerate()
    {
        for dtype in DTYPES {
            let what = format!("gdn_kkt {dims:?} {dtype}");
            assert_outcome(&what, gallery::gdn_kkt::check(device, dtype, dims, i as u64));
        }
    }
}

fn demo_runs_and_passes_every_entry(device: Device) {
    let report = gallery::run_demo(device).expect("run_demo");
    let all: Vec<gallery::Entry> = gallery::entries().into_iter().chain(gallery::library::entries()).collect();
    let expected: usize = all.iter().map(|e| e.demo_dtypes.len()).sum();
    assert_eq!(report.rows.len(), expected);
    let table = report.to_string();
    for entry in all {
        assert!(table.contains(entry.name), "{} missing from\n{table}", entry.name);
    }
    assert!(report.all_passed(), "demo failures:\n{table}");
}

backend_tests!(
    exp,
    exp_strided,
    silu,
    gelu,
    rms_norm,
    rms_norm_multi_simdgroup,
    residual_rms_norm,
    softmax,
    rope,
    attention,
    scatter_add,
    overlap_add,
    grid_sample,
    grid_sample_vjp,
    cholesky,
    gdn_kkt,
    demo_runs_and_passes_every_entry,
);

/// The table shape does not depend on a backend: a failed row reads "error" and "NO".
#[test]
fn demo_report_marks_errors_as_failures() {
    use std::time::Duration;
    let ok = gallery::DemoRow {
        kernel: "exp",
        dtype: DType::F32,
        device: Device::Cpu,
        tolerance: 1e-5,
        result: Ok((2e-7, Duration::from_micros(150))),
    };
    let nan = gallery::DemoRow { result: Ok((f64::NAN, Duration::ZERO)), ..ok.clone() };
    let failed = gallery::DemoRow { result: Err("boom".into()), ..ok.clone() };
    assert!(ok.passed() && !nan.passed() && !failed.passed());
    let report = gallery::DemoReport { device: Device::Cpu, rows: vec![ok.clone(), failed] };
    assert!(!report.all_passed());
    let table = report.to_string();
    assert!(table.contains("error") && table.contains("NO") && table.contains("boom"), "{table}");
    assert!(gallery::DemoReport { device: Device::Cpu, rows: vec![ok] }.all_passed());
}
