//! Correct kernels come back clean from the sanitizer: every gallery and library kernel (the
//! ops' kernels among them) runs checked at its demo shape, still matches its reference, and
//! the sanitizer reports nothing; so do the ops the demos leave out, the Rust examples and the
//! golden specs. (A representative set of the other test files' kernels runs checked in those
//! files: `sanitizer_clean_tests!` in `tests/common/mod.rs`.)

use kiln::check::{rel_l2, tolerance, Rng};
use kiln::ops::elementwise::{self, Unary};
use kiln::sanitize;
use kiln::{Array, DType, Device};
use kiln_tools::gallery::{self, library};

#[path = "../examples/histogram_atomics.rs"]
#[allow(dead_code)] // its `main`; the test calls `run`
mod histogram_atomics;
#[path = "../examples/metal_file.rs"]
#[allow(dead_code)] // its `main`; the test calls `run`
mod metal_file;
#[path = "../examples/myexp.rs"]
#[allow(dead_code)] // its `main`; the test calls `run`
mod myexp;
#[path = "../examples/op_chain_gpu.rs"]
#[allow(dead_code)] // its `main`; the test calls `run`
mod op_chain_gpu;
#[path = "../examples/strided_view.rs"]
#[allow(dead_code)] // its `main`; the test calls `run`
mod strided_view;

/// An example's `run`.
type Example = fn(Device) -> kiln::Result<()>;

fn rendered(found: &[sanitize::Finding]) -> String {
    found.iter().map(|f| f.render()).collect::<Vec<_>>().join("\n")
}

#[test]
fn gallery_and_library_kernels_have_no_findings() {
    let mut dirty = Vec::new();
    let entries: Vec<_> = gallery::entries().into_iter().chain(library::entries()).collect();
    for entry in &entries {
        let dtype = if entry.dtypes.contains(&DType::F32) { DType::F32 } else { entry.dtypes[0] };
        let start = std::time::Instant::now();
        let (outcome, found) = sanitize::check(|| entry.run(Device::Cpu, dtype, 29));
        let outcome = outcome.unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        eprintln!("{} {dtype}: {} findings in {:?}", entry.name, found.len(), start.elapsed());
        assert!(outcome.passed(), "{} is wrong when checked: error {}", entry.name, outcome.error());
        if !found.is_empty() {
            let text: Vec<String> = found.iter().map(|f| f.render()).collect();
            dirty.push(format!("{} {dtype}:\n{}", entry.name, text.join("\n")));
        }
    }
    eprintln!("gallery and library kernels clean: {}/{}", entries.len() - dirty.len(), entries.len());
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}

/// Golden specs the sanitizer rightly reports: `strided_views` indexes with `elem_to_loc` over an
/// unsigned element, which wraps on a negative stride (the plain run faults there too); the
/// others write one element of a larger output that has no `init_value`.
const GOLDEN_WITH_FINDINGS: [&str; 4] =
    ["strided_views", "shape_params_several_outputs_no_attributes", "all_attributes", "dispatch_substrings"];

fn spec_findings(path: &std::path::Path) -> Vec<String> {
    let spec = kiln_tools::spec::KernelSpec::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (result, found) = sanitize::check(|| spec.run(Device::Cpu));
    result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    found.iter().map(|f| f.render()).collect()
}

/// The golden `kiln run` specs and the sanitizer's own clean cases come back without findings:
/// SIMD-group functions every lane reaches, a whole SIMD-group skipping one, lanes past the
/// grid's edge returning first, every thread storing one same value; reductions, scans and
/// broadcasts over the active lanes of a branch; one barrier reached after `if`/`else if`
/// branches (partial SIMD-groups and threadgroups); writes of one element ordered by barriers (an
/// in-place Cholesky); lanes of one SIMD-group exchanging across execution-only barriers.
#[test]
fn specs_have_no_findings() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut paths = Vec::new();
    for dir in std::fs::read_dir(root.join("golden/metal")).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if dir.join("kernel.toml").exists() && !GOLDEN_WITH_FINDINGS.contains(&name.as_str()) {
            paths.push(dir.join("kernel.toml"));
        }
    }
    for file in std::fs::read_dir(root.join("sanitizer_clean")).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            paths.push(path);
        }
    }
    paths.sort();
    assert!(paths.len() >= 20, "only {} specs", paths.len());
    eprintln!("specs: {}", paths.len());
    let mut dirty = Vec::new();
    for path in &paths {
        let found = spec_findings(path);
        if !found.is_empty() {
            dirty.push(format!("{}:\n{}", path.display(), found.join("\n")));
        }
    }
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}

