//! Kernels that load just outside a buffer and discard what they read. The MLX docs' grid_sample
//! forward (its first custom-kernel example, verbatim) loads the four corners of each sample
//! before masking the ones outside the image to zero, so at the image's borders it reads up to
//! one row and one pixel before the start or past the end of `x`. Apple GPUs allow that; on CUDA
//! every buffer kiln allocates has `APRON_BYTES` of readable memory on both sides so it runs
//! there too; the CPU runs it as well, and the CPU's checked mode still reports the reads.
//!
//! The `cuda` variants need an NVIDIA GPU (`--include-ignored`, `KILN_REQUIRE_BACKEND=cuda`).

mod common;

use common::{assert_close, device_or_skip, Rng};
use kiln::backend::cuda::APRON_BYTES;
use kiln::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

/// The docs' kernel source, exactly as the Python string holds it.
const DOCS_GRID_SAMPLE: &str = r#"
        uint elem = thread_position_in_grid.x;
        int H = x_shape[1];
        int W = x_shape[2];
        int C = x_shape[3];
        int gH = grid_shape[1];
        int gW = grid_shape[2];

        int w_stride = C;
        int h_stride = W * w_stride;
        int b_stride = H * h_stride;

        uint grid_idx = elem / C * 2;
        float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
        float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;

        int ix_nw = floor(ix);
        int iy_nw = floor(iy);

        int ix_ne = ix_nw + 1;
        int iy_ne = iy_nw;

        int ix_sw = ix_nw;
        int iy_sw = iy_nw + 1;

        int ix_se = ix_nw + 1;
        int iy_se = iy_nw + 1;

        T nw = (ix_se - ix)    * (iy_se - iy);
        T ne = (ix    - ix_sw) * (iy_sw - iy);
        T sw = (ix_ne - ix)    * (iy    - iy_ne);
        T se = (ix    - ix_nw) * (iy    - iy_nw);

        int batch_idx = elem / C / gH / gW * b_stride;
        int channel_idx = elem % C;
        int base_idx = batch_idx + channel_idx;

        T I_nw = x[base_idx + iy_nw * h_stride + ix_nw * w_stride];
        T I_ne = x[base_idx + iy_ne * h_stride + ix_ne * w_stride];
        T I_sw = x[base_idx + iy_sw * h_stride + ix_sw * w_stride];
        T I_se = x[base_idx + iy_se * h_stride + ix_se * w_stride];

        I_nw = iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1 ? I_nw : 0;
        I_ne = iy_ne >= 0 && iy_ne <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1 ? I_ne : 0;
        I_sw = iy_sw >= 0 && iy_sw <= H - 1 && ix_sw >= 0 && ix_sw <= W - 1 ? I_sw : 0;
        I_se = iy_se >= 0 && iy_se <= H - 1 && ix_se >= 0 && ix_se <= W - 1 ? I_se : 0;

        out[elem] = nw * I_nw + ne * I_ne + sw * I_sw + se * I_se;
    "#;

fn docs_grid_sample() -> MetalKernel {
    MetalKernel::new("grid_sample", &["x", "grid"], &["out"], DOCS_GRID_SAMPLE).unwrap()
}

/// The docs' call: one thread per output element, threadgroups of 256, `T` = x's dtype;
/// the output poisoned with NaN so an unwritten element cannot pass.
fn call_docs_grid_sample(x: &Array, grid: &Array, device: Device) -> kiln::Result<Array> {
    let (&[b, _, _, c], &[_, gh, gw, _]) = (x.shape(), grid.shape()) else { panic!("4-d inputs") };
    let out_shape = [b, gh, gw, c];
    let spec = LaunchSpec::new([(b * gh * gw * c) as u32, 1, 1], [256, 1, 1])
        .output(&out_shape, x.dtype())
        .template("T", x.dtype())
        .init_value(f64::NAN)
        .device(device);
    Ok(docs_grid_sample().call(&[x.into(), grid.into()], &spec)?.remove(0))
}

/// `[B, H, W, C, gH, gW]`.
type Dims = [usize; 6];

/// Bilinear sampling with zeros padding, NHWC, `align_corners=False` (the docs'
/// `grid_sample_ref`), in f64; `x(i)` is element `i` of the row-major image.
fn reference(x: &dyn Fn(usize) -> f64, grid: &[f64], [b, h, w, c, gh, gw]: Dims) -> Vec<f64> {
    let mut out = Vec::with_capacity(b * gh * gw * c);
    for n in 0..b {
        for p in 0..gh * gw {
            let g = 2 * (n * gh * gw + p);
            // The sample position in float32, as the kernel computes it: at W = 1024 its
            // rounding (2^-14) moves the weights by more than float32's tolerance.
            let ix = f64::from(((grid[g] as f32 + 1.0) * w as f32 - 1.0) / 2.0);
            let iy = f64::from(((grid[g + 1] as f32 + 1.0) * h as f32 - 1.0) / 2.0);
            let (x0, y0) = (ix.floor(), iy.floor());
            for ch in 0..c {
                let mut acc = 0.0;
                for (xi, yi) in [(x0, y0), (x0 + 1.0, y0), (x0, y0 + 1.0), (x0 + 1.0, y0 + 1.0)] {
                    if xi >= 0.0 && xi < w as f64 && yi >= 0.0 && yi < h as f64 {
                        let weight = (1.0 - (ix - xi).abs()) * (1.0 - (iy - yi).abs());
                        acc += weight * x(((n * h + yi as usize) * w + xi as usize) * c + ch);
                    }
                }
                out.push(acc);
            }
        }
    }
    out
}

