//! Compiling a CPU translation unit with the host C++ compiler into a shared library, cached on
//! disk under `<cache>/cpu/<sha256>/` (`cache_root`: the key covers the whole translation unit,
//! the flags and the compiler's identity) and in memory once loaded. Sources, objects and
//! libraries on their way are files of the build's own, removed whatever happens.
//!
//! A cached library is used only when its manifest vouches for it (`backend::disk_cache`);
//! anything else is removed and built again. What is loaded is a private copy of the bytes that
//! were checked, so a cache file damaged later (truncated, overwritten) cannot reach a library
//! this process has mapped.
//!
//! The prelude every translation unit starts with comes precompiled where the compiler can
//! (`pch`); the library is the same either way, so the key does not depend on it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use super::abi::{CheckedFn, ReleaseFn, RunFn};
use super::built_once::BuiltOnce;
use super::pch;
use super::scheduler_object::{self, SchedulerObject};
use super::toolchain::{flags, host_compiler, HostCompiler};
use crate::backend::cpu::emit::{
    without_scheduler, ABI_VERSION, COROUTINES_OFF, COROUTINES_ON, REGIONS_OFF, REGIONS_ON, REGION_FORM_FILE,
};
use crate::backend::{cache_root, disk_cache};
use crate::error::{Error, Result};
use crate::program::MathMode;

/// A loaded kernel library. Libraries are never unloaded: kernels may be called again, other
/// threads could still be running their code, and their fault handlers stay chained.
pub struct Compiled {
    _lib: libloading::Library,
    pub run: RunFn,
    /// Whether the kernel's threads run as fibers (barriers or SIMD collectives), so each
    /// `run` call needs a stack set.
    pub cooperative: bool,
    pub release_stacks: ReleaseFn,
    pub checked_begin: Option<CheckedFn>,
    pub checked_end: Option<CheckedFn>,
    /// `kiln_log_drain`, absent from libraries built before kernels could log.
    pub log_drain: Option<super::kernel_log::LogDrainFn>,
}

impl Compiled {
    /// The library's export `name` (NUL-terminated), if it has one.
    ///
    /// # Safety
    /// `T` must be the export's true type.
    pub(super) unsafe fn symbol<T: Copy>(&self, name: &[u8]) -> Option<T> {
        // SAFETY: the caller vouches for the type.
        unsafe { self._lib.get::<T>(name) }.ok().map(|s| *s)
    }
}

fn loaded() -> &'static Mutex<HashMap<String, Arc<Compiled>>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Arc<Compiled>>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles (or finds) the library for `tu`, which starts with `prelude` (may be empty).
pub fn compile(cxx: &str, kernel: &str, tu: &str, prelude: &str, mode: MathMode) -> Result<Arc<Compiled>> {
    let compiler = host_compiler(cxx)?;
    let flags = flags(mode, &compiler);
    let key = library_key(tu, &flags, cxx, &compiler);
    if let Some(c) = loaded().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(c);
    }
    // One build of a key at a time in this process; the others wait for it and load its result.
    let gate = build_gate(&key);
    let _building = gate.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = loaded().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(c);
    }
    let unit = Unit { cxx, compiler: &compiler, kernel, tu, prelude, shortcuts: shortcuts_on_this_thread() };
    let compiled = Arc::new(load_or_build(&unit, &flags, &key)?);
    if let Ok(mut m) = loaded().lock() {
        m.entry(key).or_insert_with(|| compiled.clone());
    }
    Ok(compiled)
}

/// As `compile`, past the in-memory cache: the library from the disk cache, else built with
/// `shortcuts` (the compile benchmark's disk-hit and slower-path times).
pub(crate) fn compile_past_memory(
    cxx: &str,
    kernel: &str,
    tu: &str,
    prelude: &str,
    mode: MathMode,
    shortcuts: Shortcuts,
) -> Result<()> {
    let compiler = host_compiler(cxx)?;
    let flags = flags(mode, &compiler);
    let key = library_key(tu, &flags, cxx, &compiler);
    load_or_build(&Unit { cxx, compiler: &compiler, kernel, tu, prelude, shortcuts }, &flags, &key).map(|_| ())
}

#[cfg(test)]
thread_local! {
    static TEST_SHORTCUTS: std::cell::Cell<Shortcuts> = const { std::cell::Cell::new(Shortcuts::ALL) };
}

