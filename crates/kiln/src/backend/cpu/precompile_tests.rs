//! `MetalKernel::precompile` on the CPU: the call that follows finds its library in memory.

use super::compile::libraries_opened_on_this_thread;
use crate::check::Rng;
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

#[test]
fn a_precompiled_kernel_is_called_without_opening_a_library() {
    let n = 256usize;
    let mut rng = Rng::new(0x9c0);
    let x: Vec<f32> = (0..n).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let input = Array::from_vec(&[n], x.clone()).unwrap();
    let src = "uint i = thread_position_in_grid.x;\nout[i] = simd_sum(inp[i]);\n";
    let k = MetalKernel::new("cpu_precompile_simd_sum", &["inp"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [64, 1, 1]).output(&[n], DType::F32).device(Device::Cpu);

    let before = libraries_opened_on_this_thread();
    k.precompile(&[(&input).into()], &spec).unwrap();
    assert_eq!(libraries_opened_on_this_thread(), before + 1, "precompile loads the library");
    let out = k.call(&[(&input).into()], &spec).unwrap();
    assert_eq!(libraries_opened_on_this_thread(), before + 1, "the call finds it ready");

    let got = out[0].to_f64_vec().unwrap();
    for (i, &g) in got.iter().enumerate() {
        let lanes = &x[i / 32 * 32..i / 32 * 32 + 32];
        let want: f64 = lanes.iter().map(|&v| v as f64).sum();
        assert!((g - want).abs() <= 1e-4 * (1.0 + want.abs()), "out[{i}] = {g}, want {want}");
    }
}

#[test]
fn precompile_checks_the_call_like_call_does() {
    let k = MetalKernel::new("cpu_precompile_counts", &["inp"], &["out"], "out[0] = inp[0];").unwrap();
    let a = Array::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let spec = LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(Device::Cpu);
    let err = k.precompile(&[(&a).into(), (&a).into()], &spec).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let huge = LaunchSpec::new([1, 1, 1], [2048, 1, 1]).output(&[1], DType::F32).device(Device::Cpu);
    assert!(k.precompile(&[(&a).into()], &huge).is_err());
}
