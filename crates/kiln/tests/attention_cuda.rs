//! The CUDA tensor-core attention prefill against the f64 reference on fresh random inputs,
//! outputs poisoned (NaN) before each run: bf16 and f16, D = 64 and 128, no mask and causal,
//! Tq = Tk and Tq != Tk (the causal diagonal shifted by Tk - Tq, rows that see no key giving
//! zeros), lengths that are not whole tiles, grouped-query heads and non-contiguous inputs.
//! The GPU tests are ignored without a GPU (`KILN_REQUIRE_BACKEND=cuda` turns a missing GPU into
//! a failure); the rule that picks the path is checked on the CPU.

mod common;

use common::{rel_l2, tolerance, Rng};
use kiln::ops::attention::{self, Mask, Path, Route};
use kiln::{Array, DType, Device};

/// A random array of `dtype` on `device` plus the values it holds after rounding.
fn input(rng: &mut Rng, device: Device, dtype: DType, shape: &[usize]) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let host = Array::from_f64(dtype, shape, &rng.normals(n, 1.0)).unwrap();
    let values = host.to_f64_vec().unwrap();
    (host.to_device(device).unwrap(), values)
}

fn mask_of(causal: bool) -> Mask<'static> {
    if causal {
        Mask::Causal
    } else {
        Mask::None
    }
}

/// Runs the op on (q, k, v) and compares with the reference on their values.
#[allow(clippy::too_many_arguments)]
fn check(
    what: &str,
    q: &Array,
    k: &Array,
    v: &Array,
    values: [&[f64]; 3],
    dims: [usize; 6],
    causal: bool,
    route: Route,
) {
    let dtype = q.dtype();
    let d = dims[5];
    let scale = (1.0 / (d as f64).sqrt()) as f32;
    let mask = mask_of(causal);
    assert_eq!(attention::route(q, k, v, &mask).unwrap(), route, "{what}: route");
    let out = attention::scaled_dot_product_attention_with(q, k, v, scale, mask, Some(f64::NAN)).unwrap();
    assert_eq!((out.shape(), out.dtype(), out.device()), (q.shape(), dtype, q.device()), "{what}");
    let got = out.to_host().unwrap().to_f64_vec().unwrap();
    let want = attention::reference(values[0], values[1], values[2], dims, scale as f64, causal, None);
    assert!(want.iter().any(|&x| x != 0.0), "{what}: the reference is all zeros");
    let err = rel_l2(&got, &want);
    eprintln!("{what}: {err:e}");
    assert!(err <= tolerance(dtype), "{what}: relative L2 error {err:e} exceeds {:e}", tolerance(dtype));
}

fn check_case(device: Device, dtype: DType, dims: [usize; 6], causal: bool, seed: u64) {
    let [b, hq, hkv, tq, tk, d] = dims;
    let mut rng = Rng::new(seed);
    let (q, qv) = input(&mut rng, device, dtype, &[b, hq, tq, d]);
    let (k, kv) = input(&mut rng, device, dtype, &[b, hkv, tk, d]);
    let (v, vv) = input(&mut rng, device, dtype, &[b, hkv, tk, d]);
    let what = format!("{dims:?} {dtype} causal={causal}");
    check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, causal, Route::CudaPrefill);
}

