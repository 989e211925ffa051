//! The CUDA shared-memory histogram of `scatter_add` against the f64 reference: every index
//! dtype, out-of-range indices (negative, >= bins, and int64 values whose low 32 bits lie in
//! range), a count not a multiple of 4, bin counts from 1 to the device limit, and launches with
//! many tiles per warp and with blocks that find no work. The `cuda` test needs a GPU (ignored
//! otherwise; required with `KILN_REQUIRE_BACKEND=cuda`); the rule test runs anywhere.

mod common;

use common::{device_or_skip, rel_l2, tolerance, Rng};
use kiln::ops::scatter_add::{self, cuda, Path};
use kiln::{Array, DType, Device, SliceArg};

/// Random bins with out-of-range entries spread through the array.
fn indices(rng: &mut Rng, n: usize, bins: usize, dtype: DType) -> Vec<i64> {
    let mut idx: Vec<i64> = (0..n).map(|_| (rng.next_u64() % bins as u64) as i64).collect();
    let bad: &[i64] = match dtype {
        DType::I64 => &[-1, -(1 << 40), 1 << 32, (1 << 33) + 3, i64::MAX],
        DType::U32 => &[u32::MAX as i64, 1 << 31],
        _ => &[-1, i32::MIN as i64, i32::MAX as i64],
    };
    for (k, &b) in bad.iter().enumerate() {
        idx[(k * 7919 + 1) % n] = b;
    }
    idx[0] = bins as i64;
    idx[n - 1] = -1;
    idx
}

fn index_array(device: Device, dtype: DType, idx: &[i64]) -> Array {
    let host = match dtype {
        DType::I64 => Array::from_vec(&[idx.len()], idx.to_vec()),
        DType::U32 => Array::from_vec(&[idx.len()], idx.iter().map(|&i| i as u32).collect::<Vec<_>>()),
        _ => Array::from_vec(&[idx.len()], idx.iter().map(|&i| i as i32).collect::<Vec<_>>()),
    };
    host.unwrap().to_device(device).unwrap()
}

/// The reference for indices as the kernel reads them (u32 indices are non-negative).
fn reference(values: &[f64], idx: &[i64], dtype: DType, bins: usize) -> Vec<f64> {
    let as_read: Vec<i64> = match dtype {
        DType::U32 => idx.iter().map(|&i| i64::from(i as u32)).collect(),
        DType::I32 => idx.iter().map(|&i| i64::from(i as i32)).collect(),
        _ => idx.to_vec(),
    };
    scatter_add::reference(values, &as_read, 1, bins)
}

#[test]
fn the_rule_keeps_the_portable_path_off_cuda() {
    let mut rng = Rng::new(90);
    let values = Array::from_f64(DType::F32, &[1 << 16], &rng.normals(1 << 16, 1.0)).unwrap();
    let idx = Array::from_vec(&[1 << 16], vec![3i32; 1 << 16]).unwrap();
    assert_eq!(scatter_add::path(&values, &idx, 32768), Path::Portable);
    assert_eq!(cuda::max_bins((9, 0)), 57856);
    assert_eq!(cuda::max_bins((8, 6)), 25088);
    assert_eq!(cuda::Launch::for_multiprocessors(132), cuda::Launch::DEFAULT);
    assert_eq!(cuda::Launch::for_multiprocessors(0).blocks, 1);
}

#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_shared_histogram_matches_reference() {
    let Some(device) = device_or_skip("cuda") else {
        return;
    };
    let arch = kiln::backend::cuda::cuda_backend(0).unwrap().arch();
    let max = cuda::max_bins(arch);
    let mut rng = Rng::new(91);
    let small = cuda::Launch { threads: 64, items: 1, steps: 1, blocks: 3 };
    let many = cuda::Launch { threads: 256, items: 2, steps: 2, blocks: 5000 };
    // (n, bins, index dtype, launch): one bin and a few bins (heavy contention), a tail of 3,
    // bin counts not a multiple of 4, the bench shape's bins, the device limit.
    let cases = [
        (1 << 16, 1, DType::I32, cuda::Launch::DEFAULT),
        ((1 << 16) + 3, 7, DType::I64, cuda::Launch::DEFAULT),
        (200_001, 1000, DType::U32, small),
        (200_002, 4099, DType::I32, many),
        (1 << 20, 32768, DType::I32, cuda::Launch::DEFAULT),
        ((1 << 20) + 1, 32771, DType::U32, cuda::Launch::DEFAULT),
        ((1 << 22) + 2, max, DType::I64, cuda::Launch::DEFAULT),
    ];
    for (n, bins, dtype, launch) in cases {
        // Positive values where many share a bin, so the f32 sums do not cancel.
        let vals = if n / bins > 1000 { rng.uniforms(n, 0.5, 1.5) } else { rng.normals(n, 1.0) };
        let values = Array::from_f64(DType::F32, &[n], &vals).unwrap().to_device(device).unwrap();
        let vals = values.to_host().unwrap().to_f64_vec().unwrap();
        let idx = indices(&mut rng, n, bins, dtype);
        let index = index_array(device, dtype, &idx);
        let want = reference(&vals, &idx, dtype, bins);
        let what = format!("n {n} bins {bins} {dtype} {launch:?}");
        let out = if launch == cuda::Launch::DEFAULT {
            assert_eq!(scatter_add::path(&values, &index, bins), Path::CudaSmem, "{what}");
            scatter_add::scatter_add(&values, &index, bins).unwrap()
        } else {
            cuda::run(&values, &index, bins, launch).unwrap()
        };
        assert_eq!((out.shape(), out.dtype()), (&[bins][..], DType::F32), "{what}");
        let got = out.to_host().unwrap().to_f64_vec().unwrap();
        let err = rel_l2(&got, &want);
        assert!(err <= tolerance(DType::F32), "{what}: relative L2 error {err:e}");
    }
    // Past the device limit, at a misaligned offset, or with a trailing axis: the portable path.
    let n = 1 << 16;
    let values = Array::from_f64(DType::F32, &[n + 1], &rng.normals(n + 1, 1.0)).unwrap().to_device(device).unwrap();
    let idx = indices(&mut rng, n, 5000, DType::I32);
    let index = index_array(device, DType::I32, &idx);
    let head = values.slice(&SliceArg::parse_list(":-1").unwrap()).unwrap();
    let shifted = values.slice(&SliceArg::parse_list("1:").unwrap()).unwrap();
    assert_eq!(scatter_add::path(&head, &index, max + 1), Path::Portable);
    assert_eq!(scatter_add::path(&head, &index, 5000), Path::CudaSmem);
    assert_eq!(scatter_add::path(&shifted, &index, 5000), Path::Portable);
    let out = scatter_add::scatter_add(&shifted, &index, 5000).unwrap();
    let want = reference(&shifted.to_host().unwrap().to_f64_vec().unwrap(), &idx, DType::I32, 5000);
    let err = rel_l2(&out.to_host().unwrap().to_f64_vec().unwrap(), &want);
    assert!(err <= tolerance(DType::F32), "misaligned: relative L2 error {err:e}");
}
