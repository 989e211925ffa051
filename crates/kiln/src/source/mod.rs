//! Pure text: what MLX detects in a kernel body, name mangling, Metal source generation
//! byte-identical to MLX, and the lowerings of MSL to CUDA C++ and host C++.

pub mod cpu;
pub mod cuda;
pub mod limits;
pub mod lower;
pub mod mangle;
pub mod metal_codegen;
pub mod scan;
