//! `kiln bench --compile`: what the first call of a kernel costs on the CPU emulator and with
//! CUDA, as times and as multiples of compiling a one-function file with the same compiler in
//! the same run (the host C++ compiler for the CPU, NVRTC for CUDA), so machines of different
//! speeds compare.
//!
//! CPU, per kernel: cold (never-seen text: the prelude precompiled and the group scheduler
//! linked as an object, as every call compiles), cold with the scheduler compiled in, cold with
//! everything inline, disk-cache hit (a new process's first call) and memory hit (a repeated
//! call). Once per run: building the precompiled prelude and the scheduler object afresh (what
//! the very first kernel on a machine pays on top).
//!
//! CUDA, per kernel (NVRTC, no device needed): cold as a process's first units compile (whole),
//! cold after the process's precompiled prelude (every later unit), disk-cache hit and memory
//! hit. Once per run: building the precompiled prelude (done in the background by a process's
//! first compile). With a GPU, also the first call on it (cold: compile, load, run, copy back)
//! and a repeated call.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kiln::array::Array;
use kiln::backend::{cpu, cuda, MetalProgram};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::{Error, Result};
use kiln::kernel::{LaunchSpec, MetalKernel};
use kiln::program::{MathMode, ProgramKind};

/// Repetitions of each cold measurement (each with new text); the median is reported.
const REPEATS: usize = 3;
const ROW: usize = 256;
/// The architecture NVRTC compiles for when no GPU is there.
const ARCH: cuda::Arch = (9, 0);

/// One kernel's CPU first-call times in milliseconds.
#[derive(Clone, Debug)]
pub struct CpuTimes {
    pub cold_ms: f64,
    pub cold_scheduler_inline_ms: f64,
    pub cold_all_inline_ms: f64,
    pub disk_hit_ms: f64,
    pub memory_hit_ms: f64,
}

/// One kernel's CUDA first-call times in milliseconds.
#[derive(Clone, Debug)]
pub struct CudaTimes {
    pub nvrtc_whole_ms: f64,
    pub nvrtc_cold_ms: f64,
    pub disk_hit_ms: f64,
    pub memory_hit_ms: f64,
    /// With a GPU: the first call (compile, load, run, copy back) and a repeated call.
    pub gpu_cold_call_ms: Option<f64>,
    pub gpu_warm_call_ms: Option<f64>,
}

/// One kernel's first-call times.
#[derive(Clone, Debug)]
pub struct KernelTimes {
    pub name: &'static str,
    pub cpu: CpuTimes,
    pub cuda: Option<CudaTimes>,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct CompileTimes {
    pub compiler: String,
    pub linker: Option<&'static str>,
    pub trivial_ms: f64,
    /// Building the precompiled prelude and the scheduler object (`None`: the compiler cannot).
    pub prelude_build_ms: Option<f64>,
    pub scheduler_object_build_ms: Option<f64>,
    pub nvrtc: Option<String>,
    pub nvrtc_trivial_ms: Option<f64>,
    pub nvrtc_prelude_build_ms: Option<f64>,
    pub gpu: Option<String>,
    pub kernels: Vec<KernelTimes>,
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

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub(super) fn nonce() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

impl Case {
    /// The kernel with `tag` appended to its text as a comment (new text: nothing cached).
    fn kernel(&self, tag: &str) -> Result<MetalKernel> {
        MetalKernel::new(format!("bench_compile_{}", self.name), &["inp"], &["out"], format!("{}// {tag}\n", self.body))
    }

    fn spec(&self, device: Device) -> LaunchSpec {
        LaunchSpec::new([self.grid, 1, 1], [self.threadgroup, 1, 1])
            .output(&[self.outputs], DType::F32)
            .template("T", DType::F32)
            .device(device)
    }

    fn program(&self, kernel: &MetalKernel, x: &Array) -> Result<MetalProgram> {
        Ok(kernel.program(&kernel.generate(std::slice::from_ref(x), &self.spec(Device::Cpu))?))
    }

    /// Times one call (compile included when nothing is cached) and checks its outputs are
    /// finite (the poison is NaN).
    fn timed_call(&self, kernel: &MetalKernel, x: &Array, device: Device) -> Result<f64> {
        let t = Instant::now();
        let out = kernel.call(&[x.into()], &self.spec(device))?;
        let values = out[0].to_host()?.to_f64_vec()?;
        let ms = ms_since(t);
        if values.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid("bench --compile", format!("{} returned non-finite values", self.name)));
        }
        Ok(ms)
    }
}

