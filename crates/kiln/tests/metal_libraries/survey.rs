//! The survey: every kernel (instantiation) of every corpus file through the CPU translation
//! and NVRTC. Each file's kernels are compiled together (the host compiler with
//! `-fsyntax-only`, NVRTC with `--fdevice-syntax-only`: the front end, templates instantiated);
//! the kernels a failure names are set aside and the rest compiled again until they pass, so a
//! kernel counts as compiling only inside a unit that compiled. `cargo test --test
//! metal_libraries survey -- --ignored --nocapture` (`KILN_SURVEY=<parts of files' labels, comma-separated>`
//! picks files); the report also goes to `target/metal-libraries-survey.txt`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;

use kiln::backend::MetalProgram;
use kiln::source::lower::{lower, LowerTarget, LoweredModule};
use kiln::LibraryLaunch;

use super::corpus::{files, CorpusFile};

/// How many times a file's remaining kernels are compiled again after a failure.
const ROUNDS: usize = 4;

/// One file's outcome on one target.
pub struct Outcome {
    /// Kernels in a unit that compiled.
    pub ok: usize,
    /// The first errors of each round that failed.
    pub errors: Vec<String>,
}

/// The program of a whole file that names no kernel (its unit wraps every entry).
fn whole(file: &CorpusFile) -> MetalProgram {
    file.library().program(&LibraryLaunch::threads("", 1usize, 1usize))
}

/// The CPU verdict on `module` with only `keep` of its entries.
fn cpu_round(program: &MetalProgram, module: &LoweredModule, keep: &[usize]) -> Result<(), String> {
    let mut m = module.clone();
    m.entries = keep.iter().map(|&i| module.entries[i].clone()).collect();
    let tu = kiln::backend::cpu::emit::translation_unit(program, &m).map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("kiln-survey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{}.cpp", program.kernel.replace(['/', '.', ':'], "_")));
    std::fs::write(&path, tu).map_err(|e| e.to_string())?;
    let out = Command::new(kiln::config::host_cxx())
        .args(["-std=c++17", "-fsyntax-only", "-w", "-fmax-errors=60", "-ftemplate-backtrace-limit=0"])
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The kept entries a CPU log names (`kiln/entries:N`: entry wrappers are four lines each).
fn cpu_blamed(log: &str, keep: &[usize]) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for (at, _) in log.match_indices("kiln/entries:") {
        let digits: String = log[at + 13..].chars().take_while(char::is_ascii_digit).collect();
        if let Ok(line) = digits.parse::<usize>() {
            if let Some(&i) = keep.get(line.saturating_sub(1) / 4) {
                out.insert(i);
            }
        }
    }
    out
}

/// The NVRTC verdict on `module` with only `keep` of its entries.
fn cuda_round(program: &MetalProgram, module: &LoweredModule, keep: &[usize]) -> Result<(), (String, String)> {
    let mut m = module.clone();
    m.entries = keep.iter().map(|&i| module.entries[i].clone()).collect();
    let source = kiln::backend::cuda::emit::emit(&m, &program.kernel, false, false).source;
    let opts = ["--gpu-architecture=sm_90", "-std=c++17", "-default-device", "--fdevice-syntax-only"];
    let text = std::ffi::CString::new(source.clone()).map_err(|e| (e.to_string(), String::new()))?;
    let prog = cudarc::nvrtc::result::create_program(&text, None).map_err(|e| (format!("{e:?}"), String::new()))?;
    // SAFETY: `prog` was created above and is destroyed once, after its log is read.
    let (ok, log) = unsafe {
        let ok = cudarc::nvrtc::result::compile_program(prog, &opts).is_ok();
        let log = cudarc::nvrtc::result::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        let _ = cudarc::nvrtc::result::destroy_program(prog);
        (ok, log)
    };
    if ok {
        Ok(())
    } else {
        Err((log, source))
    }
}

