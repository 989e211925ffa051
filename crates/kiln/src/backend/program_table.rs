//! The table of programs a backend has already compiled and loaded, one fingerprint for every
//! cache of programs (the CUDA backend's per device, the CPU emulator's and the sanitizer's): a
//! lookup hashes the Metal text (a few KB, not the ~100 KB translation unit) with a fast
//! non-cryptographic hash and confirms the match by comparing the full content (Metal text,
//! entry, kind, math mode, constants, and the compiler where a backend has several), so two
//! programs never share an entry.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::program::{fx, MathMode, MetalProgram, ProgramKind};

/// What identifies a program; compared in full on every hit.
struct Identity {
    /// The compiler the entry was built with (empty where a backend has one).
    compiler: String,
    source: String,
    function: String,
    kind: ProgramKind,
    math_mode: MathMode,
    constants: String,
}

impl Identity {
    fn of(p: &MetalProgram, compiler: &str) -> Self {
        Identity {
            compiler: compiler.to_string(),
            source: p.source.clone(),
            function: p.function.clone(),
            kind: p.kind,
            math_mode: p.math_mode,
            constants: constants_text(p),
        }
    }

    fn matches(&self, p: &MetalProgram, compiler: &str) -> bool {
        self.compiler == compiler
            && self.kind == p.kind
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

/// Programs of one backend by fingerprint ([`fingerprint`]); each bucket is checked by full
/// comparison. `T` is what the backend keeps for a program (cheap to clone: an `Arc`).
pub(crate) struct ProgramTable<T> {
    map: Mutex<FxHashMap<u64, Vec<(Identity, T)>>>,
}

impl<T> Default for ProgramTable<T> {
    fn default() -> Self {
        ProgramTable { map: Mutex::new(FxHashMap::default()) }
    }
}

impl<T: Clone> ProgramTable<T> {
    /// What was kept for `p` (fingerprint `hash`) built with `compiler`.
    pub fn get(&self, hash: u64, p: &MetalProgram, compiler: &str) -> Result<Option<T>> {
        let map = self.map.lock().map_err(|_| poisoned(p))?;
        let bucket = map.get(&hash);
        Ok(bucket.and_then(|b| b.iter().find(|(id, _)| id.matches(p, compiler)).map(|(_, r)| r.clone())))
    }

    /// Keeps `r` for `p` (fingerprint `hash`) built with `compiler`, unless one is kept already.
    pub fn insert(&self, hash: u64, p: &MetalProgram, compiler: &str, r: T) -> Result<()> {
        let mut map = self.map.lock().map_err(|_| poisoned(p))?;
        let bucket = map.entry(hash).or_default();
        if !bucket.iter().any(|(id, _)| id.matches(p, compiler)) {
            bucket.push((Identity::of(p, compiler), r));
        }
        Ok(())
    }
}

fn poisoned(p: &MetalProgram) -> Error {
    Error::invalid(p.kernel.as_str(), "program table lock poisoned")
}

/// A fast 64-bit hash of the parts that most often differ between programs.
pub(crate) fn fingerprint(p: &MetalProgram) -> u64 {
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
