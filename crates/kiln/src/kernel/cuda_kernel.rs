//! `CudaKernel`: MLX's `cuda_kernel` contract for users who write CUDA directly. The body is
//! CUDA C++; template arguments become `constexpr` locals or `using` aliases at the top of the
//! body; `X_shape`/`X_strides`/`X_ndim` are passed by value when the body names them; the grid
//! counts threads and is covered by ceil-div blocks (so more than `grid` threads may run, as in
//! MLX: the body bounds-checks); `shared_memory` bytes of dynamic shared memory are requested.
//! The generated program is memoised per call signature, with the slot where the backend keeps
//! the module it loaded, so a repeated call neither generates nor hashes the source again.

use std::fmt::Write;

use super::launch::{KernelInput, LaunchSpec};
use super::marshal::{Convention, Marshal};
use super::signature_memo::SignatureMemo;
use crate::array::Array;
use crate::backend::{self, Dispatch, Launch, ProgramMemo};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::program::{MathMode, MetalProgram, ProgramKind, MAX_NDIM};
use crate::source::mangle::{TemplateArg, TemplateName};
use crate::source::scan::{self, ShapeInfo};

/// The most axes `X_shape`/`X_strides` carry (`MAX_NDIM` in the kernel).
pub const CUDA_MAX_NDIM: usize = MAX_NDIM;

/// A custom CUDA kernel defined by its body, exactly as for `mx.fast.cuda_kernel`.
#[derive(Clone, Debug)]
pub struct CudaKernel {
    name: String,
    input_names: Vec<String>,
    output_names: Vec<String>,
    source: String,
    header: String,
    ensure_row_contiguous: bool,
    shared_memory: usize,
    arch_specific: Option<(u32, u32)>,
    launch_bounds: Option<(u32, u32)>,
    shape_info: Vec<ShapeInfo>,
    memo: SignatureMemo<Generated>,
}

/// The program of one call signature and the slot where the backend keeps what it loaded.
#[derive(Debug)]
struct Generated {
    program: MetalProgram,
    memo: ProgramMemo,
}

/// The CUDA element type MLX uses for a dtype.
pub fn cuda_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        other => other.metal_type(),
    }
}

/// Helpers MLX's `utils.cuh` gives every body, on top of the kiln CUDA prelude's types.
const HELPERS: &str = r#"
using kiln_metal::int8_t; using kiln_metal::uint8_t; using kiln_metal::int16_t;
using kiln_metal::uint16_t; using kiln_metal::int32_t; using kiln_metal::uint32_t;
using kiln_metal::int64_t; using kiln_metal::uint64_t;
typedef kiln_metal::half __half;
typedef kiln_metal::bfloat __nv_bfloat16;
#define WARP_SIZE 32
#define MAX_NDIM 10
__device__ __forceinline__ __half __float2half(float f) { return __half(f); }
__device__ __forceinline__ float __half2float(__half h) { return static_cast<float>(h); }
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }
namespace mlx { namespace core { namespace cu {
template <class T, int N> struct kiln_array {
  T v[N];
  __device__ T& operator[](int i) { return v[i]; }
  __device__ const T& operator[](int i) const { return v[i]; }
  __device__ T* data() { return v; }
  __device__ const T* data() const { return v; }
  __device__ static constexpr int size() { return N; }
};
typedef kiln_array<int32_t, MAX_NDIM> Shape;
typedef kiln_array<int64_t, MAX_NDIM> Strides;
template <class IdxT = int64_t>
__device__ IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * IdxT(strides[i]);
    elem /= shape[i];
  }
  return loc;
}
}}}  // namespace mlx::core::cu
"#;