/// Measures every case; CUDA columns where NVRTC loads, GPU columns where a GPU is there.
pub fn measure() -> Result<CompileTimes> {
    let status = cpu::status();
    if let Some(why) = status.unavailable {
        return Err(Error::BackendUnavailable { backend: "cpu", reason: why });
    }
    let compiler = status.devices.first().map(|(_, about)| about.clone()).unwrap_or_default();
    // The once-per-compiler parts, built afresh and timed; then the cached ones, so that
    // kernels (and the trivial compile, which uses their linker) find them.
    let fresh = cpu::build_fresh_prelude(ProgramKind::MlxBody, nonce())?;
    let linker = cpu::kernel_linker()?;
    let trivial = median((0..REPEATS).map(|_| time(cpu::compile_trivial)).collect::<Result<_>>()?);
    let nvrtc = cuda::nvrtc_version().ok().map(|(a, b)| format!("NVRTC {a}.{b}"));
    let (mut nvrtc_trivial, mut nvrtc_prelude_build) = (None, None);
    if nvrtc.is_some() {
        let one = || {
            let source = format!("extern \"C\" __global__ void kiln_trivial(int* p) {{ p[0] += 1; }} // {}\n", nonce());
            cuda::compile_source_past_memory("trivial", &source, ARCH, MathMode::Safe, cuda::PastMemory::Whole)
                .map(|_| ())
        };
        one()?; // NVRTC's own first-use costs (loading its builtins) are not the trivial compile's.
        nvrtc_trivial = Some(median((0..REPEATS).map(|_| time(one)).collect::<Result<_>>()?));
        nvrtc_prelude_build = Some(time(|| cuda::build_precompiled_prelude(ARCH, MathMode::Safe).map(|_| ()))?);
    }
    let gpu = cuda::status().devices.first().map(|(d, about)| (*d, about.clone()));
    let x = Array::from_f64(DType::F32, &[ROW], &(0..ROW).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>())?;
    let mut kernels = Vec::new();
    for case in cases() {
        let cuda = match &nvrtc {
            Some(_) => Some(case.cuda_times(&x, gpu.as_ref().map(|(d, _)| *d))?),
            None => None,
        };
        kernels.push(KernelTimes { name: case.name, cpu: case.cpu_times(&x)?, cuda });
    }
    Ok(CompileTimes {
        compiler,
        linker,
        trivial_ms: trivial,
        prelude_build_ms: fresh.precompiled_prelude.map(|d| d.as_secs_f64() * 1e3),
        scheduler_object_build_ms: fresh.scheduler_object.map(|d| d.as_secs_f64() * 1e3),
        nvrtc,
        nvrtc_trivial_ms: nvrtc_trivial,
        nvrtc_prelude_build_ms: nvrtc_prelude_build,
        gpu: gpu.map(|(_, about)| about),
        kernels,
    })
}

pub(super) fn time(f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let t = Instant::now();
    f()?;
    Ok(ms_since(t))
}

impl Case {
    fn new_program(&self, x: &Array) -> Result<MetalProgram> {
        self.program(&self.kernel(&nonce().to_string())?, x)
    }

