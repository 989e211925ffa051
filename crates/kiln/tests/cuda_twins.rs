//! The gallery's grid_sample kernels written directly in CUDA (`CudaKernel`) agree with the
//! references and with the translated Metal kernels; they exist to time translation overhead.

mod common;

use common::{assert_close, device_or_skip, Rng};
use kiln::backend::cuda;
use kiln::{Array, DType, MathMode};
use kiln_tools::gallery::{grid_sample, grid_sample_cuda, grid_sample_vjp};

const DIMS: [usize; 6] = [2, 9, 13, 40, 7, 5]; // B, H, W, C, gH, gW: odd sizes, C not a multiple of 32

fn inputs(rng: &mut Rng) -> (Array, Array, Array) {
    let [b, h, w, c, gh, gw] = DIMS;
    let x = Array::from_f64(DType::F32, &[b, h, w, c], &rng.normals(b * h * w * c, 1.0)).unwrap();
    let g = Array::from_f64(DType::F32, &[b, gh, gw, 2], &rng.uniforms(b * gh * gw * 2, -1.1, 1.1)).unwrap();
    let cot = Array::from_f64(DType::F32, &[b, gh, gw, c], &rng.normals(b * gh * gw * c, 1.0)).unwrap();
    (x, g, cot)
}

#[test]
fn cuda_twins_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let (x, g, cot) = inputs(&mut Rng::new(1));
    let sources = grid_sample_cuda::cuda_sources(&x, &g, &cot).unwrap();
    assert_eq!(sources.len(), 2);
    for (name, body) in sources {
        let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), body);
        let cubin = cuda::compile_source(&name, &source, (9, 0), MathMode::Safe).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{name}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_twins_match_the_reference_and_the_metal_kernels() {
    let Some(device) = device_or_skip("cuda") else { return };
    let (x, g, cot) = inputs(&mut Rng::new(2));
    let (xv, gv, cv) = (x.to_f64_vec().unwrap(), g.to_f64_vec().unwrap(), cot.to_f64_vec().unwrap());
    let (xd, gd, cd) = (x.to_device(device).unwrap(), g.to_device(device).unwrap(), cot.to_device(device).unwrap());

    let want = kiln::ops::grid_sample::reference(&xv, &gv, DIMS);
    let twin = grid_sample_cuda::grid_sample_cuda(&xd, &gd).unwrap();
    assert_close("CUDA forward", &twin, &want, DType::F32);
    let metal = grid_sample::grid_sample(&xd, &gd).unwrap();
    assert_close("Metal forward", &metal, &want, DType::F32);

    let (want_x, want_g) = kiln::ops::grid_sample::reference_vjp(&xv, &gv, &cv, DIMS);
    let (twin_x, twin_g) = grid_sample_cuda::grid_sample_vjp_cuda(&xd, &gd, &cd).unwrap();
    assert_close("CUDA x_grad", &twin_x, &want_x, DType::F32);
    assert_close("CUDA grid_grad", &twin_g, &want_g, DType::F32);
    let (metal_x, metal_g) = grid_sample_vjp::grid_sample_vjp(&xd, &gd, &cd).unwrap();
    assert_close("Metal x_grad", &metal_x, &want_x, DType::F32);
    assert_close("Metal grid_grad", &metal_g, &want_g, DType::F32);
}

#[test]
fn cuda_twins_reject_other_dtypes_with_a_typed_error() {
    let (x, g, _) = inputs(&mut Rng::new(3));
    let x16 = x.astype(DType::F16).unwrap();
    match grid_sample_cuda::grid_sample_cuda(&x16, &g) {
        Err(kiln::Error::UnsupportedDType { op, .. }) => assert_eq!(op, "grid_sample_cuda"),
        other => panic!("expected UnsupportedDType, got {other:?}"),
    }
}
