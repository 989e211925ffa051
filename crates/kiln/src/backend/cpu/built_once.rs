//! What this process builds once per key (a precompiled prelude, a scheduler object, a kernel
//! library): a gate per key, so one thread builds while the others wait for it, and the
//! outcome remembered per key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Outcomes per key and the gates that serialise their builds.
pub(super) struct BuiltOnce<T> {
    known: Mutex<HashMap<String, T>>,
    gates: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl<T: Clone> BuiltOnce<T> {
    pub(super) fn new() -> Self {
        BuiltOnce { known: Mutex::new(HashMap::new()), gates: Mutex::new(HashMap::new()) }
    }

    /// The outcome for `key`: remembered, or built now by `build` (one thread per key at a time;
    /// the others wait and take its outcome).
    pub(super) fn get_or_build(&self, key: &str, build: impl FnOnce() -> T) -> T {
        if let Some(known) = self.get(key) {
            return known;
        }
        let gate = self.gate(key);
        let _building = gate.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = self.get(key) {
            return known;
        }
        let made = build();
        self.known.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_string(), made.clone());
        made
    }

    fn get(&self, key: &str) -> Option<T> {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// Forgets the outcome for `key` (the next `get_or_build` builds it again).
    pub(super) fn forget(&self, key: &str) {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Forgets every outcome, as a new process would know nothing (tests).
    #[cfg(test)]
    pub(super) fn forget_all(&self) {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The gate of `key`, for a caller that builds under it without remembering an outcome.
    pub(super) fn gate(&self, key: &str) -> Arc<Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        gates.entry(key.to_string()).or_default().clone()
    }
}
