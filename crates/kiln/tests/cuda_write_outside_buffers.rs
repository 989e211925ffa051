//! On CUDA a write outside every buffer is still `Error::KernelFault` naming the kernel (the
//! driver's illegal address; the context is reset), and the buffers kiln allocates on the fresh
//! context keep their aprons. A fault poisons the process's CUDA context, so this file holds one
//! test, run in a process of its own. Needs an NVIDIA GPU (`--include-ignored`,
//! `KILN_REQUIRE_BACKEND=cuda`).

mod common;

use common::{assert_close, device_or_skip, Rng};
use kiln::backend::cuda::APRON_BYTES;
use kiln::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

/// Doubles `x` into `out` after reading `x` exactly `APRON_BYTES` before its start and past
/// its end (kept in `probe` so the loads happen).
fn double_reading_aprons() -> MetalKernel {
    let reach = APRON_BYTES / 4;
    let body = format!(
        "uint i = thread_position_in_grid.x;
        int n = x_shape[0];
        probe[2 * i] = as_type<uint>(x[-{reach}]);
        probe[2 * i + 1] = as_type<uint>(x[n - 1 + {reach}]);
        out[i] = 2.0f * x[i];\n"
    );
    MetalKernel::new("double_reading_aprons", &["x"], &["out", "probe"], body).unwrap()
}

/// Runs `double_reading_aprons` on fresh inputs of a slab class and of a class with its own
/// allocation.
fn run_doubles(dev: Device, rng: &mut Rng) -> kiln::Result<()> {
    let k = double_reading_aprons();
    for n in [1000usize, 3 << 18] {
        let x = Array::from_f64(DType::F32, &[n], &rng.normals(n, 1.0)).unwrap();
        let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1])
            .output(&[n], DType::F32)
            .output(&[n, 2], DType::U32)
            .device(dev);
        let out = k.call(&[x.to_device(dev)?.into()], &spec)?;
        let want: Vec<f64> = x.to_f64_vec().unwrap().iter().map(|v| 2.0 * v).collect();
        assert_close(&format!("doubles of {n} floats"), &out[0], &want, DType::F32);
    }
    Ok(())
}

/// Copies `x` to `out`; thread 0 also writes to the device's first page, which no allocation
/// ever covers.
fn write_outside() -> MetalKernel {
    let body = "uint i = thread_position_in_grid.x;
        out[i] = x[i];
        if (i == 0) {
            device float* p = (device float*)0x10;
            p[0] = 1.0f;
        }\n";
    MetalKernel::new("write_outside", &["x"], &["out"], body).unwrap()
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_writes_outside_every_buffer_fault_and_fresh_buffers_keep_their_aprons() {
    let Some(dev) = device_or_skip("cuda") else { return };
    let mut rng = Rng::new(12);
    run_doubles(dev, &mut rng).unwrap();
    let writer = write_outside();
    let x = Array::from_f64(DType::F32, &[256], &rng.normals(256, 1.0)).unwrap().to_device(dev).unwrap();
    let spec = LaunchSpec::new([256, 1, 1], [256, 1, 1]).output(&[256], DType::F32).device(dev);
    // Launches are asynchronous: the fault surfaces at the call or when the output is read.
    match writer.call(&[x.into()], &spec).and_then(|outs| outs[0].to_host()) {
        Err(Error::KernelFault { kernel, msg }) => {
            // The launch is asynchronous: the fault is named by the call or by the read that
            // found it.
            assert!(kernel == "write_outside" || kernel == "to_host", "{kernel}");
            assert!(msg.contains("context was reset"), "{msg}");
            eprintln!("the write outside reports: {msg}");
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    // Where CUDA allows it (a reset primary context), the next calls run on a fresh context
    // whose new slabs and blocks have their aprons again.
    if let Err(e) = run_doubles(dev, &mut rng) {
        eprintln!("after a fault the device is not usable in this process: {e}");
    }
}

/// The kernels above lower and compile to sm_90 with NVRTC (no GPU needed).
#[test]
fn their_kernels_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let x = Array::from_f64(DType::F32, &[64], &[0.5; 64]).unwrap();
    for (kernel, outputs) in [(double_reading_aprons(), 2), (write_outside(), 1)] {
        let mut spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32);
        if outputs == 2 {
            spec = spec.output(&[64, 2], DType::U32);
        }
        let program = kernel.program(&kernel.generate(std::slice::from_ref(&x), &spec).unwrap());
        let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0))
            .unwrap_or_else(|e| panic!("{e}\n{}", kiln::backend::cuda::translate(&program).unwrap_or_default()));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}
