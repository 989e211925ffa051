//! An op's inputs as host values in f64 ([`HostInput`]), what the registry entries' references
//! take, and the accessors those references read the sizes and parameters with.

use crate::dtype::{element_bytes_to_f64, f64_to_element_bytes, DType};

/// One input's values in f64 (as stored in its dtype), with its shape and dtype.
#[derive(Clone, Debug)]
pub struct HostInput {
    /// The array's shape.
    pub shape: Vec<usize>,
    /// The dtype the values are stored in.
    pub dtype: DType,
    /// The values, row-major.
    pub values: Vec<f64>,
}

/// The values of input `i` (none if it is missing).
pub(super) fn values(inputs: &[HostInput], i: usize) -> &[f64] {
    inputs.get(i).map_or(&[], |x| &x.values)
}

/// The shape of input `i` (empty if it is missing).
pub(super) fn shape(inputs: &[HostInput], i: usize) -> &[usize] {
    inputs.get(i).map_or(&[], |x| &x.shape)
}

/// The dtype of input `i` (float32 if it is missing).
pub(super) fn dtype(inputs: &[HostInput], i: usize) -> DType {
    inputs.get(i).map_or(DType::F32, |x| x.dtype)
}

/// Parameter `i`, 0 if it is missing.
pub(super) fn number(params: &[f64], i: usize) -> f64 {
    params.get(i).copied().unwrap_or(0.0)
}

/// Sizes `N` of a shape, missing ones 0.
pub(super) fn sizes<const N: usize>(dims: &[usize]) -> [usize; N] {
    let mut out = [0; N];
    for (o, d) in out.iter_mut().zip(dims) {
        *o = *d;
    }
    out
}

/// The last size of a shape, at least 1.
pub(super) fn last(dims: &[usize]) -> usize {
    dims.last().copied().unwrap_or(1).max(1)
}

/// `value` rounded to `dtype`, as an array of it would store it.
pub(super) fn round_to(dtype: DType, value: f64) -> f64 {
    element_bytes_to_f64(&f64_to_element_bytes(value, dtype), dtype)
}
