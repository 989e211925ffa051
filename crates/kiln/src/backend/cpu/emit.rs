//! The host C++ translation unit of a program for the CPU emulator: the CPU prelude, the
//! lowered code under `#line` directives (so compiler messages name the user's own lines), one
//! wrapper per kernel entry that turns emulated-thread state into the kernel's arguments (and,
//! for barrier-free kernels, a loop over a group's threads with that wrapper inlined; for
//! kernels with a region form, the driver that runs each region in such a loop), the group
//! scheduler, and the C functions the host calls.

use std::fmt::Write;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::program::{MetalProgram, ProgramKind};
use crate::source::lower::{Boundary, EntryParam, LoweredModule};
use crate::source::prelude::{
    headers, Header, CPU_CHECKED_RUNTIME, CPU_CONFIG, CPU_RUNTIME, CPU_SCHEDULER, CPU_SCHEDULER_LINK, MLX_UTILS,
};
use crate::source::scan::ATTRIBUTES;
pub use crate::source::user_lines::user_file_name;

/// The group scheduler's headers, in order.
fn push_scheduler(out: &mut String) {
    for header in CPU_SCHEDULER {
        push_header(out, header);
    }
}

fn push_header(out: &mut String, (name, text): (&str, &str)) {
    let _ = writeln!(out, "#line 1 \"kiln/{name}\"");
    for line in text.lines() {
        // Headers are pasted into one file, where `#pragma once` only draws a warning.
        if line.trim() != "#pragma once" {
            out.push_str(line);
        }
        out.push('\n');
    }
}

/// What `kiln_abi_version()` of the translation units written here returns; the host refuses a
/// library with another (its `kiln_run` takes other arguments).
pub const ABI_VERSION: i32 = 6;

/// The part of every translation unit of a `kind` of program before the user's code: the same
/// text for every kernel of that kind, so it can be compiled once (a precompiled header).
pub fn prelude(kind: ProgramKind) -> &'static str {
    static PLAIN: OnceLock<String> = OnceLock::new();
    static MLX_BODY: OnceLock<String> = OnceLock::new();
    let mlx_body = matches!(kind, ProgramKind::MlxBody | ProgramKind::MlxBodyGenericPointers);
    let cell = if mlx_body { &MLX_BODY } else { &PLAIN };
    cell.get_or_init(|| build_prelude(mlx_body, false))
}

/// The prelude of the sanitizer's libraries (`kiln check`): the same headers with the
/// sanitizer's hooks compiled in and `cpu/check.h` with `cpu/check_hooks.h` after the threadgroup
/// memory.
pub fn checked_prelude(kind: ProgramKind) -> &'static str {
    static PLAIN: OnceLock<String> = OnceLock::new();
    static MLX_BODY: OnceLock<String> = OnceLock::new();
    let mlx_body = matches!(kind, ProgramKind::MlxBody | ProgramKind::MlxBodyGenericPointers);
    let cell = if mlx_body { &MLX_BODY } else { &PLAIN };
    cell.get_or_init(|| build_prelude(mlx_body, true))
}

fn build_prelude(mlx_body: bool, checked: bool) -> String {
    {
        let mut out = String::with_capacity(400_000);
        out.push_str("// kiln CPU translation unit (generated).\n");
        if checked {
            out.push_str("#define KILN_CHECKED 1\n");
        }
        let runtime: &'static [Header] = if checked { &CPU_CHECKED_RUNTIME } else { &CPU_RUNTIME };
        for header in headers(CPU_CONFIG, runtime) {
            push_header(&mut out, header);
        }
        out.push_str("using namespace metal;\n");
        if mlx_body {
            push_header(&mut out, MLX_UTILS);
        }
        out
    }
}

/// The whole translation unit for `module`, lowered from `program`.
pub fn translation_unit(program: &MetalProgram, module: &LoweredModule) -> Result<String> {
    translation_unit_after(prelude(program.kind), program, module)
}

