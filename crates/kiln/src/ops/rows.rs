//! What the row-wise ops (`rms_norm`, `residual_rms_norm`, `softmax`) share: how rows map to
//! threads ([`RowMapping`]: a row per simdgroup or per threadgroup on GPUs, a row per thread on
//! the CPU), how many 4-element chunks a thread keeps in registers, the kernel source that finds
//! a row and sums over it, and the six row-kernel variants each op builds.

use super::kernel_cache::KernelCache;
use super::util::{grid_dim, index_i32, round_up, SIMD};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::kernel::{LaunchSpec, MetalKernel};

/// Longest row handled by one simdgroup.
pub const SIMDGROUP_MAX_D: usize = 1024;
/// Rows per threadgroup of the simdgroup variant.
const ROWS_PER_GROUP: usize = 2;
/// Units each thread of a threadgroup row aims for: enough loads in flight per thread, and
/// small threadgroups so that several rows share a multiprocessor.
pub(crate) const UNITS_PER_THREAD: usize = 4;
/// Most 4-element chunks a thread keeps in registers (32 floats); longer rows loop.
pub(crate) const MAX_REGISTER_CHUNKS: usize = 8;
/// Most threads per row of the packed plan: two 512-thread rows fit on a multiprocessor at
/// up to 64 registers per thread.
const MAX_PACKED_THREADS: usize = 512;
/// Most packed 16-byte units a thread keeps (64 registers).
const MAX_PACKED_UNITS: usize = 16;

/// Threads of a threadgroup that owns one row of `d` elements: about 8 elements per thread
/// (two 16-byte loads for f32), whole simdgroups, at most 1024.
pub(crate) fn threads_per_row(d: usize) -> usize {
    round_up(d.div_ceil(8), SIMD).clamp(SIMD, 1024)
}

/// Elements a threadgroup of the CPU's row-per-thread plan covers at least (whole rows, at most
/// 256 of them): enough work per group that the per-group cost does not show.
const THREAD_ROWS_ELEMENTS: usize = 4096;

/// How rows map to threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowMapping {
    /// One simdgroup per row: the grid is rows × 32 threads, 2 rows per threadgroup.
    Simdgroup,
    /// One threadgroup per row.
    Threadgroup,
    /// One thread per row, the CPU's plan: no SIMD-group function and no barrier, so the CPU
    /// backend runs the kernel as a plain loop over its threads, a row each.
    Thread,
}

impl RowMapping {
    fn name(self) -> &'static str {
        match self {
            RowMapping::Simdgroup => "simdgroup",
            RowMapping::Threadgroup => "threadgroup",
            RowMapping::Thread => "thread",
        }
    }

    fn slot(self) -> usize {
        match self {
            RowMapping::Simdgroup => 0,
            RowMapping::Threadgroup => 1,
            RowMapping::Thread => 2,
        }
    }
}

/// How a row kernel finds its row. Defines `row`, `tid` (the thread within the row) and `nt`
/// (threads per row).
pub(crate) fn row_index_source(mapping: RowMapping) -> &'static str {
    match mapping {
        RowMapping::Simdgroup => {
            "uint row = thread_position_in_grid.x / 32;\n    uint tid = thread_index_in_simdgroup;\n    uint nt = 32;"
        }
        RowMapping::Threadgroup => {
            "uint row = threadgroup_position_in_grid.x;\n    uint tid = thread_index_in_threadgroup;\n    uint nt = threads_per_threadgroup.x;"
        }
        RowMapping::Thread => "uint row = thread_position_in_grid.x;\n    uint tid = 0;\n    uint nt = 1;",
    }
}

/// Sums the f32 `var` over the threads of a row, leaving the total in `var` of every thread:
/// `simd_sum`, then (threadgroup rows) one barrier and every thread adding the simdgroup
/// partials in the same order, so all threads hold the same bits. A thread that owns its row
/// holds the total already.
pub(crate) fn row_sum_source(mapping: RowMapping, var: &str) -> String {
    match mapping {
        RowMapping::Simdgroup => return format!("{var} = simd_sum({var});"),
        RowMapping::Thread => return String::new(),
        RowMapping::Threadgroup => {}
    }
    format!(
        "{var} = simd_sum({var});
    threadgroup float kiln_parts[32];
    if (thread_index_in_simdgroup == 0) {{
        kiln_parts[simdgroup_index_in_threadgroup] = {var};
    }}
    threadgroup_barrier(mem_flags::mem_threadgroup);
    {var} = 0.0f;
    for (uint s = 0; s < simdgroups_per_threadgroup; ++s) {{
        {var} += kiln_parts[s];
    }}"
    )
}