/// Grid coordinates uniform in [-1, 1] (float32), with every batch's first sample at the
/// top-left corner (-1, -1) and its last at the bottom-right (1, 1), and a few samples on each
/// edge: the corners read one row and one pixel before the start of `x` (batch 0) and past its
/// end (the last batch).
fn border_grid(rng: &mut Rng, [b, _, _, _, gh, gw]: Dims) -> (Array, Vec<f64>) {
    let points = gh * gw;
    let mut g = rng.uniforms(b * points * 2, -1.0, 1.0);
    for n in 0..b {
        let first = 2 * n * points;
        let last = 2 * (n * points + points - 1);
        g[first..first + 2].copy_from_slice(&[-1.0, -1.0]);
        g[last..last + 2].copy_from_slice(&[1.0, 1.0]);
        for k in 1..points.min(5) - 1 {
            g[first + 2 * k + k % 2] = if k < 3 { -1.0 } else { 1.0 };
        }
    }
    let grid = Array::from_f64(DType::F32, &[b, gh, gw, 2], &g).unwrap();
    let values = grid.to_f64_vec().unwrap();
    (grid, values)
}

/// Runs the docs' kernel on fresh random `x` and a border grid of `dims` on `device`.
fn check_small(device: Device, dims: Dims, seed: u64) {
    let [b, h, w, c, _, _] = dims;
    let mut rng = Rng::new(seed);
    let x = Array::from_f64(DType::F32, &[b, h, w, c], &rng.normals(b * h * w * c, 1.0)).unwrap();
    let xv = x.to_f64_vec().unwrap();
    let (grid, gv) = border_grid(&mut rng, dims);
    let out = call_docs_grid_sample(&x.to_device(device).unwrap(), &grid.to_device(device).unwrap(), device).unwrap();
    let want = reference(&|i| xv[i], &gv, dims);
    assert_close(&format!("docs grid_sample {dims:?} on {device}"), &out, &want, DType::F32);
}

/// A pseudo-random value in [-0.5, 0.5) for element `i`, exactly as `FILL` computes it (24-bit
/// integers scaled by a power of two are exact in float32).
fn hashed(seed: u32, i: usize) -> f64 {
    let mut h = (i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed);
    h ^= h >> 15;
    h = h.wrapping_mul(0x85EB_CA77);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE3D);
    h ^= h >> 16;
    (h >> 8) as f64 / 16_777_216.0 - 0.5
}

const FILL: &str = r#"
    uint i = thread_position_in_grid.x;
    uint h = i * 0x9E3779B1u + uint(seed);
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    h *= 0xC2B2AE3Du;
    h ^= h >> 16;
    x[i] = float(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
"#;

/// The docs' benchmark shape, `x` (8, 1024, 1024, 64) float32 (2 GiB) filled on the device
/// by `FILL`, so the host holds neither it nor its reference copy.
fn check_benchmark_shape(device: Device, seed: u32) {
    let dims: Dims = [8, 1024, 1024, 64, 256, 256];
    let [b, h, w, c, _, _] = dims;
    let fill = MetalKernel::new("fill_hashed", &["seed"], &["x"], FILL).unwrap();
    let n = b * h * w * c;
    let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1]).output(&[b, h, w, c], DType::F32).device(device);
    let x = fill.call(&[(seed as i32).into()], &spec).unwrap().remove(0);
    let (grid, gv) = border_grid(&mut Rng::new(seed as u64), dims);
    let out = call_docs_grid_sample(&x, &grid.to_device(device).unwrap(), device).unwrap();
    let want = reference(&|i| hashed(seed, i), &gv, dims);
    assert_close("docs grid_sample at the benchmark shape", &out, &want, DType::F32);
}

/// Small images, and one whose rows are as long as the benchmark's (256 KiB) with few rows, so
/// the border reads leave `x` by a whole row.
const SMALL_SHAPES: [Dims; 2] = [[1, 4, 5, 3, 3, 4], [2, 17, 23, 13, 11, 9]];
const WIDE_ROWS: Dims = [2, 8, 1024, 64, 16, 16];

fn docs_grid_sample_matches_reference_at_the_borders(device: Device) {
    for (i, dims) in SMALL_SHAPES.into_iter().enumerate() {
        check_small(device, dims, 40 + i as u64);
    }
    // A 4 MiB image has a mapping of its own: its border reads leave `x` by a whole row.
    check_small(device, WIDE_ROWS, 42);
    if device != Device::Cpu {
        check_benchmark_shape(device, 0x5EED_0001);
    }
}

