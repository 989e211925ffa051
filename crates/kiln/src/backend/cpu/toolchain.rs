//! The host C++ compiler: what kiln knows of it (its identity and whether it has stack probes,
//! examined once per process) and the flags kernels and the precompiled prelude are built with.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::program::MathMode;

/// What kiln needs to know of a host compiler: the first line of `cxx --version` (part of the
/// cache key) and whether it accepts `-fstack-clash-protection`.
#[derive(Clone, Debug)]
pub struct HostCompiler {
    /// The first line of `--version`.
    pub identity: String,
    /// Frames larger than a page are probed page by page from the top, so a kernel whose
    /// private arrays outgrow its fiber stack touches the guard below it first instead of
    /// writing into whatever lies further down.
    pub stack_probes: bool,
}

/// The compiler `cxx`, examined once per process; a compiler that cannot run makes the backend
/// unavailable.
pub fn host_compiler(cxx: &str) -> Result<HostCompiler> {
    static SEEN: OnceLock<Mutex<HashMap<String, HostCompiler>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(c) = seen.lock().ok().and_then(|m| m.get(cxx).cloned()) {
        return Ok(c);
    }
    let out = Command::new(cxx).arg("--version").output().map_err(|e| Error::BackendUnavailable {
        backend: "cpu",
        reason: format!("the host C++ compiler `{cxx}` cannot be run ({e}); set CXX to a C++17 compiler"),
    })?;
    if !out.status.success() {
        return Err(Error::BackendUnavailable {
            backend: "cpu",
            reason: format!("`{cxx} --version` failed; set CXX to a C++17 compiler"),
        });
    }
    let identity = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").to_string();
    // An empty translation unit compiled with the flag; warnings are errors so a compiler that
    // only ignores it (with a warning) counts as not supporting it.
    let stack_probes = Command::new(cxx)
        .args(["-Werror", STACK_PROBES, "-x", "c++", "-c", "-o", "/dev/null", "/dev/null"])
        .output()
        .is_ok_and(|o| o.status.success());
    let c = HostCompiler { identity, stack_probes };
    if let Ok(mut m) = seen.lock() {
        m.insert(cxx.to_string(), c.clone());
    }
    Ok(c)
}

const STACK_PROBES: &str = "-fstack-clash-protection";

/// Compiler flags for a math mode. Safe keeps IEEE semantics; only fast defines
/// `__FAST_MATH__` (via -ffast-math). Inline functions are hidden so the runtime's calls to
/// each other stay direct instead of going through the PLT. Stack probes are added where the
/// compiler has them.
pub fn flags(mode: MathMode, compiler: &HostCompiler) -> Vec<&'static str> {
    let mut f =
        vec!["-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility-inlines-hidden", "-fno-strict-aliasing", "-w"];
    if compiler.stack_probes {
        f.push(STACK_PROBES);
    }
    match mode {
        MathMode::Safe => f.extend(["-fno-fast-math", "-ffp-contract=off"]),
        MathMode::Relaxed => {
            f.extend(["-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"])
        }
        MathMode::Fast => f.push("-ffast-math"),
    }
    f
}
