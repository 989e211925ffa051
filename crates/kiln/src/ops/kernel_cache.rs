//! Kernels built once per process. Every op keeps its kernels (Metal or CUDA kernels, Metal
//! libraries) in a [`KernelCache`]: a fixed number of slots, each built on first use; a build
//! error is kept as text and returned, naming the op, on every later call.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// `N` build-once slots of kernels of type `K`, for a `static`.
pub struct KernelCache<K: 'static, const N: usize = 1> {
    slots: [OnceLock<std::result::Result<K, String>>; N],
}

impl<K: 'static, const N: usize> KernelCache<K, N> {
    /// An empty cache (nothing is built until asked for).
    pub const fn new() -> Self {
        KernelCache { slots: [const { OnceLock::new() }; N] }
    }

    /// The kernel in `slot`, built by `build` on first use. `op` names the op in the error a
    /// failed build (or a slot past `N`) returns.
    pub fn get(&'static self, op: &str, slot: usize, build: impl FnOnce() -> Result<K>) -> Result<&'static K> {
        let cell = self.slots.get(slot).ok_or_else(|| Error::invalid(op, format!("no kernel slot {slot} of {N}")))?;
        cell.get_or_init(|| build().map_err(|e| e.to_string())).as_ref().map_err(|msg| Error::invalid(op, msg.clone()))
    }

    /// The kernel of a one-slot cache (slot 0).
    pub fn one(&'static self, op: &str, build: impl FnOnce() -> Result<K>) -> Result<&'static K> {
        self.get(op, 0, build)
    }
}

impl<K: 'static, const N: usize> Default for KernelCache<K, N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_each_slot_once_and_keeps_errors() {
        static CACHE: KernelCache<String, 2> = KernelCache::new();
        let mut builds = 0;
        for _ in 0..3 {
            let k = CACHE.get("op", 0, || {
                builds += 1;
                Ok("built".to_string())
            });
            assert_eq!(k.ok().map(String::as_str), Some("built"));
        }
        assert_eq!(builds, 1);
        let failed = CACHE.get("op", 1, || Err(Error::invalid("inner", "bad source")));
        assert!(failed.is_err_and(|e| e.to_string().contains("bad source")));
        let again = CACHE.get("op", 1, || Ok("late".to_string()));
        assert!(again.is_err(), "a failed build is kept");
        assert!(CACHE.get("op", 2, || Ok(String::new())).is_err_and(|e| e.to_string().contains("slot 2")));
    }
}
