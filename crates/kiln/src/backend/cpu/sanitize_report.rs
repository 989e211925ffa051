//! A checked launch's raw findings turned into the user's: kinds, severities, lines and
//! sentences.

use super::sanitize::{CheckedRun, Memory, RawFinding, RawKind, PAD_BYTES};
use crate::finding::{Finding, Severity};
use crate::program::MetalProgram;
use crate::source::user_lines::{UserLine, UserLines};

/// The findings of one checked launch of `program`.
pub fn findings_of(program: &MetalProgram, run: &CheckedRun) -> Vec<Finding> {
    let lines = UserLines::of(program);
    let mut out = Vec::new();
    let position = |tid: u64| thread_position(tid, run.grid, run.threadgroup);
    for raw in &run.findings {
        let f = finding(program, &lines, run, raw, &position);
        // Lanes absent from a SIMD-group function because they had finished: a divergence only
        // when they ran past its line (skipped it), not when they returned before it (the
        // grid's ragged edge).
        let ran_past = match (&f.line, &f.other_line) {
            (Some(a), Some(b)) => a.part == b.part && b.line > a.line,
            _ => false,
        };
        if raw.kind == RawKind::SimdDivergence && raw.offset == 1 && !ran_past {
            continue;
        }
        out.push(f);
    }
    // After a fault the outputs are what the kernel wrote before it stopped.
    let written = if run.fault.is_some() { &[][..] } else { &run.written[..] };
    for (slot, map, last) in written {
        let Some(info) = run.slots.get(*slot) else { continue };
        let line = last.as_ref().and_then(|s| lines.site(s));
        if info.uninitialised {
            let ranges = ranges_of(map, 0);
            let unwritten: usize = ranges.iter().map(|r| r.1 - r.0).sum();
            if unwritten > 0 {
                out.push(Finding {
                    kind: "unwritten-output",
                    severity: Severity::Error,
                    kernel: program.kernel.clone(),
                    line: line.clone(),
                    other_line: None,
                    threads: Vec::new(),
                    buffer: Some(info.name.clone()),
                    index: Some(ranges[0].0 as i64),
                    count: unwritten as u64,
                    distance: None,
                    message: format!(
                        "{unwritten} of {} elements of output `{}` were written by no thread (elements {}); without \
                         `init_value` they hold whatever memory held",
                        map.len(),
                        info.name,
                        describe_ranges(&ranges)
                    ),
                });
            }
        }
        let twice = ranges_of(map, 2);
        let n_twice: usize = twice.iter().map(|r| r.1 - r.0).sum();
        if n_twice > 0 {
            out.push(Finding {
                kind: "unwritten-output",
                severity: Severity::Error,
                kernel: program.kernel.clone(),
                line,
                other_line: None,
                threads: Vec::new(),
                buffer: Some(info.name.clone()),
                index: Some(twice[0].0 as i64),
                count: n_twice as u64,
                distance: None,
                message: format!(
                    "{n_twice} elements of output `{}` were written by more than one thread without atomics \
                     (elements {}): which value stays depends on the schedule",
                    info.name,
                    describe_ranges(&twice)
                ),
            });
        }
    }
    if let Some(fault) = &run.fault {
        if !out.iter().any(|f| f.kind == "out-of-bounds" && f.severity == Severity::Error) {
            out.push(Finding {
                kind: "fault",
                severity: Severity::Error,
                kernel: program.kernel.clone(),
                line: None,
                other_line: None,
                threads: Vec::new(),
                buffer: None,
                index: None,
                count: 1,
                distance: None,
                message: format!("the kernel stopped: {fault}"),
            });
        }
    }
    out
}

