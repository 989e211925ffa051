//! `kiln bench --compile`: what the first call of a kernel costs on the CPU emulator and with
//! NVRTC, as times and as multiples of compiling a one-function C++ file with the same host
//! compiler in the same run (so machines of different speeds compare).
//!
//! CPU, per kernel: cold (never-seen text, prelude precompiled), cold with the prelude inline
//! (no precompiled header), disk-cache hit (a new process's first call) and memory hit (a
//! repeated call). Once per run: building the precompiled prelude (what the very first kernel
//! on a machine pays on top). CUDA (NVRTC, no device needed): cold and memory hit per kernel.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kiln::array::Array;
use kiln::backend::{self, cpu, cuda, MetalProgram, ProgramKind};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};

/// Repetitions of each cold measurement (each with new text); the median is reported.
const REPEATS: usize = 3;
const ROW: usize = 256;

/// One kernel's first-call times in milliseconds.
#[derive(Clone, Debug)]
pub struct KernelTimes {
    pub name: &'static str,
    pub cpu_cold_ms: f64,
    pub cpu_cold_inline_prelude_ms: f64,
    pub cpu_disk_hit_ms: f64,
    pub cpu_memory_hit_ms: f64,
    pub cuda_cold_ms: Option<f64>,
    pub cuda_memory_hit_ms: Option<f64>,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct CompileTimes {
    pub compiler: String,
    pub trivial_ms: f64,
    /// Building the precompiled prelude (`None`: the compiler cannot).
    pub prelude_build_ms: Option<f64>,
    pub kernels: Vec<KernelTimes>,
    pub nvrtc: Option<String>,
}

struct Case {
    name: &'static str,
    body: &'static str,
    grid: u32,
    threadgroup: u32,
    outputs: usize,
}

fn cases() -> [Case; 3] {
    [
        Case {
            name: "myexp",
            body: "uint elem = thread_position_in_grid.x;\nT tmp = inp[elem];\nout[elem] = metal::exp(tmp);\n",
            grid: ROW as u32,
            threadgroup: 64,
            outputs: ROW,
        },
        Case {
            name: "softmax",
            body: "uint lane = thread_position_in_threadgroup.x;\nT m = -INFINITY;\n\
                   for (uint j = lane; j < 256; j += 32) m = metal::max(m, inp[j]);\nm = simd_max(m);\n\
                   T s = 0;\nfor (uint j = lane; j < 256; j += 32) s += metal::exp(inp[j] - m);\ns = simd_sum(s);\n\
                   for (uint j = lane; j < 256; j += 32) out[j] = metal::exp(inp[j] - m) / s;\n",
            grid: 32,
            threadgroup: 32,
            outputs: ROW,
        },
        Case {
            name: "simd_reduce",
            body: "threadgroup T part[8];\nT v = simd_sum(inp[thread_position_in_grid.x]);\n\
                   if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;\n\
                   threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                   if (thread_index_in_threadgroup == 0) {\n  T s = 0;\n  for (uint k = 0; k < 8; k++) s += part[k];\n\
                   out[threadgroup_position_in_grid.x] = s;\n}\n",
            grid: ROW as u32,
            threadgroup: 256,
            outputs: 1,
        },
    ]
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn nonce() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

impl Case {
    /// The kernel with `tag` appended to its text as a comment (new text: nothing cached).
    fn kernel(&self, tag: &str) -> Result<MetalKernel> {
        MetalKernel::new(format!("bench_compile_{}", self.name), &["inp"], &["out"], format!("{}// {tag}\n", self.body))
    }

    fn spec(&self) -> LaunchSpec {
        LaunchSpec::new([self.grid, 1, 1], [self.threadgroup, 1, 1])
            .output(&[self.outputs], DType::F32)
            .template("T", DType::F32)
            .device(Device::Cpu)
    }

    fn program(&self, kernel: &MetalKernel, x: &Array) -> Result<MetalProgram> {
        Ok(kernel.program(&kernel.generate(std::slice::from_ref(x), &self.spec())?))
    }

    /// Times one call (compile included when nothing is cached) and checks its outputs are
    /// finite (the poison is NaN).
    fn timed_call(&self, kernel: &MetalKernel, x: &Array) -> Result<f64> {
        let t = Instant::now();
        let out = kernel.call(&[x.into()], &self.spec())?;
        let values = out[0].to_host()?.to_f64_vec()?;
        let ms = ms_since(t);
        if values.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid("bench --compile", format!("{} returned non-finite values", self.name)));
        }
        Ok(ms)
    }
}

