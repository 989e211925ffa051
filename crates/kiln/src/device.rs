//! Where an array lives and where a kernel runs. Moving an array between devices is explicit
//! (`Array::to_device`).

use std::any::Any;
use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A device: the CPU (where the emulator runs), an NVIDIA GPU by ordinal, or an Apple GPU.
/// `kiln::best_device()` picks the best one here; `"cuda:1".parse()` names one.
///
/// ```
/// use kiln::Device;
/// assert_eq!("cuda:1".parse::<Device>()?, Device::Cuda(1));
/// assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
/// let here = kiln::best_device(); // Device::Cuda(0) with an NVIDIA GPU, else Device::Cpu
/// println!("running on {here} ({})", here.backend_name());
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU: kernels run on the emulator, arrays in host memory.
    Cpu,
    /// An NVIDIA GPU, by CUDA ordinal.
    Cuda(usize),
    /// An Apple GPU, by ordinal.
    Metal(usize),
}

impl Device {
    /// The backend family name (`cpu`, `cuda`, `metal`).
    pub fn backend_name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda(_) => "cuda",
            Device::Metal(_) => "metal",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Metal(i) => write!(f, "metal:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;
    /// Parses `cpu`, `cuda`, `cuda:N`, `metal`, `metal:N`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let (kind, ordinal) = match s.split_once(':') {
            Some((k, n)) => {
                let n =
                    n.parse::<usize>().map_err(|_| Error::invalid("device", format!("bad device ordinal in {s:?}")))?;
                (k, n)
            }
            None => (s, 0),
        };
        match kind {
            "cpu" if ordinal == 0 => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(ordinal)),
            "metal" => Ok(Device::Metal(ordinal)),
            _ => Err(Error::invalid("device", format!("unknown device {s:?} (expected cpu, cuda[:N] or metal[:N])"))),
        }
    }
}

/// Memory owned by a device backend. Arrays hold it behind an `Arc`; only the backend that made
/// it knows its concrete type.
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// The device the memory lives on.
    fn device(&self) -> Device;
    /// Size in bytes.
    fn len_bytes(&self) -> usize;
    /// For the owning backend to recover its concrete type.
    fn as_any(&self) -> &dyn Any;
}
