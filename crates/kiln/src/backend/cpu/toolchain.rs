//! The host C++ compiler: what kiln knows of it (its identity and whether it has stack probes,
//! examined once per process) and the flags kernels and the precompiled prelude are built with.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::program::MathMode;

/// What kiln needs to know of a host compiler: the first line of `cxx --version`, whether it
/// accepts `-fstack-clash-protection`, and what `-march=native` means on this machine (all but
/// the probes part of the cache keys, through [`HostCompiler::cache_identity`]).
#[derive(Clone, Debug)]
pub struct HostCompiler {
    /// The first line of `--version`.
    pub identity: String,
    /// Frames larger than a page are probed page by page from the top, so a kernel whose
    /// private arrays outgrow its fiber stack touches the guard below it first instead of
    /// writing into whatever lies further down.
    pub stack_probes: bool,
    /// The compiler's own lines for `-march=native` (the CPU and instruction sets it targets on
    /// this machine), or `None` where it has no such flag: kernels are then built for the
    /// compiler's default target.
    pub native_target: Option<String>,
    /// Whether the compiler has C++ coroutines in C++17 (GCC's `-fcoroutines`): kernels whose
    /// barriers and SIMD-group calls lie in the kernel function itself then run their threads
    /// as coroutines instead of fibers (prelude/cpu/runtime.h).
    pub coroutines: bool,
}

impl HostCompiler {
    /// What a cached build depends on besides its source and flags: the compiler and the
    /// machine `-march=native` targets, so that a cache shared between machines never hands one
    /// a library built for instructions it lacks.
    pub fn cache_identity(&self) -> String {
        match &self.native_target {
            Some(target) => format!("{}\0{target}", self.identity),
            None => self.identity.clone(),
        }
    }
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
    let c = HostCompiler { identity, stack_probes, native_target: native_target(cxx), coroutines: has_coroutines(cxx) };
    if let Ok(mut m) = seen.lock() {
        m.insert(cxx.to_string(), c.clone());
    }
    Ok(c)
}

/// Whether `cxx` compiles a coroutine as C++17 with [`COROUTINES`] (warnings as errors).
fn has_coroutines(cxx: &str) -> bool {
    use std::io::Write;
    const PROBE: &str = "#include <coroutine>\n\
        struct T { struct promise_type { T get_return_object() { return {}; } std::suspend_always initial_suspend() noexcept { return {}; }\n\
        std::suspend_always final_suspend() noexcept { return {}; } void return_void() {} void unhandled_exception() {} }; };\n\
        T f() { co_await std::suspend_always{}; }\n";
    let child = Command::new(cxx)
        .args(["-std=c++17", COROUTINES, "-Werror", "-fsyntax-only", "-x", "c++", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return false };
    let written = child.stdin.take().is_some_and(|mut stdin| stdin.write_all(PROBE.as_bytes()).is_ok());
    child.wait().is_ok_and(|status| status.success()) && written
}

const COROUTINES: &str = "-fcoroutines";
const STACK_PROBES: &str = "-fstack-clash-protection";
const NATIVE: &str = "-march=native";

/// What `-march=native` means to `cxx` on this machine: the lines of its verbose preprocessor
/// run that name the compiler proper (GCC's `cc1plus ... -march=rocketlake -mavx2 ...`, clang's
/// `-cc1 ... -target-cpu ...`), or `None` where the flag is refused.
fn native_target(cxx: &str) -> Option<String> {
    let out = Command::new(cxx)
        .args(["-Werror", NATIVE, "-E", "-v", "-x", "c++", "-o", "/dev/null", "/dev/null"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("cc1")).collect();
    Some(lines.join("\n"))
}

/// Compiler flags for a math mode. Safe keeps IEEE semantics; only fast defines
/// `__FAST_MATH__` (via -ffast-math). Inline functions are hidden so the runtime's calls to
/// each other stay direct instead of going through the PLT. Stack probes are added where the
/// compiler has them. Kernels are built for this machine's CPU (`-march=native`: the vector
/// width of its loops), never contracting `a * b + c` into a fused multiply-add in any mode, so
/// that a kernel's results do not depend on whether the CPU has one, and with floating-point
/// operations taken not to trap (kiln enables no floating-point trap), which lets selects
/// between them become vector blends; neither changes a result.
pub fn flags(mode: MathMode, compiler: &HostCompiler) -> Vec<&'static str> {
    let mut f =
        vec!["-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility-inlines-hidden", "-fno-strict-aliasing", "-w"];
    if compiler.stack_probes {
        f.push(STACK_PROBES);
    }
    if compiler.native_target.is_some() {
        f.push(NATIVE);
    }
    if compiler.coroutines {
        f.push(COROUTINES);
    }
    match mode {
        MathMode::Safe => f.push("-fno-fast-math"),
        MathMode::Relaxed => f.extend(["-fno-math-errno", "-fassociative-math", "-fno-signed-zeros"]),
        MathMode::Fast => f.push("-ffast-math"),
    }
    // Last: -fno-fast-math would turn trapping on again, clang's -ffast-math contraction.
    f.extend(["-fno-trapping-math", "-ffp-contract=off"]);
    f
}
