//! One kernel of every corpus file compiled for the CPU and with NVRTC (sm_90, no GPU), as a
//! dispatch compiles it: the file with its includes, pruned to what that kernel reaches. The
//! kernel is the file's first instantiation unless `REPRESENTATIVE` names another.

use kiln::backend::{cpu, cuda};
use kiln::LibraryLaunch;

use super::corpus::files;
use crate::common;

/// Files whose first instantiation is not the one to compile here, and why.
const REPRESENTATIVE: &[(&str, &str)] = &[];

#[test]
fn one_kernel_of_every_file_compiles_for_the_cpu_and_with_nvrtc() {
    let nvrtc = common::nvrtc_or_skip();
    let mut failures = Vec::new();
    for file in files() {
        let label = file.label();
        let entries = file.entries().unwrap_or_else(|e| panic!("{label}: {e}"));
        let function = REPRESENTATIVE
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, f)| f.to_string())
            .or_else(|| entries.first().cloned())
            .unwrap_or_else(|| panic!("{label}: no kernels"));
        let program = file.library().program(&LibraryLaunch::threads(function.as_str(), 1usize, 1usize));
        let t = std::time::Instant::now();
        if let Err(e) = cpu::compile_past_memory(&program, true, true) {
            failures.push(format!(
                "{label} {function} (cpu): {}",
                e.to_string().lines().take(4).collect::<Vec<_>>().join(" | ")
            ));
        }
        let on_cpu = t.elapsed();
        let t = std::time::Instant::now();
        if nvrtc {
            if let Err(e) = cuda::compile_cubin(&program, (9, 0)) {
                failures.push(format!(
                    "{label} {function} (nvrtc): {}",
                    e.to_string().lines().take(4).collect::<Vec<_>>().join(" | ")
                ));
            }
        }
        eprintln!("{label:48} {function:60} cpu {on_cpu:>8.2?} nvrtc {:>8.2?}", t.elapsed());
    }
    assert!(failures.is_empty(), "{} of the files' kernels do not compile:\n{}", failures.len(), failures.join("\n"));
}