impl CudaKernel {
    /// Defines a kernel. Fails when `output_names` is empty.
    pub fn new(
        name: impl Into<String>,
        input_names: &[&str],
        output_names: &[&str],
        source: impl Into<String>,
    ) -> Result<CudaKernel> {
        let name = name.into();
        if output_names.is_empty() {
            return Err(Error::invalid(format!("cuda_kernel {name}"), "must specify at least one output"));
        }
        let source = source.into();
        let shape_info = input_names.iter().map(|n| scan::detect_shape_info(&source, n)).collect();
        Ok(CudaKernel {
            name,
            input_names: input_names.iter().map(|s| s.to_string()).collect(),
            output_names: output_names.iter().map(|s| s.to_string()).collect(),
            source,
            header: String::new(),
            ensure_row_contiguous: true,
            shared_memory: 0,
            arch_specific: None,
            launch_bounds: None,
            shape_info,
            memo: SignatureMemo::default(),
        })
    }

    /// Text placed at global namespace before the kernel.
    pub fn header(mut self, header: impl Into<String>) -> Self {
        self.header = header.into();
        self.memo = SignatureMemo::default();
        self
    }

    /// Copy non-row-contiguous inputs before the launch (default true).
    pub fn ensure_row_contiguous(mut self, on: bool) -> Self {
        self.ensure_row_contiguous = on;
        self.memo = SignatureMemo::default();
        self
    }

    /// Bytes of dynamic shared memory requested at launch (default 0).
    pub fn shared_memory(mut self, bytes: usize) -> Self {
        self.shared_memory = bytes;
        self.memo = SignatureMemo::default();
        self
    }

    /// Compile for the architecture-specific target of compute capability `capability`
    /// (`sm_90a` for `(9, 0)`: `wgmma`, `setmaxnreg`); a call on a device of any other
    /// capability fails with an error instead of running.
    pub fn arch_specific(mut self, capability: (u32, u32)) -> Self {
        self.arch_specific = Some(capability);
        self.memo = SignatureMemo::default();
        self
    }

    /// Declares `__launch_bounds__(max_threads, min_blocks)` on the kernel: the compiler keeps
    /// its registers low enough for `min_blocks` threadgroups of `max_threads` threads to share
    /// a multiprocessor. A launch with a threadgroup of more than `max_threads` threads is an
    /// error naming the kernel; `max_threads` must lie in 1..=1024 and `min_blocks` be at least 1.
    pub fn launch_bounds(mut self, max_threads: u32, min_blocks: u32) -> Self {
        self.launch_bounds = Some((max_threads, min_blocks));
        self.memo = SignatureMemo::default();
        self
    }

    /// The kernel's name (without template arguments).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The compute capability whose architecture-specific target the kernel needs, if any.
    pub fn required_arch(&self) -> Option<(u32, u32)> {
        self.arch_specific
    }

    fn op(&self) -> String {
        format!("cuda_kernel {}", self.name)
    }

    /// The entry name: `custom_kernel_<name>` plus one suffix per template argument.
    pub fn kernel_name(&self, template: &[(TemplateName, TemplateArg)]) -> String {
        let mut s = format!("custom_kernel_{}", self.name);
        for (_, arg) in template {
            match arg {
                TemplateArg::Int(v) => {
                    let _ = write!(s, "_{v}");
                }
                TemplateArg::Bool(b) => s.push_str(if *b { "_t" } else { "_f" }),
                TemplateArg::DType(d) => {
                    let _ = write!(s, "_{}", d.metal_type());
                }
            }
        }
        s
    }