/// The ops no demo runs, in each of their kernels, at small odd sizes (a partial last group, a
/// tail chunk): the elementwise ops' vector kernel (float32), 16-bit vector kernel and strided
/// kernel (a transposed view), and grid_sample's forward pass. Each still matches its f64
/// reference under the sanitizer, which finds nothing.
#[test]
fn ops_without_a_demo_have_no_findings() {
    let mut rng = Rng::new(2929);
    let mut dirty = Vec::new();
    let x32 = Array::from_f64(DType::F32, &[5, 203], &rng.normals(5 * 203, 2.0)).unwrap();
    let x16 = Array::from_f64(DType::F16, &[3, 301], &rng.normals(3 * 301, 2.0)).unwrap();
    let strided =
        Array::from_f64(DType::F32, &[37, 21], &rng.normals(37 * 21, 2.0)).unwrap().transpose(&[1, 0]).unwrap();
    for (op, x) in [(Unary::Exp, &x32), (Unary::Silu, &x16), (Unary::Gelu, &strided)] {
        let (out, found) = sanitize::check(|| elementwise::unary(op, x));
        let got = out.unwrap_or_else(|e| panic!("{}: {e}", op.name())).to_f64_vec().unwrap();
        let want = elementwise::reference(op, &x.to_f64_vec().unwrap());
        let err = rel_l2(&got, &want);
        assert!(err <= tolerance(x.dtype()), "{} {}: relative L2 error {err:.3e}", op.name(), x.dtype());
        if !found.is_empty() {
            dirty.push(format!("{} {}:\n{}", op.name(), x.dtype(), rendered(&found)));
        }
    }
    let dims = [2, 7, 9, 5, 4, 3];
    let [b, h, w, c, gh, gw] = dims;
    let xs = rng.normals(b * h * w * c, 1.0);
    let gs = rng.uniforms(b * gh * gw * 2, -1.1, 1.1);
    let x = Array::from_f64(DType::F32, &[b, h, w, c], &xs).unwrap();
    let grid = Array::from_f64(DType::F32, &[b, gh, gw, 2], &gs).unwrap();
    let (out, found) = sanitize::check(|| kiln::ops::grid_sample(&x, &grid));
    let got = out.unwrap_or_else(|e| panic!("grid_sample: {e}")).to_f64_vec().unwrap();
    let err = rel_l2(&got, &kiln::ops::grid_sample::reference(&xs, &gs, dims));
    assert!(err <= tolerance(DType::F32), "grid_sample: relative L2 error {err:.3e}");
    if !found.is_empty() {
        dirty.push(format!("grid_sample:\n{}", rendered(&found)));
    }
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}

/// The Rust examples (`crates/kiln/examples`) run under the sanitizer: each checks its own result
/// (an error on a mismatch) and the sanitizer finds nothing. They run on the CPU here, whatever
/// device the machine has, since the sanitizer checks CPU launches.
#[test]
fn examples_have_no_findings() {
    let examples: [(&str, Example); 5] = [
        ("histogram_atomics", histogram_atomics::run),
        ("metal_file", metal_file::run),
        ("myexp", myexp::run),
        ("op_chain_gpu", op_chain_gpu::run),
        ("strided_view", strided_view::run),
    ];
    let mut dirty = Vec::new();
    for (name, run) in examples {
        let (result, found) = sanitize::check(|| run(Device::Cpu));
        result.unwrap_or_else(|e| panic!("{name}: {e}"));
        if !found.is_empty() {
            dirty.push(format!("{name}:\n{}", rendered(&found)));
        }
    }
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}
