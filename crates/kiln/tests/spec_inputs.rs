//! What a spec file may load and launch: NumPy's defaults (float64 with a `dtype` cast, Fortran
//! order), clear errors for dtypes kiln cannot hold and for inputs that are not regular files,
//! the `timeout` key, and grids with a zero dimension (refused while an output would be
//! uninitialised). Errors must name the file, the key and, for launches, the kernel.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Rng;
use kiln::{Array, DType, Device, Error};
use kiln_tools::spec::KernelSpec;

/// A scratch directory unique to one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-spec-inputs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `.npy` bytes as NumPy writes them: `descr`, `fortran_order`, `shape` and the raw data.
fn npy_bytes(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if shape.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let order = if fortran { "True" } else { "False" };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn f64_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Column-major order of a row-major (rows × cols) matrix.
fn column_major<T: Copy>(rows: usize, cols: usize, row_major: &[T]) -> Vec<T> {
    (0..cols).flat_map(|c| (0..rows).map(move |r| row_major[r * cols + c])).collect()
}

/// A body kernel that copies `x` (n elements, read row-major) to `y`.
fn copy_spec(n: usize, input_keys: &str) -> String {
    format!(
        "[kernel]\nname = \"copy\"\ninput_names = [\"x\"]\noutput_names = [\"y\"]\nsource = '''\nuint i = thread_position_in_grid.x;\ny[i] = x[i];\n'''\n\n[call]\ngrid = [{n}, 1, 1]\nthreadgroup = [32, 1, 1]\noutput_shapes = [[{n}]]\noutput_dtypes = [\"float32\"]\n\n[[input]]\n{input_keys}\n"
    )
}

#[track_caller]
fn error_of<T>(what: &str, r: kiln::Result<T>) -> String {
    match r {
        Ok(_) => panic!("{what}: expected an error"),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn assert_mentions(what: &str, text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{what}: {p:?} missing from: {text}");
    }
}

#[test]
fn float64_npy_loads_with_a_dtype_cast_rounded_once() {
    let dir = scratch("f64");
    let mut rng = Rng::new(64);
    let (rows, cols) = (3, 5);
    // Values with more precision than float32 holds, so that the rounding is exercised.
    let values: Vec<f64> = rng.normals(rows * cols, 10.0).iter().map(|v| v + 1e-9).collect();
    std::fs::write(dir.join("c.npy"), npy_bytes("<f8", false, &[rows, cols], &f64_bytes(&values))).unwrap();
    let fortran = column_major(rows, cols, &values);
    std::fs::write(dir.join("f.npy"), npy_bytes("<f8", true, &[rows, cols], &f64_bytes(&fortran))).unwrap();
    let path = dir.join("spec.toml");
    for file in ["c.npy", "f.npy"] {
        let spec = KernelSpec::parse(&path, &copy_spec(rows * cols, &format!("file = {file:?}\ndtype = \"float32\"")))
            .unwrap();
        let KernelSpec::Body(body) = &spec else { panic!("a body spec") };
        let x = body.inputs[0].to_array();
        assert_eq!((x.shape(), x.dtype()), (&[rows, cols][..], DType::F32), "{file}");
        let want: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        assert_eq!(x.to_vec::<f32>().unwrap(), want, "{file}");
        let out = spec.run(Device::Cpu).unwrap();
        assert_eq!(out[0].1.to_vec::<f32>().unwrap(), want, "{file}: through the kernel");
        // An integer cast truncates toward zero, as every kiln cast does.
        let spec =
            KernelSpec::parse(&path, &copy_spec(rows * cols, &format!("file = {file:?}\ndtype = \"int32\""))).unwrap();
        let KernelSpec::Body(body) = &spec else { panic!("a body spec") };
        let want: Vec<i32> = values.iter().map(|&v| v as i32).collect();
        assert_eq!(body.inputs[0].to_array().to_vec::<i32>().unwrap(), want, "{file}");
    }
    // Without a cast: an error that says how to fix it.
    let e = error_of("no cast", KernelSpec::parse(&path, &copy_spec(15, "file = \"c.npy\"")));
    assert_mentions("no cast", &e, &["spec.toml", "input[0].file", "c.npy", "float64", "add dtype = \"float32\""]);
    // The Rust API: load_npy refuses, load_npy_as converts.
    let e = error_of("load_npy", Array::load_npy(dir.join("c.npy")));
    assert_mentions("load_npy", &e, &["c.npy", "float64", "load_npy_as"]);
    let a = Array::load_npy_as(dir.join("f.npy"), DType::F32).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), values.iter().map(|&v| v as f32).collect::<Vec<_>>());
}