    fn cpu_times(&self, x: &Array) -> Result<CpuTimes> {
        // The precompiled prelude and scheduler object of this kind exist before timing.
        self.timed_call(&self.kernel("warm-up")?, x, Device::Cpu)?;
        let (mut cold, mut scheduler_inline, mut all_inline, mut disk, mut memory) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            let kernel = self.kernel(&nonce().to_string())?;
            cold.push(self.timed_call(&kernel, x, Device::Cpu)?);
            memory.push(self.timed_call(&kernel, x, Device::Cpu)?);
            let program = self.program(&kernel, x)?;
            disk.push(time(|| cpu::compile_past_memory(&program, true, true))?);
            let program = self.new_program(x)?;
            scheduler_inline.push(time(|| cpu::compile_past_memory(&program, true, false))?);
            let program = self.new_program(x)?;
            all_inline.push(time(|| cpu::compile_past_memory(&program, false, false))?);
        }
        Ok(CpuTimes {
            cold_ms: median(cold),
            cold_scheduler_inline_ms: median(scheduler_inline),
            cold_all_inline_ms: median(all_inline),
            disk_hit_ms: median(disk),
            memory_hit_ms: median(memory),
        })
    }

    fn cuda_times(&self, x: &Array, gpu: Option<Device>) -> Result<CudaTimes> {
        let past = |p: &MetalProgram, how| cuda::compile_cubin_past_memory(p, ARCH, how).map(|_| ());
        let (mut whole, mut cold, mut disk, mut memory) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            let program = self.new_program(x)?;
            whole.push(time(|| past(&program, cuda::PastMemory::Whole))?);
            let program = self.new_program(x)?;
            cold.push(time(|| cuda::compile_cubin(&program, ARCH).map(|_| ()))?);
            memory.push(time(|| cuda::compile_cubin(&program, ARCH).map(|_| ()))?);
            disk.push(time(|| past(&program, cuda::PastMemory::DiskCache))?);
        }
        let (mut gpu_cold, mut gpu_warm) = (None, None);
        if let Some(device) = gpu {
            // The input lives on the GPU already: the first call is compile, load, run, copy back.
            let x = x.to_device(device)?;
            let (mut c, mut w) = (Vec::new(), Vec::new());
            for _ in 0..REPEATS {
                let kernel = self.kernel(&nonce().to_string())?;
                c.push(self.timed_call(&kernel, &x, device)?);
                w.push(self.timed_call(&kernel, &x, device)?);
            }
            (gpu_cold, gpu_warm) = (Some(median(c)), Some(median(w)));
        }
        Ok(CudaTimes {
            nvrtc_whole_ms: median(whole),
            nvrtc_cold_ms: median(cold),
            disk_hit_ms: median(disk),
            memory_hit_ms: median(memory),
            gpu_cold_call_ms: gpu_cold,
            gpu_warm_call_ms: gpu_warm,
        })
    }
}

impl CompileTimes {
    /// Markdown tables: milliseconds, and multiples of the trivial compile in parentheses.
    pub fn table(&self) -> String {
        let r = |ms: f64, base: f64| format!("{ms:.1} ({:.2}x)", ms / base);
        let opt = |v: Option<f64>, base: f64| v.map_or("-".to_string(), |v| r(v, base));
        let mut s = format!(
            "CPU: {}, kernel libraries linked {}\n\
             trivial C++ compile (same compiler, flags and linker): {:.1} ms\n\
             built once per compiler, flags and prelude: precompiled prelude {}, scheduler object {}\n\n",
            self.compiler,
            self.linker.map_or("with the default linker".to_string(), |l| format!("with {l}")),
            self.trivial_ms,
            opt(self.prelude_build_ms, self.trivial_ms),
            opt(self.scheduler_object_build_ms, self.trivial_ms),
        );
        s.push_str("| kernel | CPU cold | cold, scheduler compiled in | cold, all inline | disk hit | memory hit |\n");
        s.push_str("|---|---|---|---|---|---|\n");
        for k in &self.kernels {
            let (c, t) = (&k.cpu, self.trivial_ms);
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                k.name,
                r(c.cold_ms, t),
                r(c.cold_scheduler_inline_ms, t),
                r(c.cold_all_inline_ms, t),
                r(c.disk_hit_ms, t),
                r(c.memory_hit_ms, t)
            ));
        }
        match (&self.nvrtc, self.nvrtc_trivial_ms) {
            (Some(nvrtc), Some(t)) => {
                s.push_str(&format!(
                    "\nCUDA: {nvrtc}{}\ntrivial CUDA compile (NVRTC, same options): {t:.1} ms\n\
                     precompiled prelude, built once per process and options: {}\n\n",
                    self.gpu.as_ref().map_or(", compile only (no GPU)".to_string(), |g| format!(", GPU {g}")),
                    opt(self.nvrtc_prelude_build_ms, t)
                ));
                s.push_str("| kernel | NVRTC cold, whole (a process's first) | NVRTC cold | disk hit | memory hit | GPU first call | GPU repeated call |\n");
                s.push_str("|---|---|---|---|---|---|---|\n");
                for k in &self.kernels {
                    let Some(c) = &k.cuda else { continue };
                    s.push_str(&format!(
                        "| {} | {} | {} | {} | {} | {} | {} |\n",
                        k.name,
                        r(c.nvrtc_whole_ms, t),
                        r(c.nvrtc_cold_ms, t),
                        r(c.disk_hit_ms, t),
                        r(c.memory_hit_ms, t),
                        opt(c.gpu_cold_call_ms, t),
                        opt(c.gpu_warm_call_ms, t)
                    ));
                }
            }
            _ => s.push_str("\nCUDA: NVRTC not found\n"),
        }
        s.push_str(&format!(
            "\nms (multiple of the trivial compile); medians of {REPEATS}, each cold one on new kernel text.\n"
        ));
        s
    }
}
