//! `MetalKernel::cuda_kernel_source`: one call of a body-only Metal kernel as MLX's
//! `mx.fast.cuda_kernel` runs it, so that on MLX's CUDA build the kernel is an ordinary lazy
//! MLX primitive on MLX's stream (the MLX drop-in, `kiln.mlx`, builds the `cuda_kernel` from
//! this and calls it with the call's own grid, threadgroup, template and `init_value`).
//!
//! The header and body come from `backend::cuda::emit_mlx` (the lowered kernel and its entry shim).
//! The CUDA parameters are the kernel's own names, so MLX's generated source reads as the Metal
//! signature does. MLX passes `X_shape` / `X_strides` / `X_ndim` wherever their names appear in
//! the body as substrings, and also for 0-d inputs whose signature lacks them; where the body
//! would name such a parameter by accident (an input `a` beside `data_shape`), the parameters
//! get positional names (`kiln_in0`, `kiln_out0`) instead. The same source compiles with
//! kiln's own [`CudaKernel`](super::CudaKernel), which reproduces MLX's wrapper.

use super::entry_contract::EntryContract;
use super::launch::LaunchSpec;
use super::metal_kernel::MetalKernel;
use crate::array::Array;
use crate::backend::cuda::emit_mlx::{self, GridSource, PreludeSource};
use crate::error::{Error, Result};
use crate::program::{check_threadgroup, MathMode};
use crate::source::lower::{self, LowerTarget};
use crate::source::mangle::TemplateArg;
use crate::source::parse::ParseSlot;
use crate::source::scan::ShapeInfo;

/// CUDA's limits on the block counts of a launch (x, y, z).
const MAX_BLOCKS: [u64; 3] = [i32::MAX as u64, 65535, 65535];

/// What `mx.fast.cuda_kernel` is given for one call signature: the factory's arguments, and the
/// extra input a grid of partial threadgroups needs. The call passes the kernel's inputs (then
/// the grid input), the output shapes and dtypes, `grid`, `threadgroup`, `template` and
/// `init_value` as they were given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernelSource {
    /// The kernel's name (MLX names the CUDA function `custom_kernel_<name>` plus the template).
    pub name: String,
    /// The CUDA parameter names of the inputs, in order (then `grid_input`'s, when present).
    pub input_names: Vec<String>,
    /// The CUDA parameter names of the outputs.
    pub output_names: Vec<String>,
    /// The body of MLX's `__global__` function.
    pub source: String,
    /// Text placed before MLX's namespace: kiln's prelude, the lowered kernel, the entry shim.
    pub header: String,
    /// As the kernel's own.
    pub ensure_row_contiguous: bool,
    /// Bytes of dynamic shared memory (threadgroup arrays of a body are static shared memory).
    pub shared_memory: usize,
    /// For a grid that is not a whole number of threadgroups, the CUDA name of one more input
    /// after the kernel's own: the grid as a `uint32` array of 3.
    pub grid_input: Option<String>,
}

/// How a call runs on MLX's CUDA build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaKernelPlan {
    /// Through `mx.fast.cuda_kernel` with these arguments.
    Source(CudaKernelSource),
    /// `cuda_kernel` cannot run it as Metal would, for this reason (it runs eagerly instead).
    Unsupported(String),
}

/// The CUDA parameter names of one attempt.
struct Names {
    inputs: Vec<String>,
    outputs: Vec<String>,
    grid: String,
}

impl Names {
    fn of_kernel(k: &MetalKernel) -> Names {
        let mut grid = "kiln_grid".to_string();
        while k.input_names.contains(&grid) || k.output_names.contains(&grid) {
            grid.push('_');
        }
        Names { inputs: k.input_names.clone(), outputs: k.output_names.clone(), grid }
    }

    fn positional(n_inputs: usize, n_outputs: usize) -> Names {
        Names {
            inputs: (0..n_inputs).map(|k| format!("kiln_in{k}")).collect(),
            outputs: (0..n_outputs).map(|k| format!("kiln_out{k}")).collect(),
            grid: "kiln_grid".to_string(),
        }
    }
}

