//! The list of ops: one entry per op of the library, with the shapes the demo and the benchmark
//! run it at. The demo, `kiln bench` (and `bench/peers.py` through `kiln bench --list-json`),
//! the criterion benches and the Python bindings read this list instead of typing their own.
//! The op itself is `kiln::ops::<name>` (its plan `kiln::ops::<name>_call` where it is one kernel
//! call) and its reference `kiln::ops::<module>::reference`.

use crate::dtype::DType;

/// One op of the library.
#[derive(Clone, Copy, Debug)]
pub struct OpEntry {
    /// The function's name: `kiln::ops::<name>`.
    pub name: &'static str,
    /// Its name in Python's `kiln.ops`.
    pub python: &'static str,
    /// What the `dims` of its demo and benchmark shapes are, in order.
    pub dims: &'static str,
    /// The demo's run, if the demo shows it.
    pub demo: Option<DemoShape>,
    /// The benchmark cases, in report order.
    pub bench: &'static [BenchShape],
}

/// The demo's run of an op: small odd sizes, checked against the op's f64 reference.
#[derive(Clone, Copy, Debug)]
pub struct DemoShape {
    /// The demo table's label.
    pub label: &'static str,
    /// The dtype it runs in.
    pub dtype: DType,
    /// The sizes, as the entry's `dims` describes them.
    pub dims: &'static [usize],
}

/// One benchmark case of an op.
#[derive(Clone, Copy, Debug)]
pub struct BenchShape {
    /// The case's name in reports (with its shape and dtype, the case id `case/shape/dtype`).
    pub case: &'static str,
    /// The dtype it runs in.
    pub dtype: DType,
    /// The sizes, as the entry's `dims` describes them.
    pub dims: &'static [usize],
}

const fn demo(label: &'static str, dtype: DType, dims: &'static [usize]) -> Option<DemoShape> {
    Some(DemoShape { label, dtype, dims })
}

const fn case(case: &'static str, dtype: DType, dims: &'static [usize]) -> BenchShape {
    BenchShape { case, dtype, dims }
}

use DType::{BF16, F16, F32};

/// Elements of the elementwise benchmark cases (64 M).
const N: usize = 64 << 20;
/// Rows of the row-wise benchmark cases.
const ROWS: usize = 16384;

const UNARY_DIMS: &str = "elements";
const ROW_DIMS: &str = "rows, D";

/// Every op of the library, in demo order.
pub fn registry() -> &'static [OpEntry] {
    REGISTRY
}