/// The six row-kernel variants of an op (a row per simdgroup, threadgroup or thread; vec4 or
/// scalar loads), each built once and named `<base>_<simdgroup|threadgroup|thread>[_vec4]`.
pub(crate) struct RowKernels(KernelCache<MetalKernel, 6>);

impl RowKernels {
    pub(crate) const fn new() -> Self {
        RowKernels(KernelCache::new())
    }

    /// The variant for `(mapping, vec4)`; `source` builds its body on first use.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get(
        &'static self,
        op: &str,
        base: &str,
        inputs: &[&str],
        outputs: &[&str],
        header: &str,
        mapping: RowMapping,
        vec4: bool,
        source: impl FnOnce() -> String,
    ) -> Result<&'static MetalKernel> {
        let slot = mapping.slot() * 2 + usize::from(vec4);
        self.0.get(op, slot, || {
            let name = format!("{base}_{}{}", mapping.name(), if vec4 { "_vec4" } else { "" });
            Ok(MetalKernel::new(name, inputs, outputs, source())?.header(header))
        })
    }
}

/// Units per thread of an op's register rows (the plan's default is [`UNITS_PER_THREAD`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowUnits {
    /// f32 rows of D ≤ 1024 (more than 32 threads make it a threadgroup row).
    pub short_f32: usize,
    /// f16/bf16 rows of D > 1024 in the float register form.
    pub long_16bit: usize,
    /// f32 rows of D > 1024.
    pub long_f32: usize,
}

/// The row-to-thread mapping and register plan, of every row-wise op.
pub(crate) struct RowLaunch {
    pub mapping: RowMapping,
    pub grid: u32,
    pub group: u32,
    /// Units per thread held in registers (0: the looped two-pass form).
    pub cpt: usize,
    /// 4-element chunks per unit, in registers and loops alike: 2 for f16/bf16 when D % 8 == 0
    /// and the inputs are 8-element aligned (one 16-byte access per thread per unit), else 1.
    pub p: usize,
    /// The row length.
    pub d: usize,
}

impl RowLaunch {
    /// `registers`: the kernel takes 4-element loads and the caller wants the row kept in
    /// registers where it fits (the caller's rule on dtype and D); `wide`: every input is
    /// 8-element aligned (`vec8_aligned`); `units_per_thread`: the op's units per thread for
    /// each kind of register row.
    pub(crate) fn new(
        op: &str,
        rows: usize,
        d: usize,
        dtype: DType,
        registers: bool,
        wide: bool,
        units_per_thread: RowUnits,
    ) -> Result<RowLaunch> {
        index_i32(op, "D", d)?;
        let p = if wide_units(dtype, d, wide) { 2 } else { 1 };
        let units = (d / 4).div_ceil(p);
        let threads = |per_thread: usize| round_up(units.div_ceil(per_thread.max(1)), SIMD).clamp(SIMD, 1024);
        let short = d <= SIMDGROUP_MAX_D;
        let short_f32 = short && registers && dtype == DType::F32;
        let row_per_simdgroup = short && !(short_f32 && threads(units_per_thread.short_f32) > SIMD);
        let nt = if row_per_simdgroup {
            SIMD
        } else if short_f32 {
            threads(units_per_thread.short_f32)
        } else if dtype.size() == 2 {
            threads(units_per_thread.long_16bit)
        } else {
            threads(units_per_thread.long_f32)
        };
        let cpt = units.div_ceil(nt);
        let (nt, cpt) = if registers && cpt * p <= MAX_REGISTER_CHUNKS {
            (nt, cpt)
        } else if row_per_simdgroup {
            (SIMD, 0)
        } else {
            (threads_per_row(d), 0)
        };
        let (grid, group) =
            if row_per_simdgroup { (rows * SIMD, (ROWS_PER_GROUP * SIMD).min(rows * SIMD)) } else { (rows * nt, nt) };
        let mapping = if row_per_simdgroup { RowMapping::Simdgroup } else { RowMapping::Threadgroup };
        Ok(RowLaunch { mapping, grid: grid_dim(op, grid)?, group: group as u32, cpt, p, d })
    }

