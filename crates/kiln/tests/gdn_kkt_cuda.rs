//! The CUDA tensor-core path of `gdn_chunk_scaled_dot_kkt` against the f64 reference: bf16 and
//! f16 keys, several head dims and groupings, partial last chunks, realistic cumulative gates,
//! outputs poisoned with NaN. The `cuda` tests need a GPU (ignored otherwise; required with
//! `KILN_REQUIRE_BACKEND=cuda`); the rule tests and the CPU runs of the small cases run anywhere,
//! and the CUDA source is compiled for sm_90 by NVRTC without a GPU (skipped with a message when
//! NVRTC cannot be loaded, a failure under `KILN_REQUIRE_BACKEND=nvrtc` as in CI).

mod common;

use common::{device_or_skip, rel_l2, Rng};
use kiln::backend::cuda as cuda_backend;
use kiln::ops::gdn_kkt::{self, cuda, Path};
use kiln::{Array, DType, Device, MathMode, SliceArg};

/// How the cumulative log gates are formed.
#[derive(Clone, Copy)]
enum Gates {
    /// Summed within each 64-token chunk (as FLA's chunk-local cumsum).
    ChunkLocal,
    /// Summed over the whole sequence: large magnitudes, whose f32 differences round.
    WholeSequence,
}

/// (B, T, Hg, H, K), key dtype, gates.
type Case = ([usize; 5], DType, Gates);

/// Small cases, also run on the CPU (portable path).
const SMALL: [Case; 6] = [
    ([1, 100, 1, 1, 64], DType::BF16, Gates::ChunkLocal),
    ([1, 100, 2, 2, 128], DType::F16, Gates::WholeSequence),
    ([2, 130, 2, 4, 128], DType::BF16, Gates::WholeSequence),
    ([1, 130, 2, 8, 96], DType::BF16, Gates::ChunkLocal),
    ([3, 64, 1, 1, 16], DType::F16, Gates::ChunkLocal),
    ([1, 37, 1, 3, 256], DType::BF16, Gates::WholeSequence),
];

/// Long sequences with a partial last chunk (GPU only: the CPU emulator is slow at this size).
const LONG: [Case; 3] = [
    ([2, 4096 + 37, 2, 4, 128], DType::BF16, Gates::ChunkLocal),
    ([1, 4096 + 37, 2, 2, 64], DType::F16, Gates::WholeSequence),
    ([1, 1000, 4, 8, 128], DType::BF16, Gates::WholeSequence),
];

struct Inputs {
    k: Array,
    beta: Array,
    g: Array,
    kv: Vec<f64>,
    bv: Vec<f64>,
    gv: Vec<f64>,
}

