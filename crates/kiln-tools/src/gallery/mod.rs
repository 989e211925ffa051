//! The seed gallery: real-world MLX-style kernels written as `MetalKernel` bodies, each run on
//! fresh random inputs and checked against a plain-Rust f64 reference. `kiln demo` prints the
//! table `run_demo` returns; the tests run every kernel at several shapes and dtypes.
//!
//! Every gallery module offers a launcher (the kernel as a library call), a reference, and
//! `check(device, dtype, shape.., seed) -> Outcome` that does one verified run; `demo` is
//! `check` at the demo shape.

mod entry;
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

pub use entry::{rel_l2, tolerance, Demo, DemoFn, Entry, Outcome, Part, Rng, FLOAT_DTYPES};
pub use report::{DemoReport, DemoRow};

use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::Result;

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