fn finding(
    program: &MetalProgram,
    lines: &UserLines,
    run: &CheckedRun,
    raw: &RawFinding,
    position: &dyn Fn(u64) -> [u32; 3],
) -> Finding {
    let a = raw.site_a.as_ref().and_then(|s| lines.site(s));
    let b = raw.site_b.as_ref().and_then(|s| lines.site(s));
    let buffer = match &raw.memory {
        Memory::Buffer(slot) => run.slots.get(*slot).map(|s| s.name.clone()),
        Memory::Threadgroup(name) => Some(name.clone()),
        Memory::None => None,
    };
    let what = match &raw.memory {
        Memory::Buffer(_) => format!("`{}`", buffer.clone().unwrap_or_default()),
        Memory::Threadgroup(name) => format!("threadgroup array `{name}`"),
        Memory::None => String::new(),
    };
    let elem = raw.elem.max(1) as i64;
    let index = raw.offset.div_euclid(elem);
    let at = |l: &Option<UserLine>| {
        l.as_ref().map_or("a line of kiln's".to_string(), |l| format!("{} line {}", l.part, l.line))
    };
    let (ta, tb) = (raw.threads.0, raw.threads.1);
    let threads = vec![(ta, position(ta)), (tb, position(tb))];
    let mut f = Finding {
        kind: "race",
        severity: Severity::Error,
        kernel: program.kernel.clone(),
        line: b.clone(),
        other_line: None,
        threads,
        buffer: buffer.clone(),
        index: Some(index),
        count: raw.count,
        distance: None,
        message: String::new(),
    };
    match raw.kind {
        RawKind::Race | RawKind::Lockstep => {
            let verb = |write: bool| if write { "wrote" } else { "read" };
            let (wa, wb) = (raw.other_threads & 1 != 0, raw.other_threads & 2 != 0);
            let scope = match raw.memory {
                Memory::Threadgroup(_) => "no threadgroup_barrier between them",
                _ => "nothing orders them (a barrier orders only threads of one threadgroup)",
            };
            // The read is the line that goes wrong: it is `line`, the write the other.
            let (line, other) = if wa && !wb {
                (b.clone(), a.clone())
            } else if !wa && wb {
                (a.clone(), b.clone())
            } else {
                (b.clone(), a.clone())
            };
            f.line = line;
            f.other_line = other;
            f.message = format!(
                "thread {} {} {what}[{index}] at {} and thread {} {} it at {}, with {scope} ({} times)",
                fmt_thread(ta, position(ta)),
                verb(wa),
                at(&a),
                fmt_thread(tb, position(tb)),
                verb(wb),
                at(&b),
                raw.count
            );
            if raw.kind == RawKind::Lockstep {
                f.severity = Severity::Warning;
                f.message.push_str(
                    "; both are lanes of one SIMD group with no simdgroup_barrier or SIMD-group function between: the \
                     kernel relies on lanes running in lockstep",
                );
            }
        }
        RawKind::Uninitialised => {
            f.kind = "uninitialized-read";
            f.threads.truncate(1);
            f.threads[0] = (tb, position(tb));
            f.message = match raw.memory {
                Memory::Threadgroup(_) => format!(
                    "thread {} read {what}[{index}], which no thread of its threadgroup wrote ({} reads like it)",
                    fmt_thread(tb, position(tb)),
                    raw.count
                ),
                _ => format!(
                    "thread {} read output {what}[{index}], which no thread wrote, and the output has no `init_value` \
                     ({} reads like it)",
                    fmt_thread(tb, position(tb)),
                    raw.count
                ),
            };
        }
        RawKind::DoubleWrite => {
            f.kind = "unwritten-output";
            f.message = format!("{what}[{index}] was written by several threads without atomics");
        }
        RawKind::BarrierExit => {
            f.kind = "barrier-divergence";
            f.buffer = None;
            f.index = None;
            f.threads.truncate(1);
            f.count = raw.other_threads as u64;
            f.message = format!(
                "{} threads of threadgroup {} had returned when the others waited at this barrier: on a GPU the \
                 barrier hangs or is undefined",
                raw.other_threads,
                group_of(ta, run)
            );
        }
        RawKind::BarrierSites => {
            f.kind = "barrier-divergence";
            f.buffer = None;
            f.index = None;
            f.threads.truncate(1);
            f.line = a.clone();
            f.other_line = b.clone();
            f.count = raw.other_threads as u64;
            f.message = format!(
                "{} threads of threadgroup {} waited at the barrier at {} while the others waited at {}: every thread \
                 must reach the same barrier",
                raw.other_threads,
                group_of(ta, run),
                at(&a),
                at(&b)
            );
        }
        RawKind::SimdDivergence => {
            f.kind = "barrier-divergence";
            f.buffer = None;
            f.index = None;
            f.line = a.clone();
            f.other_line = b.clone();
            f.count = raw.other_threads as u64;
            let elsewhere =
                if raw.offset == 1 { format!("ran past it to {}", at(&b)) } else { format!("waited at {}", at(&b)) };
            f.message = format!(
                "a SIMD-group function at {} ran for part of a SIMD-group of threadgroup {} while {} other lanes {}: \
                 it combines only the lanes that reach it together, so every lane of the SIMD-group (or none) must call it",
                at(&a),
                group_of(ta, run),
                raw.other_threads,
                elsewhere
            );
        }
        RawKind::OobRead | RawKind::OobWrite => {
            f.kind = "out-of-bounds";
            f.line = a.clone();
            f.threads.truncate(1);
            let n = (raw.size as i64) / elem;
            // An unsigned 32-bit index that went below zero.
            let index =
                if ((1i64 << 32) - (1 << 20)..1i64 << 32).contains(&index) { index - (1i64 << 32) } else { index };
            f.index = Some(index);
            let distance = if index < 0 { -index } else { index - n + 1 };
            f.distance = Some(distance);
            let side =
                if index < 0 { format!("{distance} before the start") } else { format!("{distance} past the end") };
            let write = raw.kind == RawKind::OobWrite;
            f.message = format!(
                "thread {} {} {what}[{index}], outside its {n} elements ({side}; {} times)",
                fmt_thread(ta, position(ta)),
                if write { "wrote" } else { "read" },
                raw.count
            );
            let bytes_out = if index < 0 { -raw.offset } else { raw.offset - raw.size as i64 };
            let in_apron = matches!(raw.memory, Memory::Buffer(_)) && bytes_out < PAD_BYTES as i64;
            if !write && in_apron && run.discarded_oob == Some(true) {
                f.severity = Severity::Warning;
                f.message.push_str(
                    ": load-then-select — the value read was discarded (changing what lies outside changed no \
                     output), harmless on GPUs within 1 MiB of the buffer; loading under the condition avoids it",
                );
            }
        }
    }
    f
}

