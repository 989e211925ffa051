//! Programs by call signature: what a kernel's generated source depends on besides the kernel's
//! own fields (per input its dtype, rank and whether it is small, the template and the output
//! dtypes). A repeated call finds its program with a hash of those and a comparison, instead of
//! generating (and the backend hashing) the whole source again.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use super::launch::{LaunchSpec, OutputDTypes, TemplateArgs};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Per input its dtype, rank and whether it has fewer than 8 elements (a Metal kernel binds
/// those in `constant` space), the template and the output dtypes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Signature {
    inputs: Vec<(DType, usize, bool)>,
    template: TemplateArgs,
    outputs: OutputDTypes,
}

impl Signature {
    fn of(arrays: &[Array], spec: &LaunchSpec) -> Self {
        Signature {
            inputs: arrays.iter().map(|a| (a.dtype(), a.ndim(), a.size() < 8)).collect(),
            template: spec.template.clone(),
            outputs: spec.output_dtypes.clone(),
        }
    }

    /// Whether this is the signature of `arrays` and `spec`, without building theirs.
    fn matches(&self, arrays: &[Array], spec: &LaunchSpec) -> bool {
        self.inputs.len() == arrays.len()
            && self
                .inputs
                .iter()
                .zip(arrays)
                .all(|(&(d, n, s), a)| d == a.dtype() && n == a.ndim() && s == (a.size() < 8))
            && self.template == spec.template
            && self.outputs == spec.output_dtypes
    }
}

/// A cheap hash of what a signature holds, computed from the call's own arguments.
fn signature_hash(arrays: &[Array], spec: &LaunchSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    for a in arrays {
        (a.dtype(), a.ndim(), a.size() < 8).hash(&mut h);
    }
    spec.template.hash(&mut h);
    spec.output_dtypes.hash(&mut h);
    h.finish()
}

/// What a kernel made for each call signature. Clones share the table; a kernel's builder
/// methods start a fresh one, so a kernel changed after cloning never sees its original's.
pub(super) struct SignatureMemo<T>(Arc<Mutex<Table<T>>>);

/// Entries by signature hash, each with its whole signature.
type Table<T> = FxHashMap<u64, Vec<(Signature, Arc<T>)>>;

impl<T> Default for SignatureMemo<T> {
    fn default() -> Self {
        SignatureMemo(Arc::default())
    }
}

impl<T> Clone for SignatureMemo<T> {
    fn clone(&self) -> Self {
        SignatureMemo(self.0.clone())
    }
}

impl<T> std::fmt::Debug for SignatureMemo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.0.lock().map(|m| m.values().map(Vec::len).sum::<usize>()).unwrap_or(0);
        f.debug_struct("SignatureMemo").field("entries", &entries).finish()
    }
}

impl<T> SignatureMemo<T> {
    /// What was made for the signature of `arrays` and `spec`, made by `make` (and kept) the
    /// first time; an error of `make` is returned and nothing is kept.
    pub(super) fn get_or_make(
        &self,
        op: &str,
        arrays: &[Array],
        spec: &LaunchSpec,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let hash = signature_hash(arrays, spec);
        let poisoned = || Error::invalid(op, "program memo lock poisoned");
        if let Some(bucket) = self.0.lock().map_err(|_| poisoned())?.get(&hash) {
            if let Some((_, hit)) = bucket.iter().find(|(sig, _)| sig.matches(arrays, spec)) {
                return Ok(hit.clone());
            }
        }
        let made = Arc::new(make()?);
        let mut memo = self.0.lock().map_err(|_| poisoned())?;
        memo.entry(hash).or_default().push((Signature::of(arrays, spec), made.clone()));
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn array(dtype: DType, shape: &[usize]) -> Array {
        Array::full(dtype, shape, 1.0).unwrap()
    }

    #[test]
    fn each_signature_is_made_once_and_found_again() {
        let memo: SignatureMemo<usize> = SignatureMemo::default();
        let made = Cell::new(0);
        let get = |arrays: &[Array], spec: &LaunchSpec| {
            *memo
                .get_or_make("probe", arrays, spec, || {
                    made.set(made.get() + 1);
                    Ok(made.get())
                })
                .unwrap()
        };
        let spec = LaunchSpec::new(1, 1).output(&[4], DType::F32).template("N", 3);
        let (x, y) = (array(DType::F32, &[16]), array(DType::F16, &[16]));
        let first = get(std::slice::from_ref(&x), &spec);
        // The same signature (another shape of the same rank) finds the first.
        assert_eq!(get(&[array(DType::F32, &[40])], &spec), first);
        // Each part of the signature makes its own: the dtype, the rank, a small input, the
        // template, the output dtypes.
        let others = [
            get(&[y], &spec),
            get(&[array(DType::F32, &[4, 4])], &spec),
            get(&[array(DType::F32, &[2])], &spec),
            get(std::slice::from_ref(&x), &LaunchSpec::new(1, 1).output(&[4], DType::F32).template("N", 4)),
            get(std::slice::from_ref(&x), &LaunchSpec::new(1, 1).output(&[4], DType::I32).template("N", 3)),
        ];
        let mut all = vec![first];
        all.extend(others);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6, "{all:?}");
        assert_eq!(made.get(), 6);
        // Clones share the table.
        let clone = memo.clone();
        assert_eq!(*clone.get_or_make("probe", &[x], &spec, || Ok(99)).unwrap(), first);
    }

    #[test]
    fn a_failed_make_is_not_kept() {
        let memo: SignatureMemo<u32> = SignatureMemo::default();
        let spec = LaunchSpec::new(1, 1).output(&[1], DType::F32);
        let x = [array(DType::F32, &[8])];
        let err = memo.get_or_make("probe", &x, &spec, || Err(Error::invalid("probe", "no"))).unwrap_err();
        assert!(err.to_string().contains("no"), "{err}");
        assert_eq!(*memo.get_or_make("probe", &x, &spec, || Ok(7)).unwrap(), 7);
    }
}
