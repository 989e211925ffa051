//! NVIDIA GPUs through cudarc: MSL lowered to CUDA C++ (see `backend::cuda::emit`), compiled by NVRTC,
//! dispatched with exact Metal semantics (`dispatch.rs`). The driver and NVRTC are loaded at run
//! time; their absence, or the absence of a device, is `BackendUnavailable`.
//!
//! One backend per device ordinal, one stream per backend. Launches are asynchronous: outputs
//! come back as device arrays while the kernel runs, and `to_host` synchronises (a fault is
//! reported there). Memory is stream-ordered (`cuMemAllocAsync`/`cuMemFreeAsync` on the one
//! stream), so dropping an array the queued work still reads is safe; every buffer has
//! `APRON_BYTES` of readable memory on both sides (`pool.rs`). After a sticky fault the
//! device's context is reset and the next `backend(ordinal)` builds a fresh one.
//!
//! A program seen before costs one hash of its Metal text and a table lookup (`backend/program_table.rs`):
//! lowering, the ~100 KB translation unit and its cache key are computed once per program.

mod compile;
mod custom;
mod dispatch;
pub mod emit;
pub mod emit_mlx;
mod external;
mod graphs;
mod libs;
mod memory;
mod nvrtc_pch;
mod pool;
mod programs;
mod tensor_map;
mod timing;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result as drv, sys, CudaContext, CudaFunction, CudaModule, CudaStream, DriverError};
use cudarc::nvrtc::Ptx;

use super::{unavailable, Backend, BackendStatus, Capabilities, Launch, ProgramMemo};
use crate::array::Array;
use crate::backend::cuda::emit as cuda_source;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::program::{MathMode, MetalProgram, ProgramKind};
use crate::source::lower::{self, LowerTarget};
use crate::source::parse::ParseSlot;
use crate::source::user_lines::user_compile_error;

use super::program_table::{self, ProgramTable};
pub use compile::{
    build_precompiled_prelude, compile_past_memory as compile_source_past_memory,
    compile_with_log as compile_source_with_log, nvrtc_version, options as nvrtc_options, Arch, PastMemory,
};
pub use external::{is_current_context, lent_cuda_array, LentCudaMemory};
pub use memory::CudaBuffer;
pub use pool::APRON_BYTES;
use programs::Resolved;
pub use timing::DeviceTimer;

/// The CUDA backend of one device.
pub struct CudaBackend {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: Arch,
    /// What the device is and can do, read once (persistent launches size their grid by its
    /// multiprocessors).
    capabilities: Capabilities,
    modules: Mutex<HashMap<String, Arc<LoadedModule>>>,
    programs: ProgramTable<Arc<Resolved>>,
    pool: Arc<pool::BlockPool>,
    /// One-node graphs of launch shapes seen more than once.
    graphs: graphs::GraphLaunches,
    /// `CudaKernel` modules by the user's source, bucketed by its hash.
    custom_modules: Mutex<HashMap<u64, Vec<CustomModule>>>,
}

/// A `CudaKernel` source, whether it was compiled for the architecture-specific target, and its
/// loaded module.
type CustomModule = (String, bool, Arc<LoadedModule>);

/// A loaded cubin and its functions, with the dynamic shared memory limit already raised.
struct LoadedModule {
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<String, (CudaFunction, usize)>>,
}

fn registry() -> &'static Mutex<HashMap<usize, Arc<CudaBackend>>> {
    static REG: OnceLock<Mutex<HashMap<usize, Arc<CudaBackend>>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The backend of CUDA device `ordinal`, created on first use.
pub fn backend(ordinal: usize) -> Result<Arc<dyn Backend>> {
    Ok(cuda_backend(ordinal)?)
}

/// Like [`backend`], with the concrete type (for `CudaKernel`).
pub fn cuda_backend(ordinal: usize) -> Result<Arc<CudaBackend>> {
    // Devices created before are found without a lock (a call's hot path).
    if let Some(b) = CREATED.get(ordinal).and_then(OnceLock::get) {
        return Ok(b.clone());
    }
    libs::require_driver()?;
    libs::require_nvrtc()?;
    let mut reg = registry().lock().map_err(|_| unavailable("cuda", "backend registry lock poisoned"))?;
    if let Some(b) = reg.get(&ordinal) {
        return Ok(b.clone());
    }
    let b = Arc::new(CudaBackend::new(ordinal)?);
    reg.insert(ordinal, b.clone());
    if let Some(slot) = CREATED.get(ordinal) {
        // Set once, under the registry lock, to the registry's own backend.
        let _ = slot.set(b.clone());
    }
    Ok(b)
}

