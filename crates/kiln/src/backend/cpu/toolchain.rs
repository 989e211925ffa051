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
    // The probes run side by side: a process's first kernel waits for the slowest, not the sum.
    let (stack_probes, native_target, coroutines) = std::thread::scope(|s| {
        // An empty translation unit compiled with the flag; warnings are errors so a compiler
        // that only ignores it (with a warning) counts as not supporting it.
        let probes = s.spawn(|| {
            Command::new(cxx)
                .args(["-Werror", STACK_PROBES, "-x", "c++", "-c", "-o", "/dev/null", "/dev/null"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        let native = s.spawn(|| native_target(cxx));
        let coroutines = has_coroutines(cxx);
        (probes.join().unwrap_or(false), native.join().unwrap_or(None), coroutines)
    });
    let c = HostCompiler { identity, stack_probes, native_target, coroutines };
    if let Ok(mut m) = seen.lock() {
        m.insert(cxx.to_string(), c.clone());
    }
    Ok(c)
}

/// Whether `cxx` compiles, as C++17 with [`COROUTINES`] (warnings as errors), coroutines built as
/// the prelude builds its threads: where it does not, kernels keep fibers (the prelude compiles
/// its coroutine part only where the compiler defines `__cpp_impl_coroutine`).
fn has_coroutines(cxx: &str) -> bool {
    use std::io::Write;
    // What the prelude's coroutine threads use (prelude/cpu/runtime.h): a promise built from the
    // coroutine's arguments and allocating its frame from them, with no exceptions from the
    // allocation, an awaiter taking the promise's handle, a call bound in a lambda with its
    // arguments captured as a pack, `co_await` inside an expression, `co_return`.
    const PROBE: &str = r#"#include <coroutine>
        #include <stddef.h>
        struct Args { int* slot; };
        inline int* pick(const Args& a, int*) { return a.slot; }
        template <class T> inline int* pick(const T&, int* p) { return p; }
        template <class... A> inline int* slot_of(const A&... a) { int* p = nullptr; ((p = pick(a, p)), ...); return p; }
        alignas(64) static char arena[4096];
        struct Task {
          struct promise_type {
            int* slot;
            template <class... A> explicit promise_type(const A&... a) : slot(slot_of(a...)) {}
            Task get_return_object() noexcept { return Task{std::coroutine_handle<promise_type>::from_promise(*this).address()}; }
            static Task get_return_object_on_allocation_failure() noexcept { return Task{nullptr}; }
            template <class... A> static void* operator new(size_t n, const A&...) noexcept { return n <= sizeof arena ? arena : nullptr; }
            static void operator delete(void*) noexcept {}
            std::suspend_always initial_suspend() noexcept { return {}; }
            struct Final {
              bool await_ready() const noexcept { return false; }
              void await_suspend(std::coroutine_handle<promise_type> h) const noexcept { *h.promise().slot = 3; }
              void await_resume() const noexcept {}
            };
            Final final_suspend() noexcept { return {}; }
            void return_void() noexcept {}
            void unhandled_exception() { throw; }
          };
          void* frame;
        };
        template <class F> struct Step {
          F f;
          bool await_ready() const noexcept { return false; }
          bool await_suspend(std::coroutine_handle<Task::promise_type> h) { *h.promise().slot = 1; f(); return true; }
          auto await_resume() { return f(); }
        };
        template <class F> struct Call {
          F f;
          template <class... A> auto operator()(A... a) const { auto bound = [f = f, a...]() { return f(a...); }; return Step<decltype(bound)>{bound}; }
        };
        template <class F> inline Call<F> call(F f) { return Call<F>{f}; }
        inline float twice(float v) { return v * 2.0f; }
        Task k(float* out, unsigned i, Args args) {
          if (i > 9) co_return;
          out[i] = 1.0f + co_await call([](auto... a) { return twice(a...); })(out[i]);
        }
        void run(float* out, int* slot) { std::coroutine_handle<>::from_address(k(out, 1, Args{slot}).frame).resume(); }
    "#;
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
