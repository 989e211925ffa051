//! `kiln run` on spec files: in/out buffers written back, the warning for a written buffer that
//! is not saved, `--timeout` and the `timeout` key, outputs written all or none, and grids with
//! a zero dimension.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kiln::check::Rng;
use kiln::Array;

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory unique to one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run_spec(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", spec.to_str().unwrap(), "--device", "cpu", "--out", out.to_str().unwrap()];
    args.extend(extra);
    kiln(&args)
}

/// `x = a * x + y` in place, over `n` elements; `a` comes from a constant struct.
const AXPY: &str = "#include <metal_stdlib>\nusing namespace metal;\nstruct P { float a; uint n; };\nkernel void axpy_in_place(device float* x [[buffer(0)]], const device float* y [[buffer(1)]],\n                          constant P& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n  if (i < p.n) x[i] = p.a * x[i] + y[i];\n}\n";

fn axpy_spec(dir: &Path, n: usize, a: f32, x_keys: &str) -> PathBuf {
    std::fs::write(dir.join("axpy.metal"), AXPY).unwrap();
    let spec = format!(
        "[library]\nsource_file = \"axpy.metal\"\nfunction = \"axpy_in_place\"\n\n[dispatch]\ngrid = [{n}, 1, 1]\nthreadgroup = [64, 1, 1]\n\n[[buffer]]\nfile = \"x.npy\"\n{x_keys}\n[[buffer]]\nfile = \"y.npy\"\n\n[[buffer]]\nfields = [[\"float32\", {a}], [\"uint32\", {n}]]\n"
    );
    let path = dir.join("axpy.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

#[test]
fn run_writes_inout_buffers_back_and_warns_about_unsaved_ones() {
    let dir = scratch("inout");
    let mut rng = Rng::new(11);
    let n = 300;
    let a = rng.uniform(0.5, 2.0) as f32;
    let x: Vec<f32> = rng.normals(n, 1.0).iter().map(|&v| v as f32).collect();
    let y: Vec<f32> = rng.normals(n, 1.0).iter().map(|&v| v as f32).collect();
    Array::from_vec(&[n], x.clone()).unwrap().save_npy(dir.join("x.npy")).unwrap();
    Array::from_vec(&[n], y.clone()).unwrap().save_npy(dir.join("y.npy")).unwrap();
    let out_dir = dir.join("out");
    let out = run_spec(&axpy_spec(&dir, n, a, "output = \"x\"\n"), &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let got = Array::load_npy(out_dir.join("x.npy")).unwrap().to_vec::<f32>().unwrap();
    for i in 0..n {
        let want = f64::from(a) * f64::from(x[i]) + f64::from(y[i]);
        assert!((f64::from(got[i]) - want).abs() <= 1e-6 * want.abs().max(1.0), "{i}: {} vs {want}", got[i]);
    }
    // Checked mode binds the in/out copy between guard pages: the same result.
    let checked_dir = dir.join("checked");
    let out = run_spec(&dir.join("axpy.toml"), &checked_dir, &["--checked"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(Array::load_npy(checked_dir.join("x.npy")).unwrap().to_vec::<f32>().unwrap(), got);
    // The input file is left as it was.
    assert_eq!(Array::load_npy(dir.join("x.npy")).unwrap().to_vec::<f32>().unwrap(), x);

    // Without `output`, the kernel's writes to x would vanish: the run says so, naming it.
    let quiet_dir = dir.join("quiet");
    let out = run_spec(&axpy_spec(&dir, n, a, ""), &quiet_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    for part in ["warning:", "axpy.toml", "buffer[0]", "`x` [[buffer(0)]]", "add output = \"x\""] {
        assert!(err.contains(part), "{part} missing: {err}");
    }
    assert!(!err.contains("buffer[1]"), "y is const device: {err}");
}

/// A body kernel over `x.npy` that never ends (a loop on a value that stays positive).
fn hang_spec(dir: &Path, call_keys: &str) -> PathBuf {
    Array::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    let spec = format!(
        "[kernel]\nname = \"spin\"\ninput_names = [\"x\"]\noutput_names = [\"y\"]\nsource = '''\nuint n = 0;\nwhile (x[0] > 0.0f) {{ n++; }}\ny[thread_position_in_grid.x] = float(n);\n'''\n\n[call]\ngrid = [4, 1, 1]\nthreadgroup = [4, 1, 1]\noutput_shapes = [[4]]\noutput_dtypes = [\"float32\"]\n{call_keys}\n[[input]]\nfile = \"x.npy\"\n"
    );
    let path = dir.join("spin.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

#[track_caller]
fn assert_stopped(out: &Output, limit: &str, started: Instant) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    let err = stderr(out);
    assert!(err.contains("[spin]") && err.contains(&format!("time limit of {limit} s")), "{err}");
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
}

#[test]
fn timeout_flag_and_key_stop_a_runaway_kernel() {
    let dir = scratch("timeout");
    let out_dir = dir.join("out");
    let started = Instant::now();
    let out = run_spec(&hang_spec(&dir, ""), &out_dir, &["--timeout", "0.5"]);
    assert_stopped(&out, "0.500", started);
    let started = Instant::now();
    let out = run_spec(&hang_spec(&dir, "timeout = 0.25\n"), &out_dir, &[]);
    assert_stopped(&out, "0.250", started);
    // The flag overrides the key.
    let started = Instant::now();
    let out = run_spec(&hang_spec(&dir, "timeout = 1000\n"), &out_dir, &["--timeout", "0.3"]);
    assert_stopped(&out, "0.300", started);
    assert!(!out_dir.join("y.npy").exists());
    let out = run_spec(&hang_spec(&dir, ""), &out_dir, &["--timeout=-2"]);
    assert!(
        !out.status.success() && stderr(&out).contains("--timeout -2: give a number of seconds"),
        "{}",
        stderr(&out)
    );
}

/// Two outputs, `a` and `b`, written by one kernel.
fn two_output_spec(dir: &Path) -> PathBuf {
    let spec = "[library]\nsource = '''\nkernel void two(device float* a [[buffer(0)]], device float* b [[buffer(1)]], uint i [[thread_position_in_grid]]) { a[i] = 1.5f * float(i); b[i] = -float(i); }\n'''\nfunction = \"two\"\n\n[dispatch]\ngrid = [8, 1, 1]\nthreadgroup = [8, 1, 1]\n\n[[buffer]]\noutput = \"a\"\nshape = [8]\ndtype = \"float32\"\n\n[[buffer]]\noutput = \"b\"\nshape = [8]\ndtype = \"float32\"\n";
    let path = dir.join("two.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn outputs_are_written_all_or_none() {
    let dir = scratch("atomic");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(out_dir.join("b.npy")).unwrap();
    std::fs::write(out_dir.join("a.npy"), b"an earlier result").unwrap();
    // b.npy cannot be replaced (a directory holds its name): a.npy must not be written either.
    let out = run_spec(&two_output_spec(&dir), &out_dir, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("b.npy") && stderr(&out).contains("nothing was written"), "{}", stderr(&out));
    assert_eq!(std::fs::read(out_dir.join("a.npy")).unwrap(), b"an earlier result");
    assert_eq!(entries(&out_dir), ["a.npy", "b.npy"], "no temporaries are left");
    // A run that fails leaves earlier files as they were.
    std::fs::write(out_dir.join("y.npy"), b"an earlier y").unwrap();
    let out = run_spec(&hang_spec(&dir, ""), &out_dir, &["--timeout", "0.2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(std::fs::read(out_dir.join("y.npy")).unwrap(), b"an earlier y");
    // Once the name is free, both are written.
    std::fs::remove_dir(out_dir.join("b.npy")).unwrap();
    let out = run_spec(&two_output_spec(&dir), &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let a = Array::load_npy(out_dir.join("a.npy")).unwrap().to_vec::<f32>().unwrap();
    let b = Array::load_npy(out_dir.join("b.npy")).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, (0..8).map(|i| 1.5 * i as f32).collect::<Vec<_>>());
    assert_eq!(b, (0..8).map(|i| -(i as f32)).collect::<Vec<_>>());
    assert_eq!(entries(&out_dir), ["a.npy", "b.npy", "y.npy"]);
}

#[test]
fn zero_dimension_grids_are_refused_naming_the_kernel() {
    let dir = scratch("zero");
    let out_dir = dir.join("out");
    let text = std::fs::read_to_string(two_output_spec(&dir)).unwrap().replace("grid = [8, 1, 1]", "grid = [8, 0, 1]");
    std::fs::write(dir.join("two.toml"), &text).unwrap();
    let out = run_spec(&dir.join("two.toml"), &out_dir, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    for part in ["two.toml", "dispatch.grid", "kernel two", "zero dimension", "\"a\", \"b\""] {
        assert!(err.contains(part), "{part} missing: {err}");
    }
    assert!(!out_dir.join("a.npy").exists());
    // With every output initialised the run goes ahead, with a warning.
    let init = text.replace("dtype = \"float32\"\n", "dtype = \"float32\"\ninit_value = 4\n");
    std::fs::write(dir.join("two.toml"), init).unwrap();
    let out = run_spec(&dir.join("two.toml"), &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning:") && stderr(&out).contains("runs no thread"), "{}", stderr(&out));
    assert_eq!(Array::load_npy(out_dir.join("a.npy")).unwrap().to_vec::<f32>().unwrap(), vec![4.0; 8]);
}

#[test]
fn library_defines_and_include_dirs_reach_the_preprocessor() {
    let dir = scratch("defines");
    std::fs::create_dir_all(dir.join("inc")).unwrap();
    std::fs::write(dir.join("inc").join("step.h"), "constant float kStep = STEP;\n").unwrap();
    let spec = "[library]\nsource = '''\n#include <step.h>\nkernel void ramp(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n#if NEGATE\n  y[i] = -kStep * float(i);\n#else\n  y[i] = kStep * float(i);\n#endif\n}\n'''\nfunction = \"ramp\"\ninclude_dirs = [\"inc\"]\ndefines = { STEP = 0.25, NEGATE = true }\n\n[dispatch]\ngrid = [8, 1, 1]\nthreadgroup = [8, 1, 1]\n\n[[buffer]]\noutput = \"y\"\nshape = [8]\ndtype = \"float32\"\n";
    let path = dir.join("ramp.toml");
    std::fs::write(&path, spec).unwrap();
    let out_dir = dir.join("out");
    let out = run_spec(&path, &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let y = Array::load_npy(out_dir.join("y.npy")).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(y, (0..8).map(|i| -0.25 * i as f32).collect::<Vec<_>>());
    // A value that is not one line of text, a number or a bool names the key.
    std::fs::write(&path, spec.replace("NEGATE = true", "NEGATE = [1]")).unwrap();
    let out = run_spec(&path, &out_dir, &[]);
    assert!(!out.status.success() && stderr(&out).contains("NEGATE"), "{}", stderr(&out));
}