/// Runs `f` with the libraries this thread builds compiled with `shortcuts`, for tests that
/// compare the ways of building.
#[cfg(test)]
pub fn with_shortcuts<R>(shortcuts: Shortcuts, f: impl FnOnce() -> R) -> R {
    let before = TEST_SHORTCUTS.with(|s| s.replace(shortcuts));
    let out = f();
    TEST_SHORTCUTS.with(|s| s.set(before));
    out
}

fn shortcuts_on_this_thread() -> Shortcuts {
    #[cfg(test)]
    return TEST_SHORTCUTS.with(|s| s.get());
    #[cfg(not(test))]
    Shortcuts::ALL
}

/// Compiles a one-function C++ file with the flags of `mode` and `linker`: the floor under any
/// compile with this compiler, which the compile benchmark divides by.
pub(crate) fn compile_trivial(cxx: &str, mode: MathMode, linker: Option<&str>) -> Result<()> {
    let compiler = host_compiler(cxx)?;
    let dir = std::env::temp_dir();
    let cpp = disk_cache::Scratch::new(&dir, "kiln-trivial", "cpp");
    let so = disk_cache::Scratch::new(&dir, "kiln-trivial", "so");
    std::fs::write(cpp.path(), "extern \"C\" int kiln_trivial(int x) { return x + 1; }\n")
        .map_err(|e| Error::io(cpp.path(), e))?;
    let out =
        Command::new(cxx).args(flags(mode, &compiler)).args(linker).arg("-o").arg(so.path()).arg(cpp.path()).output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(Error::Compile {
            backend: "cpu",
            kernel: "trivial".into(),
            log: String::from_utf8_lossy(&o.stderr).into_owned(),
        }),
        Err(e) => Err(Error::BackendUnavailable { backend: "cpu", reason: format!("cannot run `{cxx}`: {e}") }),
    }
}

/// The scheduler object kernels of `prelude` link with `mode`'s flags (built if needed), for
/// the compile benchmark: `None` when the compiler cannot have one.
pub(crate) fn scheduler_object_for(cxx: &str, prelude: &str, mode: MathMode) -> Result<Option<SchedulerObject>> {
    let compiler = host_compiler(cxx)?;
    let flags = flags(mode, &compiler);
    let pch = pch::prepare(cxx, &compiler, &flags, prelude);
    Ok(scheduler_object::prepare(cxx, &compiler, &flags, prelude, pch.as_ref()))
}

/// The library of `key` from the disk cache when a checked entry is there (one that fails to
/// load is removed), else built and stored.
fn load_or_build(unit: &Unit<'_>, flags: &[&str], key: &str) -> Result<Compiled> {
    LIBRARIES_OPENED.with(|n| n.set(n.get() + 1));
    let kernel = unit.kernel;
    let so = library_dir(&cache_root::dir(), key).join("kernel.so");
    if let Some(image) = disk_cache::load_verified(&so, key) {
        match load_image(kernel, so.parent().unwrap_or(Path::new(".")), &image) {
            Ok(c) => return Ok(c),
            Err(_) => disk_cache::remove(&so),
        }
    }
    let image = cache_root::run(|root| build(unit, flags, &library_dir(root, key)))?;
    // The disk cache only saves time: a library that cannot be stored anywhere still runs.
    let _ = cache_root::run(|root| {
        let dir = library_dir(root, key);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let cpp = dir.join("kernel.cpp");
        disk_cache::write_atomically(&cpp, kept_source(unit).as_bytes()).map_err(|e| Error::io(&cpp, e))?;
        let so = dir.join("kernel.so");
        disk_cache::store(&so, key, &image).map_err(|e| Error::io(&so, e))
    });
    load_image(kernel, &library_dir(&cache_root::dir(), key), &image)
}

