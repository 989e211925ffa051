//! `kiln`: run and translate kernel spec files, list devices, run the demo gallery.

mod bench;
mod out;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kiln::backend::{self, Target};
use kiln::spec::KernelSpec;
use kiln::Device;
use out::{errln, out, outln};

#[derive(Parser)]
#[command(name = "kiln", version, about = "Run MLX-style Metal kernels on NVIDIA GPUs, any CPU and Apple Metal")]
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
    },
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
        Command::Run { spec, device, out, checked } => run(&spec, &device, &out, checked),
        Command::Translate { spec, emit } => translate(&spec, emit),
        Command::Devices => {
            devices();
            Ok(())
        }
        Command::Demo { device } => demo(&device),
        Command::Bench(args) => parse_device(args.device()).and_then(|d| bench::bench(args, d)),
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

fn run(spec: &Path, device: &str, out: &Path, checked: bool) -> kiln::Result<()> {
    // Checking is the emulator's: with it, "auto" means the CPU.
    let device = if checked && device == "auto" { Device::Cpu } else { parse_device(device)? };
    if checked && device != Device::Cpu {
        return Err(kiln::Error::invalid(
            "run",
            format!("--checked runs on the CPU emulator (--device cpu), not on {device}"),
        ));
    }
    let spec = KernelSpec::load(spec)?;
    let _checked = checked.then(backend::cpu::CheckedScope::enter);
    let outputs = spec.run(device)?;
    std::fs::create_dir_all(out).map_err(|e| kiln::Error::io(out, e))?;
    for (name, array) in outputs {
        let path = out.join(format!("{name}.npy"));
        array.save_npy(&path)?;
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
    let report = kiln::gallery::run_demo(device)?;
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