/// Measures every case; CUDA columns where NVRTC loads.
pub fn measure() -> Result<CompileTimes> {
    let status = cpu::status();
    if let Some(why) = status.unavailable {
        return Err(Error::BackendUnavailable { backend: "cpu", reason: why });
    }
    let compiler = status.devices.first().map(|(_, about)| about.clone()).unwrap_or_default();
    let mut trivial = Vec::new();
    for _ in 0..REPEATS {
        let t = Instant::now();
        cpu::compile_trivial()?;
        trivial.push(ms_since(t));
    }
    let t = Instant::now();
    let _ = t;
    let prelude_build_ms =
        cpu::build_fresh_prelude(ProgramKind::MlxBody, nonce())?.precompiled_prelude.map(|d| d.as_secs_f64() * 1e3);
    let nvrtc = cuda::nvrtc_version().ok().map(|(a, b)| format!("NVRTC {a}.{b}"));
    let x = Array::from_f64(DType::F32, &[ROW], &(0..ROW).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>())?;
    let mut kernels = Vec::new();
    for case in cases() {
        // Make sure the cached precompiled prelude exists before timing kernels.
        case.timed_call(&case.kernel("warm-up")?, &x)?;
        let (mut cold, mut inline, mut disk, mut memory) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            let kernel = case.kernel(&nonce().to_string())?;
            cold.push(case.timed_call(&kernel, &x)?);
            memory.push(case.timed_call(&kernel, &x)?);
            let program = case.program(&kernel, &x)?;
            let t = Instant::now();
            cpu::compile_past_memory(&program, true, true)?;
            disk.push(ms_since(t));
            let program = case.program(&case.kernel(&nonce().to_string())?, &x)?;
            let t = Instant::now();
            cpu::compile_past_memory(&program, false, false)?;
            inline.push(ms_since(t));
        }
        let (mut cuda_cold, mut cuda_memory) = (None, None);
        if nvrtc.is_some() {
            let (mut c, mut m) = (Vec::new(), Vec::new());
            for _ in 0..REPEATS {
                let program = case.program(&case.kernel(&nonce().to_string())?, &x)?;
                let t = Instant::now();
                backend::cuda::compile_cubin(&program, (9, 0))?;
                c.push(ms_since(t));
                let t = Instant::now();
                backend::cuda::compile_cubin(&program, (9, 0))?;
                m.push(ms_since(t));
            }
            (cuda_cold, cuda_memory) = (Some(median(c)), Some(median(m)));
        }
        kernels.push(KernelTimes {
            name: case.name,
            cpu_cold_ms: median(cold),
            cpu_cold_inline_prelude_ms: median(inline),
            cpu_disk_hit_ms: median(disk),
            cpu_memory_hit_ms: median(memory),
            cuda_cold_ms: cuda_cold,
            cuda_memory_hit_ms: cuda_memory,
        });
    }
    Ok(CompileTimes { compiler, trivial_ms: median(trivial), prelude_build_ms, kernels, nvrtc })
}

impl CompileTimes {
    /// A markdown table: milliseconds, and multiples of the trivial compile in parentheses.
    pub fn table(&self) -> String {
        let r = |ms: f64| format!("{ms:.1} ({:.1}x)", ms / self.trivial_ms);
        let opt = |v: Option<f64>| v.map_or("-".to_string(), r);
        let mut s = format!(
            "CPU: {}\ntrivial C++ compile (same compiler and flags): {:.1} ms\nprecompiled prelude build (once per compiler, flags and prelude): {}\nCUDA: {}\n\n",
            self.compiler,
            self.trivial_ms,
            opt(self.prelude_build_ms),
            self.nvrtc.as_deref().unwrap_or("NVRTC not found")
        );
        s.push_str("| kernel | CPU cold | CPU cold, prelude inline | CPU disk hit | CPU memory hit | CUDA cold | CUDA memory hit |\n");
        s.push_str("|---|---|---|---|---|---|---|\n");
        for k in &self.kernels {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                k.name,
                r(k.cpu_cold_ms),
                r(k.cpu_cold_inline_prelude_ms),
                r(k.cpu_disk_hit_ms),
                r(k.cpu_memory_hit_ms),
                opt(k.cuda_cold_ms),
                opt(k.cuda_memory_hit_ms)
            ));
        }
        s.push_str("\nms (multiple of the trivial compile); medians of 3, each cold one on new kernel text.\n");
        s
    }
}
