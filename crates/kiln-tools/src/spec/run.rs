//! Running a spec file: the time limit, what is checked before a run (a dispatch that runs no
//! thread, buffers the kernel may write that are not saved), and the run itself.

use std::time::Duration;

use super::toml_access::spec_err;
use super::KernelSpec;
use kiln::array::Array;
use kiln::backend::Dispatch;
use kiln::device::Device;
use kiln::error::Result;
use kiln::kernel::{KernelInput, LibraryArg};

impl KernelSpec {
    /// The `timeout` key of `[call]` or `[dispatch]`: how long the kernel may run before it is
    /// stopped with `Error::Timeout` (`Duration::ZERO`: no limit); `None` when the file gives
    /// none. Only the CPU can stop a running kernel; on CUDA the limit does not apply.
    pub fn timeout(&self) -> Option<Duration> {
        match self {
            KernelSpec::Body(b) => b.timeout,
            KernelSpec::Library(l) => l.timeout,
        }
    }

    /// The same spec with `limit` in place of its `timeout` key (`Duration::ZERO`: no limit).
    pub fn with_timeout(mut self, limit: Duration) -> Self {
        match &mut self {
            KernelSpec::Body(b) => b.timeout = Some(limit),
            KernelSpec::Library(l) => l.timeout = Some(limit),
        }
        self
    }

    /// What the user should hear about before a run that still goes ahead: a dispatch that runs
    /// no thread (every output then holds only its `init_value`), and `[[buffer]]`s bound to
    /// parameters the kernel may write (`device`, not `const`) that are not saved as outputs.
    /// Each warning names the spec file and the key.
    pub fn warnings(&self) -> Result<Vec<String>> {
        let mut warnings = Vec::new();
        if let Some((key, dims)) = self.empty_dispatch() {
            warnings.push(format!(
                "{}: {key}: {dims:?} has a zero dimension, so kernel {} runs no thread; the outputs hold only \
                 their init_value (and in/out buffers their loaded contents)",
                self.file().display(),
                self.kernel_name()
            ));
        }
        let KernelSpec::Library(l) = self else { return Ok(warnings) };
        let writable = l.library.writable_buffers(&l.launch)?;
        for (slot, param) in writable {
            let Some((name, arg)) = l.buffers.get(slot as usize) else { continue };
            if name.is_some() {
                continue;
            }
            let hint = match arg {
                LibraryArg::Array(_) => format!(
                    "add output = \"{param}\" to this [[buffer]] to save the updated array as <out>/{param}.npy"
                ),
                _ => "values and fields buffers are not saved; load the data from a .npy file with output = ... \
                      to keep it"
                    .to_string(),
            };
            warnings.push(format!(
                "{}: buffer[{slot}]: kernel {} may write parameter `{param}` [[buffer({slot})]] (declared device, \
                 not const), but this buffer is not an output, so what the kernel writes there is discarded; \
                 {hint} (or declare the parameter const device if the kernel only reads it)",
                l.file.display(),
                l.launch.function
            ));
        }
        Ok(warnings)
    }

    /// Runs on `device` and returns (output name, host array) pairs in output order (for a
    /// full file: outputs and in/out buffers in slot order). A dispatch that runs no thread is
    /// refused while any output has no `init_value`: its contents would be uninitialised memory.
    pub fn run(&self, device: Device) -> Result<Vec<(String, Array)>> {
        self.refuse_unwritten_outputs()?;
        let limit = self.timeout().filter(|t| !t.is_zero());
        let (names, outputs) = match self {
            KernelSpec::Body(b) => {
                let inputs = b
                    .inputs
                    .iter()
                    .map(|i| match i {
                        KernelInput::Array(a) => a.to_device(device).map(KernelInput::Array),
                        other => Ok(other.clone()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut call = b.call.clone().device(device);
                call.timeout = limit.or(call.timeout);
                (b.output_names.clone(), b.kernel.call(&inputs, &call)?)
            }
            KernelSpec::Library(l) => {
                let mut args = Vec::with_capacity(l.buffers.len());
                for (_, arg) in &l.buffers {
                    args.push(match arg {
                        LibraryArg::Array(a) => LibraryArg::Array(a.to_device(device)?),
                        LibraryArg::InOut(a) => LibraryArg::InOut(a.to_device(device)?),
                        other => other.clone(),
                    });
                }
                let names = l.buffers.iter().filter_map(|(n, _)| n.clone()).collect();
                let mut launch = l.launch.clone();
                launch.timeout = limit.or(launch.timeout);
                (names, l.library.dispatch(device, &args, &launch)?)
            }
        };
        names.into_iter().zip(outputs).map(|(n, a)| Ok((n, a.to_host()?))).collect()
    }

    fn file(&self) -> &std::path::Path {
        match self {
            KernelSpec::Body(b) => &b.file,
            KernelSpec::Library(l) => &l.file,
        }
    }

    fn kernel_name(&self) -> &str {
        match self {
            KernelSpec::Body(b) => b.kernel.name(),
            KernelSpec::Library(l) => &l.launch.function,
        }
    }

    /// The key and value of a grid (or threadgroup count) with a zero dimension.
    fn empty_dispatch(&self) -> Option<(&'static str, [u32; 3])> {
        let (key, dims) = match self {
            KernelSpec::Body(b) => ("call.grid", b.call.grid),
            KernelSpec::Library(l) => match l.launch.dispatch {
                Dispatch::Threads(grid) => ("dispatch.grid", grid),
                Dispatch::Threadgroups(groups) => ("dispatch.threadgroups", groups),
            },
        };
        dims.contains(&0).then_some((key, dims))
    }

    fn refuse_unwritten_outputs(&self) -> Result<()> {
        let Some((key, dims)) = self.empty_dispatch() else { return Ok(()) };
        let unwritten: Vec<&str> = match self {
            KernelSpec::Body(b) if b.call.init_value.is_none() => b.output_names.iter().map(String::as_str).collect(),
            KernelSpec::Body(_) => Vec::new(),
            KernelSpec::Library(l) => l
                .buffers
                .iter()
                .filter_map(|(name, arg)| match arg {
                    LibraryArg::Output { init_value: None, .. } => name.as_deref(),
                    _ => None,
                })
                .collect(),
        };
        if unwritten.is_empty() {
            return Ok(());
        }
        Err(spec_err(
            self.file(),
            key,
            format!(
                "{dims:?} has a zero dimension, so kernel {} runs no thread and output {} (without init_value) \
                 would hold uninitialised memory; give every dimension at least 1",
                self.kernel_name(),
                unwritten.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
            ),
        ))
    }
}
