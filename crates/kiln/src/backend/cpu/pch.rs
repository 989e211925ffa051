//! The CPU prelude as a precompiled header. Every translation unit starts with the same prelude
//! (`backend::cpu::emit::prelude`), and parsing it is most of a kernel's compile time, so it is
//! compiled once per (compiler, flags, prelude text) into `<cache>/cpu-pch/<sha256>/` (`cache_root`)
//! and kernels are compiled with `-include prelude.h`: GCC then reads `prelude.h.gch` and clang
//! `prelude.h.pch` beside it. Both fall back to the header's text when the precompiled file does
//! not fit, so a stale header costs time, never correctness.
//!
//! The precompiled file is a cache entry like the libraries (`backend::disk_cache`): used only
//! when its manifest vouches for it, else removed and built again, once per process check. It
//! is built under a file lock, so parallel processes build it once; a build that fails leaves
//! no file of its own behind. A compiler that cannot build it compiles kernels with the whole
//! prelude inline, as before.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

use super::built_once::BuiltOnce;
use super::toolchain::HostCompiler;
use crate::backend::{cache_root, disk_cache};
use crate::error::{Error, Result};

/// A prelude header ready to be included first, with its precompiled form beside it.
#[derive(Clone, Debug)]
pub struct PreparedPrelude {
    /// The header's text, for `-include`.
    pub header: PathBuf,
    /// The precompiled header the compiler picks up beside it.
    pub precompiled: PathBuf,
    key: String,
}

/// What this process knows of a key: ready (checked once), or not to be used (the compiler
/// could not build it, or the cache directory cannot hold it).
type Known = Option<PreparedPrelude>;

fn known() -> &'static BuiltOnce<Known> {
    static KNOWN: LazyLock<BuiltOnce<Known>> = LazyLock::new(BuiltOnce::new);
    &KNOWN
}

/// The file name extension of the precompiled header `compiler` picks up for `-include x.h`.
fn precompiled_extension(compiler: &HostCompiler) -> &'static str {
    if compiler.identity.to_ascii_lowercase().contains("clang") {
        "pch"
    } else {
        "gch"
    }
}