impl MetalKernel {
    /// What `mx.fast.cuda_kernel` needs to run this call lazily on MLX's CUDA build, with
    /// exactly Metal's semantics (see `backend::cuda::emit_mlx`). Only the inputs' dtypes, ranks and
    /// sizes are read, not their data. Errors are the call's own (counts, dtypes, the
    /// threadgroup, translation); [`CudaKernelPlan::Unsupported`] names what `cuda_kernel`
    /// cannot launch (a grid beyond its `int` sizes or CUDA's block counts).
    pub fn cuda_kernel_source(&self, inputs: &[Array], spec: &LaunchSpec) -> Result<CudaKernelPlan> {
        self.check_counts(inputs.len(), spec)?;
        check_threadgroup(self.op(), spec.threadgroup)?;
        let generated = self.generate(inputs, spec)?;
        let program = self.program(&generated);
        let group = [0, 1, 2].map(|d| spec.threadgroup[d].min(spec.grid[d].max(1)));
        let sig_inputs = self.signature_inputs(inputs);
        let n_buffers = crate::source::metal_codegen::buffer_count(&sig_inputs, self.output_names.len());
        let parse = ParseSlot::default();
        if let Some(contract) = EntryContract::of(self.op(), &program, &parse)? {
            contract.check(self.op(), group, n_buffers, &[])?;
        }
        if let Some(reason) = cuda_kernel_launch_limit(spec.grid, spec.threadgroup) {
            return Ok(CudaKernelPlan::Unsupported(reason));
        }
        let module = lower::lower_kept(&program, Some(&parse), LowerTarget::Cuda)?;
        let Some(entry) = module.entry(&program.function) else {
            return Err(Error::Compile {
                backend: "cuda",
                kernel: self.name.clone(),
                log: format!("no kernel named {:?} in the program", program.function),
            });
        };
        let padded = (0..3).any(|d| spec.grid[d] % group[d] != 0);
        let passed: Vec<ShapeInfo> = sig_inputs.iter().map(|i| i.passes_shape_info()).collect();
        let prelude_file = emit_mlx::prelude_file();
        let prelude = prelude_file.as_deref().map_or(PreludeSource::Inline, PreludeSource::Include);
        for names in [Names::of_kernel(self), Names::positional(inputs.len(), self.output_names.len())] {
            let slots = slot_expressions(&names, &passed);
            let grid = if padded { GridSource::Input(&names.grid) } else { GridSource::Launch };
            let mut text = emit_mlx::emit(&module, &self.name, entry, &slots, grid, self.restrict_pointers, prelude);
            text.body = format!("{}{}", template_uses(spec), text.body);
            if mlx_passes_what_the_shim_reads(&text.body, &names, inputs, &passed) {
                let mut input_names = names.inputs.clone();
                let grid_input = padded.then(|| names.grid.clone());
                input_names.extend(grid_input.clone());
                // NVRTC's --use_fast_math cannot be passed through cuda_kernel; the macro Metal's
                // fast mode defines still reaches the kernel.
                let header = match program.math_mode {
                    MathMode::Fast => format!("#define __FAST_MATH__ 1\n{}", text.header),
                    _ => text.header,
                };
                return Ok(CudaKernelPlan::Source(CudaKernelSource {
                    name: self.name.clone(),
                    input_names,
                    output_names: names.outputs,
                    source: text.body,
                    header,
                    ensure_row_contiguous: self.ensure_row_contiguous,
                    shared_memory: 0,
                    grid_input,
                }));
            }
        }
        Ok(CudaKernelPlan::Unsupported(
            "MLX's cuda_kernel would pass shape parameters its signature lacks (a 0-d input's name is part of \
             another parameter's)"
                .into(),
        ))
    }
}

/// MLX declares each integer and bool template argument as a `constexpr` local of the body; the
/// lowered kernel has its values already, so the body marks them used.
fn template_uses(spec: &LaunchSpec) -> String {
    let names: Vec<String> = spec
        .template
        .iter()
        .filter(|(_, arg)| !matches!(arg, TemplateArg::DType(_)))
        .map(|(name, _)| format!("(void){name};"))
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!("  {}\n", names.join(" "))
    }
}

