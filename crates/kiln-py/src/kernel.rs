//! `kiln._kiln.MetalKernel` (the base of `kiln.MetalKernel`, which `kiln.metal_kernel` makes):
//! the call, checked (`call_args.rs`) and launched with the GIL released. A launch on the CPU
//! from Python's main thread runs on one of the emulator's worker threads while that thread
//! watches for Ctrl-C (a signal sets the kernel's cancel flag and the emulator stops at its
//! next poll); from any other thread it runs on the caller's thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kiln::backend::Target;
use kiln::{Array, Device, KernelInput, LaunchSpec, MathMode, MetalKernel};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString};

use crate::arrays;
use crate::call_args::{self, Call, Keywords};
use crate::convert::{self, external_stream};
use crate::errors::{detached, internal, no_panic, IntoPy};
use crate::handoff::Handoff;
use crate::torch_call::LaunchKeywords;

/// How often the calling thread looks for Ctrl-C while a CPU kernel runs.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Runs `launch` with the GIL released. A CPU launch (the only kind that can run long and be
/// stopped) from Python's main thread runs on this thread with SIGINT forwarded to `cancel`
/// (`sigint::Forward`: a Ctrl-C stops the kernel, then Python's handler raises); where that
/// cannot be set up, it runs on an emulator worker while this thread checks Python's signal
/// handlers, and a raised `KeyboardInterrupt` (or any exception a handler raises) sets `cancel`
/// and is re-raised once the kernel has stopped.
///
/// A panic in `launch` (a bug in kiln) comes back as `kiln.InternalError` naming `op`.
pub fn run_interruptible<T: Send>(
    py: Python<'_>,
    op: &str,
    on_cpu: bool,
    cancel: Option<&Arc<AtomicBool>>,
    launch: impl FnOnce() -> kiln::Result<T> + Send,
) -> PyResult<T> {
    // Only Python's main thread runs signal handlers: a launch from another thread has nothing
    // to poll for and runs on its caller's thread.
    let Some(cancel) = cancel.filter(|_| on_cpu && is_main_thread(py)) else {
        return detached(py, op, launch);
    };
    // Where SIGINT can be forwarded to the launch's cancel flag, the launch runs right here: a
    // Ctrl-C stops the kernel and Python raises once it returns.
    #[cfg(unix)]
    if let Some(forward) = crate::sigint::Forward::install(py, cancel) {
        let result = py.detach(|| catch_unwind(AssertUnwindSafe(launch)));
        drop(forward);
        py.check_signals()?;
        return match result {
            Ok(r) => r.py_err(),
            Err(payload) => Err(internal(op, payload.as_ref())),
        };
    }
    // Otherwise it runs on a worker while this thread polls for signals.
    let (result, raised) = py.detach(|| {
        let handoff = Handoff::default();
        let job = || handoff.put(catch_unwind(AssertUnwindSafe(launch)));
        let wait = || {
            let mut raised: Option<PyErr> = None;
            let mut first = true;
            loop {
                if let Some(result) = handoff.take(SIGNAL_POLL, std::mem::take(&mut first)) {
                    return (result, raised);
                }
                if raised.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        cancel.store(true, Ordering::SeqCst);
                        raised = Some(e);
                    }
                }
            }
        };
        // The launch runs on the emulator's own (persistent) worker threads; a caller that is
        // one of them (it would wait on itself) gives it a thread of its own.
        if rayon::current_thread_index().is_none() {
            rayon::in_place_scope(|s| {
                s.spawn(|_| job());
                wait()
            })
        } else {
            std::thread::scope(|s| {
                s.spawn(job);
                wait()
            })
        }
    });
    if let Some(e) = raised {
        return Err(e);
    }
    match result {
        Ok(r) => r.py_err(),
        Err(payload) => Err(internal(op, payload.as_ref())),
    }
}

/// Whether this is Python's main thread (the one that runs signal handlers); true when it cannot
/// be told.
fn is_main_thread(py: Python<'_>) -> bool {
    static MAIN: PyOnceLock<u64> = PyOnceLock::new();
    let Ok(main) = MAIN.get_or_try_init(py, || -> PyResult<u64> {
        py.import("threading")?.call_method0("main_thread")?.getattr("ident")?.extract()
    }) else {
        return true;
    };
    thread_ident(py).is_none_or(|i| i == *main)
}

