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
    for raw in barriers_by_line(&run.findings, &lines) {
        out.push(finding(program, &lines, run, &raw, &position));
    }
    if let Some(diff) = &run.schedules_differ {
        let first_race = out.iter_mut().find(|f| f.kind == "race" && f.severity == Severity::Error);
        if let Some(f) = first_race {
            f.message.push_str(&format!(
                "; under another legal schedule ({}) the output differs: `{}`[{}] is {} under one schedule and {} \
                 under the other ({} of {} elements differ)",
                diff.schedule,
                diff.output,
                diff.index,
                fmt_value(diff.values.0),
                fmt_value(diff.values.1),
                diff.differing,
                diff.elements
            ));
        }
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
                        "{} of {} of output `{}` {} written by no thread ({} {}); without `init_value` they hold \
                         whatever memory held",
                        unwritten,
                        plural(map.len() as u64, "element"),
                        info.name,
                        if unwritten == 1 { "was" } else { "were" },
                        if unwritten == 1 { "element" } else { "elements" },
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
                    "{} of output `{}` {} written by more than one thread without atomics and with nothing to order \
                     the writes (no barrier between them, or threads of different threadgroups) ({} {}): which value \
                     stays depends on the schedule",
                    plural(n_twice as u64, "element"),
                    info.name,
                    if n_twice == 1 { "was" } else { "were" },
                    if n_twice == 1 { "element" } else { "elements" },
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

/// The raw findings with barrier pairs told apart by source line: a pair of instructions of one
/// source barrier (the optimiser copied its call into the paths that lead to it) is no
/// divergence, and pairs on the same two lines are one finding.
fn barriers_by_line(raw: &[RawFinding], lines: &UserLines) -> Vec<RawFinding> {
    let mut out: Vec<RawFinding> = Vec::new();
    let mut seen: Vec<(Option<UserLine>, Option<UserLine>, usize)> = Vec::new();
    for f in raw {
        if f.kind != RawKind::BarrierSites {
            out.push(f.clone());
            continue;
        }
        let a = f.site_a.as_ref().and_then(|s| lines.site(s));
        let b = f.site_b.as_ref().and_then(|s| lines.site(s));
        if f.site_a.is_some() && f.site_a == f.site_b {
            continue;
        }
        if let Some(&(_, _, at)) = seen.iter().find(|p| p.0 == a && p.1 == b && a.is_some()) {
            out[at].other_threads += f.other_threads;
            out[at].count = out[at].count.max(f.count);
            continue;
        }
        seen.push((a, b, out.len()));
        out.push(f.clone());
    }
    out
}

/// `n` and the noun, plural unless `n` is 1 (`1 element`, `3 elements`).
fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// How often something happened: `once`, `2 times`.
fn times(n: u64) -> String {
    if n == 1 {
        "once".to_string()
    } else {
        format!("{n} times")
    }
}

/// A value of an output, with enough significant digits to tell two apart.
fn fmt_value(v: f64) -> String {
    if !v.is_finite() || (v == v.trunc() && v.abs() < 1e15) {
        format!("{v}")
    } else if v.abs() < 1e-3 || v.abs() >= 1e7 {
        format!("{v:.4e}")
    } else {
        let fixed = format!("{v:.6}");
        fixed.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The flags of a barrier as the kernel wrote them.
fn flags_text(flags: u32) -> String {
    let names: Vec<&str> = [(1, "mem_device"), (2, "mem_threadgroup"), (4, "mem_texture")]
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    if names.is_empty() {
        "mem_flags::mem_none".to_string()
    } else {
        names.iter().map(|n| format!("mem_flags::{n}")).collect::<Vec<_>>().join(" | ")
    }
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
        Memory::Threadgroup(name) | Memory::Private(name) => Some(name.clone()),
        Memory::None => None,
    };
    let what = match &raw.memory {
        Memory::Buffer(_) => format!("`{}`", buffer.clone().unwrap_or_default()),
        Memory::Threadgroup(name) => format!("threadgroup array `{name}`"),
        Memory::Private(name) => format!("private array `{name}`"),
        Memory::None => String::new(),
    };
    let elem = raw.elem.max(1) as i64;
    let index = raw.offset.div_euclid(elem);
    let at = |l: &Option<UserLine>| l.as_ref().map_or("a line of kiln's".to_string(), UserLine::label);
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
        RawKind::Race | RawKind::Lockstep | RawKind::Unfenced => {
            let verb = |write: bool| if write { "wrote" } else { "read" };
            let (wa, wb) = (raw.other_threads & 1 != 0, raw.other_threads & 2 != 0);
            let same_group = ta / group_threads(run) == tb / group_threads(run);
            let scope = match (&raw.memory, raw.kind) {
                (Memory::Threadgroup(_), RawKind::Unfenced) => format!(
                    "only a barrier that orders execution between them: {} at {} names no mem_threadgroup, so \
                     Metal does not order threadgroup memory across it",
                    flags_text(raw.other_threads >> 8),
                    at(&raw.site_c.as_ref().and_then(|s| lines.site(s)))
                ),
                (_, RawKind::Unfenced) => format!(
                    "only a barrier that orders execution between them: {} at {} names no mem_device, so \
                     Metal does not order device memory across it",
                    flags_text(raw.other_threads >> 8),
                    at(&raw.site_c.as_ref().and_then(|s| lines.site(s)))
                ),
                (Memory::Threadgroup(_), _) => "no threadgroup_barrier between them".to_string(),
                _ if same_group => "no threadgroup_barrier(mem_flags::mem_device) between them".to_string(),
                _ => "nothing to order them (they are in different threadgroups, and a barrier orders only the \
                      threads of one)"
                    .to_string(),
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
                "thread {} {} {what}[{index}] at {} and thread {} {} it at {}, with {scope} ({})",
                fmt_thread(ta, position(ta)),
                verb(wa),
                at(&a),
                fmt_thread(tb, position(tb)),
                verb(wb),
                at(&b),
                times(raw.count)
            );
            if raw.kind == RawKind::Unfenced {
                // Exchanges across execution-only barriers run correctly wherever barriers also
                // order memory, and public kernels rely on that: undefined, but not yet wrong.
                f.severity = Severity::Warning;
                f.message.push_str(
                    ": the compiler or the GPU may move the access across the barrier; name the memory in the \
                     barrier's flags",
                );
            }
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
            let like = |n: u64| if n == 1 { "the only read like it".to_string() } else { format!("{n} reads like it") };
            f.message = match raw.memory {
                Memory::Threadgroup(_) => format!(
                    "thread {} read {what}[{index}], which no thread of its threadgroup wrote ({})",
                    fmt_thread(tb, position(tb)),
                    like(raw.count)
                ),
                Memory::Private(_) => format!(
                    "thread {} read {what}[{index}] before writing it: a private array declared without an \
                     initialiser holds whatever its memory held ({})",
                    fmt_thread(tb, position(tb)),
                    like(raw.count)
                ),
                _ => format!(
                    "thread {} read output {what}[{index}], which no thread wrote, and the output has no `init_value` \
                     ({})",
                    fmt_thread(tb, position(tb)),
                    like(raw.count)
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
                "{} of threadgroup {} had returned when the others waited at this barrier: on a GPU the barrier \
                 hangs or is undefined",
                plural(raw.other_threads as u64, "thread"),
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
                "{} of threadgroup {} waited at the barrier at {} while the others waited at the barrier at {}: every \
                 thread must reach the same barriers, as many times",
                plural(raw.other_threads as u64, "thread"),
                group_of(ta, run),
                at(&a),
                at(&b)
            );
        }
        RawKind::InactiveLane => {
            f.kind = "barrier-divergence";
            f.buffer = None;
            f.index = None;
            f.line = a.clone();
            f.other_line = b.clone();
            f.count = raw.count;
            let lane = raw.other_threads;
            let sg = (ta % group_threads(run)) / 32;
            let state = match raw.offset {
                0 => format!("it was at the SIMD-group function at {}", at(&b)),
                1 => "it finished the kernel without this call".to_string(),
                2 => format!("it waited at the barrier at {}", at(&b)),
                _ if lane >= 32 => "a SIMD-group has lanes 0 to 31".to_string(),
                _ => "the threadgroup ends before it".to_string(),
            };
            f.threads.truncate(1);
            f.message = format!(
                "a shuffle at {} in thread {} read lane {lane} of SIMD-group {sg} of threadgroup {}, which did not take \
                 part in the call ({state}): reading an inactive lane is undefined in Metal ({})",
                at(&a),
                fmt_thread(ta, position(ta)),
                group_of(ta, run),
                times(raw.count)
            );
            if run.discarded_inactive == Some(true) {
                f.severity = Severity::Warning;
                f.message.push_str(
                    "; the value read was discarded (other bytes there changed no output), so the kernel's result \
                     does not depend on it",
                );
            }
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
            // An access that starts inside the memory and runs past its end (wider than what is
            // left: a struct or vector read from a smaller buffer) has no element outside to name.
            let overruns = (0..n).contains(&index);
            f.distance = (!overruns).then_some(distance);
            let write = raw.kind == RawKind::OobWrite;
            let unit = if elem == 1 { "byte" } else { "element" };
            f.message = if overruns {
                format!(
                    "thread {} {} {what} from [{index}] on, past the end of its {} (the access is wider than what \
                     is left; {})",
                    fmt_thread(ta, position(ta)),
                    if write { "wrote" } else { "read" },
                    plural(n as u64, unit),
                    times(raw.count)
                )
            } else {
                let side =
                    if index < 0 { format!("{distance} before the start") } else { format!("{distance} past the end") };
                format!(
                    "thread {} {} {what}[{index}], outside its {} ({side}; {})",
                    fmt_thread(ta, position(ta)),
                    if write { "wrote" } else { "read" },
                    plural(n as u64, unit),
                    times(raw.count)
                )
            };
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

fn group_threads(run: &CheckedRun) -> u64 {
    run.threadgroup.iter().map(|&t| t as u64).product::<u64>().max(1)
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
