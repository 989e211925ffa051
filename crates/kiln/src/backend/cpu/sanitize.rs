//! Checked execution (`kiln check`): the kernel's library compiled with the compiler's
//! thread-sanitizer instrumentation and the sanitizer of `prelude/cpu/check.h` in place of its
//! runtime, run on the calling thread (one launch at a time in the process) with every buffer
//! copied between 1 MiB of padding on each side, so that accesses outside a buffer land in
//! memory of the launch's own and are reported with their distance instead of faulting.
//!
//! What comes back is raw: instruction offsets resolved to file and line of the generated unit
//! (`addr2line` over the library's line tables), which `sanitize_report` maps to the user's text.
//! A launch that read outside a buffer runs a second time with other bytes in the padding: equal
//! outputs mean the values read there were discarded (load, then select). One whose shuffles read
//! inactive lanes runs again with other bytes returned there, for the same question. One that
//! races runs again under other legal schedules (the threads of each group, and the groups, in
//! reverse order; then each SIMD-group running on to its next barrier before the next starts),
//! and the outputs are compared with the first run's: an element that differs is the race's
//! consequence.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::abi::LaunchDesc;
use super::compile::{self, Compiled};
use super::exec::geometry;
use super::stacks;
use super::threadgroup;
use super::toolchain;
use crate::array::{Array, HostBuffer};
use crate::backend::cpu::emit::{checked_prelude, translation_unit_after};
use crate::backend::program_table::{self, ProgramTable};
use crate::backend::{disk_cache, Binding, Launch, MetalProgram, ProgramMemo};
use crate::config;
use crate::dtype::f64_to_element_bytes;
use crate::error::{Error, Result};
use crate::source::lower::{lower_kept, EntryParam, LowerTarget};
use crate::source::parse::ParseSlot;
use crate::source::user_lines::user_compile_error;

mod symbols;

/// Bytes of padding on each side of every buffer of a checked launch.
pub const PAD_BYTES: usize = 1 << 20;

/// Mirrors `kiln::chk::Buffer`.
#[repr(C)]
struct CheckBuffer {
    data: u64,
    len: u64,
    pad: u64,
    granule: u32,
    flags: u32,
}

/// Mirrors `kiln::chk::Finding`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CFinding {
    kind: u32,
    pc_a: u32,
    pc_b: u32,
    count: u32,
    space: i32,
    slot: i32,
    tid_a: u32,
    tid_b: u32,
    offset: i64,
    size: u64,
    name: *const c_char,
    elem: u32,
    threads: u32,
    serial: u64,
    pc_c: u32,
    pad: u32,
}

/// Mirrors `kiln::chk::Launch`.
#[repr(C)]
struct CheckLaunch {
    buffers: *const CheckBuffer,
    n_buffers: u32,
    group_threads: u32,
    findings: *mut CFinding,
    cap: u32,
    n_findings: u32,
    poison_inactive: u32,
    schedule: u32,
    pad: [u32; 2],
}

/// How a checked run differs from the first: other bytes in the padding, other bytes from
/// inactive lanes, another schedule (`SCHEDULES`).
#[derive(Clone, Copy, Default)]
struct Variant {
    pad_fill: u8,
    poison_inactive: bool,
    schedule: Schedule,
}

/// The legal schedules a racy launch runs under, after the first (`Schedule::InOrder`).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Schedule {
    /// Threads of a group in index order, resolving SIMD-group functions once none can run.
    #[default]
    InOrder,
    /// Threads and groups in reverse order.
    Reversed,
    /// Each SIMD-group runs on to its next barrier before the next SIMD-group starts.
    SimdGroupsAhead,
}

const SCHEDULES: [(Schedule, &str); 2] = [
    (Schedule::Reversed, "threads and threadgroups in reverse order"),
    (Schedule::SimdGroupsAhead, "each SIMD-group running on to its next barrier before the next starts"),
];

type ArmFn = unsafe extern "C" fn(*mut CheckLaunch) -> i32;
type FinishFn = unsafe extern "C" fn(*mut CheckLaunch) -> u32;
type WrittenFn = unsafe extern "C" fn(u32, *mut u8, u64) -> u32;
type LastFn = unsafe extern "C" fn(u64, *mut u32, *mut u32, *mut u32) -> i32;

