//! `kiln`: run and translate kernel spec files, list devices, run the demo gallery.

mod bench;
mod cache;
mod check;
mod out;
mod timeout;
mod write_outputs;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kiln::backend::{self, Target};
use kiln::Device;
use kiln_tools::spec::KernelSpec;
use out::{errln, out, outln};

#[derive(Parser)]
#[command(name = "kiln", version, about = "Run MLX-style Metal kernels on NVIDIA GPUs (CUDA) and on any CPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a kernel spec file and write one .npy per output.
    Run {
        /// The kernel spec file (.toml).
        spec: PathBuf,
        /// Where to run: cpu, cuda, cuda:N, metal, or auto (the best available).
        #[arg(long, default_value = "auto")]
        device: String,
        /// Directory for the outputs (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Run on the CPU emulator with every buffer between guard pages, so an out-of-bounds
        /// read or write names the buffer (copies the inputs first); `--device auto` then means
        /// cpu.
        #[arg(long)]
        checked: bool,
        /// Stop a kernel that runs longer than this many seconds (0: no limit). Overrides the
        /// spec's `timeout` key; without either, 60. Only the CPU can stop a running kernel: on
        /// CUDA it runs to its end.
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
    },
    /// Run a spec file's kernel on the CPU emulator under the sanitizer: races, uninitialised
    /// reads, unwritten outputs, barrier divergence, out-of-bounds accesses, on the kernel's lines.
    Check(check::CheckArgs),
    /// Print the source a backend compiles for a spec file.
    Translate {
        /// The kernel spec file (.toml).
        spec: PathBuf,
        /// metal: the generated Metal source (as MLX prints it); cuda / cpu: the lowered C++.
        #[arg(long, value_enum, default_value = "metal")]
        emit: Emit,
    },
    /// List the backends and devices, and why any backend is unavailable.
    Devices,
    /// Run the kernel gallery, each kernel checked against a plain-Rust reference.
    Demo {
        /// Where to run: cpu, cuda, cuda:N, metal, or auto (the best available).
        #[arg(long, default_value = "auto")]
        device: String,
    },
    /// Time the kernel library against the copy roofline; compare with peers' reports.
    Bench(bench::BenchArgs),
    /// The on-disk kernel cache (KILN_CACHE_DIR, else ~/.cache/kiln): list, size, clear.
    Cache {
        #[command(subcommand)]
        command: cache::CacheCommand,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Emit {
    Metal,
    Cuda,
    Cpu,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => return check::check(args),
        Command::Run { spec, device, out, checked, timeout } => run(&spec, &device, &out, checked, timeout),
        Command::Translate { spec, emit } => translate(&spec, emit),
        Command::Devices => {
            devices();
            Ok(())
        }
        Command::Demo { device } => demo(&device),
        Command::Bench(args) => parse_device(args.device()).and_then(|d| bench::bench(args, d)),
        Command::Cache { command } => cache::cache(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_device(text: &str) -> kiln::Result<Device> {
    if text == "auto" {
        Ok(backend::best_device())
    } else {
        text.parse()
    }
}

fn run(spec: &Path, device: &str, out: &Path, checked: bool, timeout: Option<f64>) -> kiln::Result<()> {
    // Checking is the emulator's: with it, "auto" means the CPU.
    let device = if checked && device == "auto" { Device::Cpu } else { parse_device(device)? };
    if checked && device != Device::Cpu {
        return Err(kiln::Error::invalid(
            "run",
            format!("--checked runs on the CPU emulator (--device cpu), not on {device}"),
        ));
    }
    let mut spec = KernelSpec::load(spec)?;
    if let Some(limit) = timeout::spec_limit("run", timeout, spec.timeout())? {
        spec = spec.with_timeout(limit);
    }
    for warning in spec.warnings()? {
        errln!("warning: {warning}");
    }
    let _checked = checked.then(backend::cpu::CheckedScope::enter);
    let outputs = spec.run(device)?;
    let paths = write_outputs::write_outputs(out, &outputs)?;
    for ((name, array), path) in outputs.iter().zip(paths) {
        outln!("{} {:?} {} -> {}", name, array.shape(), array.dtype(), path.display());
    }
    Ok(())
}

fn translate(spec: &Path, emit: Emit) -> kiln::Result<()> {
    let target = match emit {
        Emit::Metal => Target::Metal,
        Emit::Cuda => Target::Cuda,
        Emit::Cpu => Target::Cpu,
    };
    let spec = KernelSpec::load(spec)?;
    let text = spec.translate(target)?;
    match (&spec, target) {
        // A full file is printed unchanged.
        (KernelSpec::Library(_), Target::Metal) => out!("{text}"),
        // The generated source followed by the newline that ends MLX's print.
        _ => outln!("{text}"),
    }
    Ok(())
}

fn demo(device: &str) -> kiln::Result<()> {
    let device = parse_device(device)?;
    outln!("kiln demo on {device}");
    // Each kernel's first run compiles it (tens of seconds in all): a progress bar on a
    // terminal, nothing when stderr is redirected.
    let bar = if std::io::stderr().is_terminal() { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = kiln_tools::gallery::run_demo_with_progress(device, &mut |kernel, dtype, i, total| {
        bar.set_length(total as u64);
        bar.set_position(i as u64);
        bar.set_message(format!("{kernel} ({dtype})"));
        if i == 0 && !bar.is_hidden() {
            // The elapsed time keeps moving while one kernel compiles.
            bar.enable_steady_tick(Duration::from_millis(250));
        }
    });
    bar.finish_and_clear();
    let report = report?;
    out!("{report}");
    if report.all_passed() {
        Ok(())
    } else {
        let failed: Vec<String> = report.failures().map(|r| format!("{} ({})", r.kernel, r.dtype)).collect();
        Err(kiln::Error::invalid("demo", format!("kernels outside tolerance: {}", failed.join(", "))))
    }
}

fn devices() {
    for status in backend::statuses() {
        match &status.unavailable {
            Some(reason) => outln!("{:<6} unavailable: {reason}", status.backend),
            None => {
                outln!("{:<6} available", status.backend);
                for (device, description) in &status.devices {
                    outln!("  {device}: {description}");
                }
            }
        }
    }
    outln!("best device: {}", backend::best_device());
}
