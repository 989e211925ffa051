//! The benchmark report: one JSON document per run (kiln's or a peer's, same fields), the table
//! `kiln bench` prints, and the kiln/peer comparison.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::Case;
use kiln::device::Device;
use kiln::error::{Error, Result};

/// What became of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and timed.
    Ok,
    /// The output disagreed with the reference: no time is reported.
    Wrong,
    /// The case could not run (see `note`).
    Failed,
}

/// One case of a report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub op: String,
    pub shape: String,
    pub dtype: String,
    pub bytes: f64,
    pub flops: f64,
    /// Median device time in milliseconds; absent unless the output was right.
    pub median_ms: Option<f64>,
    /// Relative L2 error of the checked run.
    pub error: Option<f64>,
    pub tolerance: f64,
    pub status: Status,
    #[serde(default)]
    pub note: String,
    /// Median ms of a device-to-device copy of the same bytes (half read, half written), timed
    /// the same way in the same run: what any kernel of this size can reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_ms: Option<f64>,
}

impl CaseResult {
    pub(super) fn of(case: &Case, result: Result<(Option<f64>, f64, f64)>, _copy_gbs: f64) -> CaseResult {
        let mut r = CaseResult {
            id: case.id(),
            op: case.op.to_string(),
            shape: case.shape.clone(),
            dtype: case.dtype.name().to_string(),
            bytes: case.bytes,
            flops: case.flops,
            median_ms: None,
            error: None,
            tolerance: 0.0,
            status: Status::Failed,
            note: String::new(),
            copy_ms: None,
        };
        match result {
            Ok((ms, error, tol)) => {
                r.error = Some(error);
                r.tolerance = tol;
                r.median_ms = ms;
                r.status = if ms.is_some() { Status::Ok } else { Status::Wrong };
                if ms.is_none() {
                    r.note = format!("relative L2 error {error:.3e} exceeds {tol:.1e}");
                }
            }
            Err(e) => r.note = e.to_string(),
        }
        r
    }

    /// Achieved GB/s counting the fewest bytes.
    pub fn gbs(&self) -> Option<f64> {
        self.median_ms.map(|ms| self.bytes / (ms * 1e-3) / 1e9)
    }

    /// Percent of the time of a copy of the same bytes (100: as fast as that copy).
    pub fn same_size_copy_pct(&self) -> Option<f64> {
        Some(100.0 * self.copy_ms? / self.median_ms?)
    }

    /// Achieved TFLOP/s counting the fewest operations.
    pub fn tflops(&self) -> Option<f64> {
        self.median_ms.map(|ms| self.flops / (ms * 1e-3) / 1e12)
    }
}

/// One benchmark run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Who ran the cases: `kiln`, `torch-eager`, `torch-compile`, ...
    pub implementation: String,
    pub device_name: String,
    pub device: String,
    pub commit: String,
    /// GB/s of the device-to-device copy (bytes read plus written), measured in this run.
    pub copy_gbs: f64,
    pub cases: Vec<CaseResult>,
}

impl Report {
    pub(super) fn new(device_name: String, device: Device, commit: String, copy_gbs: f64) -> Report {
        Report {
            implementation: "kiln".into(),
            device_name,
            device: device.to_string(),
            commit,
            copy_gbs,
            cases: Vec::new(),
        }
    }

    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self).map_err(|e| Error::invalid("bench", format!("writing JSON: {e}")))
    }

    pub fn from_json(text: &str) -> Result<Report> {
        serde_json::from_str(text).map_err(|e| Error::invalid("bench", format!("reading a report: {e}")))
    }

    /// Percent of the copy roofline a case reaches.
    pub fn roofline_pct(&self, c: &CaseResult) -> Option<f64> {
        c.gbs().map(|g| 100.0 * g / self.copy_gbs)
    }

    /// The table `kiln bench` prints.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} on {} ({}), copy roofline {:.0} GB/s",
            self.implementation, self.device_name, self.device, self.copy_gbs
        );
        let _ = writeln!(
            s,
            "{:<44} {:>10} {:>9} {:>9} {:>7} {:>7} {:>10}  status",
            "case", "median ms", "GB/s", "TFLOP/s", "% roof", "% copy", "rel err"
        );
        for c in &self.cases {
            let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
            let _ = writeln!(
                s,
                "{:<44} {:>10} {:>9} {:>9} {:>7} {:>7} {:>10}  {:?}{}",
                c.id,
                f(c.median_ms, 4),
                f(c.gbs(), 0),
                f(c.tflops().filter(|_| c.flops > 0.0), 2),
                f(self.roofline_pct(c), 1),
                f(c.same_size_copy_pct(), 1),
                c.error.map_or("-".into(), |e| format!("{e:.1e}")),
                c.status,
                if c.note.is_empty() { String::new() } else { format!(" ({})", c.note) }
            );
        }
        s
    }
}

