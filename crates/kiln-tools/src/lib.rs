//! What the `kiln` command line runs on top of the kernel library: the demo gallery (real-world
//! kernels checked against their references), the benchmark harness behind `kiln bench`, the
//! table of the sizes and inputs they run the library's ops at, and the TOML kernel specs
//! `kiln run` and the tests load. None of it is needed to call a kernel.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod bench;
pub mod gallery;
pub mod op_runs;
pub mod op_table;
pub mod spec;
