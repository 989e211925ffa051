//! The seam between kernels and devices. A backend compiles a Metal program for its device,
//! binds buffers and dispatches; ops and kernels only talk to [`Backend`]. Backends that are not
//! compiled in or not usable here still exist and answer `Error::BackendUnavailable`.

pub(crate) mod cache_root;
pub mod cpu;
pub mod cuda;
pub(crate) mod disk_cache;
pub mod metal;
pub(crate) mod program_table;
mod stream;

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use smallvec::SmallVec;

use crate::array::{Array, Shape};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::source::parse::ParseSlot;

/// The program description lives in the bottom layer (`program`); the backend seam speaks of it,
/// so its users find it here too.
pub use stream::ExternalStream;

pub use crate::program::{ConstantKey, ConstantValue, MetalProgram, ProgramKind, Target};

/// A freshly allocated, row-contiguous output.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// Shape of the output.
    pub shape: Shape,
    /// Element type of the output.
    pub dtype: DType,
    /// Fill value (numeric cast to `dtype`) applied before the kernel; `None` leaves the
    /// contents unspecified.
    pub init_value: Option<f64>,
}

/// The bytes of a constant binding: held inline up to 4-D shapes and strides.
pub type ConstBytes = SmallVec<[u8; 32]>;

/// What is bound to one `[[buffer(i)]]` slot, in slot order.
#[derive(Clone, Debug)]
pub enum Binding {
    /// An input array, bound at its offset with its own layout (already on the backend's device).
    Array(Array),
    /// Small constant data (shapes, strides, parameter structs), copied at launch.
    Bytes(ConstBytes),
    /// An output the backend allocates and returns.
    Output(OutputSpec),
    /// An array the kernel reads and updates: the backend copies it into a fresh row-contiguous
    /// buffer, binds that, and returns it among the outputs (in binding order); the array
    /// itself is left unchanged.
    InOut(Array),
    /// An output the caller allocated (already on the backend's device): the kernel writes it in
    /// place and the backend returns it among the outputs, in binding order.
    OutputInto(Array),
}

/// The geometry of a dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// `dispatchThreads`: exactly this many threads per dimension; edge groups may be partial.
    Threads([u32; 3]),
    /// `dispatchThreadgroups`: this many full threadgroups per dimension.
    Threadgroups([u32; 3]),
}

/// One dispatch of a program.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// The program to run.
    pub program: &'a MetalProgram,
    /// The buffers bound to the kernel's parameters.
    pub bindings: Vec<Binding>,
    /// The grid to dispatch.
    pub dispatch: Dispatch,
    /// Requested threads per threadgroup (before clamping to the grid).
    pub threadgroup: [u32; 3],
    /// Bytes bound to `[[threadgroup(0)]]`, `[[threadgroup(1)]]`, ...
    pub threadgroup_memory: Vec<usize>,
    /// Longest the launch may run; `None` for no limit.
    pub timeout: Option<Duration>,
    /// Stops the kernel when set (backends that can interrupt a kernel honour it).
    pub cancel: Option<Arc<AtomicBool>>,
    /// The caller's CUDA stream to queue the kernel on, instead of the backend's own.
    pub stream: Option<ExternalStream>,
    /// What the program's owner keeps beside it: its parse, which a backend lowers from, and
    /// where a backend keeps what it resolved for it, so that launching the same program again
    /// skips the lookup by content. `None`: the program is parsed and looked up afresh.
    pub memo: Option<&'a ProgramMemo>,
}

/// What the owner of a program (a kernel's memo of one signature, a library's of one function)
/// keeps beside it and hands to the backend with each launch: the program's one parse, read by
/// its launch contract and by every backend's lowering, and what a backend resolved (compiled
/// and loaded) for it.
#[derive(Debug, Default)]
pub struct ProgramMemo {
    parse: Arc<ParseSlot>,
    resolved: ResolvedSlot,
}

impl ProgramMemo {
    /// A memo whose program is parsed into `parse`, shared with other programs of the same
    /// text (a library's functions).
    pub(crate) fn sharing_parse(parse: &Arc<ParseSlot>) -> ProgramMemo {
        ProgramMemo { parse: parse.clone(), resolved: ResolvedSlot::default() }
    }

    /// The program's parse.
    pub(crate) fn parse(&self) -> &ParseSlot {
        &self.parse
    }

    /// Where a backend keeps what it resolved for the program.
    pub fn resolved(&self) -> &ResolvedSlot {
        &self.resolved
    }
}

/// What one backend resolved (compiled and loaded) for one program, kept beside the program by
/// its owner. The first device to fill it keeps it; other devices look their programs up.
#[derive(Default)]
pub struct ResolvedSlot(OnceLock<(Device, Arc<dyn Any + Send + Sync>)>);

impl ResolvedSlot {
    /// What `device` resolved here, if it filled the slot.
    pub fn get<T: Any + Send + Sync>(&self, device: Device) -> Option<&T> {
        let (owner, value) = self.0.get()?;
        if *owner != device {
            return None;
        }
        value.downcast_ref::<T>()
    }

