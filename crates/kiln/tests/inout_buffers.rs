//! Buffers a full-file kernel updates in place: `LibraryArg::InOut` in the Rust API and a
//! `[[buffer]]` with both `file` and `output` in a spec file. The kernel is an in-place
//! Walsh–Hadamard transform of rows (plus a per-row counter it increments in place), checked
//! against a plain-Rust transform on random data; the caller's array must stay unchanged.
//! Also: the warning for a file buffer the kernel may write that is not saved.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_close, Rng};
use kiln::backend::Dispatch;
use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch, MetalLibrary};
use kiln_tools::spec::KernelSpec;

/// One threadgroup per row: the row is loaded into threadgroup memory, transformed by butterfly
/// stages, scaled and written back over itself; `visits[row] += row + 1` updates the counter.
const FWHT: &str = r#"
#include <metal_stdlib>
using namespace metal;
struct Params { uint n; float scale; };
kernel void fwht_rows(device float* x [[buffer(0)]], constant Params& p [[buffer(1)]],
                      device float* sumsq [[buffer(2)]], device int* visits [[buffer(3)]],
                      threadgroup float* sh [[threadgroup(0)]],
                      uint row [[threadgroup_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                      uint nt [[threads_per_threadgroup]]) {
  device float* r = x + row * p.n;
  for (uint i = t; i < p.n; i += nt) sh[i] = r[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint h = 1; h < p.n; h <<= 1) {
    for (uint k = t; k < p.n / 2; k += nt) {
      uint j = (k / h) * 2 * h + (k % h);
      float a = sh[j];
      float b = sh[j + h];
      sh[j] = a + b;
      sh[j + h] = a - b;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint i = t; i < p.n; i += nt) r[i] = sh[i] * p.scale;
  if (t == 0) {
    float s = 0.0f;
    for (uint i = 0; i < p.n; ++i) s += (sh[i] * p.scale) * (sh[i] * p.scale);
    sumsq[row] = s;
    visits[row] += int(row) + 1;
  }
}
"#;

/// The orthonormal Walsh–Hadamard transform of each row of `x` (rows × n, row-major), in f64.
fn fwht_reference(x: &[f64], n: usize) -> Vec<f64> {
    let mut out = x.to_vec();
    for row in out.chunks_mut(n) {
        let mut h = 1;
        while h < n {
            for block in (0..n).step_by(2 * h) {
                for j in block..block + h {
                    let (a, b) = (row[j], row[j + h]);
                    row[j] = a + b;
                    row[j + h] = a - b;
                }
            }
            h *= 2;
        }
        let scale = 1.0 / (n as f64).sqrt();
        row.iter_mut().for_each(|v| *v *= scale);
    }
    out
}

fn params(n: usize) -> Vec<u8> {
    let mut bytes = (n as u32).to_le_bytes().to_vec();
    bytes.extend((1.0 / (n as f32).sqrt()).to_le_bytes());
    bytes
}

fn launch(rows: usize, n: usize) -> LibraryLaunch {
    let mut launch = LibraryLaunch::new("fwht_rows", Dispatch::Threadgroups([rows as u32, 1, 1]), [16, 1, 1]);
    launch.threadgroup_memory = vec![n * 4];
    launch
}

fn host(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

fn inout_buffers_come_back_updated_in_slot_order(device: Device) {
    let mut rng = Rng::new(25);
    let (rows, n) = (5, 64);
    let x = Array::from_f64(DType::F32, &[rows, n], &rng.normals(rows * n, 1.0)).unwrap();
    let xv = x.to_f64_vec().unwrap();
    let visits0: Vec<i32> = (0..rows).map(|_| (rng.next_u64() % 1000) as i32 - 500).collect();
    let visits = Array::from_vec(&[rows], visits0.clone()).unwrap();
    let lib = MetalLibrary::new("fwht", FWHT);
    let args = [
        LibraryArg::InOut(x.to_device(device).unwrap()),
        LibraryArg::Bytes(params(n)),
        LibraryArg::Output { shape: vec![rows], dtype: DType::F32, init_value: Some(f64::NAN) },
        LibraryArg::InOut(visits.to_device(device).unwrap()),
    ];
    let out = lib.dispatch(device, &args, &launch(rows, n)).unwrap();
    assert_eq!(out.len(), 3, "x, sumsq and visits, in slot order");
    let want = fwht_reference(&xv, n);
    assert_eq!(out[0].shape(), &[rows, n]);
    assert_close("transformed rows", &out[0], &want, DType::F32);
    let sumsq: Vec<f64> = want.chunks(n).map(|r| r.iter().map(|v| v * v).sum()).collect();
    assert_close("sum of squares", &out[1], &sumsq, DType::F32);
    let want_visits: Vec<f64> = visits0.iter().enumerate().map(|(r, &v)| f64::from(v) + r as f64 + 1.0).collect();
    assert_eq!((out[2].dtype(), host(&out[2])), (DType::I32, want_visits));
    // The caller's arrays are not changed: the kernel works on copies.
    assert_eq!(host(&args_array(&args[0])), xv);
    assert_eq!(host(&args_array(&args[3])), visits0.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());

    // A view is copied row-major: the kernel sees the view's elements, not the buffer behind it.
    let backing = Array::from_f64(DType::F32, &[n, rows], &rng.normals(rows * n, 1.0)).unwrap();
    let view = backing.t();
    let view_values = view.to_f64_vec().unwrap();
    let args = [
        LibraryArg::InOut(view.to_device(device).unwrap()),
        LibraryArg::Bytes(params(n)),
        LibraryArg::Output { shape: vec![rows], dtype: DType::F32, init_value: Some(f64::NAN) },
        LibraryArg::InOut(visits.to_device(device).unwrap()),
    ];
    let out = lib.dispatch(device, &args, &launch(rows, n)).unwrap();
    assert_close("transformed view", &out[0], &fwht_reference(&view_values, n), DType::F32);
    assert_eq!(view.to_f64_vec().unwrap(), view_values);
}

fn args_array(arg: &LibraryArg) -> Array {
    match arg {
        LibraryArg::InOut(a) | LibraryArg::Array(a) => a.clone(),
        other => panic!("not an array: {other:?}"),
    }
}

/// A scratch directory unique to one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-inout-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The FWHT spec with `x.npy` (float16, cast to float32) and `visits.npy` as in/out buffers.
fn fwht_spec(dir: &Path, rows: usize, n: usize, x_keys: &str) -> PathBuf {
    std::fs::write(dir.join("fwht.metal"), FWHT).unwrap();
    let spec = format!(
        "[library]\nsource_file = \"fwht.metal\"\nfunction = \"fwht_rows\"\n\n[dispatch]\nthreadgroups = [{rows}, 1, 1]\nthreadgroup = [16, 1, 1]\nthreadgroup_memory = [{}]\n\n[[buffer]]\nfile = \"x.npy\"\n{x_keys}\n[[buffer]]\nfields = [[\"uint32\", {n}], [\"float32\", {}]]\n\n[[buffer]]\noutput = \"sumsq\"\nshape = [{rows}]\ndtype = \"float32\"\n\n[[buffer]]\nfile = \"visits.npy\"\noutput = \"visits\"\n",
        n * 4,
        1.0 / (n as f64).sqrt()
    );
    let path = dir.join("fwht.toml");
    std::fs::write(&path, spec).unwrap();
    path
}

fn spec_inout_buffers_are_written_back(device: Device) {
    let dir = scratch(&format!("spec-{device}").replace(':', "_"));
    let mut rng = Rng::new(52);
    let (rows, n) = (3, 128);
    let x = Array::from_f64(DType::F16, &[rows, n], &rng.normals(rows * n, 2.0)).unwrap();
    x.save_npy(dir.join("x.npy")).unwrap();
    let visits0: Vec<i32> = (0..rows).map(|_| (rng.next_u64() % 1000) as i32).collect();
    Array::from_vec(&[rows], visits0.clone()).unwrap().save_npy(dir.join("visits.npy")).unwrap();
    let path = fwht_spec(&dir, rows, n, "output = \"x\"\ndtype = \"float32\"\n");
    let spec = KernelSpec::load(&path).unwrap();
    assert_eq!(spec.warnings().unwrap(), Vec::<String>::new(), "every writable buffer is saved");
    let out = spec.run(device).unwrap();
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x", "sumsq", "visits"]);
    assert_eq!(out[0].1.dtype(), DType::F32);
    assert_close("spec x", &out[0].1, &fwht_reference(&x.to_f64_vec().unwrap(), n), DType::F32);
    let want_visits: Vec<f64> = visits0.iter().enumerate().map(|(r, &v)| f64::from(v) + r as f64 + 1.0).collect();
    assert_eq!(host(&out[2].1), want_visits);
    // The file itself is not touched by a run.
    assert_eq!(Array::load_npy(dir.join("x.npy")).unwrap().to_f64_vec().unwrap(), x.to_f64_vec().unwrap());
}

backend_tests!(inout_buffers_come_back_updated_in_slot_order, spec_inout_buffers_are_written_back);

#[track_caller]
fn spec_error(path: &Path) -> String {
    match KernelSpec::load(path) {
        Ok(_) => panic!("{}: expected an error", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn inout_buffers_refuse_view_keys() {
    let dir = scratch("views");
    Array::from_f64(DType::F32, &[2, 64], &[0.5; 128]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    Array::from_vec(&[2], vec![1i32, 2]).unwrap().save_npy(dir.join("visits.npy")).unwrap();
    for key in ["slice = \"::2\"", "transpose = [1, 0]", "broadcast_to = [3, 2, 64]"] {
        let path = fwht_spec(&dir, 2, 64, &format!("output = \"x\"\n{key}\n"));
        let e = spec_error(&path);
        let name = key.split(' ').next().unwrap();
        assert!(e.contains(&format!("buffer[0].{name}")) && e.contains("in/out"), "{key}: {e}");
        assert!(e.contains("fwht.toml"), "{key}: {e}");
    }
    let path = fwht_spec(&dir, 2, 64, "output = \"x\"\ninit_value = 0.0\n");
    assert!(spec_error(&path).contains("buffer[0].init_value"));
}

#[test]
fn written_buffers_that_are_not_outputs_are_named_in_a_warning() {
    let dir = scratch("warn");
    Array::from_f64(DType::F32, &[2, 64], &[0.5; 128]).unwrap().save_npy(dir.join("x.npy")).unwrap();
    Array::from_vec(&[2], vec![1i32, 2]).unwrap().save_npy(dir.join("visits.npy")).unwrap();
    // `x` is loaded from a file but not saved: the kernel's updates would be lost.
    let spec = KernelSpec::load(fwht_spec(&dir, 2, 64, "")).unwrap();
    let warnings = spec.warnings().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for part in ["fwht.toml", "buffer[0]", "`x` [[buffer(0)]]", "fwht_rows", "add output = \"x\""] {
        assert!(warnings[0].contains(part), "{part}: {}", warnings[0]);
    }
    // Parameters declared const device or constant are read-only: no warning.
    let read_only = FWHT
        .replace("device float* x [[buffer(0)]]", "const device float* x [[buffer(0)]]")
        .replace("for (uint i = t; i < p.n; i += nt) r[i] = sh[i] * p.scale;", "");
    let read_only = read_only.replace("device float* r = x", "const device float* r = x");
    std::fs::write(dir.join("fwht.metal"), read_only).unwrap();
    let text = std::fs::read_to_string(dir.join("fwht.toml")).unwrap();
    let spec = KernelSpec::parse(&dir.join("fwht.toml"), &text).unwrap();
    assert_eq!(spec.warnings().unwrap(), Vec::<String>::new());
}

/// The kernel of the `cuda` variants compiles for sm_90 (no GPU needed).
#[test]
fn fwht_kernel_compiles_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let program = MetalLibrary::new("fwht", FWHT).program(&launch(2, 64));
    let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF");
}