/// The whole translation unit for `module` after `prelude` (`prelude` or `checked_prelude`).
pub fn translation_unit_after(prelude: &str, program: &MetalProgram, module: &LoweredModule) -> Result<String> {
    let mut out = String::with_capacity(module.code.len() + 200_000);
    out.push_str(prelude);
    // A barrier-free kernel's code, its entry wrappers and direct loops are compiled without
    // semantic interposition (GCC; clang assumes it already): the kernel's functions, exported
    // from the library, may then be inlined into the direct loop instead of called through the
    // PLT, while calls of functions it only declares still bind when the library is loaded.
    // They are optimized as by -O3: the kernel's function inlined into the direct loop whatever
    // its size, and that loop vectorized where the cost model finds it pays (versioned where
    // buffers may overlap), which changes no result. Pragmas, not flags: the precompiled
    // prelude would reset the flags. Cooperative kernels and the sanitizer's libraries are
    // compiled as they were: the emulator tells SIMD-group calls apart by return address, which
    // more inlining could merge.
    if module.coroutines {
        out.push_str(COROUTINES_ON);
        out.push_str(COROUTINE_MACROS);
    }
    let inlined = !module.needs_cooperative_threads;
    if inlined {
        out.push_str(
            "#if !KILN_CHECKED\n#pragma GCC push_options\n#pragma GCC optimize (\"O3\", \"no-semantic-interposition\")\n#endif\n",
        );
    }
    let _ = writeln!(out, "#line 1 \"{}\"", user_file_name(program));
    out.push_str(&module.code);
    if !module.code.ends_with('\n') {
        out.push('\n');
    }
    if !module.regions.is_empty() {
        // The region forms (of cooperative kernels, whose code is compiled as written: see
        // above), optimized as the direct loops are: they hold no SIMD-group call.
        out.push_str(REGIONS_ON);
        out.push_str("#if KILN_REGION_UNIT\n");
        out.push_str(OPTIMIZED_PUSH);
        // Numbered with the user's lines under a file name of its own: a unit refused for its
        // region form alone is told apart from one whose kernel does not compile (compile.rs).
        for kernel in &module.regions {
            let _ = writeln!(out, "#line {} \"{REGION_FORM_FILE}\"\n{}", kernel.line, kernel.code);
        }
        out.push_str("#pragma GCC pop_options\n#endif\n");
    }
    out.push_str("#line 1 \"kiln/entries\"\n");
    for (i, entry) in module.entries.iter().enumerate() {
        let mut args = Vec::new();
        for p in &entry.params {
            args.push(match p {
                EntryParam::Buffer { index, by_ref: true, .. } => format!("kiln::rt::RefArg{{b[{index}]}}"),
                EntryParam::Buffer { index, .. } => format!("kiln::rt::PtrArg{{b[{index}]}}"),
                EntryParam::Threadgroup { index, .. } => format!("kiln::rt::PtrArg{{tg[{index}]}}"),
                EntryParam::Builtin { name, attribute, .. } => {
                    if !ATTRIBUTES.iter().any(|(a, _)| a == attribute) {
                        return Err(Error::Compile {
                            backend: "cpu",
                            kernel: program.kernel.clone(),
                            log: format!(
                                "kernel {}: parameter `{name}` has attribute [[{attribute}]], which compute kernels cannot use",
                                entry.host_name
                            ),
                        });
                    }
                    format!("kiln::rt::builtin(t.{attribute})")
                }
            });
        }
        if module.coroutines {
            // A coroutine thread's body makes its frame; the scheduler resumes it.
            let _ = writeln!(
                out,
                "#if KILN_CO_UNIT\nstatic inline ::kiln::rt::CoThread kiln_entry_{i}(kiln::rt::Thread& t, void* const* b, void* const* tg) {{\n  (void)t; (void)b; (void)tg;\n  return {}({}::kiln::rt::CoArgs{{&t}});\n}}\n\
                 static void kiln_body_{i}(kiln::rt::Thread& t, void* const* b, void* const* tg) {{ t.co_frame = kiln_entry_{i}(t, b, tg).frame; }}\n\
                 #define kiln_co_resume_{i} ::kiln::rt::co_resume\n#else\n#define kiln_co_resume_{i} nullptr",
                entry.callee,
                args.iter().map(|a| format!("{a}, ")).collect::<String>()
            );
        }
        // One wrapper for both ways of running a thread: from its `Thread` record (a `Lane` with
        // a fiber), or as a `Lane` of a barrier-free kernel's direct loop.
        let _ = writeln!(
            out,
            "static inline void kiln_entry_{i}(const kiln::rt::Lane& t, void* const* b, void* const* tg) {{\n  (void)t; (void)b; (void)tg;\n  {}({});\n}}",
            entry.callee,
            args.join(", ")
        );
        let _ = writeln!(
            out,
            "static void kiln_body_{i}(kiln::rt::Thread& t, void* const* b, void* const* tg) {{ kiln_entry_{i}(t, b, tg); }}"
        );
        if module.coroutines {
            out.push_str("#endif\n");
        }
        let chunked = !module.code.contains("os_log") && !module.code.contains("atomic");
        if let Some(kernel) = module.regions.iter().find(|r| r.name == entry.callee) {
            out.push_str(&region_driver(i, entry, &kernel.boundaries, &args, chunked));
        } else if module.needs_cooperative_threads {
            let _ = writeln!(out, "#define kiln_regions_{i} nullptr");
        }
        if !module.needs_cooperative_threads {
            // Kernels that log (a line names its own thread) or take atomics (a fault in a span
            // is named by running the group again, where a thread could wait on a lock the
            // faulting one held) keep one thread per iteration; atomics do not vectorize anyway.
            out.push_str(&direct_loop(i, entry, chunked));
        }
    }
    if inlined {
        out.push_str("#if !KILN_CHECKED\n#pragma GCC pop_options\n#endif\n");
    }
    push_scheduler(&mut out);
    // Each entry's `[[threadgroup(n)]]` parameter names, for fault messages.
    for (i, entry) in module.entries.iter().enumerate() {
        let mut names = vec!["nullptr".to_string(); 16];
        for p in &entry.params {
            if let EntryParam::Threadgroup { name, index, .. } = p {
                if let Some(slot) = names.get_mut(*index as usize) {
                    *slot = format!("\"{name}\"");
                }
            }
        }
        let _ = writeln!(out, "static const char* const kiln_tg_names_{i}[16] = {{{}}};", names.join(", "));
    }
    out.push_str("#line 1 \"kiln/exports\"\n");
    let coop = if module.needs_cooperative_threads { "true" } else { "false" };
    let _ = writeln!(out, "extern \"C\" int kiln_abi_version() {{ return {ABI_VERSION}; }}");
    out.push_str("extern \"C\" void kiln_log_drain(void (*sink)(void*, const char*, size_t), void* ctx) { kiln::oslog::drain(sink, ctx); }\n");
    let _ = writeln!(
        out,
        "extern \"C\" int kiln_cooperative() {{ return {}; }}",
        u8::from(module.needs_cooperative_threads)
    );
    out.push_str("extern \"C\" int kiln_run(int entry, const kiln::rt::LaunchDesc* d, uint64_t begin, uint64_t end, kiln::rt::StackSet* stacks, kiln::rt::TgArena* arena, char* msg, int cap) {\n  switch (entry) {\n");
    for i in 0..module.entries.len() {
        let direct =
            if module.needs_cooperative_threads { format!("kiln_regions_{i}") } else { format!("kiln_direct_{i}") };
        let resume = if module.coroutines { format!("kiln_co_resume_{i}") } else { "nullptr".to_string() };
        let _ = writeln!(
            out,
            "    case {i}: return kiln::rt::run_groups(kiln_body_{i}, {direct}, {coop}, {resume}, d, begin, end, stacks, arena, kiln_tg_names_{i}, msg, cap);"
        );
    }
    out.push_str("  }\n  kiln::rt::copy_msg(msg, cap, \"no such entry\");\n  return 2;\n}\n");
    Ok(out)
}

