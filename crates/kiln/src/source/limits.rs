//! The translator's limits, in one place. Past any of them lowering stops with an error that
//! names the limit and the line, so no source (a fuzzer's or an attacker's) can exhaust the
//! caller's stack or memory, and every pass stays linear in the size of the text.

/// The deepest nesting of brackets (`(`, `[`, `{`) in a program, and of parentheses and unary
/// or conditional operators in a `#if` expression. Clang's default bracket depth is the same.
pub const MAX_NESTING: usize = 256;

/// The deepest nesting of macro expansions: an argument that holds an invocation is expanded
/// one level further down, and a macro whose replacement names another macro adds a level to
/// the tokens it produces.
pub const MAX_MACRO_DEPTH: usize = 256;

/// The most tokens macro expansion may produce or rescan (arguments are expanded before they
/// are substituted) for one program: about 100 MiB of tokens in memory at most. They are
/// counted as they are produced, so the limit holds before memory grows past it.
pub const MAX_EXPANSION_TOKENS: usize = 1 << 20;

/// The sentence an error gives when `what` passes `limit`.
pub fn exceeded(what: &str, limit: usize) -> String {
    format!("{what} exceeds kiln's limit of {limit} (see docs/msl.md, \"Limits\")")
}
