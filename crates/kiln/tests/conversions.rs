//! half and bfloat conversions agree bit for bit with the `half` crate on every backend: every
//! 16-bit pattern widened to float, and float patterns chosen to exercise rounding (both
//! neighbours of every 16-bit midpoint, the midpoints themselves, subnormals of all three
//! formats, the overflow threshold, infinities, NaN and random bits) narrowed by the scalar
//! conversions and by the 2- and 4-element vector conversions (which CUDA does in pairs).
//! Numbers, infinities and zeros must match exactly; a NaN must give a NaN (Metal leaves the bits
//! of a converted NaN open, so the payload is not compared).

mod common;

use common::{on, Rng};
use kiln::backend::cuda;
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

const GROUP: u32 = 256;

/// `threads` threads (whole groups) writing outputs of `n` elements.
fn launch(threads: usize, n: usize, outputs: &[DType], device: Device) -> LaunchSpec {
    let groups = u32::try_from(threads).unwrap().div_ceil(GROUP);
    let mut spec = LaunchSpec::new([groups * GROUP, 1, 1], [GROUP, 1, 1]).device(device);
    for &dt in outputs {
        spec = spec.output(&[n], dt);
    }
    spec
}

fn host<T: kiln::dtype::Element>(a: &Array) -> Vec<T> {
    a.to_host().expect("download output").to_vec::<T>().expect("read output")
}

fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

fn bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// Compares narrowed results: exact bits, except that a NaN input only needs a NaN output.
#[track_caller]
fn check_narrow(what: &str, xs: &[u32], got: &[u16], want: fn(f32) -> u16, is_nan: fn(u16) -> bool) {
    assert_eq!(got.len(), xs.len(), "{what}: length");
    let mut bad = Vec::new();
    for (&x, &g) in xs.iter().zip(got) {
        let f = f32::from_bits(x);
        let ok = if f.is_nan() { is_nan(g) } else { g == want(f) };
        if !ok {
            bad.push(format!("{x:#010x} -> {g:#06x} (want {:#06x})", want(f)));
        }
    }
    assert!(bad.is_empty(), "{what}: {} of {} wrong, first: {:?}", bad.len(), xs.len(), &bad[..bad.len().min(8)]);
}

/// Float bit patterns that exercise both rounding rules.
fn narrowing_inputs() -> Vec<u32> {
    let mut xs = Vec::new();
    // bfloat: every upper half (all signs, exponents and bfloat mantissas, subnormals,
    // infinities and NaNs included) with the low halves at and around the midpoint.
    for hi in 0u32..=0xffff {
        for lo in [0x0000u32, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff] {
            xs.push((hi << 16) | lo);
        }
    }
    // half: the midpoint between every finite half and the next one up in magnitude (for
    // 0x7bff that is 65520, the overflow threshold), exact in float, and its float neighbours.
    for h in 0u16..0x7c00 {
        let a = half::f16::from_bits(h).to_f64();
        let b = half::f16::from_bits(h + 1).to_f64();
        let b = if h + 1 == 0x7c00 { 65536.0 } else { b };
        let mid = ((a + b) / 2.0) as f32;
        assert_eq!(mid as f64, (a + b) / 2.0, "midpoint above {h:#06x} is not exact");
        let m = mid.to_bits();
        for bits in [m - 1, m, m + 1] {
            xs.push(bits);
            xs.push(bits | 0x8000_0000);
        }
    }
    // Float subnormals, float values under half's smallest subnormal, and named edges.
    xs.extend([
        0x0000_0000,
        0x8000_0000,
        0x0000_0001,
        0x8000_0001,
        0x007f_ffff,
        0x0080_0000,
        0x3300_0000, // 2^-25: half of half's smallest subnormal, rounds to 0
        0x3300_0001,
        0x3340_0000, // 1.5 · 2^-25: rounds up to the smallest subnormal
        0x3380_0000, // 2^-24: the smallest half subnormal
        0x387f_c000, // just under half's smallest normal
        0x3880_0000,
        0x477f_e000, // 65504: half max
        0x477f_efff,
        0x477f_f000, // 65520: rounds to infinity
        0x7f7f_ffff, // float max
        0xff7f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x7f80_0001,
        0xff80_0001,
        0x7fc0_0000,
        0xffc0_0000,
        0x7fff_ffff,
        0xffff_ffff,
        0x7fa0_0000,
    ]);
    let mut rng = Rng::new(41);
    xs.extend((0..100_000).map(|_| rng.next_u64() as u32));
    // A multiple of 4 for the 4-element vector kernel.
    while xs.len() % 4 != 0 {
        xs.push(0x3f80_0000);
    }
    xs
}