fn cuda_or_skip() -> Option<Device> {
    common::device_or_skip("cuda")
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_matches_reference_on_partial_tiles_and_grouped_heads() {
    let Some(device) = cuda_or_skip() else { return };
    // [B, Hq, Hkv, Tq, Tk, D]
    let shapes: [[usize; 4]; 7] = [
        // Tq = Tk, shorter than a tile.
        [1, 1, 17, 17],
        // Whole tiles.
        [1, 2, 128, 128],
        // Grouped heads (Hq = 4 Hkv), more keys than queries, partial tiles on both sides.
        [2, 4, 100, 257],
        // More queries than keys: causal rows before the shifted diagonal see no key.
        [1, 4, 257, 100],
        // One key.
        [1, 1, 5, 1],
        // Several query blocks and key tiles.
        [1, 1, 300, 300],
        [2, 1, 65, 63],
    ];
    let mut seed = 900;
    for dtype in [DType::BF16, DType::F16] {
        for d in [64, 128] {
            for causal in [false, true] {
                for [b, group, tq, tk] in shapes {
                    let hkv = if group == 4 { 2 } else { 1 };
                    check_case(device, dtype, [b, hkv * group, hkv, tq, tk, d], causal, seed);
                    seed += 1;
                }
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_reads_non_contiguous_and_offset_inputs() {
    let Some(device) = cuda_or_skip() else { return };
    let (b, h, t, d) = (2, 3, 70, 64);
    let mut rng = Rng::new(950);
    for dtype in [DType::BF16, DType::F16] {
        // q, k and v stored (B, T, H, D) and viewed as (B, H, T, D): copied before the launch.
        let mut views = Vec::new();
        let mut values = Vec::new();
        for _ in 0..3 {
            let (a, _) = input(&mut rng, device, dtype, &[b, t, h, d]);
            let view = a.transpose(&[0, 2, 1, 3]).unwrap();
            values.push(view.to_host().unwrap().to_f64_vec().unwrap());
            views.push(view);
        }
        let dims = [b, h, h, t, t, d];
        for causal in [false, true] {
            let what = format!("transposed {dtype} causal={causal}");
            let vals = [&values[0][..], &values[1][..], &values[2][..]];
            check(&what, &views[0], &views[1], &views[2], vals, dims, causal, Route::CudaPrefill);
        }
        // A row-contiguous slice starting one element in is not 16-byte aligned: the Metal path.
        let (flat, fv) = input(&mut rng, device, dtype, &[1 + b * h * t * d]);
        let tail = flat
            .slice(&[kiln::SliceArg { start: Some(1), stop: None, step: 1 }])
            .unwrap()
            .reshape(&[b, h, t, d])
            .unwrap();
        let vals = [&fv[1..], &fv[1..], &fv[1..]];
        let route = Route::Metal(attention::path(b * h, t, t, d, dtype));
        check(&format!("offset {dtype}"), &tail, &tail, &tail, vals, dims, true, route);
    }
}

#[test]
fn the_rule_keeps_the_metal_path_off_cuda_and_outside_the_tensor_core_set() {
    let cuda = Device::Cuda(0);
    let bf16 = DType::BF16;
    let dims = |tq: usize, d: usize| [4, 32, 8, tq, 4096, d];
    let metal = |tq: usize, d: usize, dtype: DType| Route::Metal(attention::path(4 * 32, tq, 4096, d, dtype));
    // The tensor-core set: CUDA, bf16/f16, D in {64, 128}, Tq > 4, no mask or causal, aligned.
    for dtype in [DType::BF16, DType::F16] {
        for d in [64, 128] {
            for mask in [Mask::None, Mask::Causal] {
                assert_eq!(attention::route_rule(cuda, dtype, dims(4096, d), &mask, true), Route::CudaPrefill);
            }
        }
    }
    // Everything else keeps the portable path.
    assert_eq!(attention::route_rule(Device::Cpu, bf16, dims(4096, 128), &Mask::Causal, true), metal(4096, 128, bf16));
    assert_eq!(
        attention::route_rule(cuda, DType::F32, dims(4096, 128), &Mask::Causal, true),
        metal(4096, 128, DType::F32)
    );
    let additive = Array::full(bf16, &[4096, 4096], 0.0);
    assert_eq!(
        attention::route_rule(cuda, bf16, dims(4096, 128), &Mask::Additive(&additive), true),
        metal(4096, 128, bf16)
    );
    assert_eq!(attention::route_rule(cuda, bf16, dims(4096, 96), &Mask::None, true), metal(4096, 96, bf16));
    assert_eq!(attention::route_rule(cuda, bf16, dims(4096, 128), &Mask::None, false), metal(4096, 128, bf16));
    // Decode (Tq <= 4) is unchanged.
    assert!(matches!(
        attention::route_rule(cuda, bf16, dims(4, 128), &Mask::None, true),
        Route::Metal(Path::Decode { .. })
    ));
    // On the CPU, `route` on real arrays gives the Metal path too.
    let mut rng = Rng::new(960);
    let (q, _) = input(&mut rng, Device::Cpu, bf16, &[1, 2, 20, 64]);
    let (kv, _) = input(&mut rng, Device::Cpu, bf16, &[1, 1, 20, 64]);
    assert_eq!(attention::route(&q, &kv, &kv, &Mask::Causal).unwrap(), Route::Metal(Path::PrefillTiled));
}