/// The kept entries an NVRTC log names: a line of `kiln-entries` inside one entry's wrapper.
fn cuda_blamed(log: &str, source: &str, keep: &[usize]) -> BTreeSet<usize> {
    // The first line of each wrapper, counted from the `#line 1 "kiln-entries"` marker.
    let mut starts = Vec::new();
    let mut line = None;
    for text in source.lines() {
        if text.starts_with("#line 1 \"kiln-entries\"") {
            line = Some(0usize);
            continue;
        }
        if let Some(l) = line.as_mut() {
            *l += 1;
            if text.starts_with("extern \"C\" __global__")
                || text.starts_with("__device__ __forceinline__ void kiln_entry_")
            {
                starts.push(*l);
            }
        }
    }
    let mut out = BTreeSet::new();
    let mut note = |n: usize| {
        let w = starts.partition_point(|&s| s <= n);
        if let Some(&i) = w.checked_sub(1).and_then(|w| keep.get(w)) {
            out.insert(i);
        }
    };
    for (at, _) in log.match_indices("kiln-entries(") {
        let digits: String = log[at + 13..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().into_iter().for_each(&mut note);
    }
    for (at, _) in log.match_indices(" of kiln-entries") {
        let before = &log[..at];
        let digits: String =
            before.chars().rev().take_while(char::is_ascii_digit).collect::<String>().chars().rev().collect();
        digits.parse().into_iter().for_each(&mut note);
    }
    out
}

/// Compiles the kernels of `module` in rounds, setting aside the ones each failure names.
fn rounds(n: usize, mut round: impl FnMut(&[usize]) -> Result<(), (String, BTreeSet<usize>)>) -> Outcome {
    let mut keep: Vec<usize> = (0..n).collect();
    let mut errors = Vec::new();
    for _ in 0..ROUNDS {
        if keep.is_empty() {
            break;
        }
        match round(&keep) {
            Ok(()) => return Outcome { ok: keep.len(), errors },
            Err((log, blamed)) => {
                errors.push(log);
                if blamed.is_empty() {
                    // A failure outside every kernel's instantiation: none of them compiles.
                    return Outcome { ok: 0, errors };
                }
                keep.retain(|i| !blamed.contains(i));
            }
        }
    }
    Outcome { ok: 0, errors }
}

/// One file's kernels through both targets (`nvrtc`: whether NVRTC is loaded).
pub fn survey_file(file: &CorpusFile, nvrtc: bool) -> (Result<usize, String>, Outcome, Outcome) {
    let program = whole(file);
    let translate = |target| lower(&program, target).map_err(|e| e.to_string());
    let (cpu_module, cuda_module) = match (translate(LowerTarget::Cpu), translate(LowerTarget::Cuda)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            let none = || Outcome { ok: 0, errors: vec![e.clone()] };
            return (Err(e.clone()), none(), none());
        }
    };
    let n = cpu_module.entries.len();
    let cpu = rounds(n, |keep| {
        cpu_round(&program, &cpu_module, keep).map_err(|log| {
            let blamed = cpu_blamed(&log, keep);
            (log, blamed)
        })
    });
    let cuda = if nvrtc {
        rounds(n, |keep| {
            cuda_round(&program, &cuda_module, keep).map_err(|(log, source)| {
                let blamed = cuda_blamed(&log, &source, keep);
                (log, blamed)
            })
        })
    } else {
        Outcome { ok: 0, errors: vec!["NVRTC is not loaded".into()] }
    };
    (Ok(n), cpu, cuda)
}

/// The first `n` error lines of a compiler log.
fn errors(log: &str, n: usize) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("error")).collect();
    for line in if lines.is_empty() { log.lines().collect() } else { lines }.into_iter().take(n) {
        let _ = writeln!(out, "      {}", line.chars().take(300).collect::<String>());
    }
    out
}

#[test]
#[ignore = "the whole corpus through both compilers: minutes (run with --ignored --nocapture)"]
fn survey() {
    let nvrtc = kiln::backend::cuda::nvrtc_version().is_ok();
    let filter = std::env::var("KILN_SURVEY").unwrap_or_default();
    let mut report = String::new();
    let mut totals: Vec<(&str, usize, usize, usize)> = Vec::new();
    for file in files().iter().filter(|f| filter.split(',').any(|part| f.label().contains(part))) {
        let (n, cpu, cuda) = survey_file(file, nvrtc);
        let total = *n.as_ref().unwrap_or(&0);
        let line = format!("{:48} kernels {:5}  cpu {:5}  nvrtc {:5}", file.label(), total, cpu.ok, cuda.ok);
        println!("{line}");
        let _ = writeln!(report, "{line}");
        if let Err(e) = &n {
            let _ = writeln!(report, "    translate: {}", e.lines().take(6).collect::<Vec<_>>().join("\n      "));
        }
        for (what, o) in [("cpu", &cpu), ("nvrtc", &cuda)] {
            if n.is_ok() && o.ok < total {
                let _ = write!(report, "    {what}:\n{}", o.errors.iter().map(|e| errors(e, 8)).collect::<String>());
            }
        }
        match totals.iter_mut().find(|t| t.0 == file.library) {
            Some(t) => {
                t.1 += total;
                t.2 += cpu.ok;
                t.3 += cuda.ok;
            }
            None => totals.push((file.library, total, cpu.ok, cuda.ok)),
        }
    }
    let _ = writeln!(report, "\nlibrary    kernels    cpu  nvrtc");
    for (library, total, cpu, cuda) in &totals {
        let _ = writeln!(report, "{library:8} {total:8} {cpu:6} {cuda:6}");
    }
    println!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/metal-libraries-survey.txt");
    let _ = std::fs::write(out, &report);
}