/// Widens every input pattern as half and as bfloat, by scalars and by 4-element vectors.
fn widen_kernel() -> MetalKernel {
    let src = r#"
        uint i = thread_position_in_grid.x;
        if (i >= uint(x_shape[0])) return;
        ushort b = x[i];
        from_half[i] = as_type<uint>(static_cast<float>(as_type<half>(b)));
        from_bfloat[i] = as_type<uint>(static_cast<float>(as_type<bfloat>(b)));
        if (i % 4 == 0) {
            half4 h = half4(as_type<half>(x[i]), as_type<half>(x[i + 1]), as_type<half>(x[i + 2]), as_type<half>(x[i + 3]));
            bfloat4 g = bfloat4(as_type<bfloat>(x[i]), as_type<bfloat>(x[i + 1]), as_type<bfloat>(x[i + 2]),
                                as_type<bfloat>(x[i + 3]));
            float4 fh = float4(h);
            float4 fg = float4(g);
            for (uint k = 0; k < 4; ++k) {
                from_half4[i + k] = as_type<uint>(fh[k]);
                from_bfloat4[i + k] = as_type<uint>(fg[k]);
            }
        }
    "#;
    MetalKernel::new("widen16", &["x"], &["from_half", "from_bfloat", "from_half4", "from_bfloat4"], src).unwrap()
}

/// Narrows every input float to half and to bfloat.
fn narrow_kernel() -> MetalKernel {
    let src = r#"
        uint i = thread_position_in_grid.x;
        if (i >= uint(x_shape[0])) return;
        float f = as_type<float>(x[i]);
        to_half[i] = as_type<ushort>(half(f));
        to_bfloat[i] = as_type<ushort>(static_cast<bfloat>(f));
    "#;
    MetalKernel::new("narrow16", &["x"], &["to_half", "to_bfloat"], src).unwrap()
}

/// Narrows float4 units to half4/bfloat4 and their halves to half2/bfloat2.
fn narrow_vec_kernel() -> MetalKernel {
    let src = r#"
        uint i = thread_position_in_grid.x;
        if (4 * i >= uint(x_shape[0])) return;
        float4 v = float4(as_type<float>(x[4 * i]), as_type<float>(x[4 * i + 1]), as_type<float>(x[4 * i + 2]),
                          as_type<float>(x[4 * i + 3]));
        half4 h4 = half4(v);
        bfloat4 b4 = static_cast<bfloat4>(v);
        half2 h2a = half2(v.xy);
        half2 h2b = half2(v.zw);
        bfloat2 b2a = bfloat2(v.xy);
        bfloat2 b2b = bfloat2(v.zw);
        for (uint k = 0; k < 4; ++k) {
            to_half4[4 * i + k] = as_type<ushort>(h4[k]);
            to_bfloat4[4 * i + k] = as_type<ushort>(b4[k]);
            to_half2[4 * i + k] = as_type<ushort>(k < 2 ? h2a[k] : h2b[k - 2]);
            to_bfloat2[4 * i + k] = as_type<ushort>(k < 2 ? b2a[k] : b2b[k - 2]);
        }
    "#;
    MetalKernel::new("narrow16x", &["x"], &["to_half4", "to_bfloat4", "to_half2", "to_bfloat2"], src).unwrap()
}

fn f16_is_nan(b: u16) -> bool {
    (b & 0x7fff) > 0x7c00
}

fn bf16_is_nan(b: u16) -> bool {
    (b & 0x7fff) > 0x7f80
}

/// The host's widening of a 16-bit pattern.
type Widen = fn(u16) -> f32;

