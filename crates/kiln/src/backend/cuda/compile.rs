//! NVRTC compilation of CUDA translation units to cubin, with an in-memory cache (one compile
//! per key even under concurrent callers) and a disk cache so a second process pays nothing.
//! Keys hash the full source, the options, the architecture and the NVRTC version; the `.cu`
//! is kept beside its `.cubin` for debugging. A cubin on disk is used only when its manifest
//! names the key and the cubin's SHA-256 (`backend::disk_cache`); otherwise it is compiled again.
//! The directory is `<cache>/cuda/` (`cache_root`); one that cannot be written costs the disk
//! cache, never the kernel.

use std::collections::HashMap;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use sha2::{Digest, Sha256};

use super::{libs, nvrtc_pch};
use crate::backend::{cache_root, disk_cache};
use crate::error::{Error, Result};
use crate::program::MathMode;

/// A compute capability, e.g. `(9, 0)` for sm_90.
pub type Arch = (u32, u32);

/// The NVRTC version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    libs::require_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (checked above); both pointers are valid for writes.
    let status = unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) };
    status.result().map_err(|e| crate::backend::unavailable("cuda", format!("nvrtcVersion failed: {e:?}")))?;
    Ok((major, minor))
}

/// The NVRTC options for an architecture and math mode.
pub fn options(arch: Arch, math: MathMode) -> Vec<String> {
    options_for(arch, math, false)
}

/// As [`options`]; `arch_specific` selects the architecture-specific target (`sm_90a`), whose
/// instructions (`wgmma`, `setmaxnreg`) run only on exactly that compute capability.
pub fn options_for(arch: Arch, math: MathMode, arch_specific: bool) -> Vec<String> {
    let suffix = if arch_specific { "a" } else { "" };
    let mut opts = vec![
        format!("--gpu-architecture=sm_{}{}{suffix}", arch.0, arch.1),
        "-std=c++17".to_string(),
        // Unannotated functions (user helpers) compile for the device, as MLX's JIT does.
        "-default-device".to_string(),
    ];
    if math == MathMode::Fast {
        opts.push("--use_fast_math".to_string());
        opts.push("-D__FAST_MATH__=1".to_string());
    }
    opts
}

type Slot = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

