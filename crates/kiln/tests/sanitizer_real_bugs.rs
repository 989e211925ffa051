//! The sanitizer against real bugs: `tests/sanitizer_real_bugs/` holds public Metal kernels whose
//! fix is in a repository's history, each as a pair of spec files dispatched as the repository's
//! host code does: `NAME.before.toml` (first line `# expect: KIND SEVERITY line N`, the finding
//! `kiln check` must report) and `NAME.after.toml` (`# expect: clean`, no finding at all). The
//! kernels are copied byte for byte from upstream; `SOURCE.md` names the repository, the commits,
//! the paths and the license of each.
//! A pair whose second line is `# slow: REASON` (minutes to compile) or `# pending: REASON` (a
//! finding kiln does not yet report as expected, and why) runs only in
//! `every_slow_or_pending_real_bug_is_found_and_every_fix_is_clean`, ignored.
//! `every_dtype_of_every_correct_kernel_is_clean` (ignored: it runs each gallery and library
//! kernel in every dtype it supports, minutes under the sanitizer) extends the must-be-clean side
//! that `sanitizer_clean.rs` runs in one dtype each.

use std::path::{Path, PathBuf};

use kiln::sanitize::{self, Finding};
use kiln::Device;
use kiln_tools::gallery::{self, library};
use kiln_tools::spec::KernelSpec;

/// What a spec's first line expects.
enum Expected {
    Clean,
    Finding { kind: String, severity: String, line: u32 },
}

fn expected(path: &Path) -> Expected {
    let text = std::fs::read_to_string(path).unwrap();
    let first = text.lines().next().unwrap_or_default().trim_start_matches("# expect:").trim().to_string();
    if first == "clean" {
        return Expected::Clean;
    }
    let words: Vec<&str> = first.split_whitespace().collect();
    assert!(words.len() == 4 && words[2] == "line", "{}: bad expectation {first:?}", path.display());
    Expected::Finding { kind: words[0].into(), severity: words[1].into(), line: words[3].parse().unwrap() }
}

fn check(path: &Path) -> Vec<Finding> {
    let spec = KernelSpec::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (result, found) = sanitize::check(|| spec.run(Device::Cpu));
    result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    found
}

/// Whether a spec's second line marks its pair slow or pending.
fn set_aside(path: &Path) -> bool {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().nth(1).is_some_and(|l| l.starts_with("# slow:") || l.starts_with("# pending:"))
}

fn pairs() -> Vec<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sanitizer_real_bugs");
    let mut before: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".before.toml"))
        .collect();
    before.sort();
    before
        .into_iter()
        .map(|b| {
            let after = PathBuf::from(b.to_string_lossy().replace(".before.toml", ".after.toml"));
            assert!(after.exists(), "{} has no fixed version", b.display());
            (b, after)
        })
        .collect()
}

fn rendered(found: &[Finding]) -> String {
    found.iter().map(Finding::render).collect::<Vec<_>>().join("\n")
}

/// Checks each pair; returns the counts and what went wrong.
fn check_pairs(pairs: &[(PathBuf, PathBuf)]) -> (usize, usize, Vec<String>) {
    let (mut found_bugs, mut clean_fixes, mut wrong) = (0, 0, Vec::new());
    for (before, after) in pairs {
        let name = before.file_name().unwrap().to_string_lossy().replace(".before.toml", "");
        let Expected::Finding { kind, severity, line } = expected(before) else {
            panic!("{name}: the kernel before the fix must expect a finding");
        };
        let got = check(before);
        let hit = got.iter().any(|f| {
            f.kind == kind && f.severity.as_str() == severity && f.line.as_ref().is_some_and(|l| l.line == line)
        });
        if hit {
            found_bugs += 1;
        } else {
            wrong.push(format!(
                "{name} before the fix: wanted {kind} {severity} at line {line}, found:\n{}",
                rendered(&got)
            ));
        }
        assert!(matches!(expected(after), Expected::Clean), "{name}: the fixed kernel must expect `clean`");
        let got = check(after);
        if got.is_empty() {
            clean_fixes += 1;
        } else {
            wrong.push(format!("{name} after the fix: findings on the fixed kernel:\n{}", rendered(&got)));
        }
    }
    (found_bugs, clean_fixes, wrong)
}

#[test]
fn every_real_bug_is_found_at_its_line_and_every_fix_is_clean() {
    let pairs: Vec<_> = pairs().into_iter().filter(|p| !set_aside(&p.0)).collect();
    assert!(pairs.len() >= 8, "the corpus holds {} quick pairs", pairs.len());
    let (found_bugs, clean_fixes, wrong) = check_pairs(&pairs);
    eprintln!("real bugs found: {found_bugs}/{}; fixed versions clean: {clean_fixes}/{}", pairs.len(), pairs.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
#[ignore = "slow pairs take minutes to compile; pending ones say what kiln does not yet report"]
fn every_slow_or_pending_real_bug_is_found_and_every_fix_is_clean() {
    let pairs: Vec<_> = pairs().into_iter().filter(|p| set_aside(&p.0)).collect();
    assert!(!pairs.is_empty(), "the corpus holds no slow or pending pair");
    let (found_bugs, clean_fixes, wrong) = check_pairs(&pairs);
    eprintln!(
        "slow or pending real bugs found: {found_bugs}/{}; fixed versions clean: {clean_fixes}/{}",
        pairs.len(),
        pairs.len()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// An error race comes with what it does: the output element that differs under another legal
/// schedule, with both values.
#[test]
fn a_race_names_an_output_element_that_another_schedule_changes() {
    let (before, _) = pairs().into_iter().find(|p| p.0.to_string_lossy().contains("candle_softmax")).unwrap();
    let found = check(&before);
    let race = found.iter().find(|f| f.kind == "race" && f.severity == sanitize::Severity::Error).unwrap();
    assert!(race.message.contains("under another legal schedule"), "{}", race.render());
    assert!(race.message.contains("`dst`["), "{}", race.render());
}

#[test]
#[ignore = "minutes under the sanitizer: every dtype of every gallery and library kernel"]
fn every_dtype_of_every_correct_kernel_is_clean() {
    let (mut clean, mut total, mut dirty) = (0, 0, Vec::new());
    for entry in gallery::entries().into_iter().chain(library::entries()) {
        for &dtype in entry.dtypes {
            total += 1;
            let (outcome, found) = sanitize::check(|| entry.run(Device::Cpu, dtype, 31));
            let outcome = outcome.unwrap_or_else(|e| panic!("{} {dtype}: {e}", entry.name));
            assert!(outcome.passed(), "{} {dtype} is wrong when checked: error {}", entry.name, outcome.error());
            if found.is_empty() {
                clean += 1;
            } else {
                dirty.push(format!("{} {dtype}:\n{}", entry.name, rendered(&found)));
            }
        }
    }
    eprintln!("correct kernels clean (every dtype): {clean}/{total}");
    assert!(dirty.is_empty(), "findings on correct kernels:\n{}", dirty.join("\n\n"));
}
