//! The `kiln` binary end to end on spec files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln")
}

fn golden(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln/tests/golden/metal").join(case)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch directory unique to one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `data` as a little-endian f32 .npy file.
fn write_f32_npy(path: &Path, shape: &[usize], data: &[f32]) {
    let a = kiln::Array::from_vec(shape, data.to_vec()).unwrap();
    a.save_npy(path).unwrap();
}

#[test]
fn translate_prints_mlx_source() {
    for case in ["myexp", "arg_test", "strides", "atomic_outputs"] {
        let out = kiln(&["translate", golden(case).join("kernel.toml").to_str().unwrap(), "--emit", "metal"]);
        assert!(out.status.success(), "{case}: {}", stderr(&out));
        let expected = std::fs::read_to_string(golden(case).join("expected.metal")).unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected, "{case}");
    }
}

#[test]
fn translate_prints_a_full_file_unchanged() {
    let dir = scratch("fullfile");
    let metal = "#include <metal_stdlib>\nusing namespace metal;\n\nkernel void twice(device float* x [[buffer(0)]],\n                  uint i [[thread_position_in_grid]]) {\n    x[i] *= 2.0f;\n}\n";
    std::fs::write(dir.join("k.metal"), metal).unwrap();
    write_f32_npy(&dir.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    std::fs::write(
        dir.join("spec.toml"),
        "[library]\nsource_file = \"k.metal\"\nfunction = \"twice\"\n\n[dispatch]\ngrid = [4, 1, 1]\nthreadgroup = [4, 1, 1]\n\n[[buffer]]\nfile = \"x.npy\"\n",
    )
    .unwrap();
    let out = kiln(&["translate", dir.join("spec.toml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), metal);
}

#[test]
fn devices_lists_every_backend() {
    let out = kiln(&["devices"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    for backend in ["cuda", "metal", "cpu"] {
        assert!(text.lines().any(|l| l.starts_with(backend)), "{backend} missing from:\n{text}");
    }
    assert!(text.contains("best device:"), "{text}");
}

#[test]
fn run_on_an_unavailable_backend_is_a_clear_error() {
    let dir = scratch("metal");
    let out = kiln(&[
        "run",
        golden("myexp").join("kernel.toml").to_str().unwrap(),
        "--device",
        "metal",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("metal backend unavailable"), "{err}");
    assert!(!dir.join("out.npy").exists());
}

fn spec_error(name: &str, spec: &str, files: &[(&str, &[usize], &[f32])]) -> String {
    let dir = scratch(name);
    for (file, shape, data) in files {
        write_f32_npy(&dir.join(file), shape, data);
    }
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    let out = kiln(&["translate", path.to_str().unwrap()]);
    assert!(!out.status.success(), "{name}: expected failure");
    let err = stderr(&out);
    assert!(err.contains("spec.toml"), "{name}: error does not name the file: {err}");
    err
}

const KERNEL: &str =
    "[kernel]\nname = \"k\"\ninput_names = [\"x\"]\noutput_names = [\"y\"]\nsource = \"y[0] = x[0];\"\n";
const CALL: &str =
    "\n[call]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\noutput_shapes = [[1]]\noutput_dtypes = [\"float32\"]\n";

#[test]
fn bad_spec_files_name_the_file_and_key() {
    let x: &[(&str, &[usize], &[f32])] = &[("x.npy", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])];
    let err = spec_error("unknown", &format!("{KERNEL}colour = 1\n{CALL}\n[[input]]\nfile = \"x.npy\"\n"), x);
    assert!(err.contains("kernel.colour") && err.contains("unknown key"), "{err}");

    let err = spec_error("missing", &format!("{KERNEL}{CALL}\n[[input]]\nfile = \"nope.npy\"\n"), x);
    assert!(err.contains("input[0].file") && err.contains("nope.npy"), "{err}");

    let err = spec_error("count", &format!("{KERNEL}{CALL}"), x);
    assert!(err.contains("input") && err.contains("1 input_names"), "{err}");

    let err = spec_error("slice", &format!("{KERNEL}{CALL}\n[[input]]\nfile = \"x.npy\"\nslice = \"::0\"\n"), x);
    assert!(err.contains("input[0].slice") && err.contains("step cannot be zero"), "{err}");

    let err = spec_error("bcast", &format!("{KERNEL}{CALL}\n[[input]]\nfile = \"x.npy\"\nbroadcast_to = [4, 4]\n"), x);
    assert!(err.contains("input[0].broadcast_to") && err.contains("cannot broadcast"), "{err}");

    let err = spec_error("dtype", &format!("{KERNEL}{CALL}\n[[input]]\nfile = \"x.npy\"\ndtype = \"float64\"\n"), x);
    assert!(err.contains("input[0].dtype") && err.contains("unknown dtype"), "{err}");

    let bad_call = CALL.replace("[[1]]", "[[1], [2]]");
    let err = spec_error("shapes", &format!("{KERNEL}{bad_call}\n[[input]]\nfile = \"x.npy\"\n"), x);
    assert!(err.contains("output_shapes") && err.contains("size 1 but got size 2"), "{err}");

    let tmpl = CALL.replace("output_dtypes", "template = [[\"T\", 1.5]]\noutput_dtypes");
    let err = spec_error("template", &format!("{KERNEL}{tmpl}\n[[input]]\nfile = \"x.npy\"\n"), x);
    assert!(err.contains("call.template[0]") && err.contains("invalid template argument"), "{err}");

    let err = spec_error("mode", &format!("{KERNEL}math_mode = \"precise\"\n{CALL}\n[[input]]\nfile = \"x.npy\"\n"), x);
    assert!(err.contains("kernel.math_mode") && err.contains("'safe', 'relaxed' or 'fast'"), "{err}");

    let grid = CALL.replace("grid = [1, 1, 1]", "grid = [1, 1]");
    let err = spec_error("grid", &format!("{KERNEL}{grid}\n[[input]]\nfile = \"x.npy\"\n"), x);
    assert!(err.contains("call.grid") && err.contains("expected 3 values"), "{err}");

    let err = spec_error("neither", "[call]\ngrid = [1, 1, 1]\n", x);
    assert!(err.contains("[kernel]") && err.contains("[library]"), "{err}");
}

#[test]
fn input_views_keep_their_strides() {
    let dir = scratch("views");
    write_f32_npy(&dir.join("x.npy"), &[4, 6], &(0..24).map(|i| i as f32).collect::<Vec<_>>());
    let spec = format!(
        "{}{CALL}\n[[input]]\nfile = \"x.npy\"\nslice = \"::-2, 1:5\"\ntranspose = [1, 0]\nbroadcast_to = [3, 4, 2]\n",
        KERNEL.replace("y[0] = x[0];", "y[0] = x[0]; // x_strides")
    );
    let path = dir.join("spec.toml");
    std::fs::write(&path, spec).unwrap();
    let kiln_tools::spec::KernelSpec::Body(body) = kiln_tools::spec::KernelSpec::load(&path).unwrap() else { panic!() };
    let x = body.inputs[0].to_array();
    assert_eq!(x.shape(), &[3, 4, 2]);
    assert_eq!(x.strides(), &[0, 1, -12]);
    assert_eq!(&x.to_vec::<f32>().unwrap()[..4], &[19.0, 7.0, 20.0, 8.0]);
}

#[test]
fn demo_runs_the_gallery_on_cpu_and_checks_every_kernel() {
    let out = kiln(&["demo", "--device", "cpu"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    let summary = text.lines().last().unwrap_or_default();
    let (passed, total) = summary.split_once(" passed").unwrap().0.split_once('/').unwrap();
    assert_eq!(passed, total, "{text}");
    assert!(total.parse::<usize>().unwrap() >= 15, "{text}");
    assert!(text.contains("rms_norm") && text.contains("grid_sample_vjp"), "{text}");
}

#[test]
fn run_on_cpu_writes_outputs_that_match_a_reference() {
    let dir = scratch("run-cpu");
    let x: Vec<f32> = (0..40).map(|i| (i as f32 - 17.5) / 7.0).collect();
    write_f32_npy(&dir.join("x.npy"), &[5, 8], &x);
    let spec = "[kernel]\nname = \"myexp\"\ninput_names = [\"inp\"]\noutput_names = [\"out\"]\nsource = '''\n    uint elem = thread_position_in_grid.x;\n    T tmp = inp[elem];\n    out[elem] = metal::exp(tmp);\n'''\n\n[call]\ngrid = [40, 1, 1]\nthreadgroup = [16, 1, 1]\noutput_shapes = [[8, 5]]\noutput_dtypes = [\"float32\"]\ntemplate = [[\"T\", \"float32\"]]\n\n[[input]]\nfile = \"x.npy\"\ntranspose = [1, 0]\n";
    std::fs::write(dir.join("spec.toml"), spec).unwrap();
    let out_dir = dir.join("out");
    let out =
        kiln(&["run", dir.join("spec.toml").to_str().unwrap(), "--device", "cpu", "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = kiln::Array::load_npy(out_dir.join("out.npy")).unwrap();
    assert_eq!(got.shape(), &[8, 5]);
    let got = got.to_vec::<f32>().unwrap();
    // The transposed view is made row-contiguous before the kernel reads it linearly.
    for r in 0..8 {
        for c in 0..5 {
            let want = (x[c * 8 + r] as f64).exp();
            let have = got[r * 5 + c] as f64;
            assert!((have - want).abs() <= 1e-6 * want.abs().max(1.0), "({r},{c}): {have} vs {want}");
        }
    }
}

/// A spec of one kernel over `x` (4 f32 elements, from the file `x.npy`) whose body is `body`.
fn fault_spec(dir: &Path, name: &str, body: &str) -> PathBuf {
    write_f32_npy(&dir.join("x.npy"), &[4], &[0.75, -1.5, 2.25, 3.0]);
    let spec = format!(
        "[kernel]\nname = \"{name}\"\ninput_names = [\"x\"]\noutput_names = [\"out\"]\nsource = '''\n    uint i = thread_position_in_grid.x;\n    {body}\n'''\n\n[call]\ngrid = [4, 1, 1]\nthreadgroup = [4, 1, 1]\noutput_shapes = [[4]]\noutput_dtypes = [\"float32\"]\n\n[[input]]\nfile = \"x.npy\"\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, spec).unwrap();
    path
}

#[test]
fn faulting_kernels_end_with_an_error_not_a_signal() {
    let dir = scratch("faults");
    let out_dir = dir.join("out");
    let out_dir = out_dir.to_str().unwrap();
    // A read one element past the input goes unnoticed unless checked, which names the input.
    let near = fault_spec(&dir, "near", "out[i] = x[i + 1];");
    let near = near.to_str().unwrap();
    let out = kiln(&["run", near, "--device", "cpu", "--out", out_dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    for device in ["cpu", "auto"] {
        let out = kiln(&["run", near, "--device", device, "--checked", "--out", out_dir]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("out-of-bounds access to input `x`"), "{}", stderr(&out));
    }
    // A read 4 TiB away and an integer division by zero, checked or not.
    let far = fault_spec(&dir, "far", "out[i] = x[int64_t(i + 1) << 40];");
    let div = fault_spec(&dir, "div", "int d = int(x[i] * 0.0f);\n    out[i] = float(int(i) / d);");
    for (spec, want) in [(far, "outside every buffer"), (div, "arithmetic exception")] {
        for checked in [false, true] {
            let mut args = vec!["run", spec.to_str().unwrap(), "--device", "cpu", "--out", out_dir];
            if checked {
                args.push("--checked");
            }
            let out = kiln(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        }
    }
    let out = kiln(&["run", near, "--device", "cuda", "--checked", "--out", out_dir]);
    assert!(!out.status.success() && stderr(&out).contains("--checked runs on the CPU emulator"), "{}", stderr(&out));
}

#[test]
fn writes_past_threadgroup_memory_end_with_an_error_naming_the_array() {
    let dir = scratch("threadgroup");
    let out_dir = dir.join("out");
    let out_dir = out_dir.to_str().unwrap();
    // Thread 3 writes one element past a 4-float threadgroup array.
    let spec = fault_spec(&dir, "tg_past", "threadgroup float buf[4];\n    buf[i + 1] = x[i];\n    out[i] = x[i];");
    for checked in [false, true] {
        let mut args = vec!["run", spec.to_str().unwrap(), "--device", "cpu", "--out", out_dir];
        if checked {
            args.push("--checked");
        }
        let out = kiln(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("threadgroup array `buf` (16 bytes)"), "{args:?}: {}", stderr(&out));
    }
}

/// The cache directory of the CPU library whose source contains `text`.
fn library_dir_holding(cache: &Path, text: &str) -> PathBuf {
    let dirs = std::fs::read_dir(cache.join("cpu")).unwrap().map(|e| e.unwrap().path());
    let mut hits = dirs.filter(|d| std::fs::read_to_string(d.join("kernel.cpp")).is_ok_and(|s| s.contains(text)));
    hits.next().unwrap()
}

#[test]
fn damaged_cache_entries_are_rebuilt_by_the_next_run() {
    let dir = scratch("cache");
    let cache = dir.join("cache");
    // The input `fault_spec` writes.
    let x = [0.75f32, -1.5, 2.25, 3.0];
    let a = fault_spec(&dir, "cache_a", "out[i] = x[i] * 2.0f + 1.0f;");
    let b = fault_spec(&dir, "cache_b", "out[i] = x[i] * 3.0f - 1.0f;");
    let out_dir = dir.join("out");
    let run = |spec: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["run", spec.to_str().unwrap(), "--device", "cpu", "--out", out_dir.to_str().unwrap()])
            .env("KILN_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        kiln::Array::load_npy(out_dir.join("out.npy")).unwrap().to_vec::<f32>().unwrap()
    };
    let want_b: Vec<f32> = x.iter().map(|v| v * 3.0 - 1.0).collect();
    run(&a);
    assert_eq!(run(&b), want_b);
    let so_a = library_dir_holding(&cache, "x[i] * 2.0f + 1.0f").join("kernel.so");
    let so_b = library_dir_holding(&cache, "x[i] * 3.0f - 1.0f").join("kernel.so");
    let manifest_b = so_b.with_file_name("kernel.so.manifest");
    let damage: [(&str, &dyn Fn()); 4] = [
        ("truncated", &|| {
            let good = std::fs::read(&so_b).unwrap();
            std::fs::write(&so_b, &good[..good.len() / 2]).unwrap();
        }),
        ("garbage", &|| std::fs::write(&so_b, vec![0xCCu8; 4096]).unwrap()),
        ("another kernel's library", &|| {
            std::fs::copy(&so_a, &so_b).unwrap();
        }),
        ("no manifest", &|| std::fs::remove_file(&manifest_b).unwrap()),
    ];
    for (what, damage) in damage {
        damage();
        assert_eq!(run(&b), want_b, "{what}");
        assert!(manifest_b.exists(), "{what}: the entry is built again");
    }
}

#[test]
fn a_reader_closing_the_pipe_ends_kiln_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    // The CPU translation unit is far larger than a pipe's buffer, so kiln is still writing
    // when the reader goes away.
    let spec = golden("myexp").join("kernel.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["translate", spec.to_str().unwrap(), "--emit", "cpu"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kiln");
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("// kiln CPU translation unit"));
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "status {:?}: {err}", out.status);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
}

#[test]
fn run_refuses_output_names_that_leave_the_out_directory() {
    let dir = scratch("escape");
    let out_dir = dir.join("out");
    let spec = "[library]\nsource = '''\nkernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 1.0f; }\n'''\nfunction = \"k\"\n\n[dispatch]\ngrid = [4, 1, 1]\nthreadgroup = [4, 1, 1]\n\n[[buffer]]\noutput = \"../escaped\"\nshape = [4]\ndtype = \"float32\"\n";
    std::fs::write(dir.join("spec.toml"), spec).unwrap();
    let out =
        kiln(&["run", dir.join("spec.toml").to_str().unwrap(), "--device", "cpu", "--out", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("buffer[0].output") && stderr(&out).contains("plain file name"), "{}", stderr(&out));
    assert!(!dir.join("escaped.npy").exists() && !out_dir.exists());
}

#[test]
fn bench_lists_every_ops_cases_for_peers() {
    let out = kiln(&["bench", "--list-json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON list");
    let shapes: usize = kiln_tools::op_table::ops().iter().map(|op| op.hooks.bench.len()).sum();
    assert_eq!(listed.len(), shapes);
    let peers = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers.py")).unwrap();
    let mut ids = std::collections::HashSet::new();
    for case in &listed {
        let id = case["id"].as_str().unwrap();
        assert!(ids.insert(id.to_string()), "{id} listed twice");
        let op = case["op"].as_str().unwrap();
        let table_op = kiln_tools::op_table::op(op).unwrap_or_else(|| panic!("{op} not in the registry"));
        let dims: Vec<usize> = case["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert!(
            table_op.hooks.bench.iter().any(|s| s.dims == dims.as_slice() && id.starts_with(&format!("{}/", s.case))),
            "{id}"
        );
        assert!(case["bytes"].as_f64().unwrap() > 0.0 && case["flops"].as_f64().unwrap() > 0.0, "{id}");
        // bench/peers.py builds its torch version of every listed op.
        assert!(
            peers.contains(&format!("\"{op}\": (")) || peers.contains(&format!("GDN_OP = \"{op}\"")),
            "peers.py lacks {op}"
        );
    }
}