/// Device `ordinal`'s backend if it has been created, without creating it.
fn created_backend(ordinal: usize) -> Option<Arc<CudaBackend>> {
    if let Some(b) = CREATED.get(ordinal).and_then(OnceLock::get) {
        return Some(b.clone());
    }
    registry().lock().ok()?.get(&ordinal).cloned()
}

/// The backends of the first devices, once created (the registry holds every device).
static CREATED: [OnceLock<Arc<CudaBackend>>; 16] = [const { OnceLock::new() }; 16];

fn device_count() -> Result<usize> {
    drv::init().map_err(|e| unavailable("cuda", format!("cuInit failed: {}", driver_error(e))))?;
    let n =
        drv::device::get_count().map_err(|e| unavailable("cuda", format!("no CUDA devices: {}", driver_error(e))))?;
    Ok(n.max(0) as usize)
}

/// The driver's CUDA version as (major, minor).
pub fn driver_version() -> Result<(i32, i32)> {
    libs::require_driver()?;
    let mut v = 0;
    // SAFETY: the driver library is loaded (checked above); `v` is valid for writes.
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(|e| unavailable("cuda", format!("cuDriverGetVersion: {}", driver_error(e))))?;
    Ok((v / 1000, (v % 1000) / 10))
}

/// What `kiln devices` shows for CUDA.
pub fn status() -> BackendStatus {
    let mut st = BackendStatus { backend: "cuda", devices: Vec::new(), unavailable: None };
    let probe = || -> Result<Vec<(Device, String)>> {
        libs::require_driver()?;
        libs::require_nvrtc()?;
        let (dmaj, dmin) = driver_version()?;
        let (nmaj, nmin) = nvrtc_version()?;
        let n = device_count()?;
        if n == 0 {
            return Err(unavailable("cuda", "the driver reports no CUDA devices"));
        }
        let mut out = Vec::new();
        for i in 0..n {
            let dev = drv::device::get(i as i32).map_err(|e| unavailable("cuda", driver_error(e)))?;
            let name = drv::device::get_name(dev).unwrap_or_else(|_| "unknown".into());
            let attr = |a| {
                // SAFETY: `dev` is a valid device handle from the driver.
                unsafe { drv::device::get_attribute(dev, a) }.unwrap_or(0)
            };
            let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
            let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
            // SAFETY: as above.
            let mem = unsafe { drv::device::total_mem(dev) }.unwrap_or(0);
            out.push((
                Device::Cuda(i),
                format!(
                    "{name}, compute capability {major}.{minor}, {:.1} GiB, driver CUDA {dmaj}.{dmin}, NVRTC {nmaj}.{nmin}",
                    mem as f64 / (1u64 << 30) as f64
                ),
            ));
        }
        Ok(out)
    };
    match probe() {
        Ok(devices) => st.devices = devices,
        Err(Error::BackendUnavailable { reason, .. }) => st.unavailable = Some(reason),
        Err(e) => st.unavailable = Some(e.to_string()),
    }
    st
}

/// The full CUDA source NVRTC compiles for `program`.
pub fn translate(program: &MetalProgram) -> Result<String> {
    if !program.kind.is_metal() {
        return Ok(custom::with_prelude(&program.source));
    }
    Ok(translate_unit(program, None)?.source)
}

/// The CUDA unit of `program`, lowered from the parse kept in `parse` where given.
fn translate_unit(program: &MetalProgram, parse: Option<&ParseSlot>) -> Result<cuda_source::CudaUnit> {
    let module = lower::lower_kept(program, parse, LowerTarget::Cuda)?;
    if module.entry(&program.function).is_none() {
        return Err(Error::Compile {
            backend: "cuda",
            kernel: program.kernel.clone(),
            log: format!("no kernel named {:?} in the program", program.function),
        });
    }
    let body = matches!(program.kind, ProgramKind::MlxBody | ProgramKind::MlxBodyGenericPointers);
    Ok(cuda_source::emit(&module, &program.kernel, body, program.kind == ProgramKind::MlxBody))
}