thread_local! {
    static LIBRARIES_OPENED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static BUILT_WITH_FIBERS_INSTEAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static BUILT_WITHOUT_REGIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static LINKED_WITH_SCHEDULER_OBJECT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
/// How many libraries this thread has built linked with the scheduler object.
pub fn linked_with_scheduler_object_on_this_thread() -> u64 {
    LINKED_WITH_SCHEDULER_OBJECT.with(|n| n.get())
}

#[cfg(test)]
/// How many units whose kernels the compiler refused as coroutines this thread has built with
/// fibers instead.
pub fn built_with_fibers_instead_on_this_thread() -> u64 {
    BUILT_WITH_FIBERS_INSTEAD.with(|n| n.get())
}

#[cfg(test)]
/// How many units whose kernels' region forms the compiler refused this thread has built
/// without them.
pub fn built_without_regions_on_this_thread() -> u64 {
    BUILT_WITHOUT_REGIONS.with(|n| n.get())
}

#[cfg(test)]
/// How many libraries this thread has had to load from the disk cache or build, for tests
/// that check a kernel was ready in memory.
pub fn libraries_opened_on_this_thread() -> u64 {
    LIBRARIES_OPENED.with(|n| n.get())
}

/// The cache key of a library: everything that goes into it.
fn library_key(tu: &str, flags: &[&str], cxx: &str, compiler: &HostCompiler) -> String {
    let mut h = Sha256::new();
    h.update(tu.as_bytes());
    h.update(flags.join(" ").as_bytes());
    h.update(cxx.as_bytes());
    h.update(compiler.cache_identity().as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn build_gate(key: &str) -> Arc<Mutex<()>> {
    static LIBRARIES: LazyLock<BuiltOnce<()>> = LazyLock::new(BuiltOnce::new);
    LIBRARIES.gate(key)
}

/// Where the library of `key` lives in the cache directory `root`.
fn library_dir(root: &Path, key: &str) -> PathBuf {
    root.join("cpu").join(key)
}

/// What a library is compiled from.
struct Unit<'a> {
    cxx: &'a str,
    compiler: &'a HostCompiler,
    kernel: &'a str,
    /// The whole translation unit.
    tu: &'a str,
    /// The prefix of `tu` that may come precompiled (empty: none).
    prelude: &'a str,
    shortcuts: Shortcuts,
}

/// How a unit is compiled: its prelude precompiled, the scheduler linked as an object, each
/// where that can be had (`Shortcuts::ALL`), or everything inline (`NONE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shortcuts {
    pub precompiled_prelude: bool,
    pub scheduler_object: bool,
}

impl Shortcuts {
    pub const ALL: Shortcuts = Shortcuts { precompiled_prelude: true, scheduler_object: true };
    #[cfg(test)]
    pub const NONE: Shortcuts = Shortcuts { precompiled_prelude: false, scheduler_object: false };
}

/// Compiles the unit (see `build_as_written`). A unit the compiler refuses for its kernels'
/// region forms alone (`lower::regions`: a kept variable of a type the record cannot hold, say;
/// every error on a line of `REGION_FORM_FILE`) is built again without them; one it refuses
/// as coroutines (GCC does not take `co_await` everywhere an expression may stand) is built
/// again with fibers (and without region forms, which need coroutines), so a kernel that does
/// not compile at all is compiled twice. Its text is otherwise the same.
fn build(unit: &Unit<'_>, flags: &[&str], dir: &Path) -> Result<Vec<u8>> {
    let mut tu = std::borrow::Cow::Borrowed(unit.tu);
    let mut result = build_as_written(unit, flags, dir);
    if let (Err(Error::Compile { log, .. }), true) = (&result, tu.contains(REGIONS_ON)) {
        let errors: Vec<&str> = log.lines().filter(|l| l.contains(" error:")).collect();
        let region_form_only = !errors.is_empty() && errors.iter().all(|l| l.contains(REGION_FORM_FILE));
        BUILT_WITHOUT_REGIONS.with(|n| n.set(n.get() + 1));
        tu = std::borrow::Cow::Owned(tu.replacen(REGIONS_ON, REGIONS_OFF, 1));
        if region_form_only {
            result = build_as_written(&Unit { tu: &tu, ..*unit }, flags, dir);
        }
    }
    if matches!(result, Err(Error::Compile { .. })) && tu.contains(COROUTINES_ON) {
        BUILT_WITH_FIBERS_INSTEAD.with(|n| n.set(n.get() + 1));
        let fibers = tu.replacen(COROUTINES_ON, COROUTINES_OFF, 1);
        result = build_as_written(&Unit { tu: &fibers, ..*unit }, flags, dir);
    }
    result
}

/// Compiles the unit, with its prelude precompiled and its scheduler linked as an object where
/// those can be had, and returns the library's bytes. A failure with a precompiled prelude that
/// no longer checks out is retried with everything inline.
fn build_as_written(unit: &Unit<'_>, flags: &[&str], dir: &Path) -> Result<Vec<u8>> {
    let shortcuts = unit.shortcuts;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let after_prelude = unit.tu.strip_prefix(unit.prelude).filter(|_| !unit.prelude.is_empty());
    let pch = after_prelude
        .filter(|_| shortcuts.precompiled_prelude)
        .and_then(|_| pch::prepare(unit.cxx, unit.compiler, flags, unit.prelude));
    let scheduler = after_prelude
        .filter(|_| shortcuts.scheduler_object)
        .and_then(|_| scheduler_object::prepare(unit.cxx, unit.compiler, flags, unit.prelude, pch.as_ref()));
    let source = match (&pch, after_prelude) {
        (Some(_), Some(rest)) => rest,
        _ => unit.tu,
    };
    let linked = scheduler.as_ref().and_then(|s| Some((without_scheduler(source)?, s)));
    let image = match &linked {
        Some((source, object)) => build_source(unit, flags, dir, source, pch.as_ref(), Some(object)),
        None => build_source(unit, flags, dir, source, pch.as_ref(), None),
    };
    let image = match (image, &pch) {
        (Err(Error::Compile { .. }), Some(p)) if !pch::still_sound(p) => {
            build_source(unit, flags, dir, unit.tu, None, None)
        }
        (other, _) => other,
    }?;
    Ok(image)
}

/// The kernel's part of the unit, kept beside its library for whoever wants to read it; the
/// prelude, the same for every kernel, would make most of the cache's size.
fn kept_source(unit: &Unit<'_>) -> String {
    match unit.tu.strip_prefix(unit.prelude).filter(|_| !unit.prelude.is_empty()) {
        Some(rest) => format!("// After the CPU prelude (`kiln translate --emit cpu` prints the whole unit).\n{rest}"),
        None => unit.tu.to_string(),
    }
}

/// Compiles `source` (after `-include` of the prepared prelude, if any; linked with the
/// scheduler object, if any) and returns the library's bytes.
fn build_source(
    unit: &Unit<'_>,
    flags: &[&str],
    dir: &Path,
    source: &str,
    prelude: Option<&pch::PreparedPrelude>,
    scheduler: Option<&SchedulerObject>,
) -> Result<Vec<u8>> {
    let (cxx, kernel) = (unit.cxx, unit.kernel);
    // Source, object and library under names of this build alone: another thread or process
    // building the same key never reads a half-written file.
    let cpp = disk_cache::Scratch::new(dir, "kernel", "cpp");
    let tmp = disk_cache::Scratch::new(dir, "kernel", "so");
    let object = disk_cache::Scratch::new(dir, "kernel", "scheduler.o");
    if let Some(s) = scheduler {
        std::fs::write(object.path(), &*s.image).map_err(|e| Error::io(object.path(), e))?;
    }
    std::fs::write(cpp.path(), source).map_err(|e| Error::io(cpp.path(), e))?;
    let mut command = Command::new(cxx);
    command.args(flags);
    if let Some(p) = prelude {
        command.arg("-include").arg(&p.header);
    }
    command.arg("-o").arg(tmp.path()).arg(cpp.path());
    if let Some(s) = scheduler {
        command.args(s.linker).arg(object.path());
    }
    let out = match command.output() {
        Ok(out) => out,
        Err(e) => {
            return Err(Error::BackendUnavailable { backend: "cpu", reason: format!("cannot run `{cxx}`: {e}") });
        }
    };
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr);
        // A full disk is the directory's failure, not the kernel's: the caller falls back.
        if let Some(e) = cache_root::compiler_could_not_write(&log, tmp.path()) {
            return Err(e);
        }
        let mut log = map_log(&log, cpp.path());
        if let Some(p) = prelude {
            log = log.replace(&*p.header.to_string_lossy(), "kiln/prelude.h");
        }
        return Err(Error::Compile { backend: "cpu", kernel: kernel.to_string(), log });
    }
    if scheduler.is_some() {
        LINKED_WITH_SCHEDULER_OBJECT.with(|n| n.set(n.get() + 1));
    }
    std::fs::read(tmp.path()).map_err(|e| Error::io(tmp.path(), e))
}

