//! The demo table: one row per (kernel, dtype) run, printed as aligned columns.

use std::fmt;
use std::time::Duration;

use super::entry::{tolerance, Outcome};
use kiln::device::Device;
use kiln::dtype::DType;
use kiln::error::Result;

/// One demo run: the measured error and time, or the error that stopped it.
#[derive(Clone, Debug)]
pub struct DemoRow {
    pub kernel: &'static str,
    pub dtype: DType,
    pub device: Device,
    pub tolerance: f64,
    /// The relative L2 error and time, or why the kernel could not run.
    pub result: std::result::Result<(f64, Duration), String>,
}

impl DemoRow {
    pub(crate) fn from_run(kernel: &'static str, dtype: DType, device: Device, run: Result<Outcome>) -> DemoRow {
        match run {
            Ok(outcome) => DemoRow {
                kernel,
                dtype,
                device,
                tolerance: outcome.tolerance(),
                result: Ok((outcome.error(), outcome.time)),
            },
            Err(e) => DemoRow { kernel, dtype, device, tolerance: tolerance(dtype), result: Err(e.to_string()) },
        }
    }

    /// Within tolerance (a NaN error is infinite and never passes).
    pub fn passed(&self) -> bool {
        matches!(self.result, Ok((err, _)) if err <= self.tolerance)
    }
}

/// Every row of one `run_demo`.
#[derive(Clone, Debug)]
pub struct DemoReport {
    pub device: Device,
    pub rows: Vec<DemoRow>,
}

impl DemoReport {
    /// True when every kernel ran and matched its reference.
    pub fn all_passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(DemoRow::passed)
    }

    pub fn failures(&self) -> impl Iterator<Item = &DemoRow> {
        self.rows.iter().filter(|r| !r.passed())
    }
}

fn format_time(t: Duration) -> String {
    let us = t.as_secs_f64() * 1e6;
    if us < 1e3 {
        format!("{us:.1} us")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = ["kernel", "dtype", "device", "rel L2 error", "tolerance", "ok", "time"];
        let mut cells: Vec<[String; 7]> = Vec::new();
        let mut errors = Vec::new();
        for row in &self.rows {
            let (err, time) = match &row.result {
                Ok((err, time)) => (format!("{err:.2e}"), format_time(*time)),
                Err(msg) => {
                    errors.push((row.kernel, row.dtype, msg));
                    ("error".to_string(), "-".to_string())
                }
            };
            cells.push([
                row.kernel.to_string(),
                row.dtype.name().to_string(),
                row.device.to_string(),
                err,
                format!("{:.0e}", row.tolerance),
                if row.passed() { "yes" } else { "NO" }.to_string(),
                time,
            ]);
        }
        let mut widths = header.map(str::len);
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, row: &[&str]| -> fmt::Result {
            for (i, (c, w)) in row.iter().zip(widths).enumerate() {
                // Text columns align left, numbers right.
                if i < 3 {
                    write!(f, "{c:<w$}")?;
                } else {
                    write!(f, "{c:>w$}")?;
                }
                f.write_str(if i + 1 < row.len() { "  " } else { "\n" })?;
            }
            Ok(())
        };
        line(f, &header)?;
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        line(f, &rule.iter().map(String::as_str).collect::<Vec<_>>())?;
        for row in &cells {
            line(f, &row.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        let passed = self.rows.iter().filter(|r| r.passed()).count();
        writeln!(f, "{passed}/{} passed on {}", self.rows.len(), self.device)?;
        for (kernel, dtype, msg) in errors {
            writeln!(f, "{kernel} ({dtype}): {msg}")?;
        }
        Ok(())
    }
}
