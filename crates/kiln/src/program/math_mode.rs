//! The compiler's floating-point mode, shared by every target.

use std::str::FromStr;

use crate::error::Error;

/// The compiler's floating-point mode (MLX `compile_options={"math_mode": ...}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MathMode {
    /// IEEE semantics: `exp(-inf) == 0`, NaN and infinity preserved.
    #[default]
    Safe,
    /// Reassociation allowed, special values kept.
    Relaxed,
    /// Fast math; `__FAST_MATH__` is defined.
    Fast,
}

impl MathMode {
    /// MLX's name of the mode: `"safe"`, `"relaxed"` or `"fast"`.
    pub fn name(self) -> &'static str {
        match self {
            MathMode::Safe => "safe",
            MathMode::Relaxed => "relaxed",
            MathMode::Fast => "fast",
        }
    }
}

impl FromStr for MathMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "safe" => Ok(MathMode::Safe),
            "relaxed" => Ok(MathMode::Relaxed),
            "fast" => Ok(MathMode::Fast),
            other => Err(Error::invalid(
                "metal_kernel",
                format!("expected math_mode 'safe', 'relaxed' or 'fast', got {other:?}"),
            )),
        }
    }
}
