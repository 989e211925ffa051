//! Running any registry op without knowing it: its inputs drawn as its table entry's `setup`
//! says (`op_table`), the op planned with its registry entry's `plan` and run, and the outputs
//! checked against the registry entry's `reference` (on the part of the problem the table
//! entry's `check` names, for benchmark sizes). The demo, `kiln bench` and the
//! criterion benches build their library runs from these.

use crate::op_table::{InputSpec, OpHooks, Sampled};
use kiln::array::Array;
use kiln::check::{rel_l2, tolerance, Rng};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::ops::{HostInput, OpEntry};

/// The inputs of one run of an entry: arrays, the op's parameters and the dtype whose
/// tolerance applies.
#[derive(Clone, Debug)]
pub struct OpInputs {
    pub arrays: Vec<Array>,
    pub params: Vec<f64>,
    pub tolerance_dtype: DType,
}

impl OpInputs {
    /// The inputs `hooks` sets up in `dtype` at `dims` (with a shape's `params`), drawn on the
    /// host from `rng` and moved to `device`.
    pub fn on_host(
        hooks: &OpHooks,
        dtype: DType,
        dims: &[usize],
        params: &[f64],
        device: Device,
        rng: &mut Rng,
    ) -> Result<OpInputs> {
        let mut draw = |spec: &InputSpec, rng: &mut Rng| Array::from_f64(spec.dtype, &spec.shape, &spec.draw(rng));
        Self::drawn(hooks, dtype, dims, params, device, rng, &mut draw)
    }

    /// As [`on_host`](Self::on_host), with `draw` making each input array.
    pub fn drawn(
        hooks: &OpHooks,
        dtype: DType,
        dims: &[usize],
        params: &[f64],
        device: Device,
        rng: &mut Rng,
        draw: &mut dyn FnMut(&InputSpec, &mut Rng) -> Result<Array>,
    ) -> Result<OpInputs> {
        let setup = (hooks.setup)(dtype, dims, params);
        let arrays = setup.inputs.iter().map(|spec| draw(spec, rng)?.to_device(device)).collect::<Result<_>>()?;
        Ok(OpInputs { arrays, params: setup.params, tolerance_dtype: setup.tolerance })
    }

    /// The inputs' values in f64 (waits for device arrays).
    pub fn host(&self) -> Result<Vec<HostInput>> {
        self.arrays.iter().map(host_input).collect()
    }

    /// Plans the op on these inputs and runs it; the outputs live on the inputs' device.
    pub fn run(&self, entry: &OpEntry) -> Result<Vec<Array>> {
        (entry.plan)(&self.arrays, &self.params)?.run()
    }

    /// The largest error that passes.
    pub fn tolerance(&self) -> f64 {
        tolerance(self.tolerance_dtype)
    }
}

/// An array's values in f64 with its shape and dtype (waits for a device array).
pub fn host_input(a: &Array) -> Result<HostInput> {
    Ok(HostInput { shape: a.shape().to_vec(), dtype: a.dtype(), values: a.to_host()?.to_f64_vec()? })
}

/// The rows `rows` of `x`, a row being its last `row_axes` axes (`None`: all of `x`), as an
/// array of the same rank whose leading axes hold the rows.
pub fn rows_of(x: &HostInput, row_axes: Option<usize>, rows: &[usize]) -> HostInput {
    let Some(k) = row_axes.filter(|&k| k < x.shape.len()) else { return x.clone() };
    let lead = x.shape.len() - k;
    let row_len: usize = x.shape[lead..].iter().product();
    let count = x.shape[..lead].iter().product::<usize>();
    let rows: Vec<usize> = rows.iter().copied().filter(|&r| r < count).collect();
    let mut shape = vec![1; lead - 1];
    shape.push(rows.len());
    shape.extend_from_slice(&x.shape[lead..]);
    let values = rows.iter().flat_map(|&r| x.values[r * row_len..(r + 1) * row_len].iter().copied()).collect();
    HostInput { shape, dtype: x.dtype, values }
}

/// The worst relative L2 error of `outputs` against `entry`'s reference on `inputs`, both cut
/// to the part `check` names for the run's sizes `dims` (all of them when `None`).
pub fn error(
    entry: &OpEntry,
    dims: &[usize],
    inputs: &[HostInput],
    params: &[f64],
    outputs: &[HostInput],
    check: Option<Sampled>,
) -> Result<f64> {
    let (inputs, outputs): (Vec<HostInput>, Vec<HostInput>) = match check {
        None => (inputs.to_vec(), outputs.to_vec()),
        Some(part) => {
            let rows = (part.rows)(dims);
            let axes = |i: usize| part.row_axes.get(i).copied().flatten();
            let ins = inputs.iter().enumerate().map(|(i, x)| rows_of(x, axes(i), &rows)).collect();
            let outs =
                outputs.iter().enumerate().map(|(i, x)| rows_of(x, axes(entry.inputs.len() + i), &rows)).collect();
            (ins, outs)
        }
    };
    let want = (entry.reference)(&inputs, params);
    if want.len() != outputs.len() {
        let msg = format!("{} outputs, the reference gives {}", outputs.len(), want.len());
        return Err(Error::invalid(entry.name, msg));
    }
    Ok(outputs.iter().zip(&want).map(|(got, want)| rel_l2(&got.values, want)).fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_takes_whole_rows_of_the_trailing_axes_and_keeps_the_rank() {
        let x = HostInput { shape: vec![2, 3, 2], dtype: DType::F32, values: (0..12).map(f64::from).collect() };
        let two = rows_of(&x, Some(1), &[1, 4, 9]);
        assert_eq!((two.shape.as_slice(), two.values.as_slice()), (&[1, 2, 2][..], &[2.0, 3.0, 8.0, 9.0][..]));
        let first = rows_of(&x, Some(2), &[0]);
        assert_eq!(
            (first.shape.as_slice(), first.values.as_slice()),
            (&[1, 3, 2][..], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0][..])
        );
        let elements = rows_of(&x, Some(0), &[0, 11]);
        assert_eq!((elements.shape.as_slice(), elements.values.as_slice()), (&[1, 1, 2][..], &[0.0, 11.0][..]));
        assert_eq!(rows_of(&x, None, &[0]).values, x.values);
    }
}
