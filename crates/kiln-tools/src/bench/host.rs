//! Host cost of kernel calls: one cached `MetalKernel` call (averaged over many), the first
//! call of a kernel NVRTC has never seen (lowering, compilation, module load), and the first
//! call in a process of a kernel whose cubin is on disk from an earlier process.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use kiln::array::Array;
use kiln::backend;
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::Result;
use kiln::kernel::{LaunchSpec, MetalKernel};

/// Host costs on one device, in microseconds or milliseconds as named.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostCost {
    pub device: String,
    pub calls: usize,
    /// Mean host time to queue one cached call of a one-element kernel.
    pub cached_call_us: f64,
    /// The same including the wait for all of them to finish, per call.
    pub cached_call_with_sync_us: f64,
    /// First call of a never-seen kernel (lower, NVRTC, load, run, wait).
    pub cold_compile_ms: f64,
    /// First call in this process of a fixed kernel; a disk-cache hit when an earlier process
    /// compiled it (run the measurement twice).
    pub first_call_fixed_ms: f64,
    /// The driver's floor: a bare launch of an empty kernel without parameters, and with a
    /// parameter block the size of kiln's (CUDA only).
    pub bare_launch_us: Option<f64>,
    pub bare_launch_kiln_args_us: Option<f64>,
    /// An empty kernel with a body kernel's 368-byte parameter block through kiln's launch path
    /// (a one-node graph for such a short launch): the floor under a cached call (CUDA only).
    #[serde(default)]
    pub graph_launch_us: Option<f64>,
    /// A stream-ordered allocation and free of a 64 MiB block, bare and with the two aprons
    /// every kiln buffer has (CUDA only).
    #[serde(default)]
    pub alloc_64mib_us: Option<f64>,
    #[serde(default)]
    pub alloc_64mib_with_aprons_us: Option<f64>,
}

const BODY: &str = "out[0] = inp[0] + static_cast<T>(1);";

fn one_element_call(kernel: &MetalKernel, x: &Array, device: Device) -> Result<Vec<Array>> {
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).template("T", DType::F32).device(device);
    kernel.call(&[x.into()], &spec)
}

fn wait(out: &[Array]) -> Result<()> {
    for a in out {
        a.to_host()?;
    }
    Ok(())
}

/// Measures host costs on `device` with `calls` cached calls.
pub fn measure(device: Device, calls: usize) -> Result<HostCost> {
    let x = Array::from_f64(DType::F32, &[1], &[0.5])?.to_device(device)?;
    backend::backend_for(device)?;

    let fixed = MetalKernel::new("bench_host_fixed", &["inp"], &["out"], format!("{BODY} // fixed"))?;
    let t = Instant::now();
    wait(&one_element_call(&fixed, &x, device)?)?;
    let first_call_fixed_ms = t.elapsed().as_secs_f64() * 1e3;

    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let cold = MetalKernel::new("bench_host_cold", &["inp"], &["out"], format!("{BODY} // {nonce}"))?;
    let t = Instant::now();
    wait(&one_element_call(&cold, &x, device)?)?;
    let cold_compile_ms = t.elapsed().as_secs_f64() * 1e3;

    let kernel = MetalKernel::new("bench_host_cached", &["inp"], &["out"], BODY)?;
    for _ in 0..100 {
        one_element_call(&kernel, &x, device)?;
    }
    wait(&one_element_call(&kernel, &x, device)?)?;
    let t = Instant::now();
    let mut last = Vec::new();
    for _ in 0..calls {
        last = one_element_call(&kernel, &x, device)?;
    }
    let queued = t.elapsed().as_secs_f64();
    wait(&last)?;
    let total = t.elapsed().as_secs_f64();
    let n = calls.max(1) as f64;
    let check = last.first().map(|a| a.to_host().and_then(|h| h.to_f64_vec())).transpose()?;
    if check.as_deref() != Some(&[1.5][..]) {
        return Err(kiln::error::Error::invalid("bench", format!("the timed kernel returned {check:?}, not [1.5]")));
    }
    let (bare_launch_us, bare_launch_kiln_args_us, graph_launch_us) = match device {
        Device::Cuda(i) => {
            let b = backend::cuda::cuda_backend(i)?;
            (
                Some(b.bare_launch_us(calls, 0, false)?),
                Some(b.bare_launch_us(calls, 1376, false)?),
                Some(b.bare_launch_us(calls, 368, true)?),
            )
        }
        _ => (None, None, None),
    };
    let (alloc_64mib_us, alloc_64mib_with_aprons_us) = match device {
        Device::Cuda(i) => {
            let b = backend::cuda::cuda_backend(i)?;
            let block = 64 << 20;
            let aprons = 2 * backend::cuda::APRON_BYTES;
            (Some(b.driver_alloc_us(block, calls)?), Some(b.driver_alloc_us(block + aprons, calls)?))
        }
        _ => (None, None),
    };
    Ok(HostCost {
        bare_launch_us,
        bare_launch_kiln_args_us,
        graph_launch_us,
        alloc_64mib_us,
        alloc_64mib_with_aprons_us,
        device: device.to_string(),
        calls,
        cached_call_us: queued / n * 1e6,
        cached_call_with_sync_us: total / n * 1e6,
        cold_compile_ms,
        first_call_fixed_ms,
    })
}