    /// Keeps `value` for `device` unless the slot is already filled.
    pub fn set<T: Any + Send + Sync>(&self, device: Device, value: Arc<T>) {
        let _ = self.0.set((device, value));
    }
}

impl std::fmt::Debug for ResolvedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = self.0.get().map(|(d, _)| *d);
        f.debug_tuple("ResolvedSlot").field(&owner).finish()
    }
}

impl Launch<'_> {
    /// The threadgroup size that actually runs: clamped to the grid for `Threads` dispatches.
    pub fn effective_threadgroup(&self) -> [u32; 3] {
        match self.dispatch {
            Dispatch::Threads(grid) => [0, 1, 2].map(|d| self.threadgroup[d].min(grid[d].max(1))),
            Dispatch::Threadgroups(_) => self.threadgroup,
        }
    }
}

/// What a backend's device is and can do, for ops that choose a kernel or size a grid by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The device answered for; its variant is the kind of device.
    pub device: Device,
    /// The device's name, as its driver or the system gives it.
    pub name: String,
    /// The CUDA compute capability (major, minor); `None` on other devices.
    pub compute_capability: Option<(u32, u32)>,
    /// Units that run threadgroups side by side: streaming multiprocessors of a GPU, cores of
    /// the CPU (at least 1).
    pub multiprocessors: usize,
    /// Bytes of memory the device has (the host's physical memory for the CPU); 0 when unknown.
    pub memory_bytes: u64,
}

/// A device backend.
pub trait Backend: Send + Sync {
    /// The device this backend drives.
    fn device(&self) -> Device;
    /// What the device is and can do (read once when the backend is made).
    fn capabilities(&self) -> Capabilities;
    /// Copies a host array to this device (row-contiguous); identity for the CPU.
    fn upload(&self, host: &Array) -> Result<Array>;
    /// Copies an array of this device to the host.
    fn to_host(&self, array: &Array) -> Result<Array>;
    /// A row-contiguous copy of an array of this device.
    fn row_contiguous(&self, array: &Array) -> Result<Array>;
    /// Compiles (cached) and runs one dispatch; returns the outputs in binding order.
    fn launch(&self, launch: &Launch<'_>) -> Result<Vec<Array>>;
    /// Compiles (cached) and loads `program` without running it, so its first launch does not
    /// compile; it is lowered from the parse in `memo`, and what was loaded is kept there, where
    /// given.
    fn prepare(&self, program: &MetalProgram, memo: Option<&ProgramMemo>) -> Result<()>;
    /// The tensor map (the [`TENSOR_MAP_BYTES`]-byte descriptor a tensor memory accelerator
    /// copies tiles with) of a row-contiguous 16-bit array of this device viewed as a 3-D tensor
    /// of `dims` (innermost first), copied in boxes of `tile` elements with the 128-byte
    /// shared-memory swizzle. Only devices with such a unit (NVIDIA Hopper and later) have them;
    /// the others answer an error naming `what`.
    fn tensor_map_16bit(
        &self,
        what: &str,
        array: &Array,
        dims: [u64; 3],
        tile: [u32; 3],
    ) -> Result<[u8; TENSOR_MAP_BYTES]> {
        let _ = (array, dims, tile);
        Err(Error::invalid(what, format!("tensor maps are a capability of NVIDIA GPUs, not of {}", self.device())))
    }
}

/// Bytes of one encoded tensor map ([`Backend::tensor_map_16bit`]).
pub const TENSOR_MAP_BYTES: usize = 128;

/// What `kiln devices` reports for one backend.
#[derive(Clone, Debug)]
pub struct BackendStatus {
    /// The backend's name.
    pub backend: &'static str,
    /// Devices found, with a one-line description each.
    pub devices: Vec<(Device, String)>,
    /// Why the backend cannot run here, when it cannot.
    pub unavailable: Option<String>,
}

/// The backend driving `device`.
pub fn backend_for(device: Device) -> Result<Arc<dyn Backend>> {
    match device {
        Device::Cpu => cpu::backend(),
        Device::Cuda(ordinal) => cuda::backend(ordinal),
        Device::Metal(ordinal) => metal::backend(ordinal),
    }
}

/// The status of every backend, for `kiln devices`.
pub fn statuses() -> Vec<BackendStatus> {
    vec![cuda::status(), metal::status(), cpu::status()]
}

/// The capabilities of `device` (see [`Backend::capabilities`]).
pub fn capabilities(device: Device) -> Result<Capabilities> {
    Ok(backend_for(device)?.capabilities())
}

/// The best device available here: an NVIDIA GPU, else an Apple GPU, else the CPU.
pub fn best_device() -> Device {
    if cuda::backend(0).is_ok() {
        Device::Cuda(0)
    } else if metal::backend(0).is_ok() {
        Device::Metal(0)
    } else {
        Device::Cpu
    }
}

/// Translates `program` into the text `target` compiles.
pub fn translate(program: &MetalProgram, target: Target) -> Result<String> {
    match target {
        Target::Metal => Ok(program.source.clone()),
        Target::Cuda => cuda::translate(program),
        Target::Cpu => cpu::translate(program),
    }
}

/// The most axes of a view that keeps its layout on a device.
pub const MAX_VIEW_AXES: usize = 10;

impl Array {
    /// Moves (copies) the array to `device`; a no-op when it already lives there. A view keeps
    /// its layout on the way to a device (offset, strides, broadcast axes): the span of storage
    /// it reaches is copied, so a kernel sees the same `_strides` on every backend, as MLX's
    /// kernels do (views of up to [`MAX_VIEW_AXES`] axes, the most a device copy handles; a
    /// view of more axes arrives row-contiguous). Arrays copied to the host come back
    /// row-contiguous.
    pub fn to_device(&self, device: Device) -> Result<Array> {
        let here = self.device();
        if here == device {
            return Ok(self.clone());
        }
        let host = if here == Device::Cpu { self.clone() } else { backend_for(here)?.to_host(self)? };
        if device == Device::Cpu {
            return Ok(host);
        }
        let backend = backend_for(device)?;
        match (host.host_buffer(), host.storage_span()) {
            (Some(buffer), Some((lo, hi))) if !host.is_row_contiguous() && host.ndim() <= MAX_VIEW_AXES => {
                let es = host.dtype().size();
                let bytes = buffer.bytes();
                let span = Array::from_bytes(host.dtype(), &[hi + 1 - lo], &bytes[lo * es..(hi + 1) * es])?;
                let moved = backend.upload(&span)?;
                Ok(moved.with_view(host.offset() - lo, host.shape(), host.strides()))
            }
            _ => backend.upload(&host),
        }
    }