const MAX_FINDINGS: usize = 512;

/// What the sanitizer found, as the library reported it (`kiln::chk::Kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawKind {
    /// Two threads accessed the same memory unordered, at least one writing.
    Race,
    /// Lanes of one SIMD group accessed the same memory with no collective between them.
    Lockstep,
    /// A read of memory that was never written.
    Uninitialised,
    /// Several threads wrote the same output element.
    DoubleWrite,
    /// Threads left a group before a barrier the others reached.
    BarrierExit,
    /// Threads of a group reached different barriers.
    BarrierSites,
    /// A shuffle read a lane that did not take part in the call.
    InactiveLane,
    /// A read outside a buffer.
    OobRead,
    /// A write outside a buffer.
    OobWrite,
    /// Threads of different SIMD-groups accessed the same memory with only barriers between
    /// whose flags name other memory.
    Unfenced,
}

/// One place in the generated unit: the inline chain of an instruction, innermost first, as
/// (file, line) pairs.
pub type Site = Vec<(String, u32)>;

/// One merged finding of a checked launch.
#[derive(Clone, Debug)]
pub struct RawFinding {
    /// What was found.
    pub kind: RawKind,
    /// The earlier access (or barrier) and the one that met it; `None` where there is none.
    pub site_a: Option<Site>,
    /// The access (or barrier) that met `site_a`.
    pub site_b: Option<Site>,
    /// How many times the same pair met.
    pub count: u64,
    /// The memory: `Some(slot)` of a buffer, or a threadgroup array's name.
    pub memory: Memory,
    /// Global linear thread indices of the two accesses.
    pub threads: (u64, u64),
    /// Byte offset of the first occurrence from the start of the memory (negative: before it).
    pub offset: i64,
    /// Bytes of the memory, and of one element (1 where unknown).
    pub size: u64,
    /// Bytes of one element (1 where unknown).
    pub elem: u32,
    /// Threads that left a group before a barrier, or took another barrier; for races, which
    /// access wrote (bits 1 and 2) and the barrier's flags (from bit 8); for inactive lanes, the
    /// lane read.
    pub other_threads: u32,
    /// The barrier between the two accesses of an `Unfenced` finding.
    pub site_c: Option<Site>,
}

/// Which memory a finding is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `[[buffer(slot)]]`.
    Buffer(usize),
    /// A threadgroup array (or `[[threadgroup(n)]]` parameter) by name.
    Threadgroup(String),
    /// A private (thread) array by name.
    Private(String),
    /// None (barrier findings).
    None,
}

/// A buffer of the launch: its slot's name in the kernel and what it holds.
#[derive(Clone, Debug)]
pub struct SlotInfo {
    /// The slot's parameter name in the kernel.
    pub name: String,
    /// Whether the slot is an output.
    pub is_output: bool,
    /// Outputs without `init_value`: their first contents are unspecified.
    pub uninitialised: bool,
    /// Bytes of one element.
    pub elem: usize,
    /// Number of elements.
    pub elements: usize,
}

/// Everything a checked launch produced.
pub struct CheckedRun {
    /// The outputs after the run.
    pub outputs: Vec<Array>,
    /// The merged findings.
    pub findings: Vec<RawFinding>,
    /// The launch's buffers, by slot.
    pub slots: Vec<SlotInfo>,
    /// Per slot of an output: per element 0 unwritten, 1 written once, 2 written by several
    /// threads; and the last store to it.
    pub written: Vec<(usize, Vec<u8>, Option<Site>)>,
    /// Threads per dimension of the grid and of a threadgroup.
    pub grid: [u32; 3],
    /// Threads per dimension of a threadgroup.
    pub threadgroup: [u32; 3],
    /// `Some(true)` when reads outside buffers happened and changing the bytes there did not
    /// change any output.
    pub discarded_oob: Option<bool>,
    /// `Some(true)` when shuffles read inactive lanes and other bytes there changed no output.
    pub discarded_inactive: Option<bool>,
    /// Where the outputs differ under another legal schedule (a racy launch only).
    pub schedules_differ: Option<ScheduleDiff>,
    /// A fault that stopped the kernel, if any.
    pub fault: Option<String>,
}

