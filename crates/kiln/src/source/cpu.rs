//! The host C++ translation unit of a program for the CPU emulator: the CPU prelude, the
//! lowered code under `#line` directives (so compiler messages name the user's own lines), one
//! wrapper per kernel entry that turns emulated-thread state into the kernel's arguments, the
//! group scheduler, and the C functions the host calls.

use std::fmt::Write;
use std::sync::OnceLock;

use super::lower::{EntryParam, LoweredModule};
use crate::backend::{MetalProgram, ProgramKind};
use crate::error::{Error, Result};
use crate::source::scan::ATTRIBUTES;

/// The file name compiler messages use for the user's Metal text.
pub fn user_file_name(program: &MetalProgram) -> String {
    let safe: String =
        program.kernel.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("{safe}.metal")
}

/// The common headers, in inclusion order (usable from host C++ and CUDA C++).
pub const COMMON_PRELUDE: [(&str, &str); 13] = [
    ("common/types.h", include_str!("../../prelude/common/types.h")),
    ("common/vec.h", include_str!("../../prelude/common/vec.h")),
    ("common/vec_ops.h", include_str!("../../prelude/common/vec_ops.h")),
    ("common/packed.h", include_str!("../../prelude/common/packed.h")),
    ("common/math.h", include_str!("../../prelude/common/math.h")),
    ("common/math_float.h", include_str!("../../prelude/common/math_float.h")),
    ("common/math_int.h", include_str!("../../prelude/common/math_int.h")),
    ("common/matrix.h", include_str!("../../prelude/common/matrix.h")),
    ("common/geometric.h", include_str!("../../prelude/common/geometric.h")),
    ("common/array.h", include_str!("../../prelude/common/array.h")),
    ("common/type_traits.h", include_str!("../../prelude/common/type_traits.h")),
    ("common/qualified_names.h", include_str!("../../prelude/common/qualified_names.h")),
    ("common/lowering.h", include_str!("../../prelude/common/lowering.h")),
];
/// MLX's utils preamble, for body-only programs.
pub const MLX_UTILS: &str = include_str!("../../prelude/common/mlx_utils.h");
const CPU_CONFIG: &str = include_str!("../../prelude/cpu/config.h");
const CPU_RUNTIME: &str = include_str!("../../prelude/cpu/runtime.h");
const CPU_THREADGROUP: &str = include_str!("../../prelude/cpu/threadgroup.h");
const CPU_CONVERGENCE: &str = include_str!("../../prelude/cpu/convergence.h");
const CPU_SIMD: &str = include_str!("../../prelude/cpu/simd.h");
const CPU_SCHEDULER: &str = include_str!("../../prelude/cpu/scheduler.h");
const CPU_CHECK: &str = include_str!("../../prelude/cpu/check.h");

fn push_header(out: &mut String, name: &str, text: &str) {
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
pub const ABI_VERSION: i32 = 3;

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
/// sanitizer's hooks compiled in and `cpu/check.h` after the threadgroup memory.
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
        push_header(&mut out, "cpu/config.h", CPU_CONFIG);
        for (name, text) in COMMON_PRELUDE {
            push_header(&mut out, name, text);
        }
        push_header(&mut out, "cpu/runtime.h", CPU_RUNTIME);
        push_header(&mut out, "cpu/threadgroup.h", CPU_THREADGROUP);
        if checked {
            push_header(&mut out, "cpu/check.h", CPU_CHECK);
        }
        push_header(&mut out, "cpu/convergence.h", CPU_CONVERGENCE);
        push_header(&mut out, "cpu/simd.h", CPU_SIMD);
        out.push_str("using namespace metal;\n");
        if mlx_body {
            push_header(&mut out, "common/mlx_utils.h", MLX_UTILS);
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
    let _ = writeln!(out, "#line 1 \"{}\"", user_file_name(program));
    out.push_str(&module.code);
    if !module.code.ends_with('\n') {
        out.push('\n');
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
        let _ = writeln!(
            out,
            "static void kiln_body_{i}(kiln::rt::Thread& t, void* const* b, void* const* tg) {{\n  (void)t; (void)b; (void)tg;\n  {}({});\n}}",
            entry.callee,
            args.join(", ")
        );
    }
    push_header(&mut out, "cpu/scheduler.h", CPU_SCHEDULER);
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
    let _ = writeln!(
        out,
        "extern \"C\" int kiln_cooperative() {{ return {}; }}",
        u8::from(module.needs_cooperative_threads)
    );
    out.push_str("extern \"C\" int kiln_run(int entry, const kiln::rt::LaunchDesc* d, uint64_t begin, uint64_t end, kiln::rt::StackSet* stacks, kiln::rt::TgArena* arena, char* msg, int cap) {\n  switch (entry) {\n");
    for i in 0..module.entries.len() {
        let _ = writeln!(
            out,
            "    case {i}: return kiln::rt::run_groups(kiln_body_{i}, {coop}, d, begin, end, stacks, arena, kiln_tg_names_{i}, msg, cap);"
        );
    }
    out.push_str("  }\n  kiln::rt::copy_msg(msg, cap, \"no such entry\");\n  return 2;\n}\n");
    Ok(out)
}