/// Python's identifier of the calling thread (`_thread.get_ident()`): its `pthread_self()`.
#[cfg(unix)]
fn thread_ident(_py: Python<'_>) -> Option<u64> {
    // SAFETY: `pthread_self` has no preconditions.
    Some(unsafe { libc::pthread_self() } as u64)
}

/// Python's identifier of the calling thread (`_thread.get_ident()`).
#[cfg(not(unix))]
fn thread_ident(py: Python<'_>) -> Option<u64> {
    static GET_IDENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_ident =
        GET_IDENT.get_or_try_init(py, || py.import("_thread")?.getattr("get_ident").map(Bound::unbind)).ok()?;
    get_ident.bind(py).call0().and_then(|i| i.extract()).ok()
}

/// A call's `timeout=` in seconds as a time limit (none for `None`).
pub(crate) fn time_limit(op: &str, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s).ok().filter(|d| !d.is_zero()).ok_or_else(|| {
                crate::errors::to_py(kiln::Error::invalid(
                    op,
                    format!("timeout must be a positive number of seconds, got {s}"),
                ))
            })
        })
        .transpose()
}

pub(crate) fn math_mode(name: &str) -> PyResult<MathMode> {
    name.parse::<MathMode>().map_err(|e| PyValueError::new_err(e.to_string()))
}

pub(crate) fn parse_device(op: &str, device: Option<&str>) -> PyResult<Option<Device>> {
    device
        .map(|d| {
            d.parse::<Device>()
                .map_err(|e| crate::errors::to_py(kiln::Error::invalid(op, format!("device {d:?}: {e}"))))
        })
        .transpose()
}

static IS_DESCRIBING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Whether kernel calls on this thread describe their outputs instead of running
/// (`kiln._abstract.describing`, used while PyTorch traces a graph).
fn describing(py: Python<'_>) -> PyResult<bool> {
    let get = IS_DESCRIBING.get_or_try_init(py, || {
        py.import(pyo3::intern!(py, "kiln._abstract"))?.getattr(pyo3::intern!(py, "is_describing")).map(Bound::unbind)
    })?;
    get.bind(py).call0()?.is_truthy()
}

/// A Metal kernel defined by its body (`mx.fast.metal_kernel`'s factory).
#[pyclass(module = "kiln._kiln", name = "MetalKernel", frozen, subclass)]
pub struct Kernel {
    kernel: MetalKernel,
    input_names: Vec<String>,
    ensure_row_contiguous: bool,
    launches: crate::torch_call::LaunchCache,
}

