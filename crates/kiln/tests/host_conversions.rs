//! The host's conversions to float16 and bfloat16 round once, to nearest even, from the exact
//! source value, on every path that makes such elements: `Array::from_f64` and `full`, `astype`
//! (float32 from its own bits, 16-bit floats through their exact float32 value, 64-bit integers
//! from the integer), `init_value` fills on each backend, and a spec's `dtype` cast, scalars,
//! `values` and `fields`. Each is checked against the reference of crates/kiln-convert (an
//! independent nearest-by-distance formulation), also for NaN bits: float16 keeps the sign and
//! the top 9 payload bits under the quiet bit, bfloat16 is 0x7fc0 with the sign.

mod common;

#[path = "../../kiln-convert/tests/reference/mod.rs"]
mod reference;

use std::path::PathBuf;

use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};
use kiln_convert::Format;
use kiln_tools::spec::KernelSpec;

use common::Rng;

/// The 16-bit patterns of a float16, bfloat16 or uint16 array.
fn bits(a: &Array) -> Vec<u16> {
    let bytes = a.to_host().unwrap().to_contiguous_bytes().unwrap();
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

fn format(dtype: DType) -> Format {
    if dtype == DType::F16 {
        Format::F16
    } else {
        Format::BF16
    }
}

#[track_caller]
fn assert_bits(what: &str, got: &[u16], want: &[u16], source: impl Fn(usize) -> String) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(8)
        .map(|i| format!("{} -> {:#06x}, want {:#06x}", source(i), got[i], want[i]))
        .collect();
    assert!(bad.is_empty(), "{what}: first wrong: {bad:#?}");
}

/// Every midpoint between neighbouring values of `f`, one f64 step and a relative 2^-40 either
/// side, both signs.
fn midpoint_doubles(f: Format) -> Vec<f64> {
    let mut vals = reference::values(f);
    vals.push(2f64.powi(f.bias() + 1));
    let mut xs = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN, 5e-324, 1e300];
    for w in vals.windows(2) {
        let mid = (w[0] + w[1]) / 2.0;
        let tiny = mid * 2f64.powi(-40);
        let (up, down) = (f64::from_bits(mid.to_bits() + 1), f64::from_bits(mid.to_bits() - 1));
        for x in [mid, up, down, mid + tiny, mid - tiny] {
            xs.extend([x, -x]);
        }
    }
    xs
}

#[test]
fn from_f64_and_full_round_once_to_nearest_even() {
    for dtype in [DType::F16, DType::BF16] {
        let f = format(dtype);
        let xs = midpoint_doubles(f);
        let want: Vec<u16> = xs.iter().map(|&x| reference::from_f64(f, x)).collect();
        let got = bits(&Array::from_f64(dtype, &[xs.len()], &xs).unwrap());
        assert_bits(&format!("from_f64 to {dtype}"), &got, &want, |i| format!("{:e}", xs[i]));
        for (&x, &w) in xs.iter().zip(&want).step_by(997) {
            let filled = bits(&Array::full(dtype, &[3], x).unwrap());
            assert_eq!(filled, vec![w; 3], "full({x:e}) as {dtype}");
        }
    }
    // The case that `half`'s f64 conversion gets wrong: 2^-40 above float16's midpoint 1 + 2^-11.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(bits(&Array::from_f64(DType::F16, &[1], &[x]).unwrap()), [0x3c01]);
}

