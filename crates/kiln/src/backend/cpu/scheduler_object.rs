//! The group scheduler (`prelude/cpu/scheduler.h`) compiled once per (compiler, flags, prelude)
//! into an object that kernel libraries link, instead of into every kernel: it is the same code
//! for every kernel, and with the prelude precompiled its code generation is most of a kernel's
//! compile time. Each library still gets its own copy of the scheduler and of its state (the
//! fault handler's, the workers'), hidden inside it, as when the scheduler is compiled inline.
//!
//! The object is a cache entry like the precompiled prelude (`pch`): under
//! `<cache>/cpu-scheduler/<sha256>/` (`cache_root`), used only when its manifest vouches for it,
//! built under a file lock so parallel processes build it once, and kept in memory once checked,
//! so every link reads a private copy of checked bytes. Building it also tries the faster gold
//! linker on it and records whether that works. When it cannot be built, kernels compile the
//! scheduler inline.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock};

use sha2::{Digest, Sha256};

use super::built_once::BuiltOnce;
use super::pch::{self, PreparedPrelude};
use super::toolchain::HostCompiler;
use crate::backend::cpu::emit::scheduler_unit;
use crate::backend::{cache_root, disk_cache};
use crate::error::{Error, Result};

/// The linker flag tried first: gold links a kernel library in about half the time of the
/// default linker.
const GOLD: &str = "-fuse-ld=gold";

/// A checked scheduler object and how to link it.
#[derive(Clone, Debug)]
pub struct SchedulerObject {
    /// The object's bytes, checked against its manifest.
    pub image: Arc<Vec<u8>>,
    /// The linker flag the object was found to link with (`None`: the compiler's default).
    pub linker: Option<&'static str>,
}

type Known = Option<SchedulerObject>;

fn known() -> &'static BuiltOnce<Known> {
    static KNOWN: LazyLock<BuiltOnce<Known>> = LazyLock::new(BuiltOnce::new);
    &KNOWN
}

/// The cache key of a scheduler object: everything that goes into it.
pub fn object_key(cxx: &str, compiler: &HostCompiler, flags: &[&str], prelude: &str) -> String {
    let mut h = Sha256::new();
    let identity = compiler.cache_identity();
    for part in ["kiln cpu scheduler object 1", cxx, &identity, &flags.join(" "), prelude, scheduler_unit()] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The directory of the scheduler object of `key` in this process's cache.
pub fn object_dir(key: &str) -> PathBuf {
    object_dir_in(&cache_root::dir(), key)
}

fn object_dir_in(root: &Path, key: &str) -> PathBuf {
    root.join("cpu-scheduler").join(key)
}

/// The scheduler object for units starting with `prelude` compiled with `flags`, built if
/// needed (after `precompiled` when given); `None` when it cannot be had (the caller then
/// compiles the scheduler inline). A checked prelude is refused: its sanitizer state must have
/// one copy per library, which only the inline scheduler shares with the kernel.
pub fn prepare(
    cxx: &str,
    compiler: &HostCompiler,
    flags: &[&str],
    prelude: &str,
    precompiled: Option<&PreparedPrelude>,
) -> Option<SchedulerObject> {
    if prelude.is_empty() || prelude.contains("#define KILN_CHECKED") {
        return None;
    }
    let key = object_key(cxx, compiler, flags, prelude);
    known().get_or_build(&key, || {
        cache_root::run(|root| build_or_check(&object_dir_in(root, &key), cxx, flags, prelude, precompiled, &key)).ok()
    })
}

/// Forgets what this process knows of scheduler objects (as a new process would), for tests.
#[cfg(test)]
pub fn forget() {
    known().forget_all();
}

fn build_or_check(
    dir: &Path,
    cxx: &str,
    flags: &[&str],
    prelude: &str,
    precompiled: Option<&PreparedPrelude>,
    key: &str,
) -> Result<SchedulerObject> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    // One builder at a time across processes; a lock that cannot be had only costs a duplicate
    // build (entries are renamed into place).
    let lock_path = dir.join("build.lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    pch::lock_exclusive(&lock);
    let object = dir.join("scheduler.o");
    let linker = dir.join("linker");
    let image = disk_cache::load_verified(&object, key);
    let with = disk_cache::load_verified(&linker, key).and_then(|w| match w.as_slice() {
        b"gold" => Some(Some(GOLD)),
        b"default" => Some(None),
        _ => None,
    });
    if let (Some(image), Some(linker)) = (image, with) {
        return Ok(SchedulerObject { image: Arc::new(image), linker });
    }
    let image = compile(cxx, flags, prelude, precompiled, dir)?;
    let mut with = None;
    for linker in [Some(GOLD), None] {
        if links(cxx, flags, linker, &image, dir)? {
            with = Some(linker);
            break;
        }
    }
    let Some(with) = with else {
        return Err(Error::Compile {
            backend: "cpu",
            kernel: "scheduler".into(),
            log: "the object links with no linker".into(),
        });
    };
    disk_cache::store(&object, key, &image).map_err(|e| Error::io(&object, e))?;
    disk_cache::store(&linker, key, if with.is_some() { b"gold" } else { b"default" })
        .map_err(|e| Error::io(&linker, e))?;
    Ok(SchedulerObject { image: Arc::new(image), linker: with })
}

/// The flags of a kernel library's compile with `-c` in place of `-shared`.
fn object_flags<'a>(flags: &[&'a str]) -> Vec<&'a str> {
    flags.iter().copied().filter(|f| *f != "-shared").chain(["-c"]).collect()
}

