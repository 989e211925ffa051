//! The macros Metal's compiler predefines for every kernel, which kernels test to pick a code
//! path (`#if __METAL_VERSION__ >= 310` for `bfloat`, `#if defined(__HAVE_BFLOAT__)`).
//!
//! kiln compiles as Metal 3.1 does: MLX 0.32 asks for language 3.1 on macOS 14 (3.2 and 4.0 on
//! later systems), and 3.1 is the first version with `bfloat`, which both preludes provide.
//! Claiming a later version would select paths written for newer Metal features (tensor types
//! of 4.0) that the preludes do not implement. The CPU and CUDA preludes' `config.h` define
//! exactly these lines (a test below keeps them in step); a preprocessor that evaluates `#if`
//! before the lowering reads the same table.

/// `__METAL_VERSION__`: the Metal Shading Language version as major * 100 + minor * 10.
pub const METAL_VERSION: u32 = 310;

/// Every predefined object-like macro and its replacement text, in definition order: the
/// table the lowering's preprocessor evaluates `#if` with.
pub const PREDEFINED_MACROS: &[(&str, &str)] = &crate::source::preprocess::METAL_PREDEFINED;

/// The `#define` lines of [`PREDEFINED_MACROS`], one per macro.
pub fn define_lines() -> String {
    PREDEFINED_MACROS.iter().map(|(name, value)| format!("#define {name} {value}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_macro_is_the_version_constant() {
        let (_, text) = PREDEFINED_MACROS.iter().find(|(n, _)| *n == "__METAL_VERSION__").expect("version macro");
        assert_eq!(text.parse::<u32>().ok(), Some(METAL_VERSION));
    }

    #[test]
    fn both_preludes_define_exactly_the_predefined_macros() {
        let preludes = [
            ("cpu/config.h", include_str!("../../prelude/cpu/config.h")),
            ("cuda/config.h", include_str!("../../prelude/cuda/config.h")),
        ];
        for (name, text) in preludes {
            assert!(text.contains(&define_lines()), "{name} lacks the lines:\n{}", define_lines());
            for (macro_name, _) in PREDEFINED_MACROS {
                let defines = text.lines().filter(|l| l.trim_start().starts_with("#define") && l.contains(macro_name));
                assert_eq!(defines.count(), 1, "{name} defines {macro_name} more than once");
            }
        }
    }
}
