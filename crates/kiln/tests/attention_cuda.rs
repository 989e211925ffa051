//! The CUDA tensor-core attention prefills against the f64 reference on fresh random inputs,
//! outputs poisoned (NaN) before each run: the route the rule picks (`wgmma` on compute
//! capability 9.0 with D = 64 or 128, asserted taken there; `mma.sync` otherwise) and, where that is
//! `wgmma`, the `mma.sync` one forced on the same inputs; bf16 and f16, D = 64 and 128, no mask and causal,
//! Tq = Tk and Tq != Tk (the causal diagonal shifted by Tk - Tq, rows that see no key giving
//! zeros), lengths that are not whole tiles, grouped-query heads, non-contiguous inputs, and
//! more query tiles than multiprocessors (several tiles per block of the persistent kernel).
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

/// The compute capability of a CUDA device.
fn capability(device: Device) -> Option<(u32, u32)> {
    match device {
        Device::Cuda(i) => Some(kiln::backend::cuda::cuda_backend(i).unwrap().arch()),
        _ => None,
    }
}

/// The tensor-core route the rule must pick on `device` for head dimension `d`: `wgmma` on
/// compute capability 9.0 where it takes D, `mma.sync` elsewhere.
fn tensor_core_route(device: Device, d: usize) -> Route {
    if capability(device) == Some(attention::prefill_wgmma::CAPABILITY)
        && attention::prefill_wgmma::HEAD_DIMS.contains(&d)
    {
        Route::CudaPrefillWgmma
    } else {
        Route::CudaPrefill
    }
}

/// Runs the op on (q, k, v), asserting that the rule picks `route`, and compares with the
/// reference on their values; on the `wgmma` route the `mma.sync` one is checked too.
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
    scale: f32,
) {
    let dtype = q.dtype();
    let mask = mask_of(causal);
    assert_eq!(attention::route(q, k, v, &mask).unwrap(), route, "{what}: route");
    let want = attention::reference(values[0], values[1], values[2], dims, scale as f64, causal, None);
    assert!(want.iter().any(|&x| x != 0.0), "{what}: the reference is all zeros");
    let mut runs = vec![(route, false)];
    if route == Route::CudaPrefillWgmma {
        runs.push((Route::CudaPrefill, true));
    }
    for (r, forced) in runs {
        let out = if forced {
            attention::scaled_dot_product_attention_by(r, q, k, v, scale, mask, Some(f64::NAN)).unwrap()
        } else {
            attention::scaled_dot_product_attention_with(q, k, v, scale, mask, Some(f64::NAN)).unwrap()
        };
        assert_eq!((out.shape(), out.dtype(), out.device()), (q.shape(), dtype, q.device()), "{what}");
        let got = out.to_host().unwrap().to_f64_vec().unwrap();
        let err = rel_l2(&got, &want);
        eprintln!("{what} {r:?}: {err:e}");
        assert!(err <= tolerance(dtype), "{what} {r:?}: relative L2 error {err:e} exceeds {:e}", tolerance(dtype));
    }
}

fn check_case(device: Device, dtype: DType, dims: [usize; 6], causal: bool, seed: u64) {
    check_scaled(device, dtype, dims, causal, seed, (1.0 / (dims[5] as f64).sqrt()) as f32);
}

fn check_scaled(device: Device, dtype: DType, dims: [usize; 6], causal: bool, seed: u64, scale: f32) {
    let [b, hq, hkv, tq, tk, d] = dims;
    let mut rng = Rng::new(seed);
    let (q, qv) = input(&mut rng, device, dtype, &[b, hq, tq, d]);
    let (k, kv) = input(&mut rng, device, dtype, &[b, hkv, tk, d]);
    let (v, vv) = input(&mut rng, device, dtype, &[b, hkv, tk, d]);
    let what = format!("{dims:?} {dtype} causal={causal} scale={scale}");
    check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, causal, tensor_core_route(device, d), scale);
}