/// The line that makes a unit's threads coroutines where the prelude has them; a unit that
/// does not compile so is built again with [`COROUTINES_OFF`] in its place (the lowering's
/// rewrite is then plain C++ again: compile.rs).
pub const COROUTINES_ON: &str = "#define KILN_CO_UNIT KILN_COROUTINES\n";
/// What replaces [`COROUTINES_ON`] to build a unit with fibers.
pub const COROUTINES_OFF: &str = "#define KILN_CO_UNIT 0\n";

/// The macros (after [`COROUTINES_ON`]) the lowering writes into a kernel whose threads may run
/// as coroutines (`lower::coroutines`): its return type, its returns, its barriers and SIMD-group calls, as
/// coroutine code or (fibers) as written.
const COROUTINE_MACROS: &str = concat!(
    "#if KILN_CO_UNIT\n",
    "#define KILN_CO_ENTRY ::kiln::rt::CoThread\n",
    "#define KILN_CO_PARAM , ::kiln::rt::CoArgs kiln_co_args\n",
    "#define KILN_CO_PARAM_ONLY ::kiln::rt::CoArgs kiln_co_args\n",
    "#define KILN_CO_RETURN co_return\n",
    "#define KILN_CO_BARRIER(...) co_await ::kiln::rt::co_barrier\n",
    "#define KILN_CO_CALL(...) co_await ::kiln::rt::co_call([](auto... kiln_a) { return __VA_ARGS__(kiln_a...); })\n",
    "#else\n",
    "#define KILN_CO_ENTRY void\n",
    "#define KILN_CO_PARAM\n",
    "#define KILN_CO_PARAM_ONLY\n",
    "#define KILN_CO_RETURN return\n",
    "#define KILN_CO_BARRIER(...) __VA_ARGS__\n",
    "#define KILN_CO_CALL(...) __VA_ARGS__\n",
    "#endif\n",
);

