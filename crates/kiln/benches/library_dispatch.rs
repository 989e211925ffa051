//! Host cost of a cached `MetalLibrary` dispatch on the CPU: one small function
//! (`kernel_get_rows_f16`) of ggml's whole Metal file (its two headers pasted in, about 660 KB),
//! dispatched as ggml's backend does, beside the same function in a library of its own text
//! alone. The difference is what a dispatch costs for the size of the library it comes from.
//! Run with `cargo bench -p kiln --bench library_dispatch`; the first dispatch (the compile) is
//! excluded, and the figure is the best of five rounds of mean time per dispatch.

use std::path::Path;
use std::time::Instant;

use kiln::{f16, Array, DType, Device, LibraryArg, LibraryLaunch, MetalLibrary};

/// `ggml_metal_kargs_get_rows` as C lays it out: (is 8-byte, value) fields in order.
fn packed(fields: &[(bool, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(wide, v) in fields {
        let align = if wide { 8 } else { 4 };
        out.resize(out.len().next_multiple_of(align), 0);
        if wide {
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.extend_from_slice(&(v as i32).to_le_bytes());
        }
    }
    out.resize(out.len().next_multiple_of(8), 0);
    out
}

fn measure(name: &str, library: &MetalLibrary) {
    let (rows, ne00, n) = (9u64, 72u64, 5u64);
    let src: Vec<f16> = (0..rows * ne00).map(|i| f16::from_f32((i % 17) as f32 * 0.25)).collect();
    let ids = [3i32, 8, 0, 3, 5];
    let rb = ne00 * 2;
    let (i, w) = (false, true);
    let fields = [(i, ne00), (i, ne00), (w, rb), (w, rb * rows), (w, rb * rows), (i, n)];
    let strides = [(w, 4), (w, 4 * n), (w, 4 * n), (w, 4 * ne00), (w, 4 * ne00 * n), (w, 4 * ne00 * n)];
    let args = [
        LibraryArg::Bytes(packed(&[&fields[..], &strides[..]].concat())),
        LibraryArg::Array(Array::from_slice(&[rows as usize, ne00 as usize], &src).expect("rows")),
        LibraryArg::Array(Array::from_slice(&[n as usize], &ids).expect("ids")),
        LibraryArg::Output { shape: vec![n as usize, ne00 as usize], dtype: DType::F32, init_value: None },
    ];
    let launch = LibraryLaunch::threadgroups("kernel_get_rows_f16", [n as usize, 1, 1], ne00 as usize);
    let out = library.dispatch(Device::Cpu, &args, &launch).expect("first dispatch");
    let got = out[0].to_host().and_then(|h| h.to_vec::<f32>()).expect("read back");
    let want: Vec<f32> = ids.iter().flat_map(|&r| src[r as usize * 72..][..72].iter().map(|v| v.to_f32())).collect();
    assert_eq!(got, want, "{name}: kernel_get_rows_f16 gathered other rows");
    let calls = 1000;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..calls {
            library.dispatch(Device::Cpu, &args, &launch).expect("dispatch");
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    println!("{name:<44} {:>7.1} KB of source  cached dispatch {best:>8.1} us", library.source().len() as f64 / 1e3);
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ggml/ggml-metal.metal");
    let whole = MetalLibrary::from_file(&path).expect("ggml's Metal file");
    measure("ggml-metal.metal (whole file)", &whole);
    let own = MetalLibrary::new("get_rows_f16 alone", GET_ROWS_ALONE);
    measure("the same function in a library of its own", &own);
}

/// `kernel_get_rows_f16`'s work as a self-contained library (the same arguments and layout).
const GET_ROWS_ALONE: &str = r#"#include <metal_stdlib>
using namespace metal;
typedef struct {
    int32_t ne00t; int32_t ne00; uint64_t nb01; uint64_t nb02; uint64_t nb03; int32_t ne10;
    uint64_t nb10; uint64_t nb11; uint64_t nb12; uint64_t nb1; uint64_t nb2; uint64_t nb3;
} args_get_rows;
kernel void kernel_get_rows_f16(constant args_get_rows & args, device const void * src0, device const void * src1,
        device float * dst, uint3 tgpig [[threadgroup_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],
        ushort3 ntg [[threads_per_threadgroup]]) {
    const int32_t iw0 = tgpig.x / args.ne10;
    const int32_t i10 = tgpig.x % args.ne10;
    const int32_t r = ((const device int32_t *) ((const device char *) src1 + i10*args.nb10))[0];
    for (int ind = iw0*ntg.x + tiitg; ind < args.ne00t; ind += ntg.x) {
        dst[i10*args.ne00 + ind] = ((const device half *) ((const device char *) src0 + r*args.nb01))[ind];
    }
}
"#;
