//! `kiln check SPEC [--json]`: runs a spec file's kernel on the CPU emulator under the sanitizer
//! and prints what it found on the kernel's own lines. Exit status: 0 when it found no errors
//! (warnings alone included), 2 when it found errors, 1 when the kernel could not be run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use kiln::sanitize::{self, Severity};
use kiln::Device;
use kiln_tools::spec::KernelSpec;

use crate::out::{errln, outln};

/// The arguments of `kiln check`.
#[derive(Args)]
#[command(long_about = "Run a kernel spec file on the CPU emulator with every access of the kernel recorded, and \
report on the kernel's own lines: races (two threads, at least one writing, no barrier between whose flags name \
the memory; across a barrier that orders execution only, or between lanes of one SIMD group, a warning), with the \
output element that differs under another legal schedule; reads of threadgroup memory, outputs or private \
arrays nobody wrote; output elements no thread wrote or several threads wrote unordered; barriers not reached by \
every thread of a threadgroup, shuffles that read an inactive lane, and accesses outside buffers and threadgroup \
arrays (a read whose value is discarded, load-then-select, is a warning).\n\nExit status: 0 no errors (warnings alone included), 2 errors found, 1 the \
kernel could not be run (a compile error, a bad spec file).")]
pub struct CheckArgs {
    /// The kernel spec file (.toml), as `kiln run` takes it.
    spec: PathBuf,
    /// Print one JSON array of findings (kind, severity, kernel, line, text, threads, buffer,
    /// index, count, ...) instead of text.
    #[arg(long)]
    json: bool,
    /// Stop a kernel that runs longer than this many seconds (0: no limit); default 60.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
}

/// Runs `kiln check`.
pub fn check(args: CheckArgs) -> ExitCode {
    match findings(&args.spec, args.timeout) {
        Ok(found) => {
            if args.json {
                outln!("{}", sanitize::to_json(&found));
            } else if found.is_empty() {
                outln!("{}: no findings", args.spec.display());
            } else {
                for f in &found {
                    outln!("{}\n", f.render());
                }
                let errors = found.iter().filter(|f| f.severity == Severity::Error).count();
                let count = |n: usize, noun: &str| if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") };
                outln!("{}, {}", count(errors, "error"), count(found.len() - errors, "warning"));
            }
            if found.iter().any(|f| f.severity == Severity::Error) {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn findings(path: &Path, timeout: Option<f64>) -> kiln::Result<Vec<sanitize::Finding>> {
    let mut spec = KernelSpec::load(path)?;
    if let Some(limit) = crate::timeout::spec_limit("check", timeout, spec.timeout())? {
        spec = spec.with_timeout(limit);
    }
    let (result, found) = sanitize::check(|| spec.run(Device::Cpu));
    result?;
    Ok(found)
}