/// Per case, kiln's time beside every peer's and the ratio to the best peer (peer time over
/// kiln time: above 1 means kiln is faster), with kiln's percent of the copy roofline and of a
/// copy of the same bytes.
pub fn compare(kiln: &Report, peers: &[Report]) -> String {
    let mut s = String::new();
    let names: Vec<&str> = peers.iter().map(|p| p.implementation.as_str()).collect();
    let _ = write!(s, "{:<44} {:>10}", "case", "kiln ms");
    for n in &names {
        let _ = write!(s, " {:>14}", format!("{n} ms"));
    }
    let _ = writeln!(s, " {:>14} {:>8} {:>7} {:>7}", "best peer", "ratio", "% roof", "% copy");
    for c in &kiln.cases {
        let mut by_peer: BTreeMap<&str, f64> = BTreeMap::new();
        let _ = write!(s, "{:<44} {:>10}", c.id, c.median_ms.map_or("-".into(), |v| format!("{v:.4}")));
        for p in peers {
            let t = p.cases.iter().find(|pc| pc.id == c.id).and_then(|pc| pc.median_ms);
            if let Some(t) = t {
                by_peer.insert(p.implementation.as_str(), t);
            }
            let _ = write!(s, " {:>14}", t.map_or("-".into(), |v| format!("{v:.4}")));
        }
        let best = by_peer.iter().min_by(|a, b| a.1.total_cmp(b.1));
        let ratio = match (best, c.median_ms) {
            (Some((_, &t)), Some(k)) => format!("{:.3}", t / k),
            _ => "-".into(),
        };
        let pct = kiln.roofline_pct(c).map_or("-".into(), |v| format!("{v:.1}"));
        let copy = c.same_size_copy_pct().map_or("-".into(), |v| format!("{v:.1}"));
        let _ = writeln!(s, " {:>14} {:>8} {:>7} {:>7}", best.map_or("-", |b| b.0), ratio, pct, copy);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{compare, CaseResult, Report, Status};
    use kiln::device::Device;

    fn report(implementation: &str, ms: f64) -> Report {
        let mut r = Report::new("test GPU".into(), Device::Cpu, String::new(), 3000.0);
        r.implementation = implementation.into();
        r.cases.push(CaseResult {
            id: "rms_norm/16384x8192/bfloat16".into(),
            op: "rms_norm".into(),
            shape: "16384x8192".into(),
            dtype: "bfloat16".into(),
            bytes: 536_887_296.0,
            flops: 0.0,
            median_ms: Some(ms),
            error: Some(1e-3),
            tolerance: 1e-2,
            status: Status::Ok,
            note: String::new(),
            copy_ms: None,
        });
        r
    }

    #[test]
    fn a_ratio_just_under_one_is_not_rounded_up_to_it() {
        let table = compare(&report("kiln", 0.18125), &[report("torch-compile", 0.18115)]);
        let row = table.lines().find(|l| l.starts_with("rms_norm/")).expect("the case's row");
        assert!(row.contains(" 0.999 "), "{row}");
        assert!(!row.contains(" 1.00 "), "{row}");
    }
}