/// The first output that differs between two legal schedules of one launch.
#[derive(Clone, Debug)]
pub struct ScheduleDiff {
    /// The other schedule, in words.
    pub schedule: &'static str,
    /// The output's name.
    pub output: String,
    /// The first element that differs (row-major).
    pub index: usize,
    /// Its values under the first schedule and the other.
    pub values: (f64, f64),
    /// Elements of that output that differ.
    pub differing: usize,
    /// Elements of that output.
    pub elements: usize,
}

/// A library compiled for checked runs.
struct Instrumented {
    compiled: Compiled,
    image: Vec<u8>,
    arm: ArmFn,
    finish: FinishFn,
    written: WrittenFn,
    last: LastFn,
    entry: usize,
    params: Vec<EntryParam>,
}

/// Compiles (or finds) the checked library of `program`, lowered from the parse kept in `parse`
/// where given.
fn instrumented(cxx: &str, program: &MetalProgram, parse: Option<&ParseSlot>) -> Result<Arc<Instrumented>> {
    static CACHE: OnceLock<ProgramTable<Arc<Instrumented>>> = OnceLock::new();
    let cache = CACHE.get_or_init(ProgramTable::default);
    let hash = program_table::fingerprint(program);
    if let Some(hit) = cache.get(hash, program, cxx)? {
        return Ok(hit);
    }
    let module = lower_kept(program, parse, LowerTarget::Cpu)?;
    let entry = module.entries.iter().position(|e| e.host_name == program.function).ok_or_else(|| {
        Error::invalid(program.kernel.clone(), format!("no kernel entry named {:?}", program.function))
    })?;
    let tu = translation_unit_after(checked_prelude(program.kind), program, &module)?;
    let compiler = toolchain::host_compiler(cxx)?;
    let mut flags: Vec<&str> =
        toolchain::flags(program.math_mode, &compiler).into_iter().filter(|f| *f != "-shared").collect();
    // Identical calls in two branches stay two calls, so each keeps its own line. Line tables
    // and inline chains (`-g1`) are all the findings need: full debug information costs compile
    // time.
    flags.extend(["-fsanitize=thread", "-g1", "-c", "-fno-tree-tail-merge", "-fno-crossjumping"]);
    let mut h = Sha256::new();
    h.update(tu.as_bytes());
    h.update(flags.join(" ").as_bytes());
    h.update(cxx.as_bytes());
    h.update(compiler.cache_identity().as_bytes());
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let dir = config::cache_dir().join("cpu-check").join(&key);
    let _ = std::fs::create_dir_all(&dir);
    let so = dir.join("kernel.so");
    let image = match disk_cache::load_verified(&so, &key) {
        Some(image) => image,
        None => {
            let image = build(cxx, &program.kernel, &flags, &tu).map_err(|e| user_compile_error(program, e))?;
            let _ = disk_cache::store(&so, &key, &image);
            image
        }
    };
    let path = disk_cache::private_name(&std::env::temp_dir(), "kiln-check", "so");
    std::fs::write(&path, &image).map_err(|e| Error::io(&path, e))?;
    let compiled = compile::load(&program.kernel, &path);
    let _ = std::fs::remove_file(&path);
    let compiled = compiled?;
    let fault = |what: &str| Error::Driver {
        backend: "cpu",
        kernel: program.kernel.clone(),
        msg: format!("the checked library has no {what}"),
    };
    // SAFETY: `check_hooks.h` defines these three exports with exactly these signatures.
    let arm = unsafe { compiled.symbol::<ArmFn>(b"kiln_check_arm\0") }.ok_or_else(|| fault("kiln_check_arm"))?;
    // SAFETY: as above.
    let finish =
        unsafe { compiled.symbol::<FinishFn>(b"kiln_check_finish\0") }.ok_or_else(|| fault("kiln_check_finish"))?;
    // SAFETY: as above.
    let written =
        unsafe { compiled.symbol::<WrittenFn>(b"kiln_check_written\0") }.ok_or_else(|| fault("kiln_check_written"))?;
    // SAFETY: as above.
    let last = unsafe { compiled.symbol::<LastFn>(b"kiln_check_last\0") }.ok_or_else(|| fault("kiln_check_last"))?;
    let params = module.entries[entry].params.clone();
    let inst = Arc::new(Instrumented { compiled, image, arm, finish, written, last, entry, params });
    cache.insert(hash, program, cxx, inst.clone())?;
    Ok(inst)
}

