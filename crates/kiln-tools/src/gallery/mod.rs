//! The seed gallery: real-world MLX-style kernels written as `MetalKernel` bodies, each run on
//! fresh random inputs and checked against a plain-Rust f64 reference. `kiln demo` prints the
//! table `run_demo` returns; the tests run every kernel at several shapes and dtypes.
//!
//! Every gallery module offers a launcher (the kernel as a library call), a reference, and
//! `check(device, dtype, shape.., seed) -> Outcome` that does one verified run; `demo` is
//! `check` at the demo shape.

mod report;

pub mod attention;
pub mod cholesky;
pub mod exp;
pub mod gdn_kkt;
pub mod gelu;
pub mod grid_sample;
pub mod grid_sample_cuda;
pub mod grid_sample_vjp;
pub mod library;
pub mod overlap_add;
pub mod residual_rms_norm;
pub mod rms_norm;
pub mod rope;
pub mod scatter_add;
pub mod silu;
pub mod softmax;

use std::time::Duration;

pub use kiln::check::{rel_l2, tolerance, Rng};
pub use report::{DemoReport, DemoRow};

use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};

/// The three float dtypes every templated gallery kernel supports.
pub const FLOAT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// One verified demo run of a kernel on a device, in a dtype, from a seed.
pub type DemoFn = fn(Device, DType, u64) -> Result<Outcome>;

/// What a demo row runs: a gallery kernel's own run, or a library op through its registry
/// entry.
#[derive(Clone, Copy, Debug)]
pub enum Demo {
    Kernel(DemoFn),
    Op(&'static kiln::ops::OpEntry),
}

/// One gallery kernel: its name, the dtypes it accepts, the dtypes the demo runs it in, and
/// the demo run itself.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub name: &'static str,
    pub dtypes: &'static [DType],
    pub demo_dtypes: &'static [DType],
    pub demo: Demo,
}

impl Entry {
    /// One verified demo run on `device` in `dtype` from `seed`.
    pub fn run(&self, device: Device, dtype: DType, seed: u64) -> Result<Outcome> {
        match self.demo {
            Demo::Kernel(run) => run(device, dtype, seed),
            Demo::Op(op) => library::demo(op, device, dtype, seed),
        }
    }
}

/// Every gallery kernel, in demo order.
pub fn entries() -> Vec<Entry> {
    vec![
        exp::ENTRY,
        exp::STRIDED_ENTRY,
        silu::ENTRY,
        gelu::ENTRY,
        rms_norm::BASIC_ENTRY,
        rms_norm::MULTI_SIMDGROUP_ENTRY,
        residual_rms_norm::ENTRY,
        softmax::ENTRY,
        rope::ENTRY,
        attention::ENTRY,
        scatter_add::ENTRY,
        overlap_add::ENTRY,
        grid_sample::ENTRY,
        grid_sample_vjp::ENTRY,
        cholesky::ENTRY,
        gdn_kkt::ENTRY,
    ]
}

/// Runs every gallery entry, then every library entry, in each of its demo dtypes on `device`
/// and collects the table. A kernel that fails to run becomes a failed row carrying its error,
/// so one broken kernel does not hide the others.
pub fn run_demo(device: Device) -> Result<DemoReport> {
    run_demo_with_progress(device, &mut |_, _, _, _| {})
}

/// [`run_demo`], calling `progress(kernel, dtype, index, total)` before each run (the first
/// call of a kernel compiles it, so a run can take seconds).
pub fn run_demo_with_progress(
    device: Device,
    progress: &mut dyn FnMut(&str, DType, usize, usize),
) -> Result<DemoReport> {
    kiln::backend::backend_for(device)?;
    let all: Vec<Entry> = entries().into_iter().chain(library::entries()).collect();
    let total = all.iter().map(|e| e.demo_dtypes.len()).sum();
    let mut rows = Vec::new();
    for entry in all {
        for &dtype in entry.demo_dtypes {
            progress(entry.name, dtype, rows.len(), total);
            let seed = 0x6b69_6c6e ^ (rows.len() as u64);
            rows.push(DemoRow::from_run(entry.name, dtype, device, entry.run(device, dtype, seed)));
        }
    }
    Ok(DemoReport { device, rows })
}

/// One named output of a verified run with its reference values.
#[derive(Clone, Debug)]
pub struct Part {
    pub name: &'static str,
    pub output: Vec<f64>,
    pub reference: Vec<f64>,
}

/// The result of one verified run: every output beside its reference, the dtype whose
/// tolerance applies, and the wall time of one warm call (outputs copied back included).
#[derive(Clone, Debug)]
pub struct Outcome {
    pub parts: Vec<Part>,
    pub tolerance_dtype: DType,
    pub time: Duration,
}

impl Outcome {
    /// The worst relative L2 error over the outputs.
    pub fn error(&self) -> f64 {
        self.parts.iter().map(|p| rel_l2(&p.output, &p.reference)).fold(0.0, f64::max)
    }

    pub fn tolerance(&self) -> f64 {
        tolerance(self.tolerance_dtype)
    }

    pub fn passed(&self) -> bool {
        self.error() <= self.tolerance()
    }
}

/// Kernels built once per process, as the library builds them.
pub(crate) use kiln::ops::KernelCache;

/// Checks that `dtype` is one of `allowed` for the kernel `op`.
pub(crate) fn check_dtype(op: &str, dtype: DType, allowed: &[DType]) -> Result<()> {
    if allowed.contains(&dtype) {
        Ok(())
    } else {
        Err(Error::dtype(op, dtype, format!("expected one of {allowed:?}")))
    }
}

/// Checks that `a` has exactly `shape`.
pub(crate) fn check_shape(op: &str, what: &str, a: &Array, shape: &[usize]) -> Result<()> {
    if a.shape() == shape {
        Ok(())
    } else {
        Err(Error::shape(op, format!("{what} has shape {:?}, expected {shape:?}", a.shape())))
    }
}

/// A grid or threadgroup extent as the `u32` Metal takes.
pub(crate) fn dim(op: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(op, format!("dispatch extent {n} exceeds u32")))
}

/// A kernel call ready to run: the launcher functions build one, `check` poisons and times it.
pub(crate) type Prepared = kiln::ops::OpCall;

/// A host array of `dtype` from `values` plus the values it actually holds after rounding to
/// the dtype (what a reference must be fed).
pub(crate) fn host_input(dtype: DType, shape: &[usize], values: &[f64]) -> Result<(Array, Vec<f64>)> {
    let a = Array::from_f64(dtype, shape, values)?;
    let rounded = a.to_f64_vec()?;
    Ok((a, rounded))
}

/// A normal-distributed input on `device` and its rounded host values.
pub(crate) fn normal_input(
    rng: &mut Rng,
    device: Device,
    dtype: DType,
    shape: &[usize],
    scale: f64,
) -> Result<(Array, Vec<f64>)> {
    let n = shape.iter().product();
    let (a, rounded) = host_input(dtype, shape, &rng.normals(n, scale))?;
    Ok((a.to_device(device)?, rounded))
}

/// Reads a host output as f64 values.
pub(crate) fn values(a: &Array) -> Result<Vec<f64>> {
    a.to_f64_vec()
}
