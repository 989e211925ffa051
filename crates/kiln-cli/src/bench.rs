//! `kiln bench`: times the kernel library on a device and writes the report (JSON), its table,
//! a roofline plot (SVG) and, given peers' reports, the kiln/peer ratios.

use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kiln_tools::bench::{self, cases, host, plot, report, Report};

use crate::out::{errln, out, outln};

#[derive(Args)]
pub struct BenchArgs {
    /// Where to run: cpu, cuda, cuda:N, or auto (the best available).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Only cases whose id (op/shape/dtype) contains this text (several: comma-separated, any
    /// of them).
    #[arg(long)]
    filter: Option<String>,
    /// Write the report here (JSON), the plot beside it (.svg).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Peers' reports (from bench/peers.py) to compare with; repeatable.
    #[arg(long)]
    compare: Vec<PathBuf>,
    /// Compare an existing kiln report instead of running.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Seconds of device time per case.
    #[arg(long, default_value_t = 0.25)]
    time_per_case: f64,
    /// Bytes of the roofline copy.
    #[arg(long, default_value_t = 1 << 30)]
    copy_bytes: usize,
    /// The commit being measured (recorded in the report).
    #[arg(long, default_value = "")]
    commit: String,
    /// Measure host costs (cached call, cold compile, disk-cache hit) with this many calls.
    #[arg(long)]
    host_calls: Option<usize>,
    /// Skip the op cases (useful with --host-calls).
    #[arg(long)]
    no_cases: bool,
    /// Time first calls instead: cold compile, disk-cache and memory hits of a few kernels on the
    /// CPU emulator and with NVRTC, against compiling a trivial C++ file (markdown table).
    #[arg(long)]
    compile: bool,
    /// Print the benchmark cases (id, registry op, sizes, dtype, bytes, FLOPs) as JSON and exit:
    /// what `bench/peers.py --cases` reads.
    #[arg(long)]
    list_json: bool,
    /// A compute ceiling for the plot, in TFLOP/s.
    #[arg(long)]
    peak_tflops: Option<f64>,
}

fn read_report(path: &Path) -> kiln::Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|e| kiln::Error::io(path, e))?;
    Report::from_json(&text)
}

/// A peers file holds one report or a list of them (one per implementation).
fn read_reports(path: &Path) -> kiln::Result<Vec<Report>> {
    let text = std::fs::read_to_string(path).map_err(|e| kiln::Error::io(path, e))?;
    match serde_json::from_str::<Vec<Report>>(&text) {
        Ok(v) => Ok(v),
        Err(_) => Ok(vec![Report::from_json(&text)?]),
    }
}

fn write(path: &Path, text: &str) -> kiln::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| kiln::Error::io(dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| kiln::Error::io(path, e))
}

impl BenchArgs {
    pub fn device(&self) -> &str {
        &self.device
    }
}

pub fn bench(args: BenchArgs, device: kiln::Device) -> kiln::Result<()> {
    if args.list_json {
        let text = serde_json::to_string_pretty(&cases::listed())
            .map_err(|e| kiln::Error::invalid("bench", format!("listing the cases: {e}")))?;
        outln!("{text}");
        return Ok(());
    }
    if args.compile {
        out!("{}", kiln_tools::bench::compile_time::measure()?.table());
        out!("{}", kiln_tools::bench::library_compile::measure()?.table());
        return Ok(());
    }
    if let Some(calls) = args.host_calls {
        let cost = host::measure(device, calls)?;
        outln!(
            "host cost on {}: cached call {:.2} us queued ({:.2} us with the final wait, {} calls); cold compile {:.1} ms; first call of a fixed kernel {:.2} ms",
            cost.device, cost.cached_call_us, cost.cached_call_with_sync_us, cost.calls, cost.cold_compile_ms, cost.first_call_fixed_ms
        );
        if let (Some(bare), Some(args)) = (cost.bare_launch_us, cost.bare_launch_kiln_args_us) {
            outln!(
                "driver floor: bare cuLaunchKernel {bare:.2} us, with the largest KilnArgs block (1376 bytes) {args:.2} us"
            );
        }
        if let Some(graph) = cost.graph_launch_us {
            outln!("kiln's launch path alone (one-node graph, 368-byte block): {graph:.2} us");
        }
        if let (Some(bare), Some(aproned)) = (cost.alloc_64mib_us, cost.alloc_64mib_with_aprons_us) {
            outln!(
                "a fresh 64 MiB block (stream-ordered alloc + free): {bare:.2} us; with its aprons ({} KiB each side) {aproned:.2} us",
                kiln::backend::cuda::APRON_BYTES >> 10
            );
        }
        if let Some(json) = &args.json {
            let text = serde_json::to_string_pretty(&cost).unwrap_or_default();
            write(&json.with_extension("host.json"), &text)?;
        }
    }
    if args.no_cases {
        return Ok(());
    }
    let kiln_report = match &args.report {
        Some(path) => read_report(path)?,
        None => {
            let opts = bench::Options {
                device,
                filter: args.filter.clone(),
                time_per_case: args.time_per_case,
                copy_bytes: args.copy_bytes,
                commit: args.commit.clone(),
                ..bench::Options::default()
            };
            let all = cases::all();
            let bar = ProgressBar::new(all.len() as u64 + 1);
            bar.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} {elapsed} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let r = bench::run(all, &opts, &mut |id, i, total, done| {
                bar.set_length(total as u64);
                bar.set_position(i as u64);
                bar.set_message(id.to_string());
                // One line per finished case, so an interrupted run still leaves its numbers.
                if let Some(c) = done {
                    let ms = c.median_ms.map_or("-".to_string(), |v| format!("{v:.4} ms"));
                    bar.suspend(|| errln!("[{i}/{total}] {id}: {ms} {:?} {}", c.status, c.note));
                }
            })?;
            bar.finish_and_clear();
            r
        }
    };
    out!("{}", kiln_report.table());
    if let Some(json) = &args.json {
        write(json, &kiln_report.to_json()?)?;
        write(&json.with_extension("svg"), &plot::roofline_svg(&kiln_report, args.peak_tflops))?;
    }
    if !args.compare.is_empty() {
        let mut peers = Vec::new();
        for path in &args.compare {
            peers.extend(read_reports(path)?);
        }
        out!("{}", report::compare(&kiln_report, &peers));
    }
    Ok(())
}
