//! Random inputs for the benchmark cases, generated on the device they run on (never all
//! zeros), and the reads and subsamples their checks take.

use kiln::array::Array;
use kiln::check::Rng;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{KernelInput, LaunchSpec, MetalKernel};
use kiln::ops::KernelCache;

// A hash of the element index and seed, generated where the array lives: inputs of hundreds of
// millions of elements cost milliseconds instead of host seconds.
const FILL_SOURCE: &str = r#"
    uint i = thread_position_in_grid.x;
    uint h = (i * 0x9E3779B9u) ^ static_cast<uint>(seed);
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
    out[i] = static_cast<T>(lo + (hi - lo) * u);
"#;

static FILL: KernelCache<MetalKernel> = KernelCache::new();

/// A random input of `shape` on `device`, uniform in [lo, hi), and the values it holds.
pub fn input(
    device: Device,
    dtype: DType,
    shape: &[usize],
    rng: &mut Rng,
    lo: f64,
    hi: f64,
) -> Result<(Array, Vec<f64>)> {
    let a = device_input(device, dtype, shape, rng, lo, hi)?;
    let values = host_values(&a)?;
    Ok((a, values))
}

/// A random input of `shape` on `device`, uniform in [lo, hi) (never all zeros).
pub fn device_input(device: Device, dtype: DType, shape: &[usize], rng: &mut Rng, lo: f64, hi: f64) -> Result<Array> {
    let kernel = FILL.one("bench", || MetalKernel::new("bench_fill", &["seed", "lo", "hi"], &["out"], FILL_SOURCE))?;
    let n: usize = shape.iter().product();
    let grid = u32::try_from(n).map_err(|_| Error::invalid("bench", format!("{n} elements exceed one fill")))?;
    let spec = LaunchSpec::new([grid, 1, 1], [256, 1, 1]).output(shape, dtype).template("T", dtype).device(device);
    let seed = (rng.next_u64() & 0x7fff_ffff) as i64;
    let mut outs = kernel.call(&[KernelInput::Int(seed), KernelInput::Float(lo), KernelInput::Float(hi)], &spec)?;
    outs.pop().ok_or_else(|| Error::invalid("bench", "fill returned no output"))
}

/// The values of a device array (waits for it).
pub fn host_values(a: &Array) -> Result<Vec<f64>> {
    a.to_host()?.to_f64_vec()
}

/// Every `step`-th index below `n`, at most about `max` of them.
pub fn sample(n: usize, max: usize) -> impl Iterator<Item = usize> {
    (0..n).step_by(n.div_ceil(max.max(1)).max(1))
}
