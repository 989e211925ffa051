//! Finding the CUDA driver and NVRTC at run time. cudarc loads both lazily and panics when a
//! library is missing, so every entry point asks here first and turns absence into
//! `BackendUnavailable`.
//!
//! NVRTC is found by the dynamic loader (`LD_LIBRARY_PATH`, system paths) unless
//! `KILN_NVRTC_LIBRARY` names a file or directory: that library, and the
//! `libnvrtc-builtins` beside it, are then loaded first with global visibility, so the loader's
//! later lookups by soname (cudarc's and NVRTC's own) resolve to them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::backend::unavailable;
use crate::config;
use crate::error::Result;

/// Whether the CUDA driver library can be loaded (checked once).
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: the probe only tries to dlopen candidate library names.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Whether NVRTC can be loaded (checked once, after any explicit preload).
pub fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        preload_explicit_nvrtc();
        // SAFETY: the probe only tries to dlopen candidate library names.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    })
}

/// Whether the driver library exports every function in `names`: cudarc panics when a function
/// the driver lacks is called, so optional paths ask first.
pub fn driver_exports(names: &[&str]) -> bool {
    if !driver_present() {
        return false;
    }
    // SAFETY: the library is present (probed above); loading it runs only its initialisers.
    let lib = unsafe { cudarc::driver::sys::culib() };
    // SAFETY: a symbol lookup runs no code of the library, and the address is not used.
    names.iter().all(|name| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok())
}

/// `Ok` when the driver can be used, else why not.
pub fn require_driver() -> Result<()> {
    if driver_present() {
        Ok(())
    } else {
        Err(unavailable("cuda", "the CUDA driver library (libcuda) was not found"))
    }
}

/// `Ok` when NVRTC can be used, else why not.
pub fn require_nvrtc() -> Result<()> {
    if nvrtc_present() {
        return Ok(());
    }
    let hint = match config::nvrtc_library() {
        Some(p) => format!("KILN_NVRTC_LIBRARY={} did not provide a loadable libnvrtc", p.display()),
        None => "set LD_LIBRARY_PATH or KILN_NVRTC_LIBRARY (scripts/install-nvrtc.sh installs one)".to_string(),
    };
    Err(unavailable("cuda", format!("the NVRTC library (libnvrtc) was not found; {hint}")))
}

fn preload_explicit_nvrtc() {
    let Some(path) = config::nvrtc_library() else { return };
    let Some(lib) = nvrtc_file(&path) else { return };
    if let Some(dir) = lib.parent() {
        for builtins in matching_files(dir, "libnvrtc-builtins.so") {
            preload(&builtins);
        }
    }
    preload(&lib);
}

fn nvrtc_file(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    matching_files(path, "libnvrtc.so").into_iter().next()
}

/// Files in `dir` named `prefix` or `prefix.N...` (not the `.alt` variants).
fn matching_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == prefix || n.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.')))
        })
        .collect();
    found.sort();
    found
}

#[cfg(unix)]
fn preload(path: &Path) {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading NVRTC runs only its initialisers; the handle is kept for the process
    // lifetime so code resolved through it stays mapped.
    if let Ok(lib) = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) } {
        std::mem::forget(lib);
    }
}

#[cfg(not(unix))]
fn preload(path: &Path) {
    // SAFETY: as above; the handle is leaked on purpose to stay loaded.
    if let Ok(lib) = unsafe { libloading::Library::new(path) } {
        std::mem::forget(lib);
    }
}