    /// The plan `device` gets: a row per thread on the CPU ([`RowLaunch::per_thread`]), else
    /// the GPU plan `gpu` makes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_device(
        op: &str,
        device: Device,
        rows: usize,
        d: usize,
        dtype: DType,
        wide: bool,
        gpu: impl FnOnce() -> Result<RowLaunch>,
    ) -> Result<RowLaunch> {
        if device == Device::Cpu {
            RowLaunch::per_thread(op, rows, d, dtype, wide)
        } else {
            gpu()
        }
    }

    /// The CPU's plan: a row per thread, read in loops (no registers form), threadgroups of
    /// whole rows covering about `THREAD_ROWS_ELEMENTS` elements.
    pub(crate) fn per_thread(op: &str, rows: usize, d: usize, dtype: DType, wide: bool) -> Result<RowLaunch> {
        index_i32(op, "D", d)?;
        let p = if wide_units(dtype, d, wide) { 2 } else { 1 };
        let group = THREAD_ROWS_ELEMENTS.div_ceil(d).clamp(1, 256).min(rows.max(1));
        Ok(RowLaunch { mapping: RowMapping::Thread, grid: grid_dim(op, rows)?, group: group as u32, cpt: 0, p, d })
    }

    /// The plan for 16-bit rows longer than one simdgroup's (D > 1024) kept packed in registers
    /// (16-byte units of 8 elements, 4 registers per unit, widened where used): about 4 units
    /// per thread in threadgroups of at most 512 threads, so that at least two rows share a
    /// multiprocessor; at most 16 units (64 registers) per thread. `None` where the row is
    /// short (D ≤ 1024: the float register form serves it), does not fit (D > 65536) or does
    /// not take 16-byte units.
    pub(crate) fn packed(op: &str, rows: usize, d: usize, dtype: DType, wide: bool) -> Result<Option<RowLaunch>> {
        index_i32(op, "D", d)?;
        if !wide_units(dtype, d, wide) || d <= SIMDGROUP_MAX_D {
            return Ok(None);
        }
        let units = d / 8;
        let nt = round_up(units.div_ceil(UNITS_PER_THREAD), SIMD).clamp(SIMD, MAX_PACKED_THREADS);
        let cpt = units.div_ceil(nt);
        if cpt > MAX_PACKED_UNITS {
            return Ok(None);
        }
        let mapping = RowMapping::Threadgroup;
        Ok(Some(RowLaunch { mapping, grid: grid_dim(op, rows * nt)?, group: nt as u32, cpt, p: 2, d }))
    }

    /// The launch with the plan's template values (`T`, `CPT`, `P`, and `DS`: the row length
    /// for register forms, which are compiled for it, 0 for the others).
    pub(crate) fn spec(&self, dtype: DType) -> LaunchSpec {
        let static_d = if self.cpt > 0 { self.d as i32 } else { 0 };
        LaunchSpec::new([self.grid, 1, 1], [self.group, 1, 1])
            .template("T", dtype)
            .template("CPT", self.cpt as i32)
            .template("P", self.p as i32)
            .template("DS", static_d)
    }
}

/// Whether rows take units of two chunks (one 16-byte access of 8 elements).
fn wide_units(dtype: DType, d: usize, wide: bool) -> bool {
    wide && dtype.size() == 2 && d % 8 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_per_row_is_whole_simdgroups_within_limits() {
        assert_eq!(threads_per_row(1), 32);
        assert_eq!(threads_per_row(4096), 512);
        assert_eq!(threads_per_row(8192), 1024);
        assert_eq!(threads_per_row(1 << 20), 1024);
        assert_eq!(threads_per_row(2000), 256);
    }
}
