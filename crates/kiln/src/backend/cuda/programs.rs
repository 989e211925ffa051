//! The per-backend table of programs already compiled and loaded, keyed by their full content
//! (Metal text, entry, kind, math mode, constants) so two programs never share an entry. A
//! lookup hashes the Metal text (a few KB, not the ~100 KB translation unit) with a fast
//! non-cryptographic hash and confirms the match by comparison.

use std::sync::{Arc, Mutex};

use cudarc::driver::CudaFunction;
use rustc_hash::FxHashMap;

use super::LoadedModule;
use crate::error::{Error, Result};
use crate::program::{MathMode, MetalProgram, ProgramKind};

/// A program ready to launch: its module, entry symbol and function.
pub(super) struct Resolved {
    pub module: Arc<LoadedModule>,
    pub symbol: String,
    pub func: CudaFunction,
    pub max_threads: u64,
    /// Bytes of the entry's inline data area (constant bindings beyond it go to device memory).
    pub inline_bytes: usize,
    /// Bytes of the entry's static shared memory (its `threadgroup` declarations).
    pub static_smem: usize,
}

impl Resolved {
    pub fn new(
        module: Arc<LoadedModule>,
        symbol: String,
        func: CudaFunction,
        max_threads: u64,
        inline_bytes: usize,
        static_smem: usize,
    ) -> Self {
        Resolved { module, symbol, func, max_threads, inline_bytes, static_smem }
    }
}

/// What identifies a program; compared in full on every hit.
struct Identity {
    source: String,
    function: String,
    kind: ProgramKind,
    math_mode: MathMode,
    constants: String,
}

impl Identity {
    fn of(p: &MetalProgram) -> Self {
        Identity {
            source: p.source.clone(),
            function: p.function.clone(),
            kind: p.kind,
            math_mode: p.math_mode,
            constants: constants_text(p),
        }
    }

    fn matches(&self, p: &MetalProgram) -> bool {
        self.kind == p.kind
            && self.math_mode == p.math_mode
            && self.function == p.function
            && self.source == p.source
            && (if p.constants.is_empty() { self.constants.is_empty() } else { self.constants == constants_text(p) })
    }
}

fn constants_text(p: &MetalProgram) -> String {
    if p.constants.is_empty() {
        String::new()
    } else {
        format!("{:?}", p.constants)
    }
}

/// The programs whose fingerprints are equal.
type Bucket = Vec<(Identity, Arc<Resolved>)>;

/// Programs of one backend by fingerprint; each bucket is checked by full comparison.
#[derive(Default)]
pub(super) struct ProgramTable {
    map: Mutex<FxHashMap<u64, Bucket>>,
}

impl ProgramTable {
    pub fn get(&self, hash: u64, p: &MetalProgram) -> Result<Option<Arc<Resolved>>> {
        let map = self.map.lock().map_err(|_| poisoned(p))?;
        Ok(map.get(&hash).and_then(|bucket| bucket.iter().find(|(id, _)| id.matches(p)).map(|(_, r)| r.clone())))
    }

    pub fn insert(&self, hash: u64, p: &MetalProgram, r: Arc<Resolved>) -> Result<()> {
        let mut map = self.map.lock().map_err(|_| poisoned(p))?;
        let bucket = map.entry(hash).or_default();
        if !bucket.iter().any(|(id, _)| id.matches(p)) {
            bucket.push((Identity::of(p), r));
        }
        Ok(())
    }
}

fn poisoned(p: &MetalProgram) -> Error {
    Error::invalid(p.kernel.as_str(), "program table lock poisoned")
}

/// A fast 64-bit hash of the parts that most often differ between programs.
pub(super) fn fingerprint(p: &MetalProgram) -> u64 {
    let mut h = fx(0, p.source.as_bytes());
    h = fx(h, p.function.as_bytes());
    // The kind's variant only: programs that differ inside it are told apart by comparison.
    let kind = match p.kind {
        ProgramKind::MlxBody => 0,
        ProgramKind::MlxBodyGenericPointers => 1,
        ProgramKind::FullFile => 2,
        ProgramKind::Cuda { .. } => 3,
    };
    fx(h, &[kind, p.math_mode as u8, p.constants.len() as u8])
}

/// FxHash-style mixing, eight bytes at a time (a lookup key only: collisions are resolved by
/// comparing content).
pub(super) fn fx(mut h: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    let mut w = [0u8; 8];
    w[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(5) ^ u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56)).wrapping_mul(K);
    (h.rotate_left(5) ^ bytes.len() as u64).wrapping_mul(K)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_separates_sources_of_equal_length() {
        assert_ne!(fx(0, b"abcdefgh1"), fx(0, b"abcdefgh2"));
        assert_ne!(fx(0, b""), fx(0, b"\0"));
    }
}