#[test]
fn fortran_order_npy_loads_in_row_major_order() {
    let dir = scratch("fortran");
    let mut rng = Rng::new(3);
    let (d0, d1, d2) = (2, 3, 4);
    let values: Vec<i32> = (0..d0 * d1 * d2).map(|_| (rng.next_u64() % 10_000) as i32 - 5000).collect();
    // Column-major: the first index varies fastest.
    let mut stored = Vec::new();
    for k in 0..d2 {
        for j in 0..d1 {
            for i in 0..d0 {
                stored.extend(values[(i * d1 + j) * d2 + k].to_le_bytes());
            }
        }
    }
    let path = dir.join("a.npy");
    std::fs::write(&path, npy_bytes("<i4", true, &[d0, d1, d2], &stored)).unwrap();
    let a = Array::load_npy(&path).unwrap();
    assert_eq!(a.shape(), &[d0, d1, d2]);
    assert_eq!(a.to_vec::<i32>().unwrap(), values);
    assert!(a.is_row_contiguous());
    // Through a spec file, with a view on top.
    let spec = copy_spec(d1 * d2, "file = \"a.npy\"\nslice = \"1\"\ndtype = \"float32\"");
    let out = KernelSpec::parse(
        &dir.join("spec.toml"),
        &spec.replace("y[i] = x[i];", "y[i] = x[elem_to_loc(int64_t(i), x_shape, x_strides, x_ndim)];"),
    )
    .unwrap()
    .run(Device::Cpu)
    .unwrap();
    let want: Vec<f32> = values[d1 * d2..].iter().map(|&v| v as f32).collect();
    assert_eq!(out[0].1.to_vec::<f32>().unwrap(), want);
}

#[test]
fn unsupported_npy_dtypes_are_named() {
    let dir = scratch("dtypes");
    let path = dir.join("spec.toml");
    for (descr, elem, why) in [
        ("<c16", 16, "complex"),
        ("<c8", 8, "complex"),
        ("|O", 8, "object arrays"),
        ("<U3", 12, "string data"),
        ("<M8[ns]", 8, "datetime"),
        (">f8", 8, "big-endian"),
    ] {
        std::fs::write(dir.join("z.npy"), npy_bytes(descr, false, &[2], &vec![0u8; 2 * elem])).unwrap();
        let e = error_of(descr, KernelSpec::parse(&path, &copy_spec(2, "file = \"z.npy\"\ndtype = \"float32\"")));
        assert_mentions(descr, &e, &["spec.toml", "input[0].file", "z.npy", why]);
    }
}

/// Runs `f` on a thread and fails if it has not returned within 20 s (a blocked open or read).
fn within_seconds<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what}: still blocked after 20 s"))
}

#[cfg(unix)]
#[test]
fn inputs_that_are_not_regular_files_are_refused_before_opening() {
    let dir = scratch("fifo");
    let status = std::process::Command::new("mkfifo").arg(dir.join("pipe.npy")).status().unwrap();
    assert!(status.success(), "mkfifo");
    std::fs::create_dir(dir.join("folder.npy")).unwrap();
    let path = dir.join("spec.toml");
    for (file, kind) in [("pipe.npy", "FIFO"), ("folder.npy", "directory")] {
        let (p, spec) = (path.clone(), copy_spec(2, &format!("file = {file:?}")));
        let e = within_seconds(file, move || KernelSpec::parse(&p, &spec).map(|_| ()));
        assert_mentions(file, &error_of(file, e), &["spec.toml", "input[0].file", file, kind, "not a regular file"]);
    }
    std::fs::rename(dir.join("pipe.npy"), dir.join("pipe.metal")).unwrap();
    let spec = "[library]\nsource_file = \"pipe.metal\"\nfunction = \"k\"\n\n[dispatch]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\n";
    let p = path.clone();
    let e = within_seconds("source_file", move || KernelSpec::parse(&p, spec).map(|_| ()));
    assert_mentions("source_file", &error_of("source_file", e), &["library.source_file", "pipe.metal", "FIFO"]);
}