// Every half and bfloat bit pattern widened to float by `float(x)` and by `float4(x4)`.
fn widening_is_exact(device: Device) {
    let bits: Vec<u16> = (0..=u16::MAX).collect();
    let x = Array::from_vec(&[bits.len()], bits.clone()).unwrap();
    let k = widen_kernel();
    let spec = launch(bits.len(), bits.len(), &[DType::U32; 4], device);
    let outs = k.call(&[on(device, &x)], &spec).unwrap();
    let checks: [(&str, Widen); 4] = [
        ("half -> float", |b| half::f16::from_bits(b).to_f32()),
        ("bfloat -> float", |b| half::bf16::from_bits(b).to_f32()),
        ("half4 -> float4", |b| half::f16::from_bits(b).to_f32()),
        ("bfloat4 -> float4", |b| half::bf16::from_bits(b).to_f32()),
    ];
    for (out, (what, want)) in outs.iter().zip(checks) {
        let got = host::<u32>(out);
        let mut bad = Vec::new();
        for (&b, &g) in bits.iter().zip(&got) {
            let w = want(b);
            let ok = if w.is_nan() { f32::from_bits(g).is_nan() } else { g == w.to_bits() };
            if !ok {
                bad.push(format!("{b:#06x} -> {g:#010x} (want {:#010x})", w.to_bits()));
            }
        }
        assert!(bad.is_empty(), "{what}: {} wrong, first: {:?}", bad.len(), &bad[..bad.len().min(8)]);
    }
}

// Float to half and bfloat through the scalar constructors.
fn scalar_narrowing_rounds_to_nearest_even(device: Device) {
    let xs = narrowing_inputs();
    let x = Array::from_vec(&[xs.len()], xs.clone()).unwrap();
    let k = narrow_kernel();
    let outs = k.call(&[on(device, &x)], &launch(xs.len(), xs.len(), &[DType::U16; 2], device)).unwrap();
    check_narrow("float -> half", &xs, &host::<u16>(&outs[0]), f16_bits, f16_is_nan);
    check_narrow("float -> bfloat", &xs, &host::<u16>(&outs[1]), bf16_bits, bf16_is_nan);
}

// Float vectors to half and bfloat vectors (2 and 4 elements).
fn vector_narrowing_rounds_to_nearest_even(device: Device) {
    let xs = narrowing_inputs();
    let n = xs.len();
    let x = Array::from_vec(&[n], xs.clone()).unwrap();
    let k = narrow_vec_kernel();
    let spec = launch(n / 4, n, &[DType::U16; 4], device);
    let outs = k.call(&[on(device, &x)], &spec).unwrap();
    check_narrow("float4 -> half4", &xs, &host::<u16>(&outs[0]), f16_bits, f16_is_nan);
    check_narrow("float4 -> bfloat4", &xs, &host::<u16>(&outs[1]), bf16_bits, bf16_is_nan);
    check_narrow("float2 -> half2", &xs, &host::<u16>(&outs[2]), f16_bits, f16_is_nan);
    check_narrow("float2 -> bfloat2", &xs, &host::<u16>(&outs[3]), bf16_bits, bf16_is_nan);
}

// The CUDA forms of the conversions (paired instructions included) compile with NVRTC alone, so
// CI without a GPU checks them.
#[test]
fn conversion_kernels_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let bits = Array::from_vec(&[64], vec![0u16; 64]).unwrap();
    let floats = Array::from_vec(&[64], vec![0u32; 64]).unwrap();
    let cases = [
        (widen_kernel(), bits, launch(64, 64, &[DType::U32; 4], Device::Cpu)),
        (narrow_kernel(), floats.clone(), launch(64, 64, &[DType::U16; 2], Device::Cpu)),
        (narrow_vec_kernel(), floats, launch(16, 64, &[DType::U16; 4], Device::Cpu)),
    ];
    for (k, x, spec) in cases {
        let program = k.program(&k.generate(&[x], &spec).unwrap());
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", k.name());
    }
}

backend_tests!(widening_is_exact, scalar_narrowing_rounds_to_nearest_even, vector_narrowing_rounds_to_nearest_even);