/// Lowers and compiles `program` to a cubin for `arch` with NVRTC alone (no device needed).
pub fn compile_cubin(program: &MetalProgram, arch: Arch) -> Result<Vec<u8>> {
    if let ProgramKind::Cuda { arch_specific } = program.kind {
        let source = custom::with_prelude(&program.source);
        let specific = arch_specific.is_some();
        return Ok(compile::compile_for(&program.kernel, &source, arch, MathMode::Safe, specific)?.as_ref().clone());
    }
    let unit = translate_unit(program, None)?;
    let image = compile::compile(&program.kernel, &unit.source, arch, program.math_mode)
        .map_err(|e| user_compile_error(program, e))?;
    Ok(image.as_ref().clone())
}

/// Lowers `program` and compiles it for `arch` past the in-memory cache, the `how` way (no
/// device needed). For the compile benchmark.
pub fn compile_cubin_past_memory(program: &MetalProgram, arch: Arch, how: PastMemory) -> Result<Vec<u8>> {
    let unit = translate_unit(program, None)?;
    compile::compile_past_memory(&program.kernel, &unit.source, arch, program.math_mode, how)
}

/// Compiles CUDA source text to a cubin for `arch` with NVRTC alone (no device needed).
pub fn compile_source(kernel: &str, source: &str, arch: Arch, math: MathMode) -> Result<Vec<u8>> {
    Ok(compile::compile(kernel, source, arch, math)?.as_ref().clone())
}

/// As [`compile_source`], for the architecture-specific target (`sm_90a`) when `arch_specific`.
pub fn compile_source_for(
    kernel: &str,
    source: &str,
    arch: Arch,
    math: MathMode,
    arch_specific: bool,
) -> Result<Vec<u8>> {
    Ok(compile::compile_for(kernel, source, arch, math, arch_specific)?.as_ref().clone())
}

/// Readable text of a driver error.
pub(crate) fn driver_error(e: DriverError) -> String {
    match (e.error_name(), e.error_string()) {
        (Ok(name), Ok(text)) => format!("{} ({})", name.to_string_lossy(), text.to_string_lossy()),
        _ => format!("{:?}", e.0),
    }
}

/// Keeps freed device memory in the stream-ordered pool instead of returning it to the driver at
/// every synchronisation, so the allocations of repeated calls cost no driver mapping.
fn keep_pool_memory(ctx: &CudaContext) {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is valid for writes and the device handle comes from a live context.
    if unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) } != sys::CUresult::CUDA_SUCCESS {
        return;
    }
    let mut threshold: u64 = u64::MAX;
    // SAFETY: `pool` is the device's default pool; the attribute takes a pointer to a u64.
    let _ = unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        )
    };
}

/// Errors that leave the context unusable.
fn is_sticky(e: &DriverError) -> bool {
    use sys::CUresult::*;
    matches!(
        e.0,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
    )
}