#[test]
fn timeout_key_stops_a_kernel_that_never_ends() {
    let dir = scratch("timeout");
    let path = dir.join("spec.toml");
    Array::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    let hang = copy_spec(4, "file = \"x.npy\"")
        .replace("y[i] = x[i];", "uint n = 0;\nwhile (x[0] > 0.0f) { n++; }\ny[i] = n;")
        .replace("[call]\n", "[call]\ntimeout = 0.5\n");
    let spec = KernelSpec::parse(&path, &hang).unwrap();
    assert_eq!(spec.timeout(), Some(Duration::from_millis(500)));
    let start = Instant::now();
    match spec.run(Device::Cpu) {
        Err(Error::Timeout { kernel, seconds }) => assert_eq!((kernel.as_str(), seconds), ("copy", 0.5)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(30), "stopped after {:?}", start.elapsed());
    // with_timeout overrides the key; 0 means no limit and is kept as such.
    assert_eq!(spec.clone().with_timeout(Duration::ZERO).timeout(), Some(Duration::ZERO));
    for (bad, why) in [("-1", "-1 is not a number of seconds"), ("\"soon\"", "expected a number"), ("nan", "NaN")] {
        let e = error_of(bad, KernelSpec::parse(&path, &hang.replace("timeout = 0.5", &format!("timeout = {bad}"))));
        assert_mentions(bad, &e, &["spec.toml", "call.timeout", why]);
    }
    let library = "[library]\nsource = \"kernel void k(device float* y [[buffer(0)]]) { y[0] = 1.0f; }\"\nfunction = \"k\"\n\n[dispatch]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\ntimeout = 2\n\n[[buffer]]\noutput = \"y\"\nshape = [1]\ndtype = \"float32\"\n";
    assert_eq!(KernelSpec::parse(&path, library).unwrap().timeout(), Some(Duration::from_secs(2)));
}

fn run_error(path: &Path, text: &str) -> String {
    error_of("run", KernelSpec::parse(path, text).unwrap().run(Device::Cpu))
}

#[test]
fn zero_dimension_grids_never_present_uninitialised_outputs() {
    let dir = scratch("zero");
    let path = dir.join("spec.toml");
    Array::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    let body = copy_spec(4, "file = \"x.npy\"").replace("grid = [4, 1, 1]", "grid = [4, 0, 1]");
    let e = run_error(&path, &body);
    assert_mentions("body", &e, &["spec.toml", "call.grid", "kernel copy", "\"y\"", "zero dimension", "no thread"]);
    // With init_value every output is defined: the run goes ahead, with a warning.
    let with_init = body.replace("[call]\n", "[call]\ninit_value = 2.5\n");
    let spec = KernelSpec::parse(&path, &with_init).unwrap();
    let warnings = spec.warnings().unwrap();
    assert!(warnings.len() == 1 && warnings[0].contains("call.grid") && warnings[0].contains("copy"), "{warnings:?}");
    assert_eq!(spec.run(Device::Cpu).unwrap()[0].1.to_vec::<f32>().unwrap(), vec![2.5; 4]);
    // A full file: zero threadgroups, an output without init_value.
    let library = "[library]\nsource = \"kernel void k(device float* y [[buffer(0)]], device float* z [[buffer(1)]]) { y[0] = 1.0f; z[0] = 1.0f; }\"\nfunction = \"k\"\n\n[dispatch]\nthreadgroups = [3, 0, 1]\nthreadgroup = [1, 1, 1]\n\n[[buffer]]\noutput = \"y\"\nshape = [1]\ndtype = \"float32\"\ninit_value = 0\n\n[[buffer]]\noutput = \"z\"\nshape = [1]\ndtype = \"float32\"\n";
    let e = run_error(&path, library);
    assert_mentions("library", &e, &["dispatch.threadgroups", "kernel k", "\"z\""]);
    assert!(!e.contains("\"y\""), "y has an init_value: {e}");
    // A grid without zero dimensions is not affected.
    assert!(KernelSpec::parse(&path, &copy_spec(4, "file = \"x.npy\"")).unwrap().warnings().unwrap().is_empty());
}
