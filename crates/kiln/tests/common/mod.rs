//! Shared test fixtures: the tolerance table, relative L2 error, seeded random inputs and the
//! macro that instantiates one test body for every backend.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kiln::{Array, DType, Device};

pub use kiln::check::{rel_l2, tolerance, Rng};

/// Asserts `out` matches `reference` within the tolerance of `dtype` (exact for non-floats).
#[track_caller]
pub fn assert_close(what: &str, out: &Array, reference: &[f64], dtype: DType) {
    let host = out.to_host().expect("download output");
    let got = host.to_f64_vec().expect("read output");
    let err = rel_l2(&got, reference);
    let tol = tolerance(dtype);
    assert!(
        err <= tol,
        "{what}: relative L2 error {err:e} exceeds {tol:e} for {dtype} (first values got {:?}, want {:?})",
        &got[..got.len().min(6)],
        &reference[..reference.len().min(6)]
    );
}

/// A host array of `dtype` with standard-normal values (rounded to the dtype).
pub fn random_array(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_f64(dtype, shape, &rng.normals(n, 1.0)).expect("random array")
}

/// The device for a backend name. The CPU backend must always be available (a missing emulator
/// fails the test). Another backend that is unavailable gives `None` (the test is skipped with a
/// message), unless `KILN_REQUIRE_BACKEND` names it, which turns unavailability into a failure.
pub fn device_or_skip(backend: &str) -> Option<Device> {
    let device: Device = backend.parse().expect("backend name");
    match kiln::backend::backend_for(device) {
        Ok(_) => Some(device),
        Err(e) => {
            if backend == "cpu" || kiln::config::required_backend().as_deref() == Some(backend) {
                panic!("KILN_REQUIRE_BACKEND={backend} but the backend is unavailable: {e}");
            }
            eprintln!("skipping on {backend}: {e}");
            None
        }
    }
}

/// Whether NVRTC can compile here (compile-only tests need no GPU). Without NVRTC the test is
/// skipped with a message, unless `KILN_REQUIRE_BACKEND=nvrtc` (as CI sets) makes it a failure.
pub fn nvrtc_or_skip() -> bool {
    match kiln::backend::cuda::nvrtc_version() {
        Ok(_) => true,
        Err(e) => {
            if kiln::config::required_backend().as_deref() == Some("nvrtc") {
                panic!("KILN_REQUIRE_BACKEND=nvrtc but NVRTC is unavailable: {e}");
            }
            eprintln!("skipping NVRTC compilation: {e}");
            false
        }
    }
}

/// Instantiates `fn $name(device: Device)` once per backend: `$name::cpu` always runs;
/// `$name::cuda` needs an NVIDIA GPU and is ignored unless run with `--include-ignored`
/// (then `KILN_REQUIRE_BACKEND=cuda` turns a missing GPU into a failure).
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    if let Some(device) = $crate::common::device_or_skip("cpu") {
                        super::$name(device);
                    }
                }
                #[test]
                #[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
                fn cuda() {
                    if let Some(device) = $crate::common::device_or_skip("cuda") {
                        super::$name(device);
                    }
                }
            }
        )*
    };
}

/// Runs `fn $name(device: Device)` once more on the CPU under the sanitizer (`kiln check`): the
/// test's own checks still hold, and the sanitizer finds nothing in its kernels.
#[macro_export]
macro_rules! sanitizer_clean_tests {
    ($($name:ident),* $(,)?) => {
        mod sanitizer_clean {
            $(
                #[test]
                fn $name() {
                    if let Some(device) = $crate::common::device_or_skip("cpu") {
                        let (_, found) = kiln::sanitize::check(|| super::$name(device));
                        let text: Vec<String> = found.iter().map(|f| f.render()).collect();
                        assert!(found.is_empty(), "findings on a correct kernel:\n{}", text.join("\n"));
                    }
                }
            )*
        }
    };
}

/// `a` as a kernel input living on `device` (moving arrays between devices is explicit).
pub fn on(device: Device, a: &Array) -> kiln::KernelInput {
    kiln::KernelInput::Array(a.to_device(device).expect("move input to the device"))
}

/// A directory of test data under crates/kiln/tests (`rel`, e.g. "golden/metal"): where the tests
/// were built, else in `data/` beside the test binary (scripts/collect-test-binaries.sh puts it
/// there), else under a copy of the working tree holding the current directory.
pub fn test_data(rel: &str) -> PathBuf {
    let mut tried = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(rel)];
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        tried.push(dir.join("data").join(rel));
    }
    if let Ok(cwd) = std::env::current_dir() {
        tried.extend(cwd.ancestors().map(|a| a.join("crates/kiln/tests").join(rel)));
    }
    match tried.iter().find(|p| p.is_dir()) {
        Some(found) => found.clone(),
        None => panic!("test data {rel} not found; looked in {tried:#?}"),
    }
}