impl CudaBackend {
    fn new(ordinal: usize) -> Result<CudaBackend> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(unavailable("cuda", format!("no CUDA device {ordinal} (found {n})")));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable("cuda", format!("creating a context on device {ordinal}: {}", driver_error(e))))?;
        // SAFETY: the backend uses a single stream and synchronises it at every boundary, so
        // cudarc's cross-stream event tracking is unnecessary.
        unsafe { ctx.disable_event_tracking() };
        let stream =
            ctx.new_stream().map_err(|e| unavailable("cuda", format!("creating a stream: {}", driver_error(e))))?;
        keep_pool_memory(&ctx);
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| unavailable("cuda", format!("compute capability: {}", driver_error(e))))?;
        let multiprocessors =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or(1).max(1)
                as usize;
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        // SAFETY: the device handle comes from the live context created above.
        let memory_bytes = unsafe { drv::device::total_mem(ctx.cu_device()) }.unwrap_or(0) as u64;
        let capabilities = Capabilities {
            device: Device::Cuda(ordinal),
            name,
            compute_capability: Some((major as u32, minor as u32)),
            multiprocessors,
            memory_bytes,
        };
        Ok(CudaBackend {
            ordinal,
            ctx,
            stream,
            arch: (major as u32, minor as u32),
            capabilities,
            modules: Mutex::new(HashMap::new()),
            programs: ProgramTable::default(),
            pool: Arc::default(),
            graphs: graphs::GraphLaunches::new(),
            custom_modules: Mutex::new(HashMap::new()),
        })
    }

    /// The device's compute capability.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The device's streaming multiprocessors (at least 1).
    pub fn multiprocessors(&self) -> usize {
        self.capabilities.multiprocessors
    }

    /// Maps a driver error of `kernel` during `step`; a sticky fault also retires this backend.
    pub(crate) fn fail(&self, kernel: &str, step: &str, e: DriverError) -> Error {
        if is_sticky(&e) {
            self.retire();
            return Error::KernelFault {
                kernel: kernel.to_string(),
                msg: format!(
                    "{step}: {} (the CUDA context was reset; device arrays made before are lost)",
                    driver_error(e)
                ),
            };
        }
        Error::Driver { backend: "cuda", kernel: kernel.to_string(), msg: format!("{step}: {}", driver_error(e)) }
    }

    /// Drops this backend from the registry and resets the device's primary context, so the
    /// next call starts from a clean context.
    fn retire(&self) {
        if let Ok(mut reg) = registry().lock() {
            reg.remove(&self.ordinal);
        }
        // SAFETY: resetting the primary context of a device we hold; memory of the old context
        // becomes invalid, which the caller is told in the error.
        let _ = unsafe { sys::cuDevicePrimaryCtxReset_v2(self.ctx.cu_device()) };
    }

    /// Compiles (cached) and loads `source`, returning `function` with at least `dyn_smem`
    /// bytes of dynamic shared memory allowed.
    pub(crate) fn function(
        &self,
        kernel: &str,
        source: &str,
        function: &str,
        math: MathMode,
        dyn_smem: usize,
    ) -> Result<CudaFunction> {
        let module = self.module(kernel, source, math)?;
        self.entry(kernel, &module, function, dyn_smem)
    }

    /// Compiles (cached) and loads the translation unit `source`.
    fn module(&self, kernel: &str, source: &str, math: MathMode) -> Result<Arc<LoadedModule>> {
        self.module_for(kernel, source, math, false)
    }

    /// As [`Self::module`], for the architecture-specific target when `arch_specific`.
    fn module_for(&self, kernel: &str, source: &str, math: MathMode, arch_specific: bool) -> Result<Arc<LoadedModule>> {
        let image = compile::compile_for(kernel, source, self.arch, math, arch_specific)?;
        let key = compile::cache_key(source, &compile::options_for(self.arch, math, arch_specific), self.arch, (0, 0));
        let mut mods = self.modules.lock().map_err(|_| Error::invalid(kernel, "module cache lock poisoned"))?;
        if let Some(m) = mods.get(&key) {
            return Ok(m.clone());
        }
        let module = self
            .ctx
            .load_module(Ptx::from_binary(image.as_ref().clone()))
            .map_err(|e| self.fail(kernel, "loading the module", e))?;
        let m = Arc::new(LoadedModule { module, functions: Mutex::new(HashMap::new()) });
        mods.insert(key, m.clone());
        Ok(m)
    }

    /// `function` of a loaded module with at least `dyn_smem` bytes of dynamic shared memory.
    fn entry(&self, kernel: &str, module: &LoadedModule, function: &str, dyn_smem: usize) -> Result<CudaFunction> {
        let mut fns = module.functions.lock().map_err(|_| Error::invalid(kernel, "function cache lock poisoned"))?;
        if !fns.contains_key(function) {
            let f =
                module.module.load_function(function).map_err(|e| self.fail(kernel, "finding the entry point", e))?;
            fns.insert(function.to_string(), (f, 48 * 1024));
        }
        let Some((f, limit)) = fns.get_mut(function) else {
            return Err(Error::invalid(kernel, "function cache inconsistency"));
        };
        if dyn_smem > *limit {
            let static_smem = f.shared_size_bytes().unwrap_or(0).max(0) as usize;
            let max = self
                .ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                .unwrap_or(48 * 1024)
                .max(0) as usize;
            if dyn_smem + static_smem > max {
                return Err(Error::invalid(
                    kernel,
                    format!("{dyn_smem} bytes of threadgroup memory plus {static_smem} static exceed the device limit of {max}"),
                ));
            }
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dyn_smem as i32,
            )
            .map_err(|e| self.fail(kernel, "raising the shared memory limit", e))?;
            *limit = dyn_smem;
        }
        Ok(f.clone())
    }

    /// The compiled entry of `program`: looked up by content, built on first use (lowered from
    /// the parse kept in `memo`, where given), and kept in `memo`.
    fn resolve(&self, program: &MetalProgram, memo: Option<&ProgramMemo>) -> Result<Arc<Resolved>> {
        let resolved = self.resolve_by_content(program, memo.map(ProgramMemo::parse))?;
        if let Some(memo) = memo {
            memo.resolved().set(Device::Cuda(self.ordinal), resolved.clone());
        }
        Ok(resolved)
    }

    fn resolve_by_content(&self, program: &MetalProgram, parse: Option<&ParseSlot>) -> Result<Arc<Resolved>> {
        let hash = program_table::fingerprint(program);
        if let Some(r) = self.programs.get(hash, program, "")? {
            return Ok(r);
        }
        let unit = translate_unit(program, parse)?;
        let module = self
            .module(&program.kernel, &unit.source, program.math_mode)
            .map_err(|e| user_compile_error(program, e))?;
        let symbol = cuda_source::entry_symbol(&program.function);
        let func = self.entry(&program.kernel, &module, &symbol, 0)?;
        let max_threads = func.max_threads_per_block().unwrap_or(1024).max(1) as u64;
        let static_smem =
            func.shared_size_bytes().map_err(|e| self.fail(&program.kernel, "reading the static shared memory", e))?;
        let static_smem = usize::try_from(static_smem).unwrap_or(0);
        let resolved = Arc::new(Resolved::new(module, symbol, func, max_threads, unit.inline_bytes, static_smem));
        self.programs.insert(hash, program, "", resolved.clone())?;
        Ok(resolved)
    }

    /// The entry of a resolved program allowing `dyn_smem` bytes of dynamic shared memory: the
    /// program's own up to 48 KiB, else one with the limit raised.
    fn resolved_function<'r>(&self, kernel: &str, r: &'r Resolved, dyn_smem: usize) -> Result<Cow<'r, CudaFunction>> {
        if dyn_smem <= 48 * 1024 {
            return Ok(Cow::Borrowed(&r.func));
        }
        self.entry(kernel, &r.module, &r.symbol, dyn_smem).map(Cow::Owned)
    }

    /// A kiln-internal helper kernel (no prelude, safe math).
    pub(crate) fn helper_function(&self, what: &str, source: &str, function: &str) -> Result<CudaFunction> {
        self.function(what, source, function, MathMode::Safe, 0)
    }
}

