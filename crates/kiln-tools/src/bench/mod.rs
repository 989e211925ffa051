//! Benchmarks of the kernel library: per op and shape, the median device time of many runs
//! (CUDA events, L2 flushed before each run, inputs random and never all zeros), with bytes and
//! FLOPs counted as the fewest the op must move and do, against the copy roofline measured in
//! the same run and against a copy of the case's own bytes (the most a kernel of that size
//! can reach under the same timer). Every case is checked against its reference at the benchmark shape first; a
//! case whose output is wrong gets no time.
//!
//! `kiln bench` drives this module; `bench/peers.py` writes the same JSON for PyTorch and
//! friends, and [`report::compare`] prints kiln/peer ratios.

pub mod cases;
pub mod compile_time;
mod docs_cases;
pub mod host;
pub mod inputs;
pub mod library_compile;
pub mod plot;
pub mod report;

use std::sync::Arc;
use std::time::Instant;

use kiln::array::Array;
use kiln::backend::cuda::{self, CudaBackend};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};

pub use report::{CaseResult, Report, Status};

/// A case: one op at one shape and dtype.
pub struct Case {
    /// The op's name, e.g. `rms_norm`.
    pub op: &'static str,
    /// The shape as text, e.g. `16384x4096`; with `op` and `dtype` it names the case.
    pub shape: String,
    pub dtype: DType,
    /// The fewest bytes the op must move: each input read once, each output written once.
    pub bytes: f64,
    /// The fewest floating-point operations the op must do.
    pub flops: f64,
    /// Builds inputs on a device; the seed makes them reproducible.
    pub prepare: Box<dyn Fn(Device, u64) -> Result<Prepared>>,
}

impl Case {
    /// The name shared with peers' JSON: `op/shape/dtype`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.op, self.shape, self.dtype.name())
    }
}

/// Queues one run and returns its outputs (device arrays; reading them waits).
pub type RunFn = Box<dyn FnMut() -> Result<Vec<Array>>>;
/// The relative L2 error of a run's host outputs against the reference.
pub type ErrorFn = Box<dyn Fn(&[Array]) -> Result<f64>>;

/// A prepared case: a closure that queues one run, and the check of its outputs.
pub struct Prepared {
    pub run: RunFn,
    /// Possibly on a subsample of elements or rows.
    pub error: ErrorFn,
    /// The largest error that passes.
    pub tolerance: f64,
}

/// How to run the benchmarks.
#[derive(Clone, Debug)]
pub struct Options {
    pub device: Device,
    /// Only cases whose id contains this text; several texts separated by commas select the
    /// cases that contain any of them.
    pub filter: Option<String>,
    /// Device time to spend timing each case, in seconds (bounded by `min_reps`/`max_reps`).
    pub time_per_case: f64,
    pub min_reps: usize,
    pub max_reps: usize,
    /// Bytes of the roofline copy.
    pub copy_bytes: usize,
    /// The commit measured, recorded in the report.
    pub commit: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            device: Device::Cpu,
            filter: None,
            time_per_case: 0.25,
            min_reps: 10,
            max_reps: 200,
            copy_bytes: 1 << 30,
            commit: String::new(),
        }
    }
}

/// Times runs on the device: CUDA events with an L2 flush, or the wall clock on the host.
enum Clock {
    Cuda(Arc<CudaBackend>),
    Host,
}

impl Clock {
    fn for_device(device: Device) -> Result<Clock> {
        match device {
            Device::Cuda(i) => Ok(Clock::Cuda(cuda::cuda_backend(i)?)),
            Device::Cpu => Ok(Clock::Host),
            Device::Metal(_) => Err(Error::invalid("bench", "timing on Metal devices is not supported")),
        }
    }

    fn device_name(&self) -> String {
        match self {
            Clock::Cuda(b) => b.device_name(),
            Clock::Host => format!("host CPU ({} threads)", rayon::current_num_threads()),
        }
    }

    /// Milliseconds of each of `reps` runs of `body`.
    fn time(&self, reps: usize, body: &mut dyn FnMut() -> Result<()>) -> Result<Vec<f64>> {
        match self {
            Clock::Cuda(b) => b.timer(true)?.time(reps, body),
            Clock::Host => (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    body()?;
                    Ok(t.elapsed().as_secs_f64() * 1e3)
                })
                .collect(),
        }
    }

    /// Milliseconds of each of `reps` copies of `bytes` within device memory.
    fn copy(&self, bytes: usize, reps: usize) -> Result<Vec<f64>> {
        match self {
            Clock::Cuda(b) => b.timer(true)?.copy(bytes, reps),
            Clock::Host => {
                let src = vec![0x3cu8; bytes];
                let mut dst = vec![0u8; bytes];
                self.time(reps, &mut || {
                    dst.copy_from_slice(&src);
                    Ok(())
                })
            }
        }
    }

    fn synchronize(&self) -> Result<()> {
        match self {
            Clock::Cuda(b) => b.synchronize_all(),
            Clock::Host => Ok(()),
        }
    }
}

