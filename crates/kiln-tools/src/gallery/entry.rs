//! What every gallery kernel shares: its entry in the demo, the outcome of a verified run,
//! and the input and check helpers the kernel files use.

use std::time::Duration;

pub use kiln::check::{rel_l2, tolerance, Rng};

use kiln::array::Array;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};

/// The three float dtypes every templated gallery kernel supports.
pub const FLOAT_DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// One verified demo run of a kernel on a device, in a dtype, from a seed.
pub type DemoFn = fn(Device, DType, u64) -> Result<Outcome>;

/// What a demo row runs: a gallery kernel's own run, or a library op through its registry
/// entry and its entry in the tools' table.
#[derive(Clone, Copy, Debug)]
pub enum Demo {
    Kernel(DemoFn),
    Op(crate::op_table::Op),
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