impl Backend for CudaBackend {
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    fn upload(&self, host: &Array) -> Result<Array> {
        let host = host.to_host()?;
        let bytes = host.to_contiguous_bytes()?;
        self.upload_bytes("upload", host.dtype(), host.shape(), &bytes)
    }

    fn to_host(&self, array: &Array) -> Result<Array> {
        if array.device() == Device::Cpu {
            return Ok(array.clone());
        }
        let dense = if array.is_row_contiguous() { array.clone() } else { self.gather(array)? };
        self.download("to_host", &dense)
    }

    fn row_contiguous(&self, array: &Array) -> Result<Array> {
        if array.device() == Device::Cpu {
            return self.upload(array);
        }
        if array.is_row_contiguous() {
            return Ok(array.clone());
        }
        self.gather(array)
    }

    fn launch(&self, launch: &Launch<'_>) -> Result<Vec<Array>> {
        if let ProgramKind::Cuda { arch_specific } = launch.program.kind {
            return self.run_cuda_program(launch, arch_specific);
        }
        let device = Device::Cuda(self.ordinal);
        if let Some(r) = launch.memo.and_then(|memo| memo.resolved().get::<Resolved>(device)) {
            return self.run(launch, r);
        }
        let r = self.resolve(launch.program, launch.memo)?;
        self.run(launch, &r)
    }

    fn tensor_map_16bit(
        &self,
        what: &str,
        array: &Array,
        dims: [u64; 3],
        tile: [u32; 3],
    ) -> Result<[u8; super::TENSOR_MAP_BYTES]> {
        self.encode_tensor_map_16bit(what, array, dims, tile)
    }

    fn prepare(&self, program: &MetalProgram, memo: Option<&ProgramMemo>) -> Result<()> {
        if let ProgramKind::Cuda { arch_specific } = program.kind {
            return self.prepare_cuda_program(program, arch_specific);
        }
        self.resolve(program, memo).map(|_| ())
    }
}