/// Random keys, betas in (0.05, 1) and gates `g_t = sum -a_h * softplus(x)`, with a per-head
/// decay `a_h` up to 1.5, so a chunk's gates reach about -50 for the fastest heads.
fn inputs(seed: u64, dims: [usize; 5], dtype: DType, gates: Gates) -> Inputs {
    let [b, t, hg, h, kd] = dims;
    let mut rng = Rng::new(seed);
    let k = Array::from_f64(dtype, &[b, t, hg, kd], &rng.normals(b * t * hg * kd, 0.7)).unwrap();
    let beta = Array::from_f64(DType::F32, &[b, t, h], &rng.uniforms(b * t * h, 0.05, 1.0)).unwrap();
    let decay: Vec<f64> = rng.uniforms(h, 0.05, 1.5);
    let mut gv = vec![0.0; b * t * h];
    for bi in 0..b {
        for hi in 0..h {
            let mut acc = 0.0;
            for ti in 0..t {
                if matches!(gates, Gates::ChunkLocal) && ti % 64 == 0 {
                    acc = 0.0;
                }
                let x = rng.uniform(-3.0, 3.0);
                acc -= decay[hi] * (1.0 + f64::exp(x)).ln();
                gv[(bi * t + ti) * h + hi] = acc;
            }
        }
    }
    let g = Array::from_f64(DType::F32, &[b, t, h], &gv).unwrap();
    let (kv, bv, gv) = (k.to_f64_vec().unwrap(), beta.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
    Inputs { k, beta, g, kv, bv, gv }
}

/// Runs the op on `device` with a NaN-poisoned output, checks the path taken and the error.
fn check(device: Device, seed: u64, case: Case, want_path: Path) {
    let (dims, dtype, gates) = case;
    let [b, t, _, h, _] = dims;
    let x = inputs(seed, dims, dtype, gates);
    let (k, beta, g) =
        (x.k.to_device(device).unwrap(), x.beta.to_device(device).unwrap(), x.g.to_device(device).unwrap());
    assert_eq!(gdn_kkt::path(&k, &beta), want_path, "{dims:?} {dtype} on {device}");
    let out = gdn_kkt::gdn_chunk_scaled_dot_kkt_with(&k, &beta, &g, 64, Some(f64::NAN)).unwrap();
    assert_eq!((out.shape(), out.dtype(), out.device()), (&[b, t, h, 64][..], DType::F32, device));
    let got = out.to_host().unwrap().to_f64_vec().unwrap();
    let want = gdn_kkt::reference(&x.kv, &x.bv, &x.gv, dims, dtype);
    assert!(got.iter().all(|v| v.is_finite()), "{dims:?} {dtype}: NaN or inf in the output (a poisoned element left)");
    let min_gate = x.gv.iter().cloned().fold(f64::INFINITY, f64::min);
    let err = rel_l2(&got, &want);
    eprintln!("{dims:?} {dtype} on {device}: rel L2 {err:e} (lowest gate {min_gate:.1})");
    assert!(err <= 1e-5, "{dims:?} {dtype} on {device}: relative L2 error {err:e} exceeds 1e-5");
}

#[test]
fn small_cases_take_the_portable_path_on_cpu_and_match_the_reference() {
    let device = device_or_skip("cpu").unwrap();
    for (i, case) in SMALL.into_iter().enumerate() {
        check(device, 500 + i as u64, case, Path::Portable);
    }
}

#[test]
fn the_cuda_path_serves_half_keys_with_supported_head_dims_and_groups() {
    // [B, T, Hg, H, K]
    assert!(cuda::serves(DType::BF16, [8, 4096, 16, 32, 128]));
    assert!(cuda::serves(DType::F16, [1, 1, 1, 1, 64]));
    assert!(cuda::serves(DType::BF16, [1, 100, 2, 16, 256]));
    assert!(!cuda::serves(DType::F32, [8, 4096, 16, 32, 128]), "f32 keys take the portable kernel");
    assert!(!cuda::serves(DType::BF16, [1, 100, 1, 1, 72]), "K not a multiple of 16");
    assert!(!cuda::serves(DType::BF16, [1, 100, 1, 1, 272]), "K above 256");
    assert!(!cuda::serves(DType::F16, [1, 100, 1, 16, 64]), "more than 8 value heads per key head");
    // On the CPU the rule always picks the portable kernel.
    let k = Array::from_f64(DType::BF16, &[1, 64, 1, 128], &[0.5; 64 * 128]).unwrap();
    let beta = Array::from_f64(DType::F32, &[1, 64, 2], &[0.5; 128]).unwrap();
    assert_eq!(gdn_kkt::path(&k, &beta), Path::Portable);
}

/// The CUDA path's source (inline-PTX `mma.sync`, `ldmatrix`, `cp.async`) compiles to sm_90
/// cubin for both key dtypes, the smallest and largest head dims and several groupings.
#[test]
fn the_cuda_path_compiles_to_sm90_cubin() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let cases = [(DType::BF16, 128, 32), (DType::F16, 64, 16), (DType::BF16, 256, 128), (DType::F16, 16, 48)];
    for (dtype, kd, h) in cases {
        let (t, hg) = (70, 16);
        let k = Array::from_f64(dtype, &[1, t, hg, kd], &vec![0.5; t * hg * kd]).unwrap();
        let beta = Array::from_f64(DType::F32, &[1, t, h], &vec![0.5; t * h]).unwrap();
        let (kernel, spec) = cuda::kernel_and_spec(&k, &beta).unwrap();
        let entry = kernel.kernel_name(&spec.template);
        let body = kernel.generate(&[k, beta.clone(), beta], &spec).unwrap();
        let source = format!("{}\n{}", kiln::backend::cuda::emit::prelude(), body);
        let cubin = cuda_backend::compile_source(&entry, &source, (9, 0), MathMode::Safe)
            .unwrap_or_else(|e| panic!("{dtype} K={kd} H={h}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{entry}: not a cubin");
        assert!(cubin.windows(entry.len()).any(|w| w == entry.as_bytes()), "{entry}: entry missing from the cubin");
    }
}

mod cuda_path {
    use super::*;

    #[test]
    #[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
    fn cuda_path_matches_reference_on_partial_chunks_groups_and_head_dims() {
        let Some(device) = device_or_skip("cuda") else { return };
        for (i, case) in SMALL.into_iter().chain(LONG).enumerate() {
            check(device, 600 + i as u64, case, Path::CudaMma);
        }
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
    fn cuda_falls_back_to_the_portable_kernel_outside_the_fast_set() {
        let Some(device) = device_or_skip("cuda") else { return };
        check(device, 700, ([1, 100, 1, 2, 64], DType::F32, Gates::WholeSequence), Path::Portable);
        check(device, 701, ([1, 70, 2, 2, 72], DType::BF16, Gates::ChunkLocal), Path::Portable);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
    fn cuda_views_of_keys_follow_the_alignment_rule() {
        let Some(device) = device_or_skip("cuda") else { return };
        let dims = [1, 100, 2, 4, 64];
        let x = inputs(800, dims, DType::BF16, Gates::WholeSequence);
        let (beta, g) = (x.beta.to_device(device).unwrap(), x.g.to_device(device).unwrap());
        let want = gdn_kkt::reference(&x.kv, &x.bv, &x.gv, dims, DType::BF16);
        // A strided view (keys inside a wider last axis) is copied, then served by the CUDA path.
        let n = 100 * 2;
        let mut rng = Rng::new(801);
        let mut wide = rng.normals(n * 80, 1.0);
        for (r, row) in x.kv.chunks(64).enumerate() {
            wide[r * 80 + 8..r * 80 + 72].copy_from_slice(row);
        }
        let wide = Array::from_f64(DType::BF16, &[1, 100, 2, 80], &wide).unwrap().to_device(device).unwrap();
        let strided = wide
            .slice(&[
                SliceArg::FULL,
                SliceArg::FULL,
                SliceArg::FULL,
                SliceArg { start: Some(8), stop: Some(72), step: 1 },
            ])
            .unwrap();
        // A row-contiguous view 3 elements into its buffer is not 16-byte aligned: portable.
        let mut flat = vec![1.0; 3];
        flat.extend_from_slice(&x.kv);
        let flat = Array::from_f64(DType::BF16, &[3 + x.kv.len()], &flat).unwrap().to_device(device).unwrap();
        let shifted =
            flat.slice(&[SliceArg { start: Some(3), stop: None, step: 1 }]).unwrap().reshape(&[1, 100, 2, 64]).unwrap();
        for (what, k, path) in [("strided", strided, Path::CudaMma), ("offset 3", shifted, Path::Portable)] {
            assert_eq!(gdn_kkt::path(&k, &beta), path, "{what}");
            let out = gdn_kkt::gdn_chunk_scaled_dot_kkt_with(&k, &beta, &g, 64, Some(f64::NAN)).unwrap();
            let err = rel_l2(&out.to_host().unwrap().to_f64_vec().unwrap(), &want);
            assert!(err <= 1e-5, "{what}: relative L2 error {err:e}");
        }
    }
}
