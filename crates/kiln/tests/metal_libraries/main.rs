//! Whole Metal libraries as their projects publish them (candle, ggml, MLX; the files under
//! `tests/data/`, pinned in each `SOURCE.md`): every kernel translates and compiles for the
//! CPU and with NVRTC, and kernel families run against references written from their maths,
//! dispatched as each library's host code dispatches them.

#[path = "../common/mod.rs"]
#[macro_use]
mod common;

mod cases;
mod compile_each;
mod corpus;
mod harness;
mod stdlib;
mod survey;