/// Loads `image` from a file of this process's own (in `dir`, else the temporary directory),
/// removed once loaded: the mapping then belongs to this process alone. A cache directory that
/// cannot take the copy (read-only, say) is not a reason to leave it: the copy is no entry.
fn load_image(kernel: &str, dir: &Path, image: &[u8]) -> Result<Compiled> {
    let write = |dir: &Path, stem: &str| {
        let file = disk_cache::Scratch::new(dir, stem, "loading.so");
        std::fs::write(file.path(), image).map(|()| file).map_err(|e| Error::io(dir, e))
    };
    let file = match write(dir, "kernel") {
        Ok(file) => file,
        Err(_) => write(&std::env::temp_dir(), "kiln-kernel")?,
    };
    load(kernel, file.path())
}

/// Keeps the compiler's messages about the user's file first and drops the noise about the
/// generated parts; the `#line` directives already put the user's line numbers in them.
fn map_log(log: &str, cpp: &Path) -> String {
    let cpp = cpp.display().to_string();
    let lines: Vec<String> = log.lines().map(|l| l.replace(&cpp, "<translation unit>")).collect();
    let errors: Vec<&String> = lines.iter().filter(|l| l.contains("error")).collect();
    let mut text = if errors.is_empty() {
        lines.join("\n")
    } else {
        errors.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    };
    if text.len() > MAX_LOG_BYTES {
        // At a character boundary: GCC quotes names with U+2018 and U+2019, three bytes each.
        let cut = (0..=MAX_LOG_BYTES).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str("\n...");
    }
    text
}