/// Compiles `tu` with `flags` (instrumented, to an object) and links it into a library without
/// the sanitizer's runtime (the unit defines the entry points itself).
fn build(cxx: &str, kernel: &str, flags: &[&str], tu: &str) -> Result<Vec<u8>> {
    let dir = std::env::temp_dir();
    let cpp = disk_cache::private_name(&dir, "kiln-check", "cpp");
    let obj = cpp.with_extension("o");
    let so = cpp.with_extension("so");
    std::fs::write(&cpp, tu).map_err(|e| Error::io(&cpp, e))?;
    let run = |cmd: &mut Command| -> Result<()> {
        let out = cmd
            .output()
            .map_err(|e| Error::BackendUnavailable { backend: "cpu", reason: format!("cannot run `{cxx}`: {e}") })?;
        if out.status.success() {
            return Ok(());
        }
        let log = String::from_utf8_lossy(&out.stderr).replace(&*cpp.to_string_lossy(), "<translation unit>");
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("error")).collect();
        let log = if errors.is_empty() { log.clone() } else { errors.join("\n") };
        Err(Error::Compile { backend: "cpu", kernel: kernel.to_string(), log })
    };
    let compiled = run(Command::new(cxx).args(flags).arg("-o").arg(&obj).arg(&cpp))
        .and_then(|()| run(Command::new(cxx).args(["-shared", "-Wl,-Bsymbolic", "-o"]).arg(&so).arg(&obj)));
    let image = compiled.and_then(|()| std::fs::read(&so).map_err(|e| Error::io(&so, e)));
    for p in [&cpp, &obj, &so] {
        let _ = std::fs::remove_file(p);
    }
    image
}

/// One checked launch at a time in the process: the library's sanitizer state is global.
fn launch_lock() -> &'static Mutex<()> {
    static LOCK: Mutex<()> = Mutex::new(());
    &LOCK
}