#[pymethods]
impl Kernel {
    #[new]
    #[pyo3(signature = (name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs, math_mode_name))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        input_names: Vec<String>,
        output_names: Vec<String>,
        source: &str,
        header: &str,
        ensure_row_contiguous: bool,
        atomic_outputs: bool,
        math_mode_name: &str,
    ) -> PyResult<Self> {
        no_panic(&format!("metal_kernel {name}"), || {
            let inputs: Vec<&str> = input_names.iter().map(String::as_str).collect();
            let outputs: Vec<&str> = output_names.iter().map(String::as_str).collect();
            let kernel = MetalKernel::new(name, &inputs, &outputs, source)
                .py_err()?
                .header(header)
                .ensure_row_contiguous(ensure_row_contiguous)
                .atomic_outputs(atomic_outputs)
                .math_mode(math_mode(math_mode_name)?);
            Ok(Kernel { kernel, input_names, ensure_row_contiguous, launches: Default::default() })
        })
    }

    /// A call with MLX's keywords (`kiln.MetalKernel.__call__`), checked and run here. PyTorch
    /// CUDA tensors on PyTorch's current device and stream (the common case) are launched with
    /// the launch description cached; every other call is checked once (`call_args`) and run
    /// where its inputs live. Only a call while PyTorch traces (`kiln._abstract.describing`) or
    /// with an explicit `stream=` goes to the subclass's `_call_glue` (Python), which enters
    /// PyTorch's context for it.
    #[pyo3(signature = (*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, init_value=None, verbose=None, stream=None, device=None, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        inputs: &Bound<'py, PyAny>,
        output_shapes: &Bound<'py, PyAny>,
        output_dtypes: &Bound<'py, PyAny>,
        grid: &Bound<'py, PyAny>,
        threadgroup: &Bound<'py, PyAny>,
        template: Option<&Bound<'py, PyAny>>,
        init_value: Option<&Bound<'py, PyAny>>,
        verbose: Option<&Bound<'py, PyAny>>,
        stream: Option<&Bound<'py, PyAny>>,
        device: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let none = py.None().into_bound(py);
        let template = template.unwrap_or(&none);
        let init_value = init_value.unwrap_or(&none);
        let verbose = match verbose {
            Some(v) => v.is_truthy()?,
            None => false,
        };
        let this = slf.get();
        let given = |a: Option<&Bound<'py, PyAny>>| a.is_some_and(|a| !a.is_none());
        let describing = describing(py)?;
        if !given(stream) && !given(device) && !given(timeout) && !verbose && !describing {
            let keywords =
                LaunchKeywords { inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value };
            let outs = no_panic(this.kernel.op(), || {
                this.launches.call(py, &this.kernel, this.ensure_row_contiguous, &keywords)
            })?;
            if let Some(outs) = outs {
                return Ok(outs.into_bound(py).into_any());
            }
        }
        // MLX's `stream` may also be a device name (a string), which names no CUDA stream.
        let on_stream =
            stream.is_some_and(|s| !s.is_none() && !s.is_instance_of::<PyString>() && !s.is_instance_of::<PyBytes>());
        if describing || on_stream {
            let stream = stream.unwrap_or(&none);
            let device = device.unwrap_or(&none);
            let timeout = timeout.unwrap_or(&none);
            let args = (
                inputs,
                output_shapes,
                output_dtypes,
                grid,
                threadgroup,
                template,
                init_value,
                verbose,
                stream,
                device,
                timeout,
            );
            return slf.call_method1(pyo3::intern!(py, "_call_glue"), args);
        }
        let keywords = Keywords {
            grid: Some(grid),
            threadgroup: Some(threadgroup),
            template: Some(template),
            init_value: Some(init_value),
            device,
            timeout,
            ..Keywords::new(inputs, output_shapes, output_dtypes)
        };
        no_panic(this.kernel.op(), || this.call_checked(py, &keywords, verbose))
    }

    /// The MLX drop-in's call on MLX CPU arrays (`mlx_host.rs`): MLX arrays out, or `None` where
    /// the drop-in's general path takes the call.
    #[pyo3(name = "_mlx_host_call", signature = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, mlx_array, mlx_bfloat16))]
    #[allow(clippy::too_many_arguments)]
    fn mlx_host_call<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
        output_shapes: &Bound<'py, PyAny>,
        output_dtypes: &Bound<'py, PyAny>,
        grid: &Bound<'py, PyAny>,
        threadgroup: &Bound<'py, PyAny>,
        template: &Bound<'py, PyAny>,
        mlx_array: &Bound<'py, PyAny>,
        mlx_bfloat16: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let none = py.None().into_bound(py);
        let call =
            LaunchKeywords { inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value: &none };
        let mlx = crate::mlx_host::Mlx { array: mlx_array, bfloat16: mlx_bfloat16 };
        no_panic(self.kernel.op(), || crate::mlx_host::call(py, &self.kernel, &call, &mlx))
    }

    /// The Metal source MLX would generate for these arguments, without running.
    #[pyo3(name = "_generate", signature = (inputs, output_shapes, output_dtypes, template))]
    fn generate(
        &self,
        inputs: &Bound<'_, PyAny>,
        output_shapes: &Bound<'_, PyAny>,
        output_dtypes: &Bound<'_, PyAny>,
        template: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let (arrays, spec) = self.describe(inputs, output_shapes, output_dtypes, template)?;
        no_panic(self.kernel.op(), || Ok(self.kernel.generate(&arrays, &spec).py_err()?.source))
    }

    /// The source this call runs as on `target` ("metal": what MLX would compile; "cpu": the C++
    /// unit the CPU emulator compiles; "cuda": the CUDA that NVRTC compiles), without running.
    #[pyo3(name = "_translate", signature = (inputs, output_shapes, output_dtypes, template, target))]
    fn translate(
        &self,
        inputs: &Bound<'_, PyAny>,
        output_shapes: &Bound<'_, PyAny>,
        output_dtypes: &Bound<'_, PyAny>,
        template: &Bound<'_, PyAny>,
        target: &str,
    ) -> PyResult<String> {
        let target = translate_target(self.kernel.op(), target)?;
        let (arrays, spec) = self.describe(inputs, output_shapes, output_dtypes, template)?;
        no_panic(self.kernel.op(), || {
            let program = self.kernel.program(&self.kernel.generate(&arrays, &spec).py_err()?);
            kiln::backend::translate(&program, target).py_err()
        })
    }

    /// Compiles the CUDA translation of this call with NVRTC for compute capability `arch`
    /// (no GPU needed); returns the cubin's size in bytes.
    #[pyo3(name = "_compile_cuda", signature = (inputs, output_shapes, output_dtypes, template, arch))]
    fn compile_cuda(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        output_shapes: &Bound<'_, PyAny>,
        output_dtypes: &Bound<'_, PyAny>,
        template: &Bound<'_, PyAny>,
        arch: (u32, u32),
    ) -> PyResult<usize> {
        let (arrays, spec) = self.describe(inputs, output_shapes, output_dtypes, template)?;
        let program =
            no_panic(self.kernel.op(), || Ok(self.kernel.program(&self.kernel.generate(&arrays, &spec).py_err()?)))?;
        let cubin = detached(py, self.kernel.op(), || kiln::backend::cuda::compile_cubin(&program, arch))?;
        Ok(cubin.len())
    }

    /// One call: returns the outputs kiln allocated (`HostArray` / `DeviceArray`), or `None`
    /// when the caller gave them in `outputs_into`.
    #[pyo3(name = "_launch", signature = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, verbose, device, stream, outputs_into, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyList>,
        output_shapes: &Bound<'_, PyList>,
        output_dtypes: &Bound<'_, PyList>,
        grid: (u32, u32, u32),
        threadgroup: (u32, u32, u32),
        template: &Bound<'_, PyList>,
        init_value: Option<f64>,
        verbose: bool,
        device: Option<&str>,
        stream: Option<(usize, usize)>,
        outputs_into: Option<&Bound<'_, PyList>>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let device = parse_device(self.kernel.op(), device)?;
        let mut inputs = inputs_of(inputs)?;
        let mut spec = spec_of(output_shapes, output_dtypes, grid, threadgroup, template)?;
        spec.init_value = init_value;
        spec.timeout = time_limit(self.kernel.op(), timeout)?;
        spec.verbose = verbose;
        spec.stream = external_stream(stream);
        if let Some(d) = device {
            spec.device = Some(d);
            move_inputs(&mut inputs, d, py)?;
        }
        let given = outputs_into.is_some();
        if let Some(outs) = outputs_into {
            let outs: Vec<Array> = outs.iter().map(|o| crate::lent::read(&o)).collect::<PyResult<_>>()?;
            spec.outputs_into = Some(outs.into_iter().map(Some).collect());
        }
        let launch_on = launch_device(&inputs, device);
        spec.device = Some(launch_on);
        let on_cpu = launch_on == Device::Cpu;
        // Only the CPU polls a cancel flag; a GPU call allocates none.
        let cancel = on_cpu.then(|| Arc::new(AtomicBool::new(false)));
        spec.cancel = cancel.clone();
        let kernel = &self.kernel;
        let outputs = run_interruptible(py, kernel.op(), on_cpu, cancel.as_ref(), || kernel.call(&inputs, &spec))?;
        if given {
            return Ok(None);
        }
        arrays::wrap(py, outputs).map(Some)
    }

    /// Runs a call on the CPU emulator under the sanitizer (`kiln check`) and returns its findings
    /// as a JSON array (the format of `kiln check --json`).
    #[pyo3(name = "_check_json", signature = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value))]
    #[allow(clippy::too_many_arguments)]
    fn check<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
        output_shapes: &Bound<'py, PyAny>,
        output_dtypes: &Bound<'py, PyAny>,
        grid: &Bound<'py, PyAny>,
        threadgroup: &Bound<'py, PyAny>,
        template: &Bound<'py, PyAny>,
        init_value: &Bound<'py, PyAny>,
    ) -> PyResult<String> {
        let op = self.kernel.op();
        let keywords = Keywords {
            grid: Some(grid),
            threadgroup: Some(threadgroup),
            template: Some(template),
            init_value: Some(init_value),
            ..Keywords::new(inputs, output_shapes, output_dtypes)
        };
        let call = call_args::parse(op, &self.input_names, self.ensure_row_contiguous, &keywords)?;
        if call.inputs.cuda_ordinal().is_some() {
            return Err(invalid(op, "kiln.check runs on the CPU emulator; pass host arrays (NumPy)"));
        }
        let (inputs, mut spec) = (call.inputs.values, call.spec);
        spec.device = Some(Device::Cpu);
        let kernel = &self.kernel;
        let (result, found) = detached(py, op, || Ok(kiln::sanitize::check(|| kernel.call(&inputs, &spec))))?;
        result.py_err()?;
        Ok(kiln::sanitize::to_json(&found).to_string())
    }

    /// Compiles (and caches) the kernel a call with these arguments would run, without running
    /// it; only the inputs' dtypes and ranks matter, not their data. `device` as in a call; by
    /// default where the inputs live.
    #[pyo3(name = "_precompile", signature = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, device))]
    #[allow(clippy::too_many_arguments)]
    fn precompile<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
        output_shapes: &Bound<'py, PyAny>,
        output_dtypes: &Bound<'py, PyAny>,
        grid: &Bound<'py, PyAny>,
        threadgroup: &Bound<'py, PyAny>,
        template: &Bound<'py, PyAny>,
        device: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let op = self.kernel.op();
        let keywords = Keywords {
            grid: Some(grid),
            threadgroup: Some(threadgroup),
            template: Some(template),
            device: Some(device),
            ..Keywords::new(inputs, output_shapes, output_dtypes)
        };
        let call = call_args::parse(op, &self.input_names, self.ensure_row_contiguous, &keywords)?;
        let device = call.device.or(call.inputs.cuda_ordinal().map(Device::Cuda));
        let (inputs, mut spec) = (call.inputs.values, call.spec);
        spec.device = Some(launch_device(&inputs, device));
        let kernel = &self.kernel;
        detached(py, op, || kernel.precompile(&inputs, &spec))
    }

    #[getter]
    fn name(&self) -> &str {
        self.kernel.name()
    }
}