/// The most bytes of the compiler's messages an error keeps.
const MAX_LOG_BYTES: usize = 8000;

pub(super) fn load(kernel: &str, so: &Path) -> Result<Compiled> {
    let fault = |msg: String| Error::Driver { backend: "cpu", kernel: kernel.to_string(), msg };
    // SAFETY: the library was compiled by us from a translation unit whose only static
    // initialisers are trivial thread-locals; loading it runs no user code.
    // Every symbol is bound now: one the unit declares but never defines (a specialisation
    // the translation left out, say) is this error, not a process killed at its first call.
    #[cfg(unix)]
    let opened = unsafe {
        libloading::os::unix::Library::open(Some(so), libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL)
    }
    .map(libloading::Library::from);
    #[cfg(not(unix))]
    let opened = unsafe { libloading::Library::new(so) };
    let lib = opened.map_err(|e| fault(format!("cannot load {}: {e}", so.display())))?;
    // SAFETY: `kiln_run` is defined by every translation unit with exactly the RunFn signature.
    let run: RunFn = unsafe { lib.get::<RunFn>(b"kiln_run\0") }
        .map(|s| *s)
        .map_err(|e| fault(format!("{} has no kiln_run: {e}", so.display())))?;
    let int_of = |name: &[u8]| -> Option<i32> {
        // SAFETY: `kiln_abi_version` and `kiln_cooperative` take nothing and return an int.
        let f = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(name) }.ok()?;
        // SAFETY: a function of that signature, which only returns a constant.
        Some(unsafe { f() })
    };
    let abi = int_of(b"kiln_abi_version\0").unwrap_or(0);
    if abi != ABI_VERSION {
        return Err(fault(format!("{} has ABI version {abi}, not {ABI_VERSION}", so.display())));
    }
    let cooperative =
        int_of(b"kiln_cooperative\0").ok_or_else(|| fault(format!("{} has no kiln_cooperative", so.display())))? != 0;
    // SAFETY: `kiln_release_stacks` has exactly the ReleaseFn signature.
    let release_stacks: ReleaseFn = unsafe { lib.get::<ReleaseFn>(b"kiln_release_stacks\0") }
        .map(|s| *s)
        .map_err(|e| fault(format!("{} has no kiln_release_stacks: {e}", so.display())))?;
    // SAFETY: both symbols, where present, have exactly the CheckedFn signature.
    let checked_begin = unsafe { lib.get::<CheckedFn>(b"kiln_checked_begin\0") }.ok().map(|s| *s);
    // SAFETY: as above.
    let checked_end = unsafe { lib.get::<CheckedFn>(b"kiln_checked_end\0") }.ok().map(|s| *s);
    // SAFETY: where present, `kiln_log_drain` has exactly the LogDrainFn signature.
    let log_drain = unsafe { lib.get::<super::kernel_log::LogDrainFn>(b"kiln_log_drain\0") }.ok().map(|s| *s);
    Ok(Compiled { _lib: lib, run, cooperative, release_stacks, checked_begin, checked_end, log_drain })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    /// A translation unit with the exports `load` checks, made unique by `tag`.
    fn minimal_tu(tag: u64) -> String {
        format!(
            "#include <stdint.h>\n// {tag}\n\
             extern \"C\" int kiln_abi_version() {{ return {ABI_VERSION}; }}\n\
             extern \"C\" int kiln_cooperative() {{ return 1; }}\n\
             extern \"C\" int kiln_run(int, const void*, uint64_t, uint64_t, void*, void*, char*, int) {{ return 0; }}\n\
             extern \"C\" void kiln_release_stacks(void*) {{}}\n\
             extern \"C\" uint64_t kiln_test_tag() {{ return {tag}ull; }}\n"
        )
    }

    fn unit<'a>(cxx: &'a str, compiler: &'a HostCompiler, kernel: &'a str, tu: &'a str) -> Unit<'a> {
        Unit { cxx, compiler, kernel, tu, prelude: "", shortcuts: Shortcuts::ALL }
    }

    fn tag_of(c: &Compiled) -> u64 {
        // SAFETY: `minimal_tu` defines `kiln_test_tag` with this signature; it returns a constant.
        unsafe { c._lib.get::<unsafe extern "C" fn() -> u64>(b"kiln_test_tag\0").unwrap()() }
    }

    #[test]
    fn truncated_corrupted_swapped_or_unvouched_cache_entries_are_built_again() {
        let cxx = config::host_cxx();
        let compiler = host_compiler(&cxx).unwrap();
        let flags = flags(MathMode::Safe, &compiler);
        let (tag_a, tag_b) = (fresh_tag(), fresh_tag() ^ 0x5a5a);
        let (tu_a, tu_b) = (minimal_tu(tag_a), minimal_tu(tag_b));
        let key_a = library_key(&tu_a, &flags, &cxx, &compiler);
        let key_b = library_key(&tu_b, &flags, &cxx, &compiler);
        assert_eq!(tag_of(&load_or_build(&unit(&cxx, &compiler, "a", &tu_a), &flags, &key_a).unwrap()), tag_a);
        assert_eq!(tag_of(&load_or_build(&unit(&cxx, &compiler, "b", &tu_b), &flags, &key_b).unwrap()), tag_b);
        let so_b = library_dir(&cache_root::dir(), &key_b).join("kernel.so");
        let library_a = std::fs::read(library_dir(&cache_root::dir(), &key_a).join("kernel.so")).unwrap();
        let damage: [(&str, &dyn Fn()); 5] = [
            ("truncated", &|| {
                let good = std::fs::read(&so_b).unwrap();
                std::fs::write(&so_b, &good[..good.len() / 2]).unwrap();
            }),
            ("code overwritten", &|| {
                let mut bytes = std::fs::read(&so_b).unwrap();
                let n = bytes.len();
                bytes[n / 4..n / 2].fill(0xCC);
                std::fs::write(&so_b, &bytes).unwrap();
            }),
            ("garbage", &|| std::fs::write(&so_b, b"\x7fELF and nothing else").unwrap()),
            ("another kernel's library", &|| std::fs::write(&so_b, &library_a).unwrap()),
            ("no manifest", &|| std::fs::remove_file(disk_cache::manifest_path(&so_b)).unwrap()),
        ];
        for (what, damage) in damage {
            damage();
            let c = load_or_build(&unit(&cxx, &compiler, "b", &tu_b), &flags, &key_b).unwrap();
            assert_eq!(tag_of(&c), tag_b, "{what}");
            // The entry was built again and checks out.
            assert!(disk_cache::load_verified(&so_b, &key_b).is_some(), "{what}");
        }
        // A good entry is used as it is.
        let before = std::fs::metadata(&so_b).unwrap().modified().unwrap();
        assert_eq!(tag_of(&load_or_build(&unit(&cxx, &compiler, "b", &tu_b), &flags, &key_b).unwrap()), tag_b);
        assert_eq!(std::fs::metadata(&so_b).unwrap().modified().unwrap(), before);
    }

    fn fresh_tag() -> u64 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (t.as_nanos() as u64) ^ ((std::process::id() as u64) << 40)
    }

    #[test]
    fn concurrent_first_builds_of_one_library_all_load_it() {
        let cxx = config::host_cxx();
        let tu = minimal_tu(fresh_tag());
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        compile(&cxx, "minimal", &tu, "", MathMode::Safe).map(|c| c.cooperative)
                    })
                })
                .collect();
            for r in runs {
                assert!(r.join().unwrap().unwrap());
            }
        });
    }

    #[test]
    fn long_compiler_logs_are_cut_at_a_character_boundary_and_any_bytes_are_read() {
        let cpp = Path::new("/tmp/kernel-1234.cpp");
        // GCC's quotes take three bytes: with one of these paddings the cut falls inside one.
        for pad in 0..3 {
            let log =
                format!("{}/tmp/kernel-1234.cpp:1:1: error: {}", "#".repeat(pad), "\u{2018}x\u{2019}".repeat(2000));
            let kept = map_log(&log, cpp);
            assert!(kept.len() <= MAX_LOG_BYTES + 4 && kept.ends_with("\n..."), "{pad}: {} bytes", kept.len());
            let head = format!("{}<translation unit>:1:1: error: \u{2018}x\u{2019}", "#".repeat(pad));
            assert!(kept.starts_with(&head), "{pad}");
        }
        // What the compiler prints is read as UTF-8 with anything else replaced.
        let stderr = b"kernel.cpp:3:1: error: stray \xff\xfe in program\n";
        assert_eq!(
            map_log(&String::from_utf8_lossy(stderr), cpp),
            "kernel.cpp:3:1: error: stray \u{fffd}\u{fffd} in program"
        );
    }

    #[test]
    fn a_damaged_library_in_the_cache_is_built_again() {
        let cxx = config::host_cxx();
        let tu = minimal_tu(fresh_tag());
        let compiler = host_compiler(&cxx).unwrap();
        let key = library_key(&tu, &flags(MathMode::Safe, &compiler), &cxx, &compiler);
        let dir = library_dir(&cache_root::dir(), &key);
        std::fs::create_dir_all(&dir).unwrap();
        // What a build cut short would leave: a library file that is not one.
        std::fs::write(dir.join("kernel.so"), b"not a shared library").unwrap();
        let c = compile(&cxx, "minimal", &tu, "", MathMode::Safe).unwrap();
        assert!(c.cooperative);
        assert_ne!(std::fs::read(dir.join("kernel.so")).unwrap(), b"not a shared library");
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// A scratch directory holding a regular file, `file`: a cache directory under it cannot be
    /// made, even by root.
    fn scratch_with_file(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-compile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file"), b"not a directory").unwrap();
        dir
    }

    #[test]
    fn a_library_whose_cache_directory_cannot_be_made_is_built_and_stored_in_the_fallback() {
        let scratch = scratch_with_file("fallback");
        let root = Arc::new(cache_root::CacheRoot::new(scratch.join("file/cache"), scratch.join("tmp")));
        let cxx = config::host_cxx();
        let tag = fresh_tag();
        let tu = minimal_tu(tag);
        let c = cache_root::with_root(root.clone(), || compile(&cxx, "minimal", &tu, "", MathMode::Safe)).unwrap();
        assert_eq!(tag_of(&c), tag);
        assert!(root.warning().is_some());
        let compiler = host_compiler(&cxx).unwrap();
        let key = library_key(&tu, &flags(MathMode::Safe, &compiler), &cxx, &compiler);
        let dir = library_dir(&root.dir(), &key);
        assert_eq!(names_in(&dir), ["kernel.cpp", "kernel.so", "kernel.so.manifest"]);
        assert!(disk_cache::load_verified(&dir.join("kernel.so"), &key).is_some());
        let _ = std::fs::remove_dir_all(&scratch);
    }

    #[test]
    fn a_kernel_that_does_not_compile_leaves_no_file_of_its_build() {
        let scratch = scratch_with_file("broken");
        let root = Arc::new(cache_root::CacheRoot::new(scratch.join("cache"), scratch.join("tmp")));
        let cxx = config::host_cxx();
        let tu = format!("{}\nthis is not C++;\n", minimal_tu(fresh_tag()));
        let err = cache_root::with_root(root.clone(), || compile(&cxx, "broken", &tu, "", MathMode::Safe));
        assert!(matches!(err, Err(Error::Compile { .. })), "{:?}", err.err());
        assert!(root.warning().is_none());
        let compiler = host_compiler(&cxx).unwrap();
        let key = library_key(&tu, &flags(MathMode::Safe, &compiler), &cxx, &compiler);
        assert_eq!(names_in(&library_dir(&scratch.join("cache"), &key)), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
