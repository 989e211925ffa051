//! The environment variables kiln reads, all of them, in one place.
//!
//! | variable | meaning |
//! |---|---|
//! | `KILN_CACHE_DIR` | where compiled kernels are cached on disk (default: the user cache directory, `~/.cache/kiln`) |
//! | `KILN_REQUIRE_BACKEND` | tests only: fail instead of skipping when this backend (`cuda`, `cpu`) is unavailable |
//! | `CXX` | the host C++ compiler the CPU emulator uses (default `c++`) |

use std::path::PathBuf;

/// The on-disk cache directory.
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

/// The host C++ compiler for the CPU emulator.
pub fn host_cxx() -> String {
    std::env::var("CXX").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "c++".to_string())
}
