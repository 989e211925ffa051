//! A roofline plot of a report as SVG: achieved throughput against arithmetic intensity
//! (FLOPs per byte, log-log), under the copy roofline measured in the same run. Cases that do
//! no arithmetic are drawn at the left edge by their GB/s.

use std::fmt::Write;

use super::report::{Report, Status};

const W: f64 = 900.0;
const H: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 240.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Log-scale axes: decades `[lo, hi]` mapped onto pixels.
struct Axis {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Axis {
    fn at(&self, v: f64) -> f64 {
        let t = (v.max(10f64.powf(self.lo)).log10() - self.lo) / (self.hi - self.lo);
        self.from + t.clamp(0.0, 1.0) * (self.to - self.from)
    }
}

/// The SVG text of the roofline plot of `report`; `peak_tflops` draws a compute ceiling.
pub fn roofline_svg(report: &Report, peak_tflops: Option<f64>) -> String {
    let bw = report.copy_gbs * 1e9;
    let points: Vec<(String, f64, f64)> = report
        .cases
        .iter()
        .filter(|c| c.status == Status::Ok && c.op != "copy")
        .filter_map(|c| {
            let ms = c.median_ms?;
            let intensity = if c.flops > 0.0 { c.flops / c.bytes } else { 1e-3 };
            let rate = if c.flops > 0.0 { c.flops / (ms * 1e-3) } else { c.bytes / (ms * 1e-3) * 1e-3 };
            Some((c.id.clone(), intensity, rate))
        })
        .collect();
    let x = Axis { lo: -3.0, hi: 4.0, from: LEFT, to: W - RIGHT };
    let y = Axis { lo: 9.0, hi: 16.0, from: H - BOTTOM, to: TOP };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="14">{} on {}: roofline (copy {:.0} GB/s), commit {}</text>"#,
        esc(&report.implementation),
        esc(&report.device_name),
        report.copy_gbs,
        esc(&report.commit)
    );
    for d in -3..=4 {
        let px = x.at(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{px}" y1="{TOP}" x2="{px}" y2="{}" stroke="#eee"/>"##, H - BOTTOM);
        let _ = writeln!(s, r#"<text x="{px}" y="{}" text-anchor="middle">1e{d}</text>"#, H - BOTTOM + 16.0);
    }
    for d in 9..=16 {
        let py = y.at(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{py}" x2="{}" y2="{py}" stroke="#eee"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">1e{d}</text>"#, LEFT - 6.0, py + 4.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">FLOP per byte (no-arithmetic cases at the left edge, plotted as bytes/s / 1000)</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 20.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">FLOP/s</text>"#,
        H / 2.0,
        H / 2.0
    );
    // Memory roofline: FLOP/s = bandwidth x intensity, capped by the compute ceiling if given.
    let cap = peak_tflops.map_or(f64::INFINITY, |t| t * 1e12);
    let mut path = String::new();
    for i in 0..=70 {
        let ai = 10f64.powf(-3.0 + i as f64 * 0.1);
        let _ = write!(path, "{}{:.1},{:.1} ", if i == 0 { "M" } else { "L" }, x.at(ai), y.at((bw * ai).min(cap)));
    }
    let _ = writeln!(s, r##"<path d="{path}" fill="none" stroke="#c33" stroke-width="2"/>"##);
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];
    for (i, (id, ai, rate)) in points.iter().enumerate() {
        let (px, py) = (x.at(*ai), y.at(*rate));
        let color = colors[i % colors.len()];
        let _ = writeln!(
            s,
            r#"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="{color}"><title>{}</title></circle>"#,
            esc(id)
        );
        let ly = TOP + 12.0 * i as f64;
        let lx = W - RIGHT + 12.0;
        let _ = writeln!(s, r#"<circle cx="{lx}" cy="{}" r="3" fill="{color}"/>"#, ly - 4.0);
        let _ = writeln!(s, r#"<text x="{}" y="{ly}" font-size="9">{}</text>"#, lx + 6.0, esc(id));
    }
    s.push_str("</svg>\n");
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