/// What compiles the code after it as the direct loops are (`-O3`, no semantic interposition).
const OPTIMIZED_PUSH: &str = "#pragma GCC push_options\n#pragma GCC optimize (\"O3\", \"no-semantic-interposition\")\n";

/// The line that gives a unit its kernels' region forms (never in the sanitizer's libraries);
/// a unit that does not compile so is built again with [`REGIONS_OFF`] in its place.
pub const REGIONS_ON: &str = "#define KILN_REGION_UNIT (KILN_CO_UNIT && !KILN_CHECKED)\n";
/// The file name under which the region forms' lines are numbered.
pub const REGION_FORM_FILE: &str = "kiln/region-form";
/// What replaces [`REGIONS_ON`] to build a unit without region forms.
pub const REGIONS_OFF: &str = "#define KILN_REGION_UNIT 0\n";

/// The region driver of entry `i`, whose kernel has a region form of `regions` regions
/// (`lower::regions`; prelude/cpu/runtime.h, "region loops"): the setup call, then each region
/// for every thread of the group through `run_direct`, `chunked` as a direct loop is.
fn region_driver(
    i: usize,
    entry: &crate::source::lower::Entry,
    boundaries: &[Boundary],
    args: &[String],
    chunked: bool,
) -> String {
    let pointers = local_pointers(entry);
    let mut call_args: Vec<String> = args.to_vec();
    call_args.push("ra".to_string());
    let mut out = format!(
        "#if KILN_REGION_UNIT\n{OPTIMIZED_PUSH}\
         template <int R> static inline __attribute__((always_inline)) void kiln_region_entry_{i}(const kiln::rt::Lane& t, void* const* b, void* const* tg, kiln::rt::RegionArgs ra) {{\n\
         \x20 (void)t; (void)b; (void)tg;\n\
         \x20 {}_kiln_regions<R>({});\n\
         }}\n\
         static void kiln_regions_{i}(kiln::rt::Group& g, const kiln::rt::GroupShape& s) {{\n\
         {pointers}\
         \x20 kiln::rt::RegionState st;\n\
         \x20 st.record = 0;\n\
         \x20 kiln::rt::RegionArgs ra{{&g, nullptr, nullptr, st.uniform, &st, 0}};\n\
         \x20 if (!kiln::rt::region_setup(g, s, st, ra, [&](const kiln::rt::Lane& t) {{ kiln_region_entry_{i}<-1>(t, b, tg, ra); }})) return;\n",
        entry.callee,
        call_args.join(", ")
    );
    for r in 0..=boundaries.len() {
        let _ = writeln!(
            out,
            "  kiln::rt::run_direct<{chunked}>(g, s, [&](const kiln::rt::Lane& t) {{ kiln_region_entry_{i}<{r}>(t, b, tg, ra.at(t.thread_index_in_threadgroup)); }});\n  if (g.aborted || *g.cancel) return;"
        );
        if boundaries.get(r) == Some(&Boundary::Collective) {
            out.push_str("  kiln::rt::region_resolve(g);\n");
        }
    }
    out.push_str(&format!("}}\n#pragma GCC pop_options\n#else\n#define kiln_regions_{i} nullptr\n#endif\n"));
    out
}

