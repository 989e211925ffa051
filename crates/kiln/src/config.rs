//! The environment variables kiln reads, all of them, in one place.
//!
//! | variable | meaning |
//! |---|---|
//! | `KILN_CACHE_DIR` | where compiled kernels are cached on disk (default: the user cache directory, `~/.cache/kiln`); see [`cache_dir`] for a directory that cannot be written |
//! | `KILN_REQUIRE_BACKEND` | tests only: fail instead of skipping when this backend (`cuda`, or `nvrtc` for compile-only tests) is unavailable; the CPU backend is always required (`kiln.testing`'s `kiln_device` fixture also fails without CUDA when it is `cuda`) |
//! | `KILN_MLX_HEADERS` | tests only: the include directory of MLX's Metal headers (the one holding `mlx/backend/metal/kernels/`), which `scripts/install-mlx-headers.sh` installs under `.deps/` and `scripts/test.sh` sets; without it the tests built on MLX's `steel` headers skip, or fail when `KILN_REQUIRE_BACKEND` is set |
//! | `KILN_MLX` | Python only: `1` installs the MLX drop-in (`kiln.mlx.install()`) when a process first imports `mlx.core`, in processes whose `PYTHONPATH` holds the directory `python -m kiln.mlx --site` prints (its `sitecustomize.py` reads the variable; nothing else does) |
//! | `TMPDIR` | read by `std::env::temp_dir()`: where the fallback of a cache directory that cannot be written is made (see [`cache_dir`]) and the CPU backend's scratch files go (default `/tmp`) |
//! | `CXX` | the host C++ compiler the CPU emulator uses (default `c++`) |
//! | `KILN_NVRTC_LIBRARY` | a `libnvrtc.so.*` file (or the directory holding it) loaded before the system search, with the `libnvrtc-builtins` beside it; `scripts/install-nvrtc.sh` installs one under `.deps/`. Otherwise NVRTC and the driver are found by the dynamic loader (`LD_LIBRARY_PATH`, system paths). |

use std::path::PathBuf;

/// The on-disk cache directory: `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
/// `~/.cache/kiln`, else `kiln-cache` in the temporary directory.
///
/// When kiln cannot write there (no space or quota left, a read-only file system, no
/// permission, a file in the way), it warns once on stderr, naming the directory, the error and
/// the fallback, and caches in a new directory of the process's own under the system's
/// temporary directory (`TMPDIR`, else `/tmp`): `kiln-cache-fallback-<pid>-<n>`. The process
/// sticks to it, for reading and writing, until it exits; the directory is removed then, or, if
/// the process was killed, by the next process that falls back. The call that met the error
/// succeeds; if the fallback cannot be written either, the error names both directories.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KILN_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("kiln");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache").join("kiln");
    }
    std::env::temp_dir().join("kiln-cache")
}

/// The backend a test run insists on (`KILN_REQUIRE_BACKEND`), if any.
pub fn required_backend() -> Option<String> {
    std::env::var("KILN_REQUIRE_BACKEND").ok().filter(|s| !s.is_empty())
}

/// The include directory of MLX's Metal headers for tests (`KILN_MLX_HEADERS`), if set.
pub fn mlx_headers() -> Option<PathBuf> {
    std::env::var_os("KILN_MLX_HEADERS").filter(|s| !s.is_empty()).map(PathBuf::from)
}

/// The host C++ compiler for the CPU emulator.
pub fn host_cxx() -> String {
    std::env::var("CXX").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "c++".to_string())
}

/// An explicit NVRTC library (`KILN_NVRTC_LIBRARY`): a file, or a directory holding one.
pub fn nvrtc_library() -> Option<PathBuf> {
    std::env::var_os("KILN_NVRTC_LIBRARY").filter(|s| !s.is_empty()).map(PathBuf::from)
}
