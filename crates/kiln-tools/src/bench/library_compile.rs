//! `kiln bench --compile`, whole libraries: the first call of one kernel of a large Metal file
//! against compiling the same kernel from a file that holds only it and what it uses, on the
//! CPU (translation and host compiler, prelude precompiled and scheduler linked as an object,
//! as every call compiles) and with NVRTC (sm_90; no GPU needed), each on new text (nothing
//! cached), the median of a few runs. The goal: at most 2x.
//!
//! The case is ggml's `kernel_get_rows_f16` in `ggml-metal.metal` (14,000 lines with the
//! headers ggml's build pastes in) from kiln's test corpus (`crates/kiln/tests/data/ggml`, a
//! source checkout); the file holding only the kernel is cut from the same corpus files: the
//! kernel template and its instantiations, and the argument struct from ggml-metal-impl.h.

use std::path::PathBuf;

use kiln::backend::{cpu, cuda, MetalProgram};
use kiln::error::{Error, Result};
use kiln::kernel::{LibraryLaunch, MetalLibrary};

use super::compile_time::{median, nonce, time};

const REPEATS: usize = 3;
const ARCH: cuda::Arch = (9, 0);
const FUNCTION: &str = "kernel_get_rows_f16";

/// First-call times of one kernel, whole file and alone, in milliseconds.
#[derive(Clone, Debug)]
pub struct LibraryTimes {
    pub kernel: &'static str,
    pub cpu_whole_ms: f64,
    pub cpu_alone_ms: f64,
    pub nvrtc_whole_ms: Option<f64>,
    pub nvrtc_alone_ms: Option<f64>,
}

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kiln/tests/data/ggml")
}

fn read(name: &str) -> Result<String> {
    let path = corpus().join(name);
    std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))
}

/// The lines of `text` from the one starting with `first` to the one containing `last`.
fn cut(text: &str, first: &str, last: &str) -> Result<String> {
    let missing = || Error::invalid("bench --compile", format!("the ggml corpus has no `{first}` ... `{last}`"));
    let from = text.find(first).ok_or_else(missing)?;
    let to = from + text[from..].find(last).ok_or_else(missing)?;
    let end = to + text[to..].find('\n').unwrap_or(text.len() - to);
    Ok(text[from..end].to_string())
}

/// ggml's `kernel_get_rows_f` with its instantiations and `ggml_metal_kargs_get_rows`.
fn kernel_alone() -> Result<String> {
    let metal = read("ggml-metal.metal")?;
    let imp = read("ggml-metal-impl.h")?;
    let end = imp.find("} ggml_metal_kargs_get_rows;").ok_or_else(|| Error::invalid("bench --compile", "no kargs"))?;
    let start = imp[..end].rfind("typedef struct {").ok_or_else(|| Error::invalid("bench --compile", "no kargs"))?;
    let kargs = &imp[start..end + "} ggml_metal_kargs_get_rows;".len()];
    let kernel =
        cut(&metal, "template<typename T0, typename T>\nkernel void kernel_get_rows_f(", "\"kernel_get_rows_i32\"")?;
    Ok(format!("#include <metal_stdlib>\nusing namespace metal;\n\n{kargs}\n\n{kernel}\n"))
}

/// `library`'s program for the kernel, its text made new.
fn fresh(library: &MetalLibrary) -> MetalProgram {
    let mut program = library.program(&LibraryLaunch::threads(FUNCTION, 1usize, 1usize));
    program.source.push_str(&format!("\n// {}\n", nonce()));
    program
}

/// Measures the case; the NVRTC columns where NVRTC loads.
pub fn measure() -> Result<LibraryTimes> {
    let whole = MetalLibrary::from_file(corpus().join("ggml-metal.metal"))?.defines([("GGML_METAL_HAS_BF16", "1")]);
    let alone = MetalLibrary::new("get_rows_alone.metal", kernel_alone()?);
    // The precompiled prelude and the scheduler object exist before timing.
    cpu::compile_past_memory(&fresh(&alone), true, true)?;
    let cpu_ms = |lib: &MetalLibrary| -> Result<f64> {
        let runs = (0..REPEATS).map(|_| time(|| cpu::compile_past_memory(&fresh(lib), true, true)));
        Ok(median(runs.collect::<Result<_>>()?))
    };
    let (cpu_whole_ms, cpu_alone_ms) = (cpu_ms(&whole)?, cpu_ms(&alone)?);
    let (mut nvrtc_whole_ms, mut nvrtc_alone_ms) = (None, None);
    if cuda::nvrtc_version().is_ok() {
        cuda::compile_cubin(&fresh(&alone), ARCH)?;
        let nvrtc_ms = |lib: &MetalLibrary| -> Result<f64> {
            let runs = (0..REPEATS).map(|_| time(|| cuda::compile_cubin(&fresh(lib), ARCH).map(|_| ())));
            Ok(median(runs.collect::<Result<_>>()?))
        };
        nvrtc_whole_ms = Some(nvrtc_ms(&whole)?);
        nvrtc_alone_ms = Some(nvrtc_ms(&alone)?);
    }
    Ok(LibraryTimes { kernel: FUNCTION, cpu_whole_ms, cpu_alone_ms, nvrtc_whole_ms, nvrtc_alone_ms })
}

impl LibraryTimes {
    /// A Markdown table: milliseconds, and the whole file as a multiple of the kernel alone.
    pub fn table(&self) -> String {
        let row = |target: &str, whole: f64, alone: f64| {
            format!("| {} | {target} | {whole:.0} | {alone:.0} | {:.2}x |\n", self.kernel, whole / alone)
        };
        let mut s = String::from(
            "\nOne kernel of a large library (ggml-metal.metal, 14,000 lines with its headers) against \
             the same kernel in a file of its own, first call on new text (goal: at most 2x)\n\n\
             | kernel | target | whole file (ms) | kernel alone (ms) | ratio |\n|---|---|---|---|---|\n",
        );
        s.push_str(&row("CPU", self.cpu_whole_ms, self.cpu_alone_ms));
        if let (Some(w), Some(a)) = (self.nvrtc_whole_ms, self.nvrtc_alone_ms) {
            s.push_str(&row("NVRTC sm_90", w, a));
        }
        s
    }
}