/// Runs `launch` checked with the compiler `cxx`.
pub fn run(cxx: &str, launch: &Launch<'_>) -> Result<CheckedRun> {
    let inst = instrumented(cxx, launch.program, launch.memo.map(ProgramMemo::parse))?;
    let _one = launch_lock().lock().unwrap_or_else(|e| e.into_inner());
    let first = run_once(&inst, launch, Variant::default())?;
    let same_outputs =
        |other: &Once| first.outputs.iter().zip(&other.outputs).all(|(a, b)| a.1 == b.1) && other.fault.is_none();
    let read_outside = first.raw.iter().any(|f| f.kind == 7 && f.space == 0);
    let discarded_oob = if read_outside && first.fault.is_none() {
        Some(same_outputs(&run_once(&inst, launch, Variant { pad_fill: 0x5A, ..Variant::default() })?))
    } else {
        None
    };
    let read_inactive = first.raw.iter().any(|f| f.kind == 9);
    let discarded_inactive = if read_inactive && first.fault.is_none() {
        Some(same_outputs(&run_once(&inst, launch, Variant { poison_inactive: true, ..Variant::default() })?))
    } else {
        None
    };
    let races = first.raw.iter().any(|f| f.kind == 1) || first.written.iter().any(|w| w.1.contains(&2));
    let mut schedules_differ = None;
    for (schedule, how) in SCHEDULES {
        if !races || first.fault.is_some() || schedules_differ.is_some() {
            break;
        }
        let other = run_once(&inst, launch, Variant { schedule, ..Variant::default() })?;
        if other.fault.is_none() {
            schedules_differ = schedule_diff(&first, &other).map(|d| ScheduleDiff { schedule: how, ..d });
        }
    }
    // The last store names an output's line only in an unwritten-output finding: resolving it
    // otherwise would cost an `addr2line` run per clean launch.
    let last_writes: Vec<u32> =
        first.written.iter().filter(|w| w.1.iter().any(|&state| state != 1)).map(|w| w.2).collect();
    let pcs = first.raw.iter().flat_map(|f| [f.pc_a, f.pc_b, f.pc_c]).chain(last_writes.iter().copied());
    let sites = symbols::resolve(&inst.image, pcs);
    let site = |pc: u32| if pc == 0 { None } else { sites.get(&pc).cloned() };
    let findings = first
        .raw
        .iter()
        .filter_map(|f| {
            let kind = match f.kind {
                1 => RawKind::Race,
                2 => RawKind::Lockstep,
                3 => RawKind::Uninitialised,
                4 => RawKind::DoubleWrite,
                5 => RawKind::BarrierExit,
                6 => RawKind::BarrierSites,
                7 => RawKind::OobRead,
                8 => RawKind::OobWrite,
                9 => RawKind::InactiveLane,
                10 => RawKind::Unfenced,
                _ => return None,
            };
            let name = |fallback: &str| {
                if f.name.is_null() {
                    fallback.to_string()
                } else {
                    // SAFETY: array names are string literals of the library, which is never
                    // unloaded.
                    unsafe { CStr::from_ptr(f.name) }.to_string_lossy().into_owned()
                }
            };
            let memory = match (f.space, usize::try_from(f.slot)) {
                (0, Ok(slot)) => Memory::Buffer(slot),
                (1, _) => Memory::Threadgroup(name("threadgroup memory")),
                (2, _) => Memory::Private(name("a private array")),
                _ => Memory::None,
            };
            Some(RawFinding {
                kind,
                site_a: site(f.pc_a),
                site_b: site(f.pc_b),
                count: f.count as u64,
                memory,
                threads: (f.tid_a as u64, f.tid_b as u64),
                offset: f.offset,
                size: f.size,
                elem: f.elem.max(1),
                other_threads: f.threads,
                site_c: site(f.pc_c),
            })
        })
        .collect();
    let outputs = first
        .outputs
        .into_iter()
        .map(|(spec, bytes)| Array::from_host(HostBuffer::from_bytes(&bytes), spec.1, &spec.0))
        .collect();
    Ok(CheckedRun {
        outputs,
        findings,
        slots: first.slots,
        written: first.written.into_iter().map(|(slot, map, pc)| (slot, map, site(pc))).collect(),
        grid: first.grid,
        threadgroup: first.threadgroup,
        discarded_oob,
        discarded_inactive,
        schedules_differ,
        fault: first.fault,
    })
}

/// The first output element that differs between two runs, with its values.
fn schedule_diff(a: &Once, b: &Once) -> Option<ScheduleDiff> {
    for (k, ((spec, x), (_, y))) in a.outputs.iter().zip(&b.outputs).enumerate() {
        if x == y {
            continue;
        }
        let elem = spec.1.size().max(1);
        let differs: Vec<usize> =
            (0..x.len() / elem).filter(|&i| x[i * elem..(i + 1) * elem] != y[i * elem..(i + 1) * elem]).collect();
        let &index = differs.first()?;
        let value = |bytes: &[u8]| {
            let one = Array::from_host(HostBuffer::from_bytes(&bytes[index * elem..(index + 1) * elem]), spec.1, &[1]);
            one.to_f64_vec().ok().and_then(|v| v.first().copied()).unwrap_or(f64::NAN)
        };
        let name = a.output_slots.get(k).and_then(|&slot| a.slots.get(slot)).map(|s| s.name.clone());
        return Some(ScheduleDiff {
            schedule: "",
            output: name.unwrap_or_else(|| format!("output {k}")),
            index,
            values: (value(x), value(y)),
            differing: differs.len(),
            elements: x.len() / elem,
        });
    }
    None
}

/// An output's shape, dtype and bytes.
type OutputBytes = ((Vec<usize>, crate::dtype::DType), Vec<u8>);

/// One run's results before symbolisation.
struct Once {
    outputs: Vec<OutputBytes>,
    /// The slot of each output.
    output_slots: Vec<usize>,
    raw: Vec<CFinding>,
    slots: Vec<SlotInfo>,
    written: Vec<(usize, Vec<u8>, u32)>,
    fault: Option<String>,
    grid: [u32; 3],
    threadgroup: [u32; 3],
}