impl Kernel {
    /// The kiln kernel (for `mlx_cuda`).
    pub(crate) fn metal_kernel(&self) -> &MetalKernel {
        &self.kernel
    }

    /// The input arrays and launch description of a call that only describes (no grid).
    fn describe(
        &self,
        inputs: &Bound<'_, PyAny>,
        output_shapes: &Bound<'_, PyAny>,
        output_dtypes: &Bound<'_, PyAny>,
        template: &Bound<'_, PyAny>,
    ) -> PyResult<(Vec<Array>, LaunchSpec)> {
        let keywords = Keywords { template: Some(template), ..Keywords::new(inputs, output_shapes, output_dtypes) };
        let call = call_args::parse(self.kernel.op(), &self.input_names, self.ensure_row_contiguous, &keywords)?;
        Ok((call.inputs.values.iter().map(KernelInput::to_array).collect(), call.spec))
    }

    /// A call checked here and run where its inputs live: host inputs (NumPy arrays, PyTorch
    /// CPU tensors, scalars) on the CPU or on `device=`, returned in the lead input's framework;
    /// PyTorch CUDA tensors on their device and PyTorch's current stream there, into outputs
    /// PyTorch allocates.
    fn call_checked<'py>(&self, py: Python<'py>, k: &Keywords<'_, 'py>, verbose: bool) -> PyResult<Bound<'py, PyAny>> {
        let op = self.kernel.op();
        let Call { inputs, mut spec, device, device_text } =
            call_args::parse(op, &self.input_names, self.ensure_row_contiguous, k)?;
        spec.verbose = verbose;
        if let Some(ordinal) = inputs.cuda_ordinal() {
            if let Some(text) = device_text.filter(|t| *t != format!("cuda:{ordinal}")) {
                return Err(invalid(
                    op,
                    format!("the inputs live on cuda:{ordinal}, not on {text}; move them with torch"),
                ));
            }
            return self.call_on_tensor_device(py, &inputs, spec, ordinal);
        }
        let lead = inputs.lead();
        let mut values = inputs.values;
        if let Some(d) = device {
            move_inputs(&mut values, d, py)?;
        }
        let launch_on = launch_device(&values, device);
        spec.device = Some(launch_on);
        let on_cpu = launch_on == Device::Cpu;
        // Only the CPU polls a cancel flag; a GPU call allocates none.
        let cancel = on_cpu.then(|| Arc::new(AtomicBool::new(false)));
        spec.cancel = cancel.clone();
        let kernel = &self.kernel;
        let outputs = run_interruptible(py, op, on_cpu, cancel.as_ref(), || kernel.call(&values, &spec))?;
        host_outputs(py, outputs, lead)
    }

    /// A call of PyTorch CUDA tensors of device `ordinal` (under a device guard where another
    /// is current), queued on PyTorch's current stream there, into outputs PyTorch allocates
    /// on that stream (so its caching allocator orders their reuse after the kernel).
    fn call_on_tensor_device<'py>(
        &self,
        py: Python<'py>,
        inputs: &call_args::Inputs<'py>,
        mut spec: LaunchSpec,
        ordinal: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = self.kernel.op();
        let (Some(torch), Some(lead)) = (crate::torch_call::torch(py), inputs.lead_tensor.as_ref()) else {
            return Err(invalid(op, "CUDA tensor inputs need PyTorch"));
        };
        let device = lead.getattr(pyo3::intern!(py, "device"))?;
        let mut outs = Vec::new();
        // On a count mismatch kiln reports it, in MLX's words.
        if spec.output_shapes.len() == spec.output_dtypes.len() {
            let wanted = spec.output_shapes.iter().zip(&spec.output_dtypes);
            let (tensors, lent) =
                torch.outputs(op, &device, ordinal, wanted.map(|(s, &d)| (s.as_slice(), d, spec.init_value)))?;
            outs = tensors;
            spec.outputs_into = Some(lent.into_iter().map(Some).collect());
        }
        spec.stream = external_stream(Some((torch.current_stream(py, ordinal)?, ordinal)));
        spec.device = Some(Device::Cuda(ordinal));
        let (kernel, values) = (&self.kernel, &inputs.values);
        torch.on_device(py, ordinal, || detached(py, op, || kernel.call(values, &spec)).map(drop))?;
        Ok(PyList::new(py, outs)?.into_any())
    }
}