    /// Copies the array to the host.
    pub fn to_host(&self) -> Result<Array> {
        self.to_device(Device::Cpu)
    }
}

pub(crate) fn unavailable(backend: &'static str, reason: impl Into<String>) -> Error {
    Error::BackendUnavailable { backend, reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolved_slot_answers_only_its_device_and_type() {
        let slot = ResolvedSlot::default();
        assert!(slot.get::<u32>(Device::Cuda(0)).is_none(), "an empty slot holds nothing");
        slot.set(Device::Cuda(0), Arc::new(7u32));
        assert_eq!(slot.get::<u32>(Device::Cuda(0)), Some(&7));
        assert!(slot.get::<u32>(Device::Cuda(1)).is_none(), "another device looks its program up");
        assert!(slot.get::<u64>(Device::Cuda(0)).is_none(), "another type is not this one");
        slot.set(Device::Cuda(1), Arc::new(9u32));
        assert_eq!(slot.get::<u32>(Device::Cuda(0)), Some(&7), "the first device keeps the slot");
        assert!(slot.get::<u32>(Device::Cuda(1)).is_none());
    }

    #[test]
    fn the_cpu_answers_what_it_is() {
        let caps = capabilities(Device::Cpu).unwrap();
        assert_eq!(caps.device, Device::Cpu);
        assert_eq!(caps.compute_capability, None);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(caps.multiprocessors, cores);
        assert!(!caps.name.is_empty());
        if cfg!(target_os = "linux") {
            assert!(caps.memory_bytes >= 1 << 20, "{caps:?}");
        }
    }

    #[test]
    fn a_cuda_program_is_refused_by_the_cpu_with_its_name() {
        let program = MetalProgram {
            kernel: "user_cuda".into(),
            source: "extern \"C\" __global__ void k(float* out) { out[0] = 1.0f; }".into(),
            kind: ProgramKind::Cuda { arch_specific: None },
            function: "k".into(),
            math_mode: crate::program::MathMode::Safe,
            constants: Vec::new(),
        };
        let launch = Launch {
            program: &program,
            bindings: vec![Binding::Output(OutputSpec {
                shape: [1].as_slice().into(),
                dtype: DType::F32,
                init_value: None,
            })],
            dispatch: Dispatch::Threads([1, 1, 1]),
            threadgroup: [1, 1, 1],
            threadgroup_memory: Vec::new(),
            timeout: None,
            cancel: None,
            stream: None,
            memo: None,
        };
        let cpu = backend_for(Device::Cpu).unwrap();
        for err in [
            cpu.launch(&launch).unwrap_err(),
            cpu.prepare(&program, None).unwrap_err(),
            translate(&program, Target::Cpu).unwrap_err(),
        ] {
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
            assert!(err.to_string().contains("user_cuda") && err.to_string().contains("CUDA devices only"), "{err}");
        }
    }

    #[test]
    fn tensor_maps_are_refused_by_the_cpu_with_the_op_named() {
        let a = Array::full(DType::F16, &[4, 64], 1.0).unwrap();
        let err =
            backend_for(Device::Cpu).unwrap().tensor_map_16bit("prefill", &a, [64, 4, 1], [64, 4, 1]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert!(err.to_string().contains("prefill") && err.to_string().contains("NVIDIA"), "{err}");
    }
}