/// Compiles the scheduler unit after the prelude and returns the object's bytes.
fn compile(
    cxx: &str,
    flags: &[&str],
    prelude: &str,
    precompiled: Option<&PreparedPrelude>,
    dir: &Path,
) -> Result<Vec<u8>> {
    let cpp = disk_cache::Scratch::new(dir, "scheduler", "cpp");
    let tmp = disk_cache::Scratch::new(dir, "scheduler", "o");
    let text = match precompiled {
        Some(_) => scheduler_unit().to_string(),
        None => format!("{prelude}{}", scheduler_unit()),
    };
    std::fs::write(cpp.path(), text).map_err(|e| Error::io(cpp.path(), e))?;
    let mut command = Command::new(cxx);
    command.args(object_flags(flags));
    if let Some(p) = precompiled {
        command.arg("-include").arg(&p.header);
    }
    let out = command.arg("-o").arg(tmp.path()).arg(cpp.path()).output().map_err(|e| cannot_run(cxx, e))?;
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        return Err(cache_root::compiler_could_not_write(&log, tmp.path()).unwrap_or(Error::Compile {
            backend: "cpu",
            kernel: "scheduler".into(),
            log,
        }));
    }
    std::fs::read(tmp.path()).map_err(|e| Error::io(tmp.path(), e))
}

/// Whether the object links into a shared library with `linker`; an error when the link
/// could not be tried or could not write.
fn links(cxx: &str, flags: &[&str], linker: Option<&str>, image: &[u8], dir: &Path) -> Result<bool> {
    let object = disk_cache::Scratch::new(dir, "scheduler-probe", "o");
    let library = disk_cache::Scratch::new(dir, "scheduler-probe", "so");
    std::fs::write(object.path(), image).map_err(|e| Error::io(object.path(), e))?;
    let out = Command::new(cxx)
        .args(flags)
        .args(linker)
        .arg("-o")
        .arg(library.path())
        .arg(object.path())
        .output()
        .map_err(|e| cannot_run(cxx, e))?;
    match cache_root::compiler_could_not_write(&String::from_utf8_lossy(&out.stderr), library.path()) {
        Some(e) if !out.status.success() => Err(e),
        _ => Ok(out.status.success()),
    }
}

fn cannot_run(cxx: &str, e: std::io::Error) -> Error {
    Error::BackendUnavailable { backend: "cpu", reason: format!("cannot run `{cxx}`: {e}") }
}