/// The cache key of a precompiled prelude: everything that goes into it.
pub fn prelude_key(cxx: &str, compiler: &HostCompiler, flags: &[&str], prelude: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"kiln cpu prelude pch 1\0");
    h.update(cxx.as_bytes());
    h.update(b"\0");
    h.update(compiler.cache_identity().as_bytes());
    h.update(b"\0");
    h.update(flags.join(" ").as_bytes());
    h.update(b"\0");
    h.update(prelude.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The directory of the precompiled prelude of `key` in this process's cache.
pub fn prelude_dir(key: &str) -> PathBuf {
    prelude_dir_in(&cache_root::dir(), key)
}

fn prelude_dir_in(root: &Path, key: &str) -> PathBuf {
    root.join("cpu-pch").join(key)
}

/// The precompiled `prelude` for these flags, built if needed; `None` when it cannot be had
/// (the caller then compiles the prelude inline).
pub fn prepare(cxx: &str, compiler: &HostCompiler, flags: &[&str], prelude: &str) -> Option<PreparedPrelude> {
    if prelude.is_empty() {
        return None;
    }
    let key = prelude_key(cxx, compiler, flags, prelude);
    known().get_or_build(&key, || {
        cache_root::run(|root| build_or_check(&prelude_dir_in(root, &key), cxx, compiler, flags, prelude, &key)).ok()
    })
}

/// Called when a compile that used `prepared` failed: whether the precompiled header still
/// checks out (then the failure is the kernel's own). One that does not is removed, and the
/// next `prepare` builds it again.
pub fn still_sound(prepared: &PreparedPrelude) -> bool {
    if disk_cache::load_verified(&prepared.precompiled, &prepared.key).is_some() {
        return true;
    }
    known().forget(&prepared.key);
    false
}

fn build_or_check(
    dir: &Path,
    cxx: &str,
    compiler: &HostCompiler,
    flags: &[&str],
    prelude: &str,
    key: &str,
) -> Result<PreparedPrelude> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    // One builder at a time across processes; the others wait and then find the entry.
    // A lock that cannot be had only costs a duplicate build: entries are renamed into place.
    let lock_path = dir.join("build.lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    lock_exclusive(&lock);
    let header = dir.join("prelude.h");
    let precompiled = dir.join(format!("prelude.h.{}", precompiled_extension(compiler)));
    let prepared = PreparedPrelude { header: header.clone(), precompiled: precompiled.clone(), key: key.to_string() };
    if std::fs::read(&header).ok().as_deref() != Some(prelude.as_bytes()) {
        disk_cache::store(&header, key, prelude.as_bytes()).map_err(|e| Error::io(&header, e))?;
    }
    if disk_cache::load_verified(&precompiled, key).is_some() {
        return Ok(prepared);
    }
    let image = build(cxx, flags, &header, dir)?;
    disk_cache::store(&precompiled, key, &image).map_err(|e| Error::io(&precompiled, e))?;
    Ok(prepared)
}

/// Waits for an exclusive lock on `file`, held until the file is closed; whether it was had.
#[cfg(unix)]
pub(super) fn lock_exclusive(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    extern "C" {
        fn flock(fd: i32, operation: i32) -> i32;
    }
    const LOCK_EX: i32 = 2;
    // SAFETY: `flock` reads no memory of ours; the descriptor is open for the whole call.
    (0..8).any(|_| unsafe { flock(file.as_raw_fd(), LOCK_EX) } == 0)
}

#[cfg(not(unix))]
pub(super) fn lock_exclusive(_file: &std::fs::File) -> bool {
    false
}

/// Compiles `header` with `flags` and returns the precompiled header's bytes.
fn build(cxx: &str, flags: &[&str], header: &Path, dir: &Path) -> Result<Vec<u8>> {
    let tmp = disk_cache::Scratch::new(dir, "prelude", "building");
    let out = Command::new(cxx)
        .args(flags)
        .args(["-x", "c++-header", "-o"])
        .arg(tmp.path())
        .arg(header)
        .output()
        .map_err(|e| Error::BackendUnavailable { backend: "cpu", reason: format!("cannot run `{cxx}`: {e}") })?;
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        return Err(cache_root::compiler_could_not_write(&log, tmp.path()).unwrap_or(Error::Compile {
            backend: "cpu",
            kernel: "prelude".into(),
            log,
        }));
    }
    std::fs::read(tmp.path()).map_err(|e| Error::io(tmp.path(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cache_root::{self, CacheRoot};
    use crate::backend::cpu::toolchain::{flags, host_compiler};
    use crate::config;
    use crate::program::MathMode;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    /// A prelude no other test uses, so this test owns its cache entry.
    fn unique_prelude(tag: &str) -> String {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        format!(
            "// pch test {tag} {} {}\n#include <stdint.h>\nnamespace t {{ template <class T> T twice(T x) {{ return x + x; }} }}\n",
            t.as_nanos(),
            std::process::id()
        )
    }

    /// Whether the compiler reads `prepared`'s precompiled header for a unit including it
    /// (GCC's `-H` marks a precompiled header it used with `!`; clang's has no such mark, so
    /// there only the build is checked).
    fn compiler_uses(cxx: &str, flags: &[&str], prepared: &PreparedPrelude) -> bool {
        if prepared.precompiled.extension().is_some_and(|e| e == "pch") {
            return true;
        }
        let out = Command::new(cxx)
            .args(flags)
            .args(["-H", "-fsyntax-only", "-include"])
            .arg(&prepared.header)
            .args(["-x", "c++", "/dev/null"])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{log}");
        log.lines().any(|l| l.starts_with('!') && l.contains(&*prepared.precompiled.to_string_lossy()))
    }

    #[test]
    fn the_precompiled_prelude_is_built_once_reused_and_rebuilt_when_damaged() {
        let cxx = config::host_cxx();
        let compiler = host_compiler(&cxx).unwrap();
        let flags = flags(MathMode::Safe, &compiler);
        let prelude = unique_prelude("reuse");
        let prepared = prepare(&cxx, &compiler, &flags, &prelude).expect("the host compiler builds the prelude");
        assert!(compiler_uses(&cxx, &flags, &prepared), "the compiler reads the precompiled header");
        let built = std::fs::metadata(&prepared.precompiled).unwrap().modified().unwrap();

        // Another process (no memory of it) finds the entry and does not build it again.
        known().forget_all();
        let again = prepare(&cxx, &compiler, &flags, &prelude).unwrap();
        assert_eq!(again.precompiled, prepared.precompiled);
        assert_eq!(std::fs::metadata(&again.precompiled).unwrap().modified().unwrap(), built);

        // Damaged on disk: the next check removes it and the next prepare builds a sound one.
        let good = std::fs::read(&prepared.precompiled).unwrap();
        std::fs::write(&prepared.precompiled, &good[..good.len() / 3]).unwrap();
        assert!(!still_sound(&prepared));
        let rebuilt = prepare(&cxx, &compiler, &flags, &prelude).unwrap();
        assert!(std::fs::read(&rebuilt.precompiled).unwrap().len() > good.len() / 3);
        assert!(still_sound(&rebuilt));
        assert!(compiler_uses(&cxx, &flags, &rebuilt));
        let _ = std::fs::remove_dir_all(prelude_dir(&rebuilt.key));
    }

    #[test]
    fn a_prelude_the_compiler_rejects_gives_no_precompiled_header() {
        let cxx = config::host_cxx();
        let compiler = host_compiler(&cxx).unwrap();
        let flags = flags(MathMode::Safe, &compiler);
        let broken = format!("{}\nthis is not C++;\n", unique_prelude("broken"));
        assert!(prepare(&cxx, &compiler, &flags, &broken).is_none());
        let dir = prelude_dir(&prelude_key(&cxx, &compiler, &flags, &broken));
        // The failed build left nothing of its own.
        assert_eq!(names_in(&dir), ["build.lock", "prelude.h", "prelude.h.manifest"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_cache_directory_that_cannot_be_made_gives_a_precompiled_prelude_in_the_fallback() {
        let scratch = std::env::temp_dir().join(format!("kiln-pch-fallback-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("file"), b"not a directory").unwrap();
        let root = std::sync::Arc::new(CacheRoot::new(scratch.join("file/cache"), scratch.join("tmp")));
        let cxx = config::host_cxx();
        let compiler = host_compiler(&cxx).unwrap();
        let flags = flags(MathMode::Safe, &compiler);
        let prelude = unique_prelude("fallback");
        let prepared = cache_root::with_root(root.clone(), || prepare(&cxx, &compiler, &flags, &prelude)).unwrap();
        assert!(root.warning().is_some());
        let dir = prelude_dir_in(&root.dir(), &prepared.key);
        assert!(prepared.precompiled.starts_with(&dir), "{}", prepared.precompiled.display());
        let ext = precompiled_extension(&compiler);
        let want = [
            "build.lock".into(),
            "prelude.h".into(),
            format!("prelude.h.{ext}"),
            format!("prelude.h.{ext}.manifest"),
            "prelude.h.manifest".into(),
        ];
        assert_eq!(names_in(&dir), want);
        assert!(compiler_uses(&cxx, &flags, &prepared));
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