fn invalid(op: &str, msg: impl Into<String>) -> PyErr {
    crate::errors::to_py(kiln::Error::invalid(op, msg))
}

/// kiln's host outputs (device outputs copied back) as arrays of the lead input's framework:
/// NumPy arrays over kiln's buffers, or through `kiln._arrays.host_output` (bfloat16 NumPy
/// arrays, PyTorch CPU tensors).
fn host_outputs<'py>(py: Python<'py>, outputs: Vec<Array>, lead: call_args::Lead) -> PyResult<Bound<'py, PyAny>> {
    static HOST_OUTPUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let host_output =
        HOST_OUTPUT.get_or_try_init(py, || py.import("kiln._arrays")?.getattr("host_output").map(Bound::unbind))?;
    let framework = match lead {
        call_args::Lead::Torch(_) => "torch",
        call_args::Lead::NumPy => "numpy",
    };
    let list = PyList::empty(py);
    for array in outputs {
        let array = if array.device() == Device::Cpu { array } else { py.detach(|| array.to_host()).py_err()? };
        // A NumPy output of a NumPy dtype is NumPy's view of kiln's buffer, made here; bfloat16
        // and PyTorch outputs take the package's glue.
        if matches!(lead, call_args::Lead::NumPy) && array.dtype() != kiln::DType::BF16 {
            list.append(arrays::numpy_view(py, array)?)?;
            continue;
        }
        for h in arrays::wrap(py, vec![array])? {
            list.append(host_output.bind(py).call1((h, framework))?)?;
        }
    }
    Ok(list.into_any())
}