/// Why MLX's `cuda_kernel` cannot launch a grid of `grid` threads in threadgroups of
/// `threadgroup` in one CUDA launch, if it cannot (the reason a call's plan is unsupported).
pub fn cuda_kernel_launch_limit(grid: [u32; 3], threadgroup: [u32; 3]) -> Option<String> {
    launch_limit(grid, [0, 1, 2].map(|d| threadgroup[d].min(grid[d].max(1))))
}

/// Why MLX's launch cannot realise a grid of `grid` threads in groups of `group`, if it cannot.
fn launch_limit(grid: [u32; 3], group: [u32; 3]) -> Option<String> {
    for d in 0..3 {
        if grid[d] > i32::MAX as u32 {
            return Some(format!("grid {grid:?} has a dimension beyond the 32-bit int that cuda_kernel takes"));
        }
        let blocks = u64::from(grid[d]).div_ceil(u64::from(group[d].max(1)));
        if blocks > MAX_BLOCKS[d] {
            return Some(format!(
                "grid {grid:?} in threadgroups of {group:?} needs {blocks} blocks in dimension {d}; one CUDA launch \
                 takes at most {}",
                MAX_BLOCKS[d]
            ));
        }
    }
    None
}

/// Per Metal buffer slot, the expression of MLX's CUDA parameters that holds it: each input's
/// data, then its shape, strides and rank where the Metal signature has them; then the outputs.
fn slot_expressions(names: &Names, passed: &[ShapeInfo]) -> Vec<String> {
    let mut slots = Vec::new();
    for (name, info) in names.inputs.iter().zip(passed) {
        slots.push(name.clone());
        if info.shape {
            slots.push(format!("{name}_shape.data()"));
        }
        if info.strides {
            slots.push(format!("{name}_strides.data()"));
        }
        if info.ndim {
            slots.push(format!("&{name}_ndim"));
        }
    }
    slots.extend(names.outputs.iter().cloned());
    slots
}

/// Whether MLX, detecting `X_shape` / `X_strides` / `X_ndim` by substring in `body`, passes each
/// input what the shim reads: a 0-d input nothing (MLX would pass extra arguments its signature
/// lacks), an input of rank > 0 at least those the Metal signature has and, for the rest, no
/// more than its shape can fill (MLX refuses more than 10 axes).
fn mlx_passes_what_the_shim_reads(body: &str, names: &Names, inputs: &[Array], passed: &[ShapeInfo]) -> bool {
    names.inputs.iter().zip(inputs).zip(passed).all(|((name, a), want)| {
        let seen = crate::source::scan::detect_shape_info(body, name);
        if a.ndim() == 0 {
            return !seen.any();
        }
        let covers = (seen.shape || !want.shape) && (seen.strides || !want.strides) && (seen.ndim || !want.ndim);
        covers && (seen == *want || a.ndim() <= super::CUDA_MAX_NDIM)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn launches_beyond_cuda_block_counts_are_named() {
        assert_eq!(launch_limit([1024, 1, 1], [256, 1, 1]), None);
        assert!(launch_limit([1, 70000, 1], [1, 1, 1]).is_some_and(|r| r.contains("dimension 1")));
        assert!(launch_limit([u32::MAX, 1, 1], [1024, 1, 1]).is_some_and(|r| r.contains("32-bit")));
    }

    #[test]
    fn a_zero_d_input_inside_another_name_gets_positional_names() {
        let k = MetalKernel::new(
            "sub",
            &["a", "data"],
            &["out"],
            "uint i = thread_position_in_grid.x; out[i] = data[i] * data_shape[0] + a;",
        )
        .unwrap();
        let data = Array::from_vec(&[16], vec![1.0f32; 16]).unwrap();
        let spec = LaunchSpec::new([16, 1, 1], [16, 1, 1]).output(&[16], DType::F32);
        let CudaKernelPlan::Source(s) = k.cuda_kernel_source(&[Array::scalar(2.0f32), data], &spec).unwrap() else {
            panic!("unsupported")
        };
        assert_eq!(s.input_names, ["kiln_in0", "kiln_in1"]);
        assert!(s.source.contains("kiln_in1_shape.data()") && !s.source.contains("kiln_in0_shape"), "{}", s.source);
    }
}
