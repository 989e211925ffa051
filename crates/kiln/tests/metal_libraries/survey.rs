//! The survey: every kernel (instantiation) of every corpus file through the CPU translation
//! and NVRTC, each file compiled once whole (syntax and template instantiation only), with
//! the failures printed by file. `cargo test --test metal_libraries survey -- --ignored
//! --nocapture`; the report also goes to `target/metal-libraries-survey.txt`.

use std::fmt::Write as _;
use std::process::Command;

use kiln::backend::{cpu, cuda};
use kiln::LibraryLaunch;

use super::corpus::{files, CorpusFile};

/// One file's outcome.
pub struct FileReport {
    pub label: String,
    pub entries: Result<Vec<String>, String>,
    pub cpu: Result<(), String>,
    pub cuda: Result<(), String>,
}

/// The host compiler's verdict on the whole CPU unit of `file` (`-fsyntax-only`).
pub fn cpu_syntax(file: &CorpusFile, function: &str) -> Result<(), String> {
    let program = file.library().program(&LibraryLaunch::threads(function, 1usize, 1usize));
    let tu = cpu::translate(&program).map_err(|e| format!("translate: {e}"))?;
    let dir = std::env::temp_dir().join(format!("kiln-survey-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{}.cpp", file.label().replace(['/', '.'], "_")));
    std::fs::write(&path, tu).map_err(|e| e.to_string())?;
    let out = Command::new(kiln::config::host_cxx())
        .args(["-std=c++17", "-fsyntax-only", "-w", "-fmax-errors=40", "-ftemplate-backtrace-limit=4"])
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// NVRTC's verdict on the whole CUDA unit of `file` (`--fdevice-syntax-only`).
pub fn cuda_syntax(file: &CorpusFile, function: &str) -> Result<(), String> {
    let program = file.library().program(&LibraryLaunch::threads(function, 1usize, 1usize));
    let source = cuda::translate(&program).map_err(|e| format!("translate: {e}"))?;
    let opts = ["--gpu-architecture=sm_90", "-std=c++17", "-default-device", "--fdevice-syntax-only"];
    let text = std::ffi::CString::new(source).map_err(|e| e.to_string())?;
    let prog = cudarc::nvrtc::result::create_program(&text, None).map_err(|e| format!("{e:?}"))?;
    // SAFETY: `prog` was created above and is destroyed once, after its log is read.
    unsafe {
        let ok = cudarc::nvrtc::result::compile_program(prog, &opts);
        let log = cudarc::nvrtc::result::get_program_log(prog).map(|l| {
            let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        });
        let _ = cudarc::nvrtc::result::destroy_program(prog);
        match ok {
            Ok(()) => Ok(()),
            Err(_) => Err(log.unwrap_or_else(|e| format!("{e:?}"))),
        }
    }
}

pub fn survey_file(file: &CorpusFile, nvrtc: bool) -> FileReport {
    let entries = file.entries();
    let first = entries.as_ref().ok().and_then(|e| e.first().cloned());
    let (cpu, cuda) = match &first {
        Some(f) => (cpu_syntax(file, f), if nvrtc { cuda_syntax(file, f) } else { Err("NVRTC not loaded".into()) }),
        None => (Err("no entries".into()), Err("no entries".into())),
    };
    FileReport { label: file.label(), entries, cpu, cuda }
}

/// The first `n` error lines of a compiler log.
fn errors(log: &str, n: usize) -> String {
    let mut out = String::new();
    for line in log.lines().filter(|l| l.contains("error")).take(n) {
        let _ = writeln!(out, "      {}", line.chars().take(300).collect::<String>());
    }
    if out.is_empty() {
        for line in log.lines().take(n) {
            let _ = writeln!(out, "      {}", line.chars().take(300).collect::<String>());
        }
    }
    out
}

#[test]
#[ignore = "the whole corpus through both compilers: minutes (run with --ignored --nocapture)"]
fn survey() {
    let nvrtc = kiln::backend::cuda::nvrtc_version().is_ok();
    let filter = std::env::var("KILN_SURVEY").unwrap_or_default();
    let mut report = String::new();
    for file in files().iter().filter(|f| f.label().contains(&filter)) {
        let r = survey_file(file, nvrtc);
        let n = r.entries.as_ref().map_or(0, Vec::len);
        let mark = |x: &Result<(), String>| if x.is_ok() { "ok" } else { "FAIL" };
        let _ = writeln!(report, "{:48} kernels {:5}  cpu {:4}  nvrtc {:4}", r.label, n, mark(&r.cpu), mark(&r.cuda));
        if let Err(e) = &r.entries {
            let _ = writeln!(report, "    translate: {}", e.lines().take(6).collect::<Vec<_>>().join("\n      "));
        }
        if let Err(e) = &r.cpu {
            let _ = write!(report, "    cpu:\n{}", errors(e, 12));
        }
        if let Err(e) = &r.cuda {
            let _ = write!(report, "    nvrtc:\n{}", errors(e, 12));
        }
        eprintln!("{}", r.label);
    }
    println!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/metal-libraries-survey.txt");
    let _ = std::fs::write(out, &report);
}