/// A `translate` target by name.
pub(crate) fn translate_target(op: &str, target: &str) -> PyResult<Target> {
    match target {
        "metal" => Ok(Target::Metal),
        "cpu" => Ok(Target::Cpu),
        "cuda" => Ok(Target::Cuda),
        other => Err(crate::errors::to_py(kiln::Error::invalid(
            op,
            format!("target must be 'metal', 'cpu' or 'cuda', got {other:?}"),
        ))),
    }
}

/// Where a call runs: the explicit device, else that of the first array input, else the CPU
/// (kiln's Python API runs arrays where they live; a call with only scalars runs on the CPU).
fn launch_device(inputs: &[KernelInput], device: Option<Device>) -> Device {
    device.unwrap_or_else(|| {
        inputs
            .iter()
            .find_map(|i| match i {
                KernelInput::Array(a) if a.ndim() > 0 || a.device() != Device::Cpu => Some(a.device()),
                _ => None,
            })
            .unwrap_or(Device::Cpu)
    })
}

/// Copies host array inputs to `device` (the explicit `device=` of a call).
fn move_inputs(inputs: &mut [KernelInput], device: Device, py: Python<'_>) -> PyResult<()> {
    for input in inputs.iter_mut() {
        if let KernelInput::Array(a) = input {
            if a.device() == Device::Cpu && device != Device::Cpu && a.ndim() > 0 {
                let moved = py.detach(|| a.to_device(device)).py_err()?;
                *a = moved;
            }
        }
    }
    Ok(())
}

