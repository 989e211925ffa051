//! The sanitizer's catalogue of planted bugs (`tests/sanitizer_catalogue/*.toml`, each a spec
//! file whose first line says what `kiln check` must find: `# expect: KIND SEVERITY line N`,
//! with `(header)` when the line is in the header): every bug is found with its kind, severity
//! and line.

use std::path::Path;

use kiln::sanitize::{self, Finding};
use kiln::Device;
use kiln_tools::spec::KernelSpec;

struct Expected {
    kind: String,
    severity: String,
    line: u32,
    part: &'static str,
}

fn expected(text: &str) -> Expected {
    let first = text.lines().next().unwrap();
    let words: Vec<&str> = first.trim_start_matches("# expect:").split_whitespace().collect();
    let part = if first.contains("(header)") {
        "header"
    } else if text.contains("[library]") {
        "source"
    } else {
        "body"
    };
    Expected { kind: words[0].into(), severity: words[1].into(), line: words[3].parse().unwrap(), part }
}

fn check(path: &Path) -> Vec<Finding> {
    let spec = KernelSpec::load(path).unwrap();
    let (result, found) = sanitize::check(|| spec.run(Device::Cpu));
    result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    found
}

#[test]
fn every_planted_bug_is_found_with_its_kind_and_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sanitizer_catalogue");
    let mut specs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    specs.sort();
    assert!(specs.len() >= 25, "the catalogue holds {} bugs", specs.len());
    let mut missed = Vec::new();
    for path in &specs {
        let want = expected(&std::fs::read_to_string(path).unwrap());
        let found = check(path);
        let hit = found.iter().any(|f| {
            f.kind == want.kind
                && f.severity.as_str() == want.severity
                && f.line.as_ref().is_some_and(|l| l.line == want.line && l.part == want.part)
        });
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !hit {
            let got: Vec<String> = found.iter().map(Finding::render).collect();
            missed.push(format!(
                "{name}: wanted {} {} at {} line {}, found:\n{}",
                want.kind,
                want.severity,
                want.part,
                want.line,
                got.join("\n")
            ));
        }
    }
    assert!(missed.is_empty(), "{} of {} bugs missed:\n{}", missed.len(), specs.len(), missed.join("\n\n"));
}