#[test]
fn astype_from_float32_rounds_from_its_own_bits() {
    let mut rng = Rng::new(2501);
    let mut patterns: Vec<u32> = (0..200_000).map(|_| rng.next_u64() as u32).collect();
    patterns.extend([0x3eaa_8003, 0x7f80_0001, 0xffc0_2000, 0x7fa0_1234, 0x0000_0001, 0x8000_0000, 0x477f_f000]);
    // Both neighbours of every bfloat16 midpoint in a band of exponents.
    patterns.extend((0x3e00u32..0x4000).flat_map(|hi| [(hi << 16) | 0x7fff, (hi << 16) | 0x8000, (hi << 16) | 0x8001]));
    let x = Array::from_vec(&[patterns.len()], patterns.iter().map(|&b| f32::from_bits(b)).collect()).unwrap();
    for dtype in [DType::F16, DType::BF16] {
        let want: Vec<u16> = patterns.iter().map(|&b| reference::from_f32(format(dtype), f32::from_bits(b))).collect();
        let got = bits(&x.astype(dtype).unwrap());
        assert_bits(&format!("float32 -> {dtype}"), &got, &want, |i| format!("{:#010x}", patterns[i]));
    }
    assert_eq!(bits(&x.astype(DType::BF16).unwrap())[200_000], 0x3eab);
    // float16 <-> bfloat16: every pattern through its exact float32 value, rounded once.
    let all: Vec<u16> = (0..=u16::MAX).collect();
    for (from, to) in [(DType::F16, DType::BF16), (DType::BF16, DType::F16)] {
        let a = Array::from_bytes(from, &[all.len()], &all.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>());
        let widen = |b: u16| match from {
            DType::F16 => half::f16::from_bits(b).to_f32(),
            _ => half::bf16::from_bits(b).to_f32(),
        };
        let want: Vec<u16> = all
            .iter()
            .map(|&b| {
                let w = widen(b);
                // The NaN rule applies to the widened NaN's payload (quiet bit set on widening).
                reference::from_f32(format(to), if w.is_nan() { f32::from_bits(w.to_bits() | 0x40_0000) } else { w })
            })
            .collect();
        let got = bits(&a.unwrap().astype(to).unwrap());
        assert_bits(&format!("{from} -> {to}"), &got, &want, |i| format!("{:#06x}", all[i]));
    }
}

/// Integers near every midpoint of both formats and of float32, around 2^24 and 2^53, extremes.
fn integer_cases(rng: &mut Rng) -> Vec<i64> {
    let mut vs = vec![0, 1, -1, i64::MIN, i64::MAX, 65519, 65520, (1 << 60) + (1 << 52) + 1, (1 << 60) + (1 << 36) + 1];
    for e in [24, 53] {
        vs.extend([(1i64 << e) - 1, 1 << e, (1 << e) + 1, (1 << e) + 3]);
    }
    for m in [7u32, 10, 23] {
        for e in (m as i32 + 1)..62 {
            let q = 1i64 << (e - m as i32);
            for _ in 0..30 {
                let k = (1i64 << m) + (rng.next_u64() % (1 << m)) as i64;
                let mid = k * q + q / 2;
                vs.extend([mid - 1, mid, mid + 1, -(mid + 1)]);
            }
        }
    }
    vs
}

/// Whether `r` is the float32 nearest to `v` (ties to the even mantissa), in integer arithmetic.
fn is_nearest_f32(v: i128, r: f32) -> bool {
    let exact = |x: f32| x as f64 as i128; // every float32 of magnitude >= 1 is an integer
    let d = (v - exact(r)).abs();
    let neighbours = [f32::from_bits(r.to_bits().wrapping_sub(1)), f32::from_bits(r.to_bits() + 1)];
    neighbours.iter().filter(|n| n.is_finite() && n.abs() >= 1.0).all(|&n| {
        let dn = (v - exact(n)).abs();
        d < dn || (d == dn && r.to_bits() & 1 == 0)
    })
}

#[test]
fn astype_from_64_bit_integers_rounds_once() {
    let vs = integer_cases(&mut Rng::new(2502));
    let signed = Array::from_vec(&[vs.len()], vs.clone()).unwrap();
    let unsigned = Array::from_vec(&[vs.len()], vs.iter().map(|&v| v as u64).collect()).unwrap();
    // Each source array with the integer its elements hold.
    type Value = fn(i64) -> i128;
    let sources: [(&Array, Value); 2] = [(&signed, |v| i128::from(v)), (&unsigned, |v| i128::from(v as u64))];
    for (a, value) in sources {
        for dtype in [DType::F16, DType::BF16] {
            let want: Vec<u16> = vs.iter().map(|&v| reference::from_int(format(dtype), value(v))).collect();
            let got = bits(&a.astype(dtype).unwrap());
            assert_bits(&format!("{} -> {dtype}", a.dtype()), &got, &want, |i| value(vs[i]).to_string());
        }
        let got = a.astype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        for (&v, &r) in vs.iter().zip(&got) {
            let v = value(v);
            assert!(v.abs() < 1 << 24 || is_nearest_f32(v, r), "{} -> float32: {v} gave {r:e}", a.dtype());
        }
    }
}

fn init_kernel() -> MetalKernel {
    // Writes nothing (the condition never holds): the outputs keep their init_value.
    let src = "if (thread_position_in_grid.x == 1u << 30) { h[0] = 0; b[0] = 0; }";
    MetalKernel::new("init_only", &[], &["h", "b"], src).unwrap()
}

