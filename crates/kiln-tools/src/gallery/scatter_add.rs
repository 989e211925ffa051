//! Scatter-add with float atomics (an embedding-gradient accumulation):
//! `out[indices[n], j] += values[n, j]` for every row `n`, many rows hitting the same bin.
//!
//! One thread per value element; each adds with `atomic_fetch_add_explicit` on a pointer cast
//! `(device atomic_float*)&out[..]` (the output is a plain `device float*`, `atomic_outputs` is
//! off), relaxed order. `init_value = 0` zeroes the output first. The summation order varies
//! between runs, so results agree to rounding, not bit for bit.
//! Layout: `values` (N, M) of f32/f16/bf16, `indices` (N,) int32 in [0, V); output (V, M)
//! float32 (the atomic type). The f32 sums of dtype-rounded values are held to the f32 tolerance.
//! Reference: f64 sums of the dtype-rounded values.

use super::entry::{
    check_dtype, check_shape, dim, host_input, normal_input, values, Demo, Entry, KernelCache, Outcome, Part, Prepared,
    Rng, FLOAT_DTYPES,
};
use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

pub const ENTRY: Entry =
    Entry { name: "scatter_add", dtypes: &FLOAT_DTYPES, demo_dtypes: &[DType::F16], demo: Demo::Kernel(demo) };

const SOURCE: &str = r#"
    uint elem = thread_position_in_grid.x;
    uint M = values_shape[1];
    uint row = elem / M;
    uint col = elem % M;
    int target = indices[row];
    atomic_fetch_add_explicit(
        (device atomic_float*)&out[target * M + col],
        static_cast<float>(values[elem]),
        memory_order_relaxed);
"#;

static KERNEL: KernelCache<MetalKernel> = KernelCache::new();

fn prepare(vals: &Array, indices: &Array, bins: usize) -> Result<Prepared> {
    let op = "scatter_add";
    check_dtype(op, vals.dtype(), &FLOAT_DTYPES)?;
    check_dtype(op, indices.dtype(), &[DType::I32])?;
    let &[n, m] = vals.shape() else {
        return Err(Error::shape(op, format!("values must be 2-D (N, M), got {:?}", vals.shape())));
    };
    check_shape(op, "indices", indices, &[n])?;
    let kernel =
        KERNEL.one(op, || MetalKernel::new("gallery_scatter_add", &["values", "indices"], &["out"], SOURCE))?;
    let spec = LaunchSpec::new([dim(op, n * m)?, 1, 1], [256, 1, 1])
        .output(&[bins, m], DType::F32)
        .template("T", vals.dtype())
        .init_value(0.0);
    Ok(Prepared::new(kernel, vec![vals.into(), indices.into()], spec))
}

/// Sums the rows of `values` (N, M) into `bins` rows chosen by `indices` (N,); returns (bins, M)
/// float32. Indices must lie in `0..bins` (the kernel does not check them).
pub fn scatter_add(values: &Array, indices: &Array, bins: usize) -> Result<Array> {
    prepare(values, indices, bins)?.run_one()
}

pub fn reference(vals: &[f64], indices: &[usize], m: usize, bins: usize) -> Vec<f64> {
    let mut out = vec![0.0; bins * m];
    for (row, &target) in vals.chunks(m).zip(indices) {
        for (o, v) in out[target * m..(target + 1) * m].iter_mut().zip(row) {
            *o += v;
        }
    }
    out
}

/// One verified run: `n` rows of width `m` into `bins` bins.
pub fn check(device: Device, dtype: DType, n: usize, m: usize, bins: usize, seed: u64) -> Result<Outcome> {
    let mut rng = Rng::new(seed);
    let (vals, vv) = normal_input(&mut rng, device, dtype, &[n, m], 1.0)?;
    let idx: Vec<usize> = (0..n).map(|_| (rng.next_u64() % bins as u64) as usize).collect();
    let idx_f: Vec<f64> = idx.iter().map(|&i| i as f64).collect();
    let (indices, _) = host_input(DType::I32, &[n], &idx_f)?;
    let (outs, time) = prepare(&vals, &indices.to_device(device)?, bins)?.timed()?;
    let parts = vec![Part { name: "out", output: values(&outs[0])?, reference: reference(&vv, &idx, m, bins) }];
    Ok(Outcome { parts, tolerance_dtype: DType::F32, time })
}

fn demo(device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
    check(device, dtype, 1500, 7, 23, seed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_accumulates_repeated_bins() {
        let out = super::reference(&[1.0, 2.0, 10.0, 20.0, 100.0, 200.0], &[1, 0, 1], 2, 3);
        assert_eq!(out, vec![10.0, 20.0, 101.0, 202.0, 0.0, 0.0]);
    }
}