    /// The CUDA source for inputs of these dtypes and ranks (without the prelude).
    pub fn generate(&self, inputs: &[Array], spec: &LaunchSpec) -> Result<String> {
        self.check_counts(inputs.len(), spec)?;
        self.check_launch_bounds(spec)?;
        let mut params = Vec::new();
        for ((name, a), info) in self.input_names.iter().zip(inputs).zip(&self.shape_info) {
            params.push(format!("const {}* {name}", cuda_type(a.dtype())));
            if a.ndim() > 0 {
                if a.ndim() > CUDA_MAX_NDIM && (info.shape || info.strides) {
                    return Err(Error::invalid(self.op(), format!("ndim can not be larger than {CUDA_MAX_NDIM}")));
                }
                if info.shape {
                    params.push(format!("const __grid_constant__ Shape {name}_shape"));
                }
                if info.strides {
                    params.push(format!("const __grid_constant__ Strides {name}_strides"));
                }
                if info.ndim {
                    params.push(format!("const __grid_constant__ int {name}_ndim"));
                }
            }
        }
        for (name, &dtype) in self.output_names.iter().zip(&spec.output_dtypes) {
            params.push(format!("{}* {name}", cuda_type(dtype)));
        }
        let mut s = String::new();
        s.push_str(HELPERS);
        s.push_str(&self.header);
        s.push_str("\nnamespace mlx::core::cu {\n");
        let bounds = match self.launch_bounds {
            Some((threads, blocks)) => format!("__launch_bounds__({threads}, {blocks}) "),
            None => String::new(),
        };
        let _ = writeln!(s, "extern \"C\" __global__ void {bounds}{}(", self.kernel_name(&spec.template));
        let _ = writeln!(s, "    {}) {{", params.join(",\n    "));
        for (name, arg) in &spec.template {
            let _ = match arg {
                TemplateArg::Int(v) => writeln!(s, "  constexpr int {name} = {v};"),
                TemplateArg::Bool(b) => writeln!(s, "  constexpr bool {name} = {b};"),
                TemplateArg::DType(d) => writeln!(s, "  using {name} = {};", cuda_type(*d)),
            };
        }
        s.push('\n');
        s.push_str(&self.source);
        s.push_str("\n}\n}  // namespace mlx::core::cu\n");
        Ok(s)
    }

    fn check_counts(&self, n_inputs: usize, spec: &LaunchSpec) -> Result<()> {
        spec.check_counts(&self.op(), self.input_names.len(), n_inputs, self.output_names.len())
    }

    /// The declared bounds are valid and the launch's threadgroup stays within them.
    fn check_launch_bounds(&self, spec: &LaunchSpec) -> Result<()> {
        let Some((threads, blocks)) = self.launch_bounds else { return Ok(()) };
        if !(1..=1024).contains(&threads) || blocks == 0 {
            return Err(Error::invalid(
                self.op(),
                format!("launch bounds ({threads}, {blocks}): max_threads must lie in 1..=1024 and min_blocks be >= 1"),
            ));
        }
        let group: u64 = spec.threadgroup.iter().map(|&t| u64::from(t)).product();
        if group > u64::from(threads) {
            return Err(Error::invalid(
                self.op(),
                format!(
                    "threadgroup {:?} has {group} threads, more than the kernel's launch bound of {threads}",
                    spec.threadgroup
                ),
            ));
        }
        Ok(())
    }