backend_tests!(docs_grid_sample_matches_reference_at_the_borders);

/// Checked mode on the CPU still reports the docs' kernel's border loads as out-of-bounds reads
/// of `x` (what tells a harmless load-then-select from a bug is whether the value is used; the
/// unchecked run above matches the reference, so here it is not).
#[test]
fn checked_cpu_reports_the_docs_kernels_border_reads() {
    let dims: Dims = [2, 6, 7, 4, 5, 5];
    let [b, h, w, c, _, _] = dims;
    let mut rng = Rng::new(7);
    let x = Array::from_f64(DType::F32, &[b, h, w, c], &rng.normals(b * h * w * c, 1.0)).unwrap();
    let (grid, _) = border_grid(&mut rng, dims);
    let _checked = kiln::backend::cpu::CheckedScope::enter();
    match call_docs_grid_sample(&x, &grid, Device::Cpu) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "grid_sample");
            assert!(msg.contains("input `x`"), "the fault names x: {msg}");
            assert!(msg.contains("past the end") || msg.contains("before the start"), "{msg}");
        }
        other => panic!("expected an out-of-bounds read of x, got {other:?}"),
    }
}

/// A kernel that reads exactly `APRON_BYTES` outside its input and its output, on both sides
/// (keeping the raw bits in `probe` so the loads happen), and doubles `x` into `out`.
fn apron_reader() -> MetalKernel {
    let reach = APRON_BYTES / 4;
    let body = format!(
        "uint i = thread_position_in_grid.x;
        int n = x_shape[0];
        float xb = x[-{reach}];
        float xa = x[n - 1 + {reach}];
        float ob = out[-{reach}];
        float oa = out[n - 1 + {reach}];
        probe[4 * i] = as_type<uint>(xb);
        probe[4 * i + 1] = as_type<uint>(xa);
        probe[4 * i + 2] = as_type<uint>(ob);
        probe[4 * i + 3] = as_type<uint>(oa);
        out[i] = 2.0f * x[i];\n"
    );
    MetalKernel::new("apron_reader", &["x"], &["out", "probe"], body).unwrap()
}

/// Reads of exactly the documented distance before and after a buffer return (unspecified)
/// values instead of faulting, for buffers carved from a slab and for ones with their own
/// allocation, uploaded inputs and fresh outputs alike.
#[test]
#[ignore = "needs an NVIDIA GPU (run with --include-ignored and KILN_REQUIRE_BACKEND=cuda)"]
fn cuda_reads_at_the_apron_distance_do_not_fault() {
    let Some(dev) = device_or_skip("cuda") else { return };
    let k = apron_reader();
    let mut rng = Rng::new(11);
    // 4 KiB and 1 MiB classes (slabs), 3 MiB (an allocation of its own).
    for n in [1000usize, 1 << 18, 3 << 18] {
        let x = Array::from_f64(DType::F32, &[n], &rng.normals(n, 1.0)).unwrap();
        let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1])
            .output(&[n], DType::F32)
            .output(&[n, 4], DType::U32)
            .device(dev);
        let out = k.call(&[x.to_device(dev).unwrap().into()], &spec).unwrap();
        let want: Vec<f64> = x.to_f64_vec().unwrap().iter().map(|v| 2.0 * v).collect();
        assert_close(&format!("apron reads around {n} floats"), &out[0], &want, DType::F32);
        out[1].to_host().unwrap();
    }
}

/// The kernels of the CUDA tests above lower and compile to sm_90 with NVRTC (no GPU needed),
/// so the GPU run tests what they mean to.
#[test]
fn their_cuda_kernels_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let f32s = |shape: &[usize]| Array::from_f64(DType::F32, shape, &vec![0.5; shape.iter().product()]).unwrap();
    let cases = [
        (docs_grid_sample(), vec![f32s(&[2, 8, 16, 4]), f32s(&[2, 3, 3, 2])], vec![(vec![2, 3, 3, 4], DType::F32)]),
        (
            MetalKernel::new("fill_hashed", &["seed"], &["x"], FILL).unwrap(),
            vec![Array::scalar(5i32)],
            vec![(vec![64], DType::F32)],
        ),
        (apron_reader(), vec![f32s(&[64])], vec![(vec![64], DType::F32), (vec![64, 4], DType::U32)]),
    ];
    for (kernel, inputs, outputs) in cases {
        let mut spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).template("T", DType::F32);
        for (shape, dtype) in &outputs {
            spec = spec.output(shape, *dtype);
        }
        let program = kernel.program(&kernel.generate(&inputs, &spec).unwrap());
        let cubin = kiln::backend::cuda::compile_cubin(&program, (9, 0))
            .unwrap_or_else(|e| panic!("{e}\n{}", kiln::backend::cuda::translate(&program).unwrap_or_default()));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}