fn fmt_thread(tid: u64, pos: [u32; 3]) -> String {
    format!("{tid} (position ({}, {}, {}))", pos[0], pos[1], pos[2])
}

fn group_of(tid: u64, run: &CheckedRun) -> String {
    let per = run.threadgroup.iter().map(|&t| t as u64).product::<u64>().max(1);
    let lin = tid / per;
    let groups = [0, 1, 2].map(|d| run.grid[d].div_ceil(run.threadgroup[d].max(1)).max(1) as u64);
    format!("({}, {}, {})", lin % groups[0], (lin / groups[0]) % groups[1], lin / (groups[0] * groups[1]))
}

/// `thread_position_in_grid` of the thread with global linear index `tid` (group-major, the
/// local index over the group's own size, as the emulator numbers them).
fn thread_position(tid: u64, grid: [u32; 3], tg: [u32; 3]) -> [u32; 3] {
    let per = tg.iter().map(|&t| t as u64).product::<u64>().max(1);
    let (lin, local) = (tid / per, tid % per);
    let groups = [0, 1, 2].map(|d| grid[d].div_ceil(tg[d].max(1)).max(1) as u64);
    let gid = [lin % groups[0], (lin / groups[0]) % groups[1], lin / (groups[0] * groups[1])];
    let size = [0, 1, 2].map(|d| (grid[d] as u64 - gid[d] * tg[d] as u64).min(tg[d] as u64).max(1));
    let l = [local % size[0], (local / size[0]) % size[1], local / (size[0] * size[1])];
    [0, 1, 2].map(|d| (gid[d] * tg[d] as u64 + l[d]) as u32)
}

/// Half-open runs of elements whose map entry is `value`.
fn ranges_of(map: &[u8], value: u8) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &v) in map.iter().enumerate() {
        match (v == value, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, map.len()));
    }
    out
}

fn describe_ranges(ranges: &[(usize, usize)]) -> String {
    let mut parts: Vec<String> = ranges
        .iter()
        .take(6)
        .map(|&(a, b)| if b == a + 1 { format!("{a}") } else { format!("{a}..{}", b - 1) })
        .collect();
    if ranges.len() > 6 {
        parts.push(format!("and {} more ranges", ranges.len() - 6));
    }
    parts.join(", ")
}