/// Whether a filter (texts separated by commas) selects the case `id`: some text is part of it.
fn selects(filter: &str, id: &str) -> bool {
    filter.split(',').any(|f| id.contains(f))
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

/// Hears a case id, its position, the total, and (once it ran) its result.
pub type Progress<'a> = dyn FnMut(&str, usize, usize, Option<&CaseResult>) + 'a;

/// Runs `cases` (those matching the filter) and the copy roofline; `progress` hears each case
/// id as it starts (with its position and the total) and again with its result.
pub fn run(cases: Vec<Case>, opts: &Options, progress: &mut Progress<'_>) -> Result<Report> {
    let clock = Clock::for_device(opts.device)?;
    let cases: Vec<Case> =
        cases.into_iter().filter(|c| opts.filter.as_deref().is_none_or(|f| selects(f, &c.id()))).collect();
    let total = cases.len() + 1;
    progress("copy roofline", 0, total, None);
    let copy_ms = median(&clock.copy(opts.copy_bytes, 20)?);
    let copy_gbs = 2.0 * opts.copy_bytes as f64 / (copy_ms * 1e-3) / 1e9;
    let mut report = Report::new(clock.device_name(), opts.device, opts.commit.clone(), copy_gbs);
    report.cases.push(CaseResult {
        id: format!("copy/{}/uint8", opts.copy_bytes),
        op: "copy".into(),
        shape: opts.copy_bytes.to_string(),
        dtype: "uint8".into(),
        bytes: 2.0 * opts.copy_bytes as f64,
        flops: 0.0,
        median_ms: Some(copy_ms),
        error: Some(0.0),
        tolerance: 0.0,
        status: Status::Ok,
        note: "device-to-device copy: the roofline".into(),
        copy_ms: Some(copy_ms),
    });
    // Copies of each case's bytes, by size: the roofline a kernel of that size can reach (short
    // transfers do not reach the large copy's bandwidth).
    let mut copies: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
    for (i, case) in cases.iter().enumerate() {
        progress(&case.id(), i + 1, total, None);
        let result = run_case(&clock, case, opts, 0x6b69_6c6e ^ i as u64);
        let mut r = CaseResult::of(case, result, copy_gbs);
        if r.median_ms.is_some() {
            let half = ((case.bytes / 2.0) as usize).next_multiple_of(16).max(16);
            r.copy_ms = match copies.get(&half) {
                Some(&ms) => Some(ms),
                None => {
                    let ms = median(&clock.copy(half, 20)?);
                    copies.insert(half, ms);
                    Some(ms)
                }
            };
        }
        report.cases.push(r);
        if let Some(last) = report.cases.last() {
            progress(&case.id(), i + 1, total, Some(last));
        }
        // A fault leaves nothing queued behind it; later cases start clean.
        let _ = clock.synchronize();
    }
    Ok(report)
}

/// (median ms, error) of one case; the time is `None` when the check fails.
fn run_case(clock: &Clock, case: &Case, opts: &Options, seed: u64) -> Result<(Option<f64>, f64, f64)> {
    let mut prepared = (case.prepare)(opts.device, seed)?;
    let outs = (prepared.run)()?;
    let host = outs.iter().map(Array::to_host).collect::<Result<Vec<_>>>()?;
    drop(outs);
    let error = (prepared.error)(&host)?;
    drop(host);
    if error.is_nan() || error > prepared.tolerance {
        return Ok((None, error, prepared.tolerance));
    }
    let run = &mut prepared.run;
    let mut body = || run().map(drop);
    let first = median(&clock.time(3, &mut body)?);
    let reps = ((opts.time_per_case * 1e3 / first.max(1e-3)) as usize).clamp(opts.min_reps, opts.max_reps);
    let times = clock.time(reps, &mut body)?;
    Ok((Some(median(&times)), error, prepared.tolerance))
}

#[cfg(test)]
mod tests {
    use super::selects;

    #[test]
    fn a_filter_selects_the_ids_containing_any_of_its_texts() {
        assert!(selects("rms_norm/", "residual_rms_norm/16384x1024/float32"));
        assert!(selects("softmax/,exp/", "exp/67108864/float16"));
        assert!(!selects("softmax/,exp/", "rope/32x32x1024x128/bfloat16"));
        assert!(selects("", "anything"));
    }
}