fn run_once(inst: &Instrumented, launch: &Launch<'_>, variant: Variant) -> Result<Once> {
    let pad_fill = variant.pad_fill;
    let kernel = &launch.program.kernel;
    let (grid, tg, groups) = geometry(launch)?;
    let names: HashMap<usize, &str> = inst
        .params
        .iter()
        .filter_map(|p| match p {
            EntryParam::Buffer { name, index, .. } => Some((*index as usize, name.as_str())),
            _ => None,
        })
        .collect();
    // Each binding copied between paddings: (storage, data offset in it, data length).
    let mut storage: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut slots = Vec::new();
    let mut specs = Vec::new();
    for (slot, binding) in launch.bindings.iter().enumerate() {
        let name = names.get(&slot).map_or(format!("buffer {slot}"), |n| n.to_string());
        let (bytes, base, info) = match binding {
            Binding::Array(a) => {
                let size = a.dtype().size();
                let host = a.host_buffer().ok_or_else(|| {
                    Error::invalid(kernel.clone(), "an input lives on a GPU; `kiln check` runs on host arrays")
                })?;
                let (lo, hi) = super::checked::reach(a.shape(), a.strides(), size);
                let start = (a.offset() * size) as isize + lo;
                let all = host.bytes();
                let end = (a.offset() * size) as isize + hi;
                if start < 0 || end as usize > all.len() {
                    return Err(Error::invalid(kernel.clone(), format!("input `{name}` reaches outside its buffer")));
                }
                let info = SlotInfo {
                    name,
                    is_output: false,
                    uninitialised: false,
                    elem: size,
                    elements: (hi - lo) as usize / size,
                };
                (all[start as usize..end as usize].to_vec(), (-lo) as usize, info)
            }
            Binding::Bytes(b) => {
                let info = SlotInfo { name, is_output: false, uninitialised: false, elem: 1, elements: b.len() };
                (b.to_vec(), 0, info)
            }
            Binding::Output(spec) => {
                let n = spec.shape.iter().product::<usize>();
                let elem = spec.dtype.size();
                let bytes = match spec.init_value {
                    Some(v) => f64_to_element_bytes(v, spec.dtype).repeat(n),
                    None => vec![0xFF; n * elem],
                };
                specs.push((slot, (spec.shape.to_vec(), spec.dtype)));
                let info =
                    SlotInfo { name, is_output: true, uninitialised: spec.init_value.is_none(), elem, elements: n };
                (bytes, 0, info)
            }
            Binding::InOut(a) | Binding::OutputInto(a) => {
                let bytes = a.to_contiguous_bytes()?;
                specs.push((slot, (a.shape().to_vec(), a.dtype())));
                let elem = a.dtype().size();
                let info = SlotInfo { name, is_output: true, uninitialised: false, elem, elements: bytes.len() / elem };
                (bytes, 0, info)
            }
        };
        let mut padded = vec![pad_fill; bytes.len() + 2 * PAD_BYTES];
        padded[PAD_BYTES..PAD_BYTES + bytes.len()].copy_from_slice(&bytes);
        storage.push((padded, base));
        slots.push(info);
    }
    let mut ptrs: Vec<*mut c_void> = Vec::new();
    let mut buffers: Vec<CheckBuffer> = Vec::new();
    for ((bytes, base), info) in storage.iter_mut().zip(&slots) {
        let len = bytes.len() - 2 * PAD_BYTES;
        let data = bytes[PAD_BYTES..].as_mut_ptr();
        // SAFETY: `base` (the view's first element) lies within the data, as `reach` says.
        ptrs.push(unsafe { data.add(*base) } as *mut c_void);
        let flags = if info.uninitialised { 2 } else { 1 | if info.is_output { 2 } else { 0 } };
        buffers.push(CheckBuffer {
            data: data as u64,
            len: len as u64,
            pad: PAD_BYTES as u64,
            granule: info.elem.max(1) as u32,
            flags,
        });
    }
    let n_buffers = ptrs.len() as u32;
    ptrs.resize(ptrs.len().max(31), std::ptr::null_mut());
    let tg_sizes: Vec<u64> = launch.threadgroup_memory.iter().map(|&s| s as u64).collect();
    if tg_sizes.len() > 16 {
        return Err(Error::invalid(kernel.clone(), "more than 16 [[threadgroup(n)]] bindings"));
    }
    let cancel = AtomicI32::new(0);
    let desc = LaunchDesc::new(ptrs.as_ptr(), &tg_sizes, cancel.as_ptr() as *const i32, n_buffers, grid, tg, groups);
    let group_threads = tg.iter().product::<u32>();
    let mut found = vec![
        CFinding {
            kind: 0,
            pc_a: 0,
            pc_b: 0,
            count: 0,
            space: 0,
            slot: 0,
            tid_a: 0,
            tid_b: 0,
            offset: 0,
            size: 0,
            name: std::ptr::null(),
            elem: 0,
            threads: 0,
            serial: 0,
            pc_c: 0,
            pad: 0,
        };
        MAX_FINDINGS
    ];
    let mut cl = CheckLaunch {
        buffers: buffers.as_ptr(),
        n_buffers,
        group_threads,
        findings: found.as_mut_ptr(),
        cap: MAX_FINDINGS as u32,
        n_findings: 0,
        poison_inactive: u32::from(variant.poison_inactive),
        schedule: match variant.schedule {
            Schedule::InOrder => 0,
            Schedule::Reversed => 1,
            Schedule::SimdGroupsAhead => 2,
        },
        pad: [0; 2],
    };
    // SAFETY: `cl` and what it points to outlive the launch and `kiln_check_finish` below.
    if unsafe { (inst.arm)(&mut cl) } != 0 {
        return Err(Error::invalid(kernel.clone(), "out of memory for the sanitizer's shadow memory"));
    }
    let total = groups.iter().map(|&g| g as u64).product::<u64>();
    let timeout = launch.timeout;
    let mut msg = [0 as c_char; 512];
    let done = AtomicI32::new(0);
    let rc = std::thread::scope(|s| {
        let watcher = timeout.map(|limit| {
            let (cancel, done) = (&cancel, &done);
            s.spawn(move || {
                let start = Instant::now();
                while done.load(Ordering::SeqCst) == 0 {
                    if start.elapsed() >= limit {
                        cancel.store(1, Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        });
        let mut lease = inst
            .compiled
            .cooperative
            .then(|| stacks::pool().take(group_threads as usize, inst.compiled.release_stacks));
        let stacks = lease.as_mut().map_or(std::ptr::null_mut(), |l| l.as_ptr());
        let mut arena = threadgroup::take();
        // The reversed schedule takes the groups last to first, one call each.
        let ranges: Vec<(u64, u64)> = if variant.schedule == Schedule::Reversed {
            (0..total).rev().map(|g| (g, g + 1)).collect()
        } else {
            vec![(0, total)]
        };
        let mut rc = 0;
        for (begin, end) in ranges {
            // SAFETY: as in `exec::execute`: the descriptor, stacks and arena are valid for the
            // call, and `msg` has room for the NUL-terminated message it may write.
            rc = unsafe {
                (inst.compiled.run)(
                    inst.entry as i32,
                    &desc,
                    begin,
                    end,
                    stacks,
                    arena.as_ptr(),
                    msg.as_mut_ptr(),
                    msg.len() as i32,
                )
            };
            if rc != 0 {
                break;
            }
        }
        done.store(1, Ordering::SeqCst);
        if let Some(w) = watcher {
            let _ = w.join();
        }
        rc
    });
    // SAFETY: `cl` is the record armed above.
    let n = unsafe { (inst.finish)(&mut cl) } as usize;
    let fault = match rc {
        0 => None,
        1 => return Err(Error::Timeout { kernel: kernel.clone(), seconds: timeout.map_or(0.0, |t| t.as_secs_f64()) }),
        _ => Some(msg.iter().take_while(|&&b| b != 0).map(|&b| b as u8 as char).collect()),
    };
    let mut raw = found[..n.min(MAX_FINDINGS)].to_vec();
    if let Some(addr) = fault.as_deref().and_then(fault_address) {
        let (mut pc, mut tid, mut write) = (0u32, 0u32, 0u32);
        // SAFETY: three valid places to write to.
        let known = unsafe { (inst.last)(addr, &mut pc, &mut tid, &mut write) } != 0;
        tid = fault.as_deref().and_then(|m| faulting_thread(m, grid, tg)).unwrap_or(0);
        let outside = buffers.iter().all(|b| addr < b.data - b.pad || addr >= b.data + b.len + b.pad);
        if let (true, Some(slot)) = (known && outside && pc != 0, owner_of(&buffers, addr)) {
            let b = &buffers[slot];
            raw.push(CFinding {
                kind: if write != 0 { 8 } else { 7 },
                pc_a: pc,
                pc_b: 0,
                count: 1,
                space: 0,
                slot: slot as i32,
                tid_a: tid,
                tid_b: tid,
                offset: addr.wrapping_sub(b.data) as i64,
                size: b.len,
                name: std::ptr::null(),
                elem: b.granule,
                threads: 0,
                serial: 0,
                pc_c: 0,
                pad: 0,
            });
        }
    }
    let mut written = Vec::new();
    for (slot, info) in slots.iter().enumerate() {
        if info.is_output {
            let granules = buffers[slot].len as usize / info.elem.max(1);
            let mut map = vec![0u8; granules];
            // SAFETY: `map` has room for `granules` bytes, the buffer's granule count.
            let last = unsafe { (inst.written)(slot as u32, map.as_mut_ptr(), granules as u64) };
            written.push((slot, map, last));
        }
    }
    let output_slots = specs.iter().map(|s| s.0).collect();
    let outputs = specs
        .into_iter()
        .map(|(slot, spec)| {
            let (bytes, _) = &storage[slot];
            (spec, bytes[PAD_BYTES..bytes.len() - PAD_BYTES].to_vec())
        })
        .collect();
    Ok(Once { outputs, output_slots, raw, slots, written, fault, grid, threadgroup: tg })
}

/// The global linear index of the thread a fault message names ("thread (x, y, z)"), numbered
/// as the sanitizer numbers threads (group-major, the local index over the group's own size).
fn faulting_thread(msg: &str, grid: [u32; 3], tg: [u32; 3]) -> Option<u32> {
    let at = msg.find("thread (")? + "thread (".len();
    let inner = msg[at..].split(')').next()?;
    let pos: Vec<u64> = inner.split(',').map(|p| p.trim().parse().ok()).collect::<Option<_>>()?;
    let &[x, y, z] = pos.as_slice() else { return None };
    let pos = [x, y, z];
    let tg = tg.map(|t| t.max(1) as u64);
    let groups = [0, 1, 2].map(|d| (grid[d] as u64).div_ceil(tg[d]).max(1));
    let gid = [0, 1, 2].map(|d| pos[d] / tg[d]);
    let size = [0, 1, 2].map(|d| (grid[d] as u64).saturating_sub(gid[d] * tg[d]).clamp(1, tg[d]));
    let local = [0, 1, 2].map(|d| pos[d] % tg[d]);
    let lin = gid[0] + gid[1] * groups[0] + gid[2] * groups[0] * groups[1];
    let local = local[0] + local[1] * size[0] + local[2] * size[0] * size[1];
    u32::try_from(lin * tg.iter().product::<u64>() + local).ok()
}

/// The address in a fault message ("accessed address 0x...").
fn fault_address(msg: &str) -> Option<u64> {
    let at = msg.find("address 0x")? + "address 0x".len();
    let hex: String = msg[at..].chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).ok()
}

/// The buffer a faulting address was meant for: one it lies a wrapped 32-bit index away from
/// (`i - 1` at `i == 0` with an unsigned index), else the nearest.
fn owner_of(buffers: &[CheckBuffer], addr: u64) -> Option<usize> {
    let wrapped = buffers.iter().position(|b| {
        let idx = addr.wrapping_sub(b.data) / b.granule.max(1) as u64;
        addr >= b.data && ((1u64 << 32) - (1 << 20)..1u64 << 32).contains(&idx)
    });
    wrapped.or_else(|| {
        (0..buffers.len()).min_by_key(|&i| {
            let b = &buffers[i];
            if addr < b.data {
                b.data - addr
            } else {
                addr.saturating_sub(b.data + b.len)
            }
        })
    })
}