// init_value fills outputs with the value rounded once to the output dtype.
fn init_value_fills_round_once(device: Device) {
    let near16 = 1.0 + 2f64.powi(-11) + 2f64.powi(-40); // 2^-40 above a float16 midpoint
    let near8 = 1.0 + 2f64.powi(-8) + 2f64.powi(-40); // 2^-40 above a bfloat16 midpoint
    for (x, want_h, want_b) in [(near16, 0x3c01, 0x3f80), (near8, 0x3c04, 0x3f81), (-near8, 0xbc04, 0xbf81)] {
        assert_eq!((reference::from_f64(Format::F16, x), reference::from_f64(Format::BF16, x)), (want_h, want_b));
        let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1])
            .output(&[100], DType::F16)
            .output(&[100], DType::BF16)
            .init_value(x)
            .device(device);
        let out = init_kernel().call(&[], &spec).unwrap();
        assert_eq!(bits(&out[0]), vec![want_h; 100], "init_value {x:e} as float16");
        assert_eq!(bits(&out[1]), vec![want_b; 100], "init_value {x:e} as bfloat16");
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-host-conversions-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const BIG: i64 = (1 << 60) + (1 << 52) + 1; // just above a bfloat16 midpoint; exactly on it in f64

// A spec's `dtype` cast of a file input, a scalar, `values` and `fields`, each rounded once.
#[test]
fn spec_numbers_and_casts_round_once() {
    let dir = scratch("spec");
    let mut rng = Rng::new(2503);
    let mut xs: Vec<f32> = (0..256).map(|_| f32::from_bits(rng.next_u64() as u32 & 0xbfff_ffff)).collect();
    xs[0] = f32::from_bits(0x3eaa_8003);
    Array::from_vec(&[xs.len()], xs.clone()).unwrap().save_npy(dir.join("x.npy")).unwrap();
    let near = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
    let body = format!(
        "[kernel]\nname = \"cast_bits\"\ninput_names = [\"x\", \"s\"]\noutput_names = [\"xb\", \"sb\"]\nsource = '''\nuint i = thread_position_in_grid.x;\nxb[i] = as_type<ushort>(x[i]);\nif (i == 0) sb[0] = as_type<ushort>(s);\n'''\n\n[call]\ngrid = [256, 1, 1]\nthreadgroup = [64, 1, 1]\noutput_shapes = [[256], [1]]\noutput_dtypes = [\"uint16\", \"uint16\"]\n\n[[input]]\nfile = \"x.npy\"\ndtype = \"bfloat16\"\n\n[[input]]\nscalar = {BIG}\ndtype = \"bfloat16\"\n"
    );
    let out = KernelSpec::parse(&dir.join("body.toml"), &body).unwrap().run(Device::Cpu).unwrap();
    let want: Vec<u16> = xs.iter().map(|&x| reference::from_f32(Format::BF16, x)).collect();
    assert_bits("dtype cast of a file", &bits(&out[0].1), &want, |i| format!("{:#010x}", xs[i].to_bits()));
    assert_eq!(bits(&out[1].1), [0x5d81], "scalar {BIG} as bfloat16");
    let library = format!(
        "[library]\nsource = '''\nkernel void k(device const ushort* v [[buffer(0)]], constant ushort* f [[buffer(1)]], device ushort* o [[buffer(2)]], uint i [[thread_position_in_grid]]) {{ o[i] = i < 4 ? v[i] : f[i - 4]; }}\n'''\nfunction = \"k\"\n\n[dispatch]\ngrid = [6, 1, 1]\nthreadgroup = [6, 1, 1]\n\n[[buffer]]\nvalues = [{BIG}, {near:?}, {neg}, 3]\ndtype = \"bfloat16\"\n\n[[buffer]]\nfields = [[\"bfloat16\", {BIG}], [\"float16\", {near16:?}]]\n\n[[buffer]]\noutput = \"o\"\nshape = [6]\ndtype = \"uint16\"\n",
        neg = -BIG,
        near16 = 1.0 + 2f64.powi(-11) + 2f64.powi(-40),
    );
    let out = KernelSpec::parse(&dir.join("library.toml"), &library).unwrap().run(Device::Cpu).unwrap();
    assert_eq!(bits(&out[0].1), [0x5d81, 0x3f81, 0xdd81, 0x4040, 0x5d81, 0x3c01], "values and fields");
}

backend_tests!(init_value_fills_round_once);
