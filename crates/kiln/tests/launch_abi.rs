//! Constant data a launch carries besides buffers: scalar inputs, the `_shape`/`_strides`/`_ndim`
//! of strided inputs (inline in the CUDA parameter block, whose inline area a body kernel sizes
//! to its constant slots), and constant data larger than the inline area (which goes to device
//! memory). Each case reads every value back through the kernel and compares with the host.

mod common;

use common::{assert_close, on, random_array, Rng};
use kiln::backend::Dispatch;
use kiln::{
    Array, DType, Device, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary, SliceArg,
};

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

/// A strided 6-axis view: a transposed, sliced block of a random array.
fn strided_view(rng: &mut Rng) -> Array {
    let base = random_array(rng, DType::F32, &[2, 1, 6, 1, 2, 2]);
    let every = SliceArg { start: None, stop: None, step: 1 };
    let view = base
        .slice(&[every, every, SliceArg { start: None, stop: None, step: 2 }])
        .unwrap()
        .transpose(&[5, 1, 2, 3, 4, 0])
        .unwrap();
    assert!(!view.is_row_contiguous());
    view
}

// Ten scalars of three kinds (one int beyond 32 bits) and two strided inputs with their shape,
// strides and rank, all in one launch.
fn scalars_and_shapes_travel_with_the_launch(device: Device) {
    let mut rng = Rng::new(71);
    let (a, b) = (strided_view(&mut rng), strided_view(&mut rng));
    let ints: [i64; 5] = [3, -7, 11, 40_000, 5_000_000_000];
    let floats: [f64; 4] = [0.25, -1.5, 2.0, 0.125];
    let src = r#"
        uint i = thread_position_in_grid.x;
        float s = float(i0) + float(i1) + float(i2) + float(i3) + float(i4 - 5000000000) + f0 + f1 + f2 + f3
                  + (flag ? 100.0f : 0.0f);
        out[i] = a[elem_to_loc(i, a_shape, a_strides, a_ndim)] + 2.0f * b[elem_to_loc(i, b_shape, b_strides, b_ndim)];
        sums[i] = s;
    "#;
    let names = ["a", "b", "i0", "i1", "i2", "i3", "i4", "f0", "f1", "f2", "f3", "flag"];
    let k = MetalKernel::new("launch_constants", &names, &["out", "sums"], src).unwrap().ensure_row_contiguous(false);
    let mut inputs = vec![on(device, &a), on(device, &b)];
    inputs.extend(ints.iter().map(|&v| KernelInput::Int(v)));
    inputs.extend(floats.iter().map(|&v| KernelInput::Float(v)));
    inputs.push(KernelInput::Bool(true));
    let n = a.size();
    let spec = LaunchSpec::new([n as u32, 1, 1], [8, 1, 1])
        .output(&[n], DType::F32)
        .output(&[n], DType::F32)
        .init_value(f64::NAN)
        .device(device);
    let out = k.call(&inputs, &spec).unwrap();
    let want: Vec<f64> = values(&a).iter().zip(values(&b)).map(|(x, y)| x + 2.0 * y).collect();
    assert_close("strided inputs", &out[0], &want, DType::F32);
    let s = (3 - 7 + 11 + 40_000) as f64 + 0.25 - 1.5 + 2.0 + 0.125 + 100.0;
    assert_eq!(values(&out[1]), vec![s; n], "scalars");
}

// A view moved to a device keeps its layout: a reversed, stepped slice of a broadcast array
// reaches the kernel with the same shape, strides (negative and zero ones included) and the same
// storage behind them on every backend, as MLX passes views: raw reads below the view's first
// element see the base array's elements there.
fn views_keep_their_strides_on_every_device(device: Device) {
    let mut rng = Rng::new(73);
    let base = random_array(&mut rng, DType::F32, &[7, 1, 9]);
    let stop_at = |stop: isize, step: isize| SliceArg { start: None, stop: Some(stop), step };
    let every = SliceArg { start: None, stop: None, step: 1 };
    let view = base.slice(&[stop_at(0, -2), every, stop_at(9, 3)]).unwrap().broadcast_to(&[3, 4, 3]).unwrap();
    assert!(!view.is_row_contiguous());
    let src = r#"
        uint i = thread_position_in_grid.x;
        out[i] = a[elem_to_loc(int64_t(i), a_shape, a_strides, a_ndim)];
        raw[i] = a[-int(i)];
        if (i < 3) {
            layout[2 * i] = a_shape[i];
            layout[2 * i + 1] = a_strides[i];
        }
    "#;
    let k =
        MetalKernel::new("view_layout", &["a"], &["out", "raw", "layout"], src).unwrap().ensure_row_contiguous(false);
    let n = view.size();
    let spec = LaunchSpec::new([n as u32, 1, 1], [16, 1, 1])
        .output(&[n], DType::F32)
        .output(&[n], DType::F32)
        .output(&[6], DType::I64)
        .init_value(f64::NAN)
        .device(device);
    let out = k.call(&[on(device, &view)], &spec).unwrap();
    assert_close("elements through elem_to_loc", &out[0], &values(&view), DType::F32);
    let flat = values(&base);
    let raw: Vec<f64> = (0..n).map(|i| flat[view.offset() - i]).collect();
    assert_close("raw reads around the view's first element", &out[1], &raw, DType::F32);
    let want: Vec<f64> = (0..3).flat_map(|d| [view.shape()[d] as f64, view.strides()[d] as f64]).collect();
    assert_eq!(values(&out[2]), want, "shape and strides");
}

const TABLE_SOURCE: &str = r#"
#include <metal_stdlib>
using namespace metal;
kernel void read_table(constant float* table [[buffer(0)]],
                       constant uint& n [[buffer(1)]],
                       device float* out [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
  if (i < n) {
    out[i] = 2.0f * table[i] + table[n - 1 - i];
  }
}
"#;

// Constant data of 1600 bytes, beyond the 1024 bytes a parameter block carries inline, beside a
// small value that fits inline.
fn constant_data_beyond_the_inline_area(device: Device) {
    let mut rng = Rng::new(72);
    let table: Vec<f32> = rng.normals(400, 1.0).into_iter().map(|v| v as f32).collect();
    let n = table.len();
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    let library = MetalLibrary::new("launch_abi", TABLE_SOURCE);
    let args = vec![
        LibraryArg::Bytes(bytes),
        LibraryArg::Bytes((n as u32).to_le_bytes().to_vec()),
        LibraryArg::Output { shape: vec![n], dtype: DType::F32, init_value: Some(f64::NAN) },
    ];
    let launch = LibraryLaunch::new("read_table", Dispatch::Threads([n as u32, 1, 1]), [64, 1, 1]);
    let out = library.dispatch(device, &args, &launch).unwrap();
    let want: Vec<f64> = (0..n).map(|i| 2.0 * table[i] as f64 + table[n - 1 - i] as f64).collect();
    assert_close("constant table", &out[0], &want, DType::F32);
}

backend_tests!(
    scalars_and_shapes_travel_with_the_launch,
    views_keep_their_strides_on_every_device,
    constant_data_beyond_the_inline_area
);