/// The lines that copy a group's buffer and threadgroup pointers into locals `b` and `tg` (so
/// that the kernel's stores cannot be taken to change them), for the loops that inline entry
/// `entry`.
fn local_pointers(entry: &crate::source::lower::Entry) -> String {
    let buffers = entry
        .params
        .iter()
        .filter_map(|p| match p {
            EntryParam::Buffer { index, .. } => Some(*index as usize + 1),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    format!(
        "  void* b[{buffers}];\n  for (int k = 0; k < {buffers}; ++k) b[k] = g.buffers[k];\n  void* tg[16];\n  for (int k = 0; k < 16; ++k) tg[k] = g.tg_mem[k];\n"
    )
}

/// The direct loop of entry `i` of a barrier-free kernel (`kiln::rt::run_direct`): the entry
/// inlined into the loop over a group's threads, its buffer and threadgroup pointers copied
/// into locals first so that the kernel's stores cannot be taken to change them; `chunked`
/// (for kernels that neither log nor take atomics) lets the compiler run consecutive threads as
/// vector lanes. The sanitizer's libraries run every thread through
/// `kiln_body_{i}` and have none.
fn direct_loop(i: usize, entry: &crate::source::lower::Entry, chunked: bool) -> String {
    let pointers = local_pointers(entry);
    format!(
        "#if KILN_CHECKED\n#define kiln_direct_{i} nullptr\n#else\n\
         static void kiln_direct_{i}(kiln::rt::Group& g, const kiln::rt::GroupShape& s) {{\n\
         {pointers}\
         \x20 kiln::rt::run_direct<{chunked}>(g, s, [&](const kiln::rt::Lane& t) {{ kiln_entry_{i}(t, b, tg); }});\n\
         }}\n#endif\n"
    )
}

/// The group scheduler as a translation unit of its own, compiled after the prelude into an
/// object that kernel libraries link (`without_scheduler` gives them the declarations instead).
pub fn scheduler_unit() -> &'static str {
    static UNIT: OnceLock<String> = OnceLock::new();
    UNIT.get_or_init(|| {
        let mut out = String::from("#define KILN_SCHEDULER_LINKAGE __attribute__((visibility(\"hidden\")))\n");
        push_scheduler(&mut out);
        out
    })
}

/// `unit` (a translation unit, or its part after the prelude) with the group scheduler declared
/// instead of defined, for linking with `scheduler_unit`'s object; `None` when `unit` has no
/// scheduler.
pub fn without_scheduler(unit: &str) -> Option<String> {
    static BLOCKS: OnceLock<(String, String)> = OnceLock::new();
    let (defined, declared) = BLOCKS.get_or_init(|| {
        let (mut defined, mut declared) = (String::new(), String::new());
        push_scheduler(&mut defined);
        push_header(&mut declared, CPU_SCHEDULER_LINK);
        (defined, declared)
    });
    // The scheduler comes after the user's code, so the last occurrence is the prelude's.
    let at = unit.rfind(defined.as_str())?;
    let mut out = String::with_capacity(unit.len());
    out.push_str(&unit[..at]);
    out.push_str(declared);
    out.push_str(&unit[at + defined.len()..]);
    Some(out)
}
