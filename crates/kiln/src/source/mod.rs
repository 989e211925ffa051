//! Pure text: what MLX detects in a kernel body, name mangling, Metal source generation
//! byte-identical to MLX, the one front end over MSL (tokens, a cursor over them, the
//! preprocessor and a target-independent parse), the lowerings of MSL to CUDA C++ and host
//! C++, and the map from a program's lines back to the user's (`user_lines`).

pub(crate) mod cursor;
pub mod limits;
pub mod lower;
pub mod mangle;
pub mod metal_codegen;
pub(crate) mod parse;
pub mod prelude;
pub mod preprocess;
pub mod scan;
pub mod tokens;
pub mod user_lines;
