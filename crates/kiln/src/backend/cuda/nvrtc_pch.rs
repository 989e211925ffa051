//! The CUDA prelude as an NVRTC precompiled header. Parsing the prelude is nine tenths of
//! NVRTC's time on a kernel, and every unit lowered from Metal starts with the same prelude
//! text (`backend::cuda::emit::shared_prelude`), so units are compiled as `#include "kiln_prelude.h"`
//! plus their own part, with the header precompiled.
//!
//! NVRTC's precompiled headers live at a fixed address of its PCH heap, so one file serves only
//! the process that made it: each process builds its own per option set, on a thread of its
//! own when its second unit is compiled (the units before the header is ready compile as
//! they did before, whole; a process that exits meanwhile waits for the build), in
//! `<cache>/cuda-pch/` (`cache_root`) under its process id; files of processes that are gone
//! are removed when a new one is made. A unit whose compile with the header fails because of
//! the header (a file removed meanwhile, say) compiles whole, and the header is not used again.

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};

use crate::backend::cache_root;
use crate::backend::cuda::emit::shared_prelude;
use crate::error::{Error, Result};

/// The name units include the prelude by.
const HEADER_NAME: &str = "kiln_prelude.h";

/// One option set's precompiled prelude: the file once built (`None` inside: it could not be),
/// and whether it proved unusable since.
#[derive(Default)]
struct Entry {
    file: OnceLock<Option<PathBuf>>,
    unusable: AtomicBool,
}

fn entries() -> &'static Mutex<HashMap<Vec<String>, Arc<Entry>>> {
    static ENTRIES: OnceLock<Mutex<HashMap<Vec<String>, Arc<Entry>>>> = OnceLock::new();
    ENTRIES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn entry(opts: &[String]) -> Arc<Entry> {
    let mut m = entries().lock().unwrap_or_else(|e| e.into_inner());
    m.entry(opts.to_vec()).or_default().clone()
}

/// The part of `source` after the shared prelude, when `source` starts with it and goes on with
/// a declaration (a directive there would move the point where the precompiled part ends).
pub(super) fn after_prelude(source: &str) -> Option<&str> {
    let rest = source.strip_prefix(shared_prelude())?;
    (!rest.trim_start().starts_with('#')).then_some(rest)
}

/// The precompiled prelude for `opts` when it is ready; otherwise `None`, and the first call
/// for `opts` starts building it on a thread of its own.
pub(super) fn ready(opts: &[String]) -> Option<PathBuf> {
    let e = entry(opts);
    if e.unusable.load(Ordering::Relaxed) {
        return None;
    }
    if let Some(file) = e.file.get() {
        return file.clone();
    }
    // Units asked for per option set; the build starts at the second, so a process that
    // compiles one kernel never pays for a header it would not use.
    static ASKED: OnceLock<Mutex<HashMap<Vec<String>, usize>>> = OnceLock::new();
    let asked = ASKED.get_or_init(Default::default);
    let nth = asked
        .lock()
        .map(|mut m| {
            let n = m.entry(opts.to_vec()).or_insert(0);
            *n += 1;
            *n
        })
        .unwrap_or(0);
    if nth == BUILD_AT_UNIT {
        let opts = opts.to_vec();
        let building = BuildUnderWay::start();
        std::thread::spawn(move || {
            let e = entry(&opts);
            e.file.get_or_init(|| build(&opts));
            drop(building);
        });
    }
    None
}

/// The unit of an option set whose compile starts building its precompiled prelude.
const BUILD_AT_UNIT: usize = 2;

/// Builds under way on their threads. The process waits for them when it exits: NVRTC's
/// static state is torn down by `exit`, under a build still running in it.
struct BuildUnderWay;

fn builds() -> &'static (Mutex<usize>, std::sync::Condvar) {
    static BUILDS: OnceLock<(Mutex<usize>, std::sync::Condvar)> = OnceLock::new();
    BUILDS.get_or_init(Default::default)
}