/// A call's inputs, from the descriptors the Python side built.
fn inputs_of(inputs: &Bound<'_, PyList>) -> PyResult<Vec<KernelInput>> {
    inputs.iter().map(|i| crate::lent::kernel_input(&i)).collect()
}

/// A call's launch description (grid and threadgroup as `(x, y, z)`).
pub(crate) fn spec_of(
    output_shapes: &Bound<'_, PyList>,
    output_dtypes: &Bound<'_, PyList>,
    (gx, gy, gz): (u32, u32, u32),
    (tx, ty, tz): (u32, u32, u32),
    template: &Bound<'_, PyList>,
) -> PyResult<LaunchSpec> {
    // Python callers pass MLX's keywords, so errors name them as MLX does.
    let mut spec = LaunchSpec::new([gx, gy, gz], [tx, ty, tz]).mlx_keywords(true);
    for shape in output_shapes.iter() {
        spec.output_shapes.push(convert::tuple_of(shape.as_borrowed())?);
    }
    for name in output_dtypes.iter() {
        spec.output_dtypes.push(convert::dtype(name.cast::<PyString>()?.to_str()?)?);
    }
    for item in template.iter() {
        let (name, value): (String, Bound<'_, PyAny>) = item.extract()?;
        spec = if let Ok(b) = value.cast::<PyBool>() {
            spec.template(name, b.is_true())
        } else if value.is_instance_of::<PyInt>() {
            let v: i32 = value.extract().map_err(|_| {
                PyValueError::new_err(format!("template argument {name:?} = {value} does not fit a 32-bit int"))
            })?;
            spec.template(name, v)
        } else if let Ok(dtype) = value.extract::<String>() {
            spec.template(name, convert::dtype(&dtype)?)
        } else {
            return Err(PyValueError::new_err("invalid template argument; must be Dtype, int or bool"));
        };
    }
    Ok(spec)
}