static REGISTRY: &[OpEntry] = &[
    OpEntry {
        name: "exp",
        python: "exp",
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("exp", F32, &[N]), case("exp", F16, &[N]), case("exp", BF16, &[N])],
    },
    OpEntry {
        name: "silu",
        python: "silu",
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("silu", F32, &[N]), case("silu", F16, &[N]), case("silu", BF16, &[N])],
    },
    OpEntry {
        name: "gelu",
        python: "gelu_approx",
        dims: UNARY_DIMS,
        demo: None,
        bench: &[case("gelu_tanh", F32, &[N]), case("gelu_tanh", F16, &[N]), case("gelu_tanh", BF16, &[N])],
    },
    OpEntry {
        name: "gelu_erf",
        python: "gelu",
        dims: "rows, columns",
        demo: demo("ops::gelu_erf", F32, &[7, 333]),
        bench: &[],
    },
    OpEntry {
        name: "rms_norm",
        python: "rms_norm",
        dims: "batch..., D (the last is the row length)",
        demo: demo("ops::rms_norm", BF16, &[3, 5, 1537]),
        bench: &[
            case("rms_norm", BF16, &[ROWS, 1024]),
            case("rms_norm", BF16, &[ROWS, 4096]),
            case("rms_norm", BF16, &[ROWS, 8192]),
            case("rms_norm", F32, &[ROWS, 1024]),
            case("rms_norm", F32, &[ROWS, 4096]),
            case("rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpEntry {
        name: "residual_rms_norm",
        python: "residual_rms_norm",
        dims: ROW_DIMS,
        demo: demo("ops::residual_rms_norm", F16, &[9, 515]),
        bench: &[
            case("residual_rms_norm", BF16, &[ROWS, 1024]),
            case("residual_rms_norm", BF16, &[ROWS, 4096]),
            case("residual_rms_norm", BF16, &[ROWS, 8192]),
            case("residual_rms_norm", F32, &[ROWS, 1024]),
            case("residual_rms_norm", F32, &[ROWS, 4096]),
            case("residual_rms_norm", F32, &[ROWS, 8192]),
        ],
    },
    OpEntry {
        name: "softmax",
        python: "softmax",
        dims: ROW_DIMS,
        demo: demo("ops::softmax", F32, &[3, 5000]),
        bench: &[
            case("softmax", F32, &[ROWS, 1024]),
            case("softmax", F32, &[ROWS, 4096]),
            case("softmax", F32, &[ROWS, 32768]),
            case("softmax", BF16, &[ROWS, 1024]),
            case("softmax", BF16, &[ROWS, 4096]),
            case("softmax", BF16, &[ROWS, 32768]),
        ],
    },
    OpEntry {
        name: "rope",
        python: "rope",
        dims: "batch, heads, L, D",
        demo: demo("ops::rope", F32, &[2, 3, 37, 64]),
        bench: &[case("rope", BF16, &[32, 32, 1024, 128])],
    },
    OpEntry {
        name: "scaled_dot_product_attention",
        python: "scaled_dot_product_attention",
        dims: "B, query heads, key/value heads, Tq, Tk, D",
        demo: demo("ops::attention (causal, GQA)", F32, &[1, 4, 2, 19, 23, 32]),
        bench: &[
            case("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 128]),
            case("attention_causal", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention", BF16, &[4, 32, 32, 4096, 4096, 64]),
            case("attention_decode", BF16, &[32, 32, 32, 1, 8192, 128]),
        ],
    },
    OpEntry {
        name: "scatter_add",
        python: "scatter_add",
        dims: "values, values per index, bins",
        demo: demo("ops::scatter_add", F32, &[1000, 3, 37]),
        bench: &[case("scatter_add", F32, &[N, 1, 32768])],
    },
    OpEntry {
        name: "overlap_add",
        python: "overlap_add",
        dims: "batch, frames, frame length, hop",
        demo: demo("ops::overlap_add", F32, &[2, 13, 100, 37]),
        bench: &[],
    },
    OpEntry {
        name: "grid_sample",
        python: "grid_sample",
        dims: "B, H, W, C, grid H, grid W",
        demo: None,
        bench: &[case("grid_sample", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "grid_sample_vjp",
        python: "grid_sample_vjp",
        dims: "B, H, W, C, grid H, grid W",
        demo: demo("ops::grid_sample_vjp", F32, &[2, 9, 13, 40, 6, 5]),
        bench: &[case("grid_sample_vjp", F32, &[8, 1024, 1024, 64, 256, 256])],
    },
    OpEntry {
        name: "cholesky",
        python: "cholesky",
        dims: "batch, N",
        demo: demo("ops::cholesky", F32, &[3, 45]),
        bench: &[
            case("cholesky", F32, &[65536, 16]),
            case("cholesky", F32, &[8192, 64]),
            case("cholesky", F32, &[64, 1024]),
        ],
    },
    OpEntry {
        name: "qr",
        python: "qr",
        dims: "batch, M, N",
        demo: demo("ops::qr", F32, &[2, 37, 21]),
        bench: &[case("qr", F32, &[8192, 64, 64]), case("qr", F32, &[16, 1024, 1024])],
    },
    OpEntry {
        name: "gdn_chunk_scaled_dot_kkt",
        python: "gdn_chunk_scaled_dot_kkt",
        dims: "B, T, key heads, heads, K",
        demo: demo("ops::gdn_chunk_scaled_dot_kkt", BF16, &[1, 150, 2, 4, 64]),
        bench: &[case("gdn_kkt", BF16, &[8, 4096, 16, 32, 128])],
    },
];

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_unique_and_every_entry_runs_somewhere() {
        let entries = super::registry();
        for (i, e) in entries.iter().enumerate() {
            assert!(entries[..i].iter().all(|o| o.name != e.name), "{} listed twice", e.name);
            assert!(e.demo.is_some() || !e.bench.is_empty(), "{} is neither demoed nor benchmarked", e.name);
        }
    }
}