    /// Runs the kernel on a CUDA device and returns its outputs in `output_names` order.
    pub fn call(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<Vec<Array>> {
        self.check_counts(inputs.len(), spec)?;
        self.check_launch_bounds(spec)?;
        let device = self.resolve_device(inputs, spec)?;
        let Device::Cuda(ordinal) = device else {
            return Err(Error::invalid(self.op(), format!("only supports the GPU; the call resolved to {device}")));
        };
        let arrays: Vec<Array> = inputs.iter().map(KernelInput::to_array).collect();
        let generated = self.memo.get_or_make(&self.op(), &arrays, spec, || {
            Ok(Generated { program: self.program(&arrays, spec)?, memo: ProgramMemo::default() })
        })?;
        let backend = backend::backend_for(Device::Cuda(ordinal))?;
        let marshal = Marshal {
            op: &self.op(),
            device,
            backend: backend.as_ref(),
            shape_info: &self.shape_info,
            ensure_row_contiguous: self.ensure_row_contiguous,
            convention: Convention::Cuda,
        };
        let bindings = marshal.bindings(inputs, arrays, spec)?;
        let launch = Launch {
            program: &generated.program,
            bindings,
            dispatch: Dispatch::Threads(spec.grid),
            threadgroup: spec.threadgroup,
            threadgroup_memory: if self.shared_memory > 0 { vec![self.shared_memory] } else { Vec::new() },
            timeout: spec.timeout,
            cancel: spec.cancel.clone(),
            stream: spec.stream,
            memo: Some(&generated.memo),
        };
        backend.launch(&launch)
    }

    /// The program a call with inputs `arrays` and `spec` runs: the generated CUDA source and
    /// its entry, compiled for the architecture-specific target where the kernel asks for one.
    pub fn program(&self, arrays: &[Array], spec: &LaunchSpec) -> Result<MetalProgram> {
        Ok(MetalProgram {
            kernel: self.name.clone(),
            source: self.generate(arrays, spec)?,
            kind: ProgramKind::Cuda { arch_specific: self.arch_specific },
            function: self.kernel_name(&spec.template),
            math_mode: MathMode::Safe,
            constants: Vec::new(),
        })
    }

    fn resolve_device(&self, inputs: &[KernelInput], spec: &LaunchSpec) -> Result<Device> {
        if let Some(d) = spec.device {
            return Ok(d);
        }
        for input in inputs {
            if let KernelInput::Array(a) = input {
                if a.device() != Device::Cpu {
                    return Ok(a.device());
                }
            }
        }
        Ok(Device::Cuda(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_templates_follow_mlx() {
        let k = CudaKernel::new("arg_test", &["a"], &["out"], "out[0] = a[0];").unwrap();
        let template = vec![
            ("B".into(), TemplateArg::Bool(true)),
            ("N".into(), TemplateArg::Int(3)),
            ("T".into(), TemplateArg::DType(DType::F16)),
        ];
        assert_eq!(k.kernel_name(&template), "custom_kernel_arg_test_t_3_float16_t");
        let a = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
        let mut spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32);
        spec.template = template.into();
        let src = k.generate(&[a], &spec).unwrap();
        assert!(src.contains("  constexpr bool B = true;\n  constexpr int N = 3;\n  using T = __half;\n"));
        assert!(src.contains("const float* a,\n    float* out) {"));
    }

    #[test]
    fn launch_bounds_are_declared_and_checked() {
        let a = Array::from_vec(&[4], vec![1.0f32; 4]).unwrap();
        let k = CudaKernel::new("bounded", &["a"], &["out"], "out[0] = a[0];").unwrap().launch_bounds(256, 2);
        let fits = LaunchSpec::new([512, 1, 1], [128, 2, 1]).output(&[4], DType::F32);
        let src = k.generate(std::slice::from_ref(&a), &fits).unwrap();
        assert!(src.contains("extern \"C\" __global__ void __launch_bounds__(256, 2) custom_kernel_bounded("), "{src}");
        let too_big = LaunchSpec::new([512, 1, 1], [512, 1, 1]).output(&[4], DType::F32);
        let err = k.generate(std::slice::from_ref(&a), &too_big).unwrap_err();
        assert!(err.to_string().contains("cuda_kernel bounded") && err.to_string().contains("512 threads"), "{err}");
        let err = k.call(&[(&a).into()], &too_big).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        for (threads, blocks) in [(0, 1), (2048, 1), (256, 0)] {
            let k = CudaKernel::new("bad_bounds", &["a"], &["out"], "out[0] = a[0];")
                .unwrap()
                .launch_bounds(threads, blocks);
            let err = k.generate(std::slice::from_ref(&a), &fits).unwrap_err();
            assert!(err.to_string().contains("launch bounds"), "{err}");
        }
        let plain = CudaKernel::new("plain", &["a"], &["out"], "out[0] = a[0];").unwrap();
        assert!(!plain.generate(&[a], &fits).unwrap().contains("__launch_bounds__"));
    }
}