fn cuda_or_skip() -> Option<Device> {
    common::device_or_skip("cuda")
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_matches_reference_on_partial_tiles_and_grouped_heads() {
    let Some(device) = cuda_or_skip() else { return };
    // [B, Hq, Hkv, Tq, Tk, D]
    let shapes: [[usize; 4]; 8] = [
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
        // Several 128-query blocks and 128-key tiles, grouped heads.
        [1, 4, 600, 600],
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

/// A few small cases that still take every stage of the prefill (partial query and key tiles,
/// several key tiles through the pipelined stages, grouped heads, both masks, both head sizes):
/// sized for compute-sanitizer's racecheck and synccheck, under which the cases above take
/// minutes each (`scripts/gpu-tests.sh` runs the sanitizers on this test alone).
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_sanitizer_sized() {
    let Some(device) = cuda_or_skip() else { return };
    let mut seed = 960;
    for d in [64, 128] {
        for causal in [false, true] {
            // [B, Hq, Hkv, Tq, Tk, D]: Hq = 2 Hkv, 3 key tiles (the last partial), 2 query blocks.
            check_case(device, DType::BF16, [1, 2, 1, 150, 300, d], causal, seed);
            seed += 1;
        }
    }
    check_case(device, DType::F16, [1, 1, 1, 33, 129, 128], true, seed);
}

/// More query tiles than the GPU has multiprocessors: the persistent `wgmma` prefill runs
/// several tiles per block (query rows, key stages and turns carried from tile to tile; under
/// the shifted causal diagonal, tiles whose first consumers see no key).
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_runs_several_tiles_per_block() {
    let Some(device) = cuda_or_skip() else { return };
    let Device::Cuda(ordinal) = device else { unreachable!("a CUDA device") };
    let multiprocessors = kiln::backend::cuda::cuda_backend(ordinal).unwrap().multiprocessors();
    let mut seed = 990;
    for d in [64, 128] {
        for causal in [false, true] {
            for [b, hq, hkv, tq, tk] in [[8usize, 16, 4, 300, 300], [8, 16, 4, 333, 120]] {
                // Tiles hold at most 192 queries.
                assert!(b * hq * tq.div_ceil(192) > multiprocessors, "{multiprocessors} multiprocessors");
                check_case(device, DType::BF16, [b, hq, hkv, tq, tk, d], causal, seed);
                seed += 1;
            }
        }
    }
    // f16 once, at D = 128 with the causal mask.
    check_case(device, DType::F16, [8, 16, 4, 300, 300, 128], true, seed);
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_takes_negative_zero_and_large_scales() {
    let Some(device) = cuda_or_skip() else { return };
    // A negative scale makes the row extreme a minimum; a zero scale averages the visible values
    // (hidden keys must still give nothing); a large one sharpens the softmax.
    let mut seed = 950;
    for scale in [-0.3f32, 0.0, 0.5] {
        for d in [64, 128] {
            for causal in [false, true] {
                for [b, hq, hkv, tq, tk] in [[1, 2, 1, 257, 100], [1, 1, 1, 300, 300]] {
                    check_scaled(device, DType::BF16, [b, hq, hkv, tq, tk, d], causal, seed, scale);
                    seed += 1;
                }
            }
        }
    }
}

/// Keys of `dtype`: normal values times `factor(key, Tk)`. Returns the device array and the
/// values it holds.
fn scaled_keys(
    rng: &mut Rng,
    device: Device,
    dtype: DType,
    shape: [usize; 4],
    factor: impl Fn(usize, usize) -> f64,
) -> (Array, Vec<f64>) {
    let [_, _, tk, d] = shape;
    let mut values = rng.normals(shape.iter().product(), 1.0);
    for (i, x) in values.iter_mut().enumerate() {
        *x *= factor((i / d) % tk, tk);
    }
    let k = Array::from_f64(dtype, &shape, &values).unwrap();
    let values = k.to_f64_vec().unwrap();
    (k.to_device(device).unwrap(), values)
}

/// Keys whose size grows along the sequence (x (1 + 3 key / Tk)): each row's largest score
/// moves from key tile to key tile.
fn growing_keys(rng: &mut Rng, device: Device, shape: [usize; 4]) -> (Array, Vec<f64>) {
    scaled_keys(rng, device, DType::BF16, shape, |key, tk| 1.0 + 3.0 * key as f64 / tk as f64)
}

/// Keys 0.02 times normal values before key `quiet` and 4 times after it: each row's largest
/// score jumps there.
fn jumping_keys(rng: &mut Rng, device: Device, dtype: DType, shape: [usize; 4], quiet: usize) -> (Array, Vec<f64>) {
    scaled_keys(rng, device, dtype, shape, |key, _| if key < quiet { 0.02 } else { 4.0 })
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_follows_row_extremes_that_grow_along_the_keys() {
    let Some(device) = cuda_or_skip() else { return };
    // The largest score of a row moves by more than the kernels' rescaling threshold in some
    // rows and tiles and less in others; with a negative scale the smallest score moves instead.
    let mut seed = 1200;
    for scale in [0.5f32, -0.5, 0.08] {
        for d in [64, 128] {
            for causal in [false, true] {
                let dims = [2, 4, 2, 300, 700, d];
                let [b, hq, hkv, tq, tk, _] = dims;
                let mut rng = Rng::new(seed);
                seed += 1;
                let (q, qv) = input(&mut rng, device, DType::BF16, &[b, hq, tq, d]);
                let (k, kv) = growing_keys(&mut rng, device, [b, hkv, tk, d]);
                let (v, vv) = input(&mut rng, device, DType::BF16, &[b, hkv, tk, d]);
                let what = format!("{dims:?} growing keys causal={causal} scale={scale}");
                check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, causal, tensor_core_route(device, d), scale);
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_follows_scores_that_jump_far_past_the_first_key_tile() {
    let Some(device) = cuda_or_skip() else { return };
    // After a first key tile of small scores the rest are large: with scale 1 a row's largest
    // exponent (base 2) jumps by about 200, past the f32 range, so exponents formed against the
    // first tile's extremes overflow; with scale 0.1 it jumps by about 15 to 20, past the
    // kernels' rescaling threshold but inside the range. A negative scale moves the smallest
    // score instead; the jump at key 300 falls inside a key tile.
    let mut seed = 1500;
    for (scale, quiet) in [(1.0f32, 128), (-1.0, 128), (0.1, 128), (1.0, 300)] {
        for dtype in [DType::BF16, DType::F16] {
            for d in [64, 128] {
                for causal in [false, true] {
                    let dims = [1, 2, 1, 300, 700, d];
                    let [b, hq, hkv, tq, tk, _] = dims;
                    let mut rng = Rng::new(seed);
                    seed += 1;
                    let (q, qv) = input(&mut rng, device, dtype, &[b, hq, tq, d]);
                    let (k, kv) = jumping_keys(&mut rng, device, dtype, [b, hkv, tk, d], quiet);
                    let (v, vv) = input(&mut rng, device, dtype, &[b, hkv, tk, d]);
                    let what = format!("{dims:?} {dtype} keys jumping at {quiet} causal={causal} scale={scale}");
                    check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, causal, tensor_core_route(device, d), scale);
                }
            }
        }
    }
}

/// Under the causal mask the `wgmma` prefill takes the tiles of its last heads longest first
/// across those heads (asserted on the device to be some heads but not all): the order maps
/// every tile once, with the diagonal shifted (Tq != Tk) and grouped heads.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_orders_the_last_heads_longest_first_under_the_causal_mask() {
    let Some(device) = cuda_or_skip() else { return };
    let mut seed = 1400;
    let mut ordered = 0;
    for d in [64, 128] {
        let wgmma = tensor_core_route(device, d) == Route::CudaPrefillWgmma;
        for (tq, tk) in [(300, 300), (280, 330)] {
            // As many heads as the longest-first ones, plus three taken in head order before them.
            let last = attention::prefill_wgmma::schedule(device, 1 << 20, tq, tk, d, true).unwrap().last_heads;
            let (hq, hkv) = (2 * (last.max(1) + 3).div_ceil(2), 2);
            let dims = [1, hq, hkv, tq, tk, d];
            let mut rng = Rng::new(seed);
            seed += 1;
            let (q, qv) = input(&mut rng, device, DType::BF16, &[1, hq, tq, d]);
            let schedule = attention::prefill_wgmma::schedule(device, hq, tq, tk, d, true).unwrap();
            if wgmma {
                assert!(
                    schedule.last_heads > 0 && schedule.last_heads < hq && schedule.split == 0,
                    "{dims:?}: {schedule:?}"
                );
                ordered += 1;
            }
            let (k, kv) = input(&mut rng, device, DType::BF16, &[1, hkv, tk, d]);
            let (v, vv) = input(&mut rng, device, DType::BF16, &[1, hkv, tk, d]);
            let what = format!("{dims:?} {schedule:?} causal");
            let scale = (1.0 / (d as f64).sqrt()) as f32;
            check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, true, tensor_core_route(device, d), scale);
        }
    }
    if capability(device) == Some(attention::prefill_wgmma::CAPABILITY) {
        assert_eq!(ordered, 4);
    }
}

/// Without a mask the `wgmma` prefill splits the tiles of its last round over their keys, the
/// last part to finish combining the parts (asserted split on the device): one tile split
/// eight ways (its second consumers past the queries at D = 64, a partial last key tile),
/// grouped heads, whole tiles before split ones, negative and zero scales, and keys that move
/// each row's extreme from part to part, so the parts' extremes differ.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_splits_the_last_round_of_tiles_over_the_keys() {
    let Some(device) = cuda_or_skip() else { return };
    let mut seed = 1300;
    let mut splits = 0;
    for d in [64, 128] {
        // Elsewhere the same inputs go through the `mma.sync` prefill, which splits nothing.
        let wgmma = tensor_core_route(device, d) == Route::CudaPrefillWgmma;
        let Device::Cuda(ordinal) = device else { unreachable!("a CUDA device") };
        let multiprocessors = kiln::backend::cuda::cuda_backend(ordinal).unwrap().multiprocessors();
        // [B, Hq, Hkv, Tq, Tk]; the last: one more tile than the blocks hold in a round.
        let heads = multiprocessors + 2;
        for [b, hq, hkv, tq, tk] in
            [[1, 1, 1, 200, 4100], [1, 4, 2, 300, 1030], [3, 2, 2, 129, 2048], [1, heads, 1, 64, 1024]]
        {
            let cases = [
                (0.1f32, "normal"),
                (-0.5, "normal"),
                (0.0, "normal"),
                (0.5, "growing"),
                (-0.5, "growing"),
                (1.0, "jumping"),
            ];
            for (scale, keys) in cases {
                let dims = [b, hq, hkv, tq, tk, d];
                let mut rng = Rng::new(seed);
                seed += 1;
                let (q, qv) = input(&mut rng, device, DType::BF16, &[b, hq, tq, d]);
                let schedule = attention::prefill_wgmma::schedule(device, b * hq, tq, tk, d, false).unwrap();
                if wgmma {
                    assert!(schedule.parts >= 2 && schedule.split > 0, "{dims:?}: {schedule:?}");
                    splits += 1;
                }
                let (k, kv) = match keys {
                    "growing" => growing_keys(&mut rng, device, [b, hkv, tk, d]),
                    "jumping" => jumping_keys(&mut rng, device, DType::BF16, [b, hkv, tk, d], 128),
                    _ => input(&mut rng, device, DType::BF16, &[b, hkv, tk, d]),
                };
                let (v, vv) = input(&mut rng, device, DType::BF16, &[b, hkv, tk, d]);
                let what = format!("{dims:?} {schedule:?} {keys} keys scale={scale}");
                check(&what, &q, &k, &v, [&qv, &kv, &vv], dims, false, tensor_core_route(device, d), scale);
            }
        }
        // f16 once.
        check_case(device, DType::F16, [1, 1, 1, 200, 4100, d], false, seed);
        seed += 1;
    }
    if capability(device) == Some(attention::prefill_wgmma::CAPABILITY) {
        assert_eq!(splits, 48);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_takes_the_wgmma_path_exactly_on_compute_capability_9_0() {
    let Some(device) = cuda_or_skip() else { return };
    let cap = capability(device).unwrap();
    let mut rng = Rng::new(970);
    let (q, _) = input(&mut rng, device, DType::BF16, &[1, 2, 64, 128]);
    let want = if cap == (9, 0) { Route::CudaPrefillWgmma } else { Route::CudaPrefill };
    assert_eq!(attention::route(&q, &q, &q, &Mask::Causal).unwrap(), want, "compute capability {cap:?}");
    let (q64, _) = input(&mut rng, device, DType::BF16, &[1, 2, 64, 64]);
    assert_eq!(attention::route(&q64, &q64, &q64, &Mask::None).unwrap(), want, "D = 64, {cap:?}");
    // A kernel built for another capability's architecture-specific target is refused with an
    // error, not launched.
    let other = if cap == (8, 0) { (9, 0) } else { (8, 0) };
    let k = kiln::CudaKernel::new("arch_guard", &["a"], &["out"], "out[0] = a[0];").unwrap().arch_specific(other);
    let a = Array::from_vec(&[1], vec![1.0f32]).unwrap().to_device(device).unwrap();
    let spec = kiln::LaunchSpec::new([1, 1, 1], [1, 1, 1]).output(&[1], DType::F32).device(device);
    let err = k.call(&[a.into()], &spec).unwrap_err().to_string();
    assert!(err.contains("compute capability"), "{err}");
    // Off capability 9.0 the forced wgmma route fails the same way.
    if cap != (9, 0) {
        let r = attention::scaled_dot_product_attention_by(Route::CudaPrefillWgmma, &q, &q, &q, 0.1, Mask::None, None);
        assert!(r.is_err());
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_prefill_reads_non_contiguous_and_offset_inputs() {
    let Some(device) = cuda_or_skip() else { return };
    let mut rng = Rng::new(950);
    for (dtype, d) in [(DType::BF16, 64), (DType::F16, 64), (DType::BF16, 128), (DType::F16, 128)] {
        let (b, h, t) = (2, 3, 70);
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
            let what = format!("transposed {dtype} D={d} causal={causal}");
            let vals = [&values[0][..], &values[1][..], &values[2][..]];
            let route = tensor_core_route(device, d);
            check(&what, &views[0], &views[1], &views[2], vals, dims, causal, route, 1.0 / (d as f32).sqrt());
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
        check(&format!("offset {dtype} D={d}"), &tail, &tail, &tail, vals, dims, true, route, 1.0 / (d as f32).sqrt());
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
                // wgmma exactly on compute capability 9.0; mma.sync elsewhere.
                assert_eq!(
                    attention::route_rule(cuda, Some((9, 0)), dtype, dims(4096, d), &mask, true),
                    Route::CudaPrefillWgmma
                );
                for cap in [None, Some((8, 0)), Some((8, 9)), Some((10, 0)), Some((12, 0))] {
                    let r = attention::route_rule(cuda, cap, dtype, dims(4096, d), &mask, true);
                    assert_eq!(r, Route::CudaPrefill, "{cap:?}");
                }
            }
        }
    }
    // Everything else keeps the portable path.
    assert_eq!(
        attention::route_rule(Device::Cpu, None, bf16, dims(4096, 128), &Mask::Causal, true),
        metal(4096, 128, bf16)
    );
    assert_eq!(
        attention::route_rule(cuda, Some((9, 0)), DType::F32, dims(4096, 128), &Mask::Causal, true),
        metal(4096, 128, DType::F32)
    );
    let additive = Array::full(bf16, &[4096, 4096], 0.0).unwrap();
    assert_eq!(
        attention::route_rule(cuda, Some((9, 0)), bf16, dims(4096, 128), &Mask::Additive(&additive), true),
        metal(4096, 128, bf16)
    );
    assert_eq!(
        attention::route_rule(cuda, Some((9, 0)), bf16, dims(4096, 96), &Mask::None, true),
        metal(4096, 96, bf16)
    );
    assert_eq!(
        attention::route_rule(cuda, Some((9, 0)), bf16, dims(4096, 128), &Mask::None, false),
        metal(4096, 128, bf16)
    );
    // Decode (Tq <= 4) is unchanged.
    assert!(matches!(
        attention::route_rule(cuda, Some((9, 0)), bf16, dims(4, 128), &Mask::None, true),
        Route::Metal(Path::Decode { .. })
    ));
    // On the CPU, `route` on real arrays gives the Metal path too.
    let mut rng = Rng::new(960);
    let (q, _) = input(&mut rng, Device::Cpu, bf16, &[1, 2, 20, 64]);
    let (kv, _) = input(&mut rng, Device::Cpu, bf16, &[1, 1, 20, 64]);
    assert_eq!(attention::route(&q, &kv, &kv, &Mask::Causal).unwrap(), Route::Metal(Path::PrefillTiled));
}