/// The process that started the builds: a child forked meanwhile inherits the count but not
/// the threads, and must not wait for them.
static BUILDING_PROCESS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn wait_for_builds() {
    if BUILDING_PROCESS.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    let (count, done) = builds();
    let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        n = done.wait(n).unwrap_or_else(|e| e.into_inner());
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

impl BuildUnderWay {
    fn start() -> Self {
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        // SAFETY: `atexit` stores a plain function pointer, called once by `exit`; the handler
        // only waits on a process-wide condition variable. Registered after NVRTC was loaded,
        // it runs before NVRTC's own exit handlers.
        REGISTERED.call_once(|| unsafe {
            atexit(wait_for_builds);
        });
        BUILDING_PROCESS.store(std::process::id(), Ordering::Relaxed);
        *builds().0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        BuildUnderWay
    }
}

impl Drop for BuildUnderWay {
    fn drop(&mut self) {
        let (count, done) = builds();
        let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        done.notify_all();
    }
}

/// The precompiled prelude for `opts`, built now if need be (waiting for a build under way);
/// `None` when NVRTC cannot make one. For the compile benchmark.
pub fn build_now(opts: &[String]) -> Option<PathBuf> {
    let e = entry(opts);
    e.file.get_or_init(|| build(opts)).clone()
}

/// Marks the precompiled prelude of `opts` as not to be used again.
pub(super) fn give_up(opts: &[String]) {
    entry(opts).unusable.store(true, Ordering::Relaxed);
}

/// A compile log without NVRTC's note that it used the precompiled header, and whether what
/// is left says the header could not be read or used.
pub(super) fn without_header_note(log: &str) -> (String, bool) {
    let kept: Vec<&str> = log.lines().filter(|l| !l.contains("using precompiled header file")).collect();
    let blamed = kept.iter().any(|l| l.contains("precompiled header") || l.contains("PCH"));
    (kept.join("\n"), blamed)
}

/// The headers (name, text) and main text of a unit compiled after the precompiled prelude.
pub(super) fn unit_after_prelude(rest: &str) -> (String, [(&'static str, &'static str); 1]) {
    (format!("#include \"{HEADER_NAME}\"\n{rest}"), [(HEADER_NAME, shared_prelude())])
}

fn build(opts: &[String]) -> Option<PathBuf> {
    cache_root::run(|root| build_in(&root.join("cuda-pch"), opts)).ok()
}

fn build_in(dir: &Path, opts: &[String]) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    remove_stale(dir);
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let file = dir.join(format!("{}-{}.pch", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let mut with = opts.to_vec();
    with.push(format!("--create-pch={}", file.display()));
    let (text, headers) = unit_after_prelude("extern \"C\" __global__ void kiln_prelude_probe() {}\n");
    let compiled = compile_with_headers(&text, "kiln_prelude_probe.cu", &headers, &with).is_ok_and(|(_, ok)| ok);
    let made = std::fs::metadata(&file).is_ok_and(|m| m.len() > 0);
    if compiled && made {
        return Ok(file);
    }
    let _ = std::fs::remove_file(&file);
    Err(Error::Compile { backend: "cuda", kernel: "prelude".into(), log: "NVRTC made no precompiled header".into() })
}

/// Removes the precompiled headers of processes that no longer run (Linux: `/proc/<pid>`).
fn remove_stale(dir: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(files) = std::fs::read_dir(dir) else { return };
    for f in files.flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_suffix(".pch").and_then(|n| n.split('-').next()) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(f.path());
        }
    }
}

/// One NVRTC compile of `text` named `name` with in-memory `headers`: the program (the caller
/// reads its log and output) and whether it compiled.
pub(super) fn compile_with_headers(
    text: &str,
    name: &str,
    headers: &[(&str, &str)],
    opts: &[String],
) -> Result<(Program, bool), String> {
    let src = CString::new(text).map_err(|_| "the generated source contains a NUL byte".to_string())?;
    let name = CString::new(name.replace('\0', "_")).map_err(|_| "bad kernel name".to_string())?;
    let texts: Vec<CString> = headers.iter().filter_map(|(_, t)| CString::new(*t).ok()).collect();
    let names: Vec<CString> = headers.iter().filter_map(|(n, _)| CString::new(*n).ok()).collect();
    if texts.len() != headers.len() || names.len() != headers.len() {
        return Err("a header contains a NUL byte".into());
    }
    let text_ptrs: Vec<*const c_char> = texts.iter().map(|t| t.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut prog: nvrtc_sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: the strings live until it returns and the
    // two arrays hold `headers.len()` entries each.
    unsafe {
        nvrtc_sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            headers.len() as i32,
            if headers.is_empty() { std::ptr::null() } else { text_ptrs.as_ptr() },
            if headers.is_empty() { std::ptr::null() } else { name_ptrs.as_ptr() },
        )
    }
    .result()
    .map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?;
    let program = Program(prog);
    // SAFETY: `prog` was just created and stays live until `program` drops.
    let compiled = unsafe { nvrtc::compile_program(prog, opts) }.is_ok();
    Ok((program, compiled))
}

/// An NVRTC program, destroyed when dropped.
pub(super) struct Program(nvrtc_sys::nvrtcProgram);

impl Program {
    pub(super) fn raw(&self) -> nvrtc_sys::nvrtcProgram {
        self.0
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program is live and not used after this.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}
