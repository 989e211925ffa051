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