fn memory_cache() -> &'static Mutex<HashMap<String, Slot>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Slot>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The cache key of a compilation.
pub fn cache_key(source: &str, options: &[String], arch: Arch, version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    for o in options {
        h.update([0u8]);
        h.update(o.as_bytes());
    }
    h.update(format!("\0sm_{}{}\0nvrtc {}.{}", arch.0, arch.1, version.0, version.1).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn disk_dir() -> PathBuf {
    disk_dir_in(&cache_root::dir())
}

fn disk_dir_in(root: &Path) -> PathBuf {
    root.join("cuda")
}

/// Compiles `source` to cubin for `arch` (cached). `kernel` names the kernel in errors.
pub fn compile(kernel: &str, source: &str, arch: Arch, math: MathMode) -> Result<Arc<Vec<u8>>> {
    compile_for(kernel, source, arch, math, false)
}

/// As [`compile`], for the architecture-specific target when `arch_specific` (the option is
/// part of the cache key).
pub fn compile_for(
    kernel: &str,
    source: &str,
    arch: Arch,
    math: MathMode,
    arch_specific: bool,
) -> Result<Arc<Vec<u8>>> {
    libs::require_nvrtc()?;
    let opts = options_for(arch, math, arch_specific);
    let key = cache_key(source, &opts, arch, nvrtc_version()?);
    let slot = {
        let mut map = memory_cache().lock().map_err(|_| poisoned(kernel))?;
        map.entry(key.clone()).or_default().clone()
    };
    let mut guard = slot.lock().map_err(|_| poisoned(kernel))?;
    if let Some(image) = guard.as_ref() {
        return Ok(image.clone());
    }
    let dir = disk_dir();
    let cubin_path = dir.join(format!("{key}.cubin"));
    // Only a cubin its manifest vouches for is used; a damaged entry is removed and compiled
    // again.
    if let Some(bytes) = disk_cache::load_verified(&cubin_path, &key) {
        let image = Arc::new(bytes);
        *guard = Some(image.clone());
        return Ok(image);
    }
    let image = Arc::new(nvrtc_compile_fast(kernel, source, &opts)?);
    // The disk cache only saves time: a cubin that cannot be stored anywhere still runs.
    let _ = write_disk_cache(&key, source, &image);
    *guard = Some(image.clone());
    Ok(image)
}

/// How the compile benchmark reaches a cubin past the in-memory cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PastMemory {
    /// From the disk cache (compiled and stored when it is not there).
    DiskCache,
    /// Compiled now with the precompiled prelude, built first if need be (no cache).
    PrecompiledPrelude,
    /// Compiled now whole, as the first units of a process are (no cache).
    Whole,
}

/// `source` compiled to cubin for `arch` past the in-memory cache, the `how` way. For the
/// compile benchmark.
pub fn compile_past_memory(kernel: &str, source: &str, arch: Arch, math: MathMode, how: PastMemory) -> Result<Vec<u8>> {
    libs::require_nvrtc()?;
    let opts = options_for(arch, math, false);
    match how {
        PastMemory::DiskCache => {
            let key = cache_key(source, &opts, arch, nvrtc_version()?);
            let dir = disk_dir();
            if let Some(bytes) = disk_cache::load_verified(&dir.join(format!("{key}.cubin")), &key) {
                return Ok(bytes);
            }
            let image = nvrtc_compile_fast(kernel, source, &opts)?;
            let _ = write_disk_cache(&key, source, &image);
            Ok(image)
        }
        PastMemory::PrecompiledPrelude => {
            nvrtc_pch::build_now(&opts);
            nvrtc_compile_fast(kernel, source, &opts)
        }
        PastMemory::Whole => nvrtc_compile(kernel, source, &opts),
    }
}

/// Builds this process's precompiled CUDA prelude for `arch` and `math` now (or waits for the
/// build under way); whether NVRTC made one. For the compile benchmark.
pub fn build_precompiled_prelude(arch: Arch, math: MathMode) -> Result<bool> {
    libs::require_nvrtc()?;
    Ok(nvrtc_pch::build_now(&options_for(arch, math, false)).is_some())
}

/// Stores the cubin of `key` with its manifest, and its source for reading, in the cache
/// directory (its fallback when that cannot be written).
fn write_disk_cache(key: &str, source: &str, image: &[u8]) -> Result<()> {
    cache_root::run(|root| {
        let dir = disk_dir_in(root);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let cu = dir.join(format!("{key}.cu"));
        disk_cache::write_atomically(&cu, source.as_bytes()).map_err(|e| Error::io(&cu, e))?;
        let cubin = dir.join(format!("{key}.cubin"));
        disk_cache::store(&cubin, key, image).map_err(|e| Error::io(&cubin, e))
    })
}

fn poisoned(kernel: &str) -> Error {
    Error::Compile { backend: "cuda", kernel: kernel.to_string(), log: "kernel cache lock poisoned".into() }
}

/// Compiles without the caches and returns the cubin with NVRTC's log of the successful
/// compile: warnings and the code generator's notes, such as `wgmma` products it had to
/// serialise ("Potential Performance Loss"), and with `verbose` its resource report
/// (registers, spills), for checks of how the compiler treated a kernel.
pub fn compile_with_log(
    kernel: &str,
    source: &str,
    arch: Arch,
    math: MathMode,
    arch_specific: bool,
    verbose: bool,
) -> Result<(Vec<u8>, String)> {
    libs::require_nvrtc()?;
    let mut opts = options_for(arch, math, arch_specific);
    if verbose {
        opts.push("--ptxas-options=-v".to_string());
    }
    nvrtc_compile_with_log(kernel, source, &opts)
}

/// One NVRTC run, no caching.
fn nvrtc_compile(kernel: &str, source: &str, opts: &[String]) -> Result<Vec<u8>> {
    Ok(nvrtc_compile_with_log(kernel, source, opts)?.0)
}

/// One NVRTC run, no caching: the cubin and the compiler's log.
fn nvrtc_compile_with_log(kernel: &str, source: &str, opts: &[String]) -> Result<(Vec<u8>, String)> {
    run_nvrtc(kernel, source, &[], opts)
}

/// One NVRTC run of a unit, with its prelude precompiled where this process has that ready
/// (`nvrtc_pch`; the first units of a process compile whole while it is built).
fn nvrtc_compile_fast(kernel: &str, source: &str, opts: &[String]) -> Result<Vec<u8>> {
    let precompiled = nvrtc_pch::after_prelude(source).and_then(|rest| Some((rest, nvrtc_pch::ready(opts)?)));
    let Some((rest, header)) = precompiled else {
        return nvrtc_compile(kernel, source, opts);
    };
    let (text, headers) = nvrtc_pch::unit_after_prelude(rest);
    let mut with = opts.to_vec();
    with.push(format!("--use-pch={}", header.display()));
    let result = match run_nvrtc(kernel, &text, &headers, &with) {
        Ok((image, log)) => Ok((image, nvrtc_pch::without_header_note(&log))),
        Err(Error::Compile { log, .. }) => Err(nvrtc_pch::without_header_note(&log)),
        Err(other) => return Err(other),
    };
    match result {
        Ok((image, (_, false))) => Ok(image),
        Err((log, false)) => Err(Error::Compile { backend: "cuda", kernel: kernel.to_string(), log }),
        Ok((_, (_, true))) | Err((_, true)) => {
            nvrtc_pch::give_up(opts);
            nvrtc_compile(kernel, source, opts)
        }
    }
}

/// One NVRTC run of `source` with in-memory `headers`: the cubin and the compiler's log.
fn run_nvrtc(kernel: &str, source: &str, headers: &[(&str, &str)], opts: &[String]) -> Result<(Vec<u8>, String)> {
    let fail = |log: String| Error::Compile { backend: "cuda", kernel: kernel.to_string(), log };
    let (prog, compiled) =
        nvrtc_pch::compile_with_headers(source, &format!("{kernel}.cu"), headers, opts).map_err(fail)?;
    // SAFETY: `prog` is live until it drops at the end of this function.
    let log = unsafe { nvrtc::get_program_log(prog.raw()) }.map(|raw| c_chars_to_string(&raw)).unwrap_or_default();
    if !compiled {
        return Err(fail(if log.trim().is_empty() { "NVRTC failed without a log".into() } else { log }));
    }
    cubin_of(prog.raw()).map(|image| (image, log)).map_err(fail)
}

fn cubin_of(prog: nvrtc_sys::nvrtcProgram) -> std::result::Result<Vec<u8>, String> {
    let mut size = 0usize;
    // SAFETY: `prog` is a successfully compiled program; `size` is valid for writes.
    unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
    if size == 0 {
        return Err("NVRTC produced no cubin (is the architecture a real sm_XY?)".into());
    }
    let mut image = vec![0u8; size];
    // SAFETY: `image` has room for exactly `size` bytes as NVRTC reported.
    unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
    Ok(image)
}

fn c_chars_to_string(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    /// The cached cubin of `source`, from the disk (the memory cache forgets it first).
    fn from_disk(source: &str, key: &str) -> Arc<Vec<u8>> {
        memory_cache().lock().unwrap().remove(key);
        compile("damaged_cache", source, (9, 0), MathMode::Safe).unwrap()
    }

    #[test]
    fn a_unit_compiled_after_the_precompiled_prelude_matches_the_whole_unit() {
        match libs::require_nvrtc() {
            Err(e) if config::required_backend().is_none() => {
                eprintln!("skipped: {e}");
                return;
            }
            r => r.unwrap(),
        }
        let tag = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let source = format!(
            "{}\nnamespace kiln_metal {{\nextern \"C\" __global__ void pch_match_{tag}(float* p, uint n) {{\n  \
             uint i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] = metal::exp(p[i]) + metal::simd_sum(p[i]);\n}}\n}}\n",
            crate::backend::cuda::emit::shared_prelude()
        );
        let arch = (9, 0);
        assert!(build_precompiled_prelude(arch, MathMode::Safe).unwrap(), "NVRTC builds the precompiled prelude");
        let whole = compile_past_memory("pch_match", &source, arch, MathMode::Safe, PastMemory::Whole).unwrap();
        let fast =
            compile_past_memory("pch_match", &source, arch, MathMode::Safe, PastMemory::PrecompiledPrelude).unwrap();
        let opts = options_for(arch, MathMode::Safe, false);
        assert!(nvrtc_pch::ready(&opts).is_some(), "the precompiled prelude was used, not given up");
        assert_eq!(whole, fast);
        // A kernel error is still the kernel's, with its log.
        let broken = format!(
            "{}\nnamespace kiln_metal {{ __global__ void broken() {{ undeclared_name(); }} }}\n",
            crate::backend::cuda::emit::shared_prelude()
        );
        match compile_past_memory("pch_broken", &broken, arch, MathMode::Safe, PastMemory::PrecompiledPrelude) {
            Err(Error::Compile { log, .. }) => assert!(log.contains("undeclared_name"), "{log}"),
            other => panic!("expected a compile error, got {other:?}"),
        }
        assert!(nvrtc_pch::ready(&opts).is_some(), "a kernel's own error does not give up the header");
    }

    #[test]
    fn truncated_corrupted_swapped_or_unvouched_cubins_are_compiled_again() {
        // NVRTC only, no GPU; skipped where it cannot be loaded unless a backend is required.
        match libs::require_nvrtc() {
            Err(e) if config::required_backend().is_none() => {
                eprintln!("skipped: {e}");
                return;
            }
            r => r.unwrap(),
        }
        let tag = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let source =
            |v: u32| format!("extern \"C\" __global__ void damaged_cache_{tag}(float* p) {{ p[0] = {v}.0f; }}\n");
        let (source_a, source_b) = (source(1), source(2));
        let arch = (9, 0);
        let key = |s: &str| cache_key(s, &options_for(arch, MathMode::Safe, false), arch, nvrtc_version().unwrap());
        let (key_a, key_b) = (key(&source_a), key(&source_b));
        let image_a = compile("damaged_cache", &source_a, arch, MathMode::Safe).unwrap();
        let image_b = compile("damaged_cache", &source_b, arch, MathMode::Safe).unwrap();
        assert_ne!(image_a, image_b);
        let path = disk_dir().join(format!("{key_b}.cubin"));
        let damage: [(&str, &dyn Fn()); 5] = [
            ("truncated", &|| std::fs::write(&path, &image_b[..image_b.len() / 2]).unwrap()),
            ("garbage after an ELF magic", &|| std::fs::write(&path, b"\x7fELF and nothing else").unwrap()),
            ("another kernel's cubin", &|| std::fs::write(&path, &image_a[..]).unwrap()),
            ("no manifest", &|| std::fs::remove_file(disk_cache::manifest_path(&path)).unwrap()),
            ("another key's manifest", &|| {
                let other = disk_cache::manifest_path(&disk_dir().join(format!("{key_a}.cubin")));
                std::fs::copy(other, disk_cache::manifest_path(&path)).unwrap();
                std::fs::write(&path, &image_a[..]).unwrap();
            }),
        ];
        for (what, damage) in damage {
            damage();
            assert_eq!(from_disk(&source_b, &key_b), image_b, "{what}");
            // The entry was written again and checks out.
            assert_eq!(disk_cache::load_verified(&path, &key_b).as_deref(), Some(&image_b[..]), "{what}");
        }
        assert_eq!(from_disk(&source_a, &key_a), image_a);
    }

    #[test]
    fn a_cubin_whose_cache_directory_cannot_be_made_is_stored_in_the_fallback() {
        match libs::require_nvrtc() {
            Err(e) if config::required_backend().is_none() => {
                eprintln!("skipped: {e}");
                return;
            }
            r => r.unwrap(),
        }
        let scratch = std::env::temp_dir().join(format!("kiln-cubin-fallback-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("file"), b"not a directory").unwrap();
        let root = Arc::new(cache_root::CacheRoot::new(scratch.join("file/cache"), scratch.join("tmp")));
        let tag = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let source = format!("extern \"C\" __global__ void fallback_{tag}(float* p) {{ p[0] = 1.0f; }}\n");
        let arch = (9, 0);
        let image = cache_root::with_root(root.clone(), || compile("fallback", &source, arch, MathMode::Safe)).unwrap();
        assert!(root.warning().is_some());
        let key = cache_key(&source, &options_for(arch, MathMode::Safe, false), arch, nvrtc_version().unwrap());
        let dir = disk_dir_in(&root.dir());
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, [format!("{key}.cu"), format!("{key}.cubin"), format!("{key}.cubin.manifest")]);
        assert_eq!(disk_cache::load_verified(&dir.join(format!("{key}.cubin")), &key).as_deref(), Some(&image[..]));
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
