//! Correct kernels come back clean from the sanitizer: every gallery and library kernel (the
//! ops' kernels among them) runs checked at its demo shape, still matches its reference, and
//! the sanitizer reports nothing.

use kiln::sanitize;
use kiln::{DType, Device};
use kiln_tools::gallery::{self, library};

#[test]
fn gallery_and_library_kernels_have_no_findings() {
    let mut dirty = Vec::new();
    for entry in gallery::entries().into_iter().chain(library::entries()) {
        let dtype = if entry.dtypes.contains(&DType::F32) { DType::F32 } else { entry.dtypes[0] };
        let start = std::time::Instant::now();
        let (outcome, found) = sanitize::check(|| (entry.demo)(Device::Cpu, dtype, 29));
        let outcome = outcome.unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        eprintln!("{} {dtype}: {} findings in {:?}", entry.name, found.len(), start.elapsed());
        assert!(outcome.passed(), "{} is wrong when checked: error {}", entry.name, outcome.error());
        if !found.is_empty() {
            let text: Vec<String> = found.iter().map(|f| f.render()).collect();
            dirty.push(format!("{} {dtype}:\n{}", entry.name, text.join("\n")));
        }
    }
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

/// The golden `kiln run` specs and the sanitizer's own clean cases (SIMD-group functions every
/// lane reaches, a whole SIMD-group skipping one, lanes past the grid's edge returning first,
/// every thread storing one same value) come back without findings.
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
        paths.push(file.unwrap().path());
    }
    paths.sort();
    assert!(paths.len() >= 20, "only {} specs", paths.len());
    let mut dirty = Vec::new();
    for path in &paths {
        let found = spec_findings(path);
        if !found.is_empty() {
            dirty.push(format!("{}:\n{}", path.display(), found.join("\n")));
        }
    }
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}
