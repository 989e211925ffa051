//! Metal's math library against its definitions, on every backend: the pi-scaled trigonometry
//! with exact argument reduction, exp10, fract, correctly rounded half/bfloat fma, half and
//! bfloat mixed with integers (the integer converts to half/bfloat first, conversions round
//! once), the integer functions of every width, the float library functions (frexp, ldexp,
//! modf, ilogb, nextafter, fdim, fmin3/fmax3/fmedian3, sincos), the classification functions,
//! MLX's `Limits<T>` constants and `log1p`, and the absence of `metal::cbrt/log1p/expm1`.
//! Expectations are computed here from the definitions: exact rounding from i128 or f64 values,
//! f64 functions with an ulp bound where the result is not exact. Floats travel as bit patterns
//! (exact in both directions); every output starts poisoned.

mod common;

use common::{on, Rng};
use half::{bf16, f16};
use kiln::backend::cuda;
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

#[path = "msl_math/integers.rs"]
mod integers;
#[path = "msl_math/library.rs"]
mod library;
use integers::{int_case, mul24_case, INT_TYPES};
use library::{classify_case, float_library_case, mlx_limits_case, unsupported_kernels};

/// Checks the outputs of a case, panicking with what is wrong.
type Check = Box<dyn Fn(&[Array])>;

/// A kernel, its inputs and launch, and the check of its outputs.
struct Case {
    kernel: MetalKernel,
    inputs: Vec<Array>,
    spec: LaunchSpec,
    check: Check,
}

impl Case {
    fn run(&self, device: Device) -> Vec<Array> {
        let inputs: Vec<_> = self.inputs.iter().map(|a| on(device, a)).collect();
        self.kernel.call(&inputs, &self.spec.clone().device(device)).expect("kernel runs")
    }
    fn check_on(&self, device: Device) {
        (self.check)(&self.run(device));
    }
}

/// `n` threads writing outputs of the given lengths and dtypes, poisoned before the run.
fn launch(n: usize, outputs: &[(usize, DType)]) -> LaunchSpec {
    let mut s = LaunchSpec::new([n as u32, 1, 1], [n.min(64) as u32, 1, 1]).init_value(77.0);
    for &(len, dt) in outputs {
        s = s.output(&[len], dt);
    }
    s
}

fn kernel(name: &str, inputs: &[&str], outputs: &[&str], src: &str) -> MetalKernel {
    MetalKernel::new(name, inputs, outputs, src).expect("kernel")
}

fn host<T: kiln::dtype::Element>(a: &Array) -> Vec<T> {
    a.to_host().expect("download").to_vec::<T>().expect("read")
}

fn arr<T: kiln::dtype::Element>(v: Vec<T>) -> Array {
    Array::from_vec(&[v.len()], v).expect("array")
}

#[track_caller]
fn expect_none(what: &str, bad: &[String]) {
    assert!(bad.is_empty(), "{what}: {} wrong, first: {:?}", bad.len(), &bad[..bad.len().min(6)]);
}

// ---- floating-point formats and exact rounding

#[derive(Clone, Copy)]
struct Fmt {
    mant: i32,
    emin: i32,
    max: f64,
}
const F32: Fmt = Fmt { mant: 23, emin: -126, max: f32::MAX as f64 };
const F16: Fmt = Fmt { mant: 10, emin: -14, max: 65504.0 };
const BF16: Fmt = Fmt { mant: 7, emin: -126, max: 3.3895313892515355e38 };

fn exponent(v: f64) -> i32 {
    ((v.abs().to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// `v` (a normal f64) rounded to nearest even in `f`; infinite beyond its range.
fn round_to(v: f64, f: Fmt) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let q = 2f64.powi(exponent(v).max(f.emin) - f.mant);
    let r = (v / q).round_ties_even() * q;
    if r.abs() > f.max {
        f64::INFINITY.copysign(v)
    } else {
        r
    }
}

/// The integer `s` times 2^-scale, rounded to nearest even in `f` (exact for any i128).
fn round_scaled(s: i128, scale: i32, f: Fmt) -> f64 {
    if s == 0 {
        return 0.0;
    }
    let m = s.unsigned_abs();
    let e = (127 - m.leading_zeros() as i32) - scale;
    let qe = e.max(f.emin) - f.mant;
    let shift = qe + scale;
    let q = if shift <= 0 {
        m << -shift
    } else {
        let (q, rem, half) = (m >> shift, m & ((1u128 << shift) - 1), 1u128 << (shift - 1));
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    let v = q as f64 * 2f64.powi(qe);
    let v = if v > f.max { f64::INFINITY } else { v };
    if s < 0 {
        -v
    } else {
        v
    }
}

/// |got - want| in units of the last place of `want` in `f`; 0 for matching NaNs, infinities
/// and overflow to the right infinity.
fn ulps(got: f64, want: f64, f: Fmt) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if got.is_infinite() && want.abs() > f.max && got.signum() == want.signum() {
        return 0.0;
    }
    if want.is_infinite() || got.is_infinite() {
        return if got == want { 0.0 } else { f64::INFINITY };
    }
    let e = if want == 0.0 { f.emin } else { exponent(want).max(f.emin) };
    (got - want).abs() / 2f64.powi(e - f.mant)
}

fn f32b(b: u32) -> f64 {
    f32::from_bits(b) as f64
}
fn f16b(b: u16) -> f64 {
    f16::from_bits(b).to_f64()
}
fn bf16b(b: u16) -> f64 {
    bf16::from_bits(b).to_f64()
}
fn sign(rng: &mut Rng) -> f64 {
    if rng.next_u64() & 1 == 0 {
        1.0
    } else {
        -1.0
    }
}

/// Checks `got[i]` against `want(i)` within `tol` ulps.
#[track_caller]
fn check_ulps(what: &str, got: &[f64], want: impl Fn(usize) -> f64, tol: f64, f: Fmt, xs: &[f64]) {
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| ulps(got[i], want(i), f) > tol)
        .map(|i| format!("x={:e}: got {:e} want {:e}", xs[i], got[i], want(i)))
        .collect();
    expect_none(what, &bad);
}

// ---- sinpi, cospi, tanpi

fn sinpi_ref(x: f64) -> f64 {
    if !x.is_finite() {
        return f64::NAN;
    }
    let r = x - 2.0 * (x / 2.0).round(); // exact, in [-1, 1]
    let r = if r > 0.5 {
        1.0 - r
    } else if r < -0.5 {
        -1.0 - r
    } else {
        r
    };
    (std::f64::consts::PI * r).sin()
}
fn cospi_ref(x: f64) -> f64 {
    sinpi_ref(x + 0.5)
}

fn pi_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let mut xs: Vec<f32> = vec![
        0.0, -0.0, 1.0, 2.0, -3.0, 0.5, 1.5, -0.5, 2.5, 0.25, -0.75, 7.0, 8.5, -8.5, 1e7, -1e7, 8388609.0, 16777216.0,
        3e9, -2.001415,
    ];
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    xs.extend((0..300).map(|_| rng.uniform(-1e4, 1e4) as f32));
    xs.extend((-40..40).flat_map(|k| [k as f32, k as f32 + 0.5]));
    for _ in 0..300 {
        // Near integers and half-integers, where sin(pi * x) in float loses everything.
        let n = (rng.uniform(-2000.0, 2000.0)).round() / 2.0;
        let d = sign(&mut rng) * 2f64.powi(-(rng.uniform(6.0, 22.0) as i32));
        xs.push((n + d) as f32);
    }
    xs.extend((0..60).map(|_| (sign(&mut rng) * rng.uniform(2f64.powi(22), 2f64.powi(40))) as f32));
    let n = xs.len();
    let src = r#"
        uint i = thread_position_in_grid.x;
        float v = as_type<float>(x[i]);
        half h = half(v);
        sp[i] = as_type<uint>(metal::sinpi(v));
        cp[i] = as_type<uint>(metal::precise::cospi(v));
        tp[i] = as_type<uint>(metal::tanpi(v));
        float4 v4 = metal::cospi(float4(v, -v, v, v));
        cv[i] = as_type<uint>(v4.y);
        hs[i] = as_type<ushort>(metal::sinpi(h));
        hc[i] = as_type<ushort>(metal::cospi(h));
    "#;
    let outs = [(n, DType::U32), (n, DType::U32), (n, DType::U32), (n, DType::U32), (n, DType::U16), (n, DType::U16)];
    let k = kernel("msl_pi_trig", &["x"], &["sp", "cp", "tp", "cv", "hs", "hc"], src);
    let input = arr(xs.iter().map(|v| v.to_bits()).collect());
    let check = move |o: &[Array]| {
        let x: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
        let g32 = |j: usize| host::<u32>(&o[j]).into_iter().map(f32b).collect::<Vec<_>>();
        let g16 = |j: usize| host::<u16>(&o[j]).into_iter().map(f16b).collect::<Vec<_>>();
        check_ulps("sinpi(float)", &g32(0), |i| sinpi_ref(x[i]), 1.0, F32, &x);
        check_ulps("cospi(float)", &g32(1), |i| cospi_ref(x[i]), 1.0, F32, &x);
        check_ulps("tanpi(float)", &g32(2), |i| sinpi_ref(x[i]) / cospi_ref(x[i]), 1.0, F32, &x);
        check_ulps("cospi(float4)", &g32(3), |i| cospi_ref(-x[i]), 1.0, F32, &x);
        let h: Vec<f64> = x.iter().map(|&v| f16::from_f64(v).to_f64()).collect();
        check_ulps("sinpi(half)", &g16(4), |i| sinpi_ref(h[i]), 1.0, F16, &h);
        check_ulps("cospi(half)", &g16(5), |i| cospi_ref(h[i]), 1.0, F16, &h);
        // Zeros are exact, not merely close.
        let sp = g32(0);
        let bad: Vec<String> = (0..n)
            .filter(|&i| x[i].is_finite() && x[i] == x[i].round() && sp[i] != 0.0)
            .map(|i| format!("sinpi({}) = {:e}", x[i], sp[i]))
            .collect();
        expect_none("sinpi of integers", &bad);
    };
    Case { kernel: k, inputs: vec![input], spec: launch(n, &outs), check: Box::new(check) }
}

// ---- exp10

fn exp10_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let mut xs: Vec<f32> = vec![0.0, 1.0, 2.0, -3.0, 10.0, 38.0, 39.0, -45.0, -46.0, f32::INFINITY, f32::NEG_INFINITY];
    xs.push(f32::NAN);
    xs.extend((0..400).map(|_| rng.uniform(-37.0, 38.5) as f32));
    let n = xs.len();
    let hs: Vec<u16> = (0..n).map(|_| f16::from_f64(rng.uniform(-7.5, 4.8)).to_bits()).collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        e[i] = as_type<uint>(metal::exp10(as_type<float>(x[i])));
        he[i] = as_type<ushort>(metal::exp10(as_type<half>(hx[i])));
        e2[i] = as_type<uint>(metal::precise::exp10(float2(0.0f, as_type<float>(x[i]))).y);
    "#;
    let k = kernel("msl_exp10", &["x", "hx"], &["e", "he", "e2"], src);
    let inputs = vec![arr(xs.iter().map(|v| v.to_bits()).collect()), arr(hs.clone())];
    let h2 = hs;
    let check = move |o: &[Array]| {
        let x: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
        let e: Vec<f64> = host::<u32>(&o[0]).into_iter().map(f32b).collect();
        let e2: Vec<f64> = host::<u32>(&o[2]).into_iter().map(f32b).collect();
        // Metal's bound for exp10 in precise mode is 4 ulp; CUDA's exp10f is within 2.
        check_ulps("exp10(float)", &e, |i| 10f64.powf(x[i]), 2.0, F32, &x);
        check_ulps("exp10(float2)", &e2, |i| 10f64.powf(x[i]), 2.0, F32, &x);
        let hx: Vec<f64> = h2.iter().map(|&b| f16b(b)).collect();
        let he: Vec<f64> = host::<u16>(&o[1]).into_iter().map(f16b).collect();
        check_ulps("exp10(half)", &he, |i| 10f64.powf(hx[i]), 1.0, F16, &hx);
    };
    let spec = launch(n, &[(n, DType::U32), (n, DType::U16), (n, DType::U32)]);
    Case { kernel: k, inputs, spec, check: Box::new(check) }
}

// ---- fract

/// Metal's fract: min(x - floor(x) rounded to the format, the largest value below 1); NaN stays.
fn fract_ref(x: f64, f: Fmt) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x.is_infinite() {
        return 0.0;
    }
    round_to(x - x.floor(), f).min(1.0 - 2f64.powi(-f.mant - 1))
}

fn fract_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let mut xs: Vec<f32> = vec![-1e-10, -2e-30, -1.4e-45, -0.25, 2.0, -3.0, 1e20, -1e-6, 0.0, -0.0];
    xs.extend([f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    xs.extend((0..200).map(|_| rng.uniform(-1000.0, 1000.0) as f32));
    xs.extend((0..100).map(|_| -(2f64.powi(-(rng.uniform(1.0, 60.0) as i32)) * rng.uniform(1.0, 2.0)) as f32));
    let n = xs.len();
    // half and bfloat: tiny negatives, whose fraction rounds up to 1 in the format.
    let small = |rng: &mut Rng, i: usize| -> f64 {
        if i % 3 == 0 {
            -2f64.powi(-(rng.uniform(1.0, 24.0) as i32)) * rng.uniform(1.0, 2.0)
        } else {
            rng.uniform(-300.0, 300.0)
        }
    };
    let hs: Vec<u16> = (0..n).map(|i| f16::from_f64(small(&mut rng, i)).to_bits()).collect();
    let bs: Vec<u16> = (0..n).map(|i| bf16::from_f64(small(&mut rng, i)).to_bits()).collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        float v = as_type<float>(x[i]);
        f[i] = as_type<uint>(metal::fract(v));
        fv[i] = as_type<uint>(metal::fract(float2(v, v)).y);
        hf[i] = as_type<ushort>(metal::fract(as_type<half>(hx[i])));
        bf[i] = as_type<ushort>(metal::fract(as_type<bfloat>(bx[i])));
    "#;
    let k = kernel("msl_fract", &["x", "hx", "bx"], &["f", "fv", "hf", "bf"], src);
    let inputs = vec![arr(xs.iter().map(|v| v.to_bits()).collect()), arr(hs.clone()), arr(bs.clone())];
    let (h2, b2) = (hs, bs);
    let check = move |o: &[Array]| {
        let x: Vec<f64> = xs.iter().map(|&v| v as f64).collect();
        let hx: Vec<f64> = h2.iter().map(|&b| f16b(b)).collect();
        let bx: Vec<f64> = b2.iter().map(|&b| bf16b(b)).collect();
        for (what, j, xv, f) in [("fract(float)", 0, &x, F32), ("fract(float2)", 1, &x, F32)] {
            let got: Vec<f64> = host::<u32>(&o[j]).into_iter().map(f32b).collect();
            check_ulps(what, &got, |i| fract_ref(xv[i], f), 0.0, f, xv);
        }
        let got: Vec<f64> = host::<u16>(&o[2]).into_iter().map(f16b).collect();
        check_ulps("fract(half)", &got, |i| fract_ref(hx[i], F16), 0.0, F16, &hx);
        let got: Vec<f64> = host::<u16>(&o[3]).into_iter().map(bf16b).collect();
        check_ulps("fract(bfloat)", &got, |i| fract_ref(bx[i], BF16), 0.0, BF16, &bx);
    };
    let spec = launch(n, &[(n, DType::U32), (n, DType::U32), (n, DType::U16), (n, DType::U16)]);
    Case { kernel: k, inputs, spec, check: Box::new(check) }
}

// ---- fma of half and bfloat

/// `v` (nonzero, of format `f`) as m * 2^e with an integer m.
fn int_and_exponent(v: f64, f: Fmt) -> (i128, i32) {
    let e = exponent(v).max(f.emin) - f.mant;
    let m = v / 2f64.powi(e);
    assert_eq!(m.fract(), 0.0, "{v:e} is not a value of the format");
    (m as i128, e)
}

/// a * b + c, exact (as an integer times a power of two), rounded once to `f`.
fn fma_ref(a: f64, b: f64, c: f64, f: Fmt) -> f64 {
    if !(a.is_finite() && b.is_finite() && c.is_finite()) || a * b == 0.0 || c == 0.0 {
        return a * b + c; // exact here, with IEEE's sign of zero
    }
    let ((ma, ea), (mb, eb), (mc, ec)) = (int_and_exponent(a, f), int_and_exponent(b, f), int_and_exponent(c, f));
    let e = (ea + eb).min(ec);
    assert!((ea + eb).max(ec) - e < 96, "{a:e} * {b:e} + {c:e} spans too many bits");
    let s = ((ma * mb) << (ea + eb - e)) + (mc << (ec - e));
    round_scaled(s, -e, f)
}

fn fma_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let hv = |v: f64| f16::from_f64(v).to_bits();
    let bv = |v: f64| bf16::from_f64(v).to_bits();
    let (mut h, mut b) = (Vec::new(), Vec::new());
    // Triples where rounding the float fma to the format rounds twice, found by search.
    let mut tries = 0;
    while h.len() < 3 * 60 && tries < 400_000 {
        tries += 1;
        let t = [rng.uniform(-4.0, 4.0), rng.uniform(-4.0, 4.0) * 2f64.powi(-10), rng.uniform(-4.0, 4.0)];
        let t = t.map(|v| f16::from_f64(v).to_f64());
        let twice = f16::from_f32((t[0] as f32).mul_add(t[1] as f32, t[2] as f32)).to_f64();
        if twice != fma_ref(t[0], t[1], t[2], F16) {
            h.extend(t.map(hv));
        }
    }
    assert!(h.len() >= 30, "found only {} double-rounding half triples", h.len() / 3);
    // bfloat: a product exactly halfway between two bfloats and an addend far below it, whose
    // sign decides the rounding (a float fma of these rounds to the midpoint first; from 2^-40
    // down, p + c is not exact in double either).
    for k in 0..60 {
        let p = 1.5 * (1.0 + (2 * (k % 32) + 1) as f64 * 2f64.powi(-7)) * 2f64.powi(k % 7 - 3);
        let c = sign(&mut rng) * p.abs() * 2f64.powi(-(25 + (k * 7) % 60));
        b.extend([bv(1.5 * 2f64.powi(k % 7 - 3)), bv(1.0 + (2 * (k % 32) + 1) as f64 * 2f64.powi(-7)), bv(c)]);
        let t = [rng.uniform(-8.0, 8.0), rng.uniform(-8.0, 8.0) * 2f64.powi(-8), rng.uniform(-8.0, 8.0)];
        h.extend(t.map(hv));
    }
    while b.len() < h.len() {
        let t = [rng.uniform(-64.0, 64.0), rng.uniform(-64.0, 64.0), rng.uniform(-64.0, 64.0) * 2f64.powi(-9)];
        b.extend(t.map(bv));
    }
    let n = h.len() / 3;
    let src = r#"
        uint i = thread_position_in_grid.x;
        half a = as_type<half>(h[3 * i]), b = as_type<half>(h[3 * i + 1]), c = as_type<half>(h[3 * i + 2]);
        bfloat d = as_type<bfloat>(g[3 * i]), e = as_type<bfloat>(g[3 * i + 1]), f = as_type<bfloat>(g[3 * i + 2]);
        hr[i] = as_type<ushort>(metal::fma(a, b, c));
        hv[i] = as_type<ushort>(metal::fma(half2(b, a), half2(a, b), half2(c, c)).y);
        br[i] = as_type<ushort>(metal::fma(d, e, f));
    "#;
    let k = kernel("msl_small_fma", &["h", "g"], &["hr", "hv", "br"], src);
    let (h2, b2) = (h.clone(), b.clone());
    let check = move |o: &[Array]| {
        let hx: Vec<f64> = h2.iter().map(|&v| f16b(v)).collect();
        let bx: Vec<f64> = b2.iter().map(|&v| bf16b(v)).collect();
        let want_h = |i: usize| fma_ref(hx[3 * i], hx[3 * i + 1], hx[3 * i + 2], F16);
        let want_b = |i: usize| fma_ref(bx[3 * i], bx[3 * i + 1], bx[3 * i + 2], BF16);
        let firsts: Vec<f64> = (0..n).map(|i| hx[3 * i]).collect();
        let got: Vec<f64> = host::<u16>(&o[0]).into_iter().map(f16b).collect();
        check_ulps("fma(half)", &got, want_h, 0.0, F16, &firsts);
        let got: Vec<f64> = host::<u16>(&o[1]).into_iter().map(f16b).collect();
        check_ulps("fma(half2)", &got, want_h, 0.0, F16, &firsts);
        let firsts: Vec<f64> = (0..n).map(|i| bx[3 * i]).collect();
        let got: Vec<f64> = host::<u16>(&o[2]).into_iter().map(bf16b).collect();
        check_ulps("fma(bfloat)", &got, want_b, 0.0, BF16, &firsts);
    };
    let spec = launch(n, &[(n, DType::U16), (n, DType::U16), (n, DType::U16)]);
    Case { kernel: k, inputs: vec![arr(h), arr(b)], spec, check: Box::new(check) }
}

// ---- half and bfloat with integers, and integer conversions

const MIXED_COLS: usize = 24;

fn mixed_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let n = 256;
    // Odd integers that half (11 bits) and bfloat (8 bits) cannot hold; halves near them.
    let ni: Vec<i32> = (0..n).map(|_| 2 * (rng.uniform(1024.0, 4096.0) as i32) + 1).collect();
    let mi: Vec<i32> =
        (0..n).map(|i| (2 * (rng.uniform(128.0, 40000.0) as i32) + 1) * if i % 2 == 0 { 1 } else { -1 }).collect();
    let hs: Vec<u16> = (0..n)
        .map(|i| f16::from_f64(if i % 3 == 0 { ni[i] as f64 } else { rng.uniform(2000.0, 9000.0) }).to_bits())
        .collect();
    let bs: Vec<u16> = (0..n)
        .map(|i| bf16::from_f64(if i % 3 == 0 { mi[i] as f64 } else { rng.uniform(-5e4, 5e4) }).to_bits())
        .collect();
    // Integers just above a bfloat midpoint, by less than half a float ulp: through float they
    // round to the midpoint, then to even (2^24 + 2^16 + 1 -> 2^24 instead of 2^24 + 2^17).
    fn above_midpoint(rng: &mut Rng, i: usize, top: u32) -> u64 {
        let k = 24 + (i as u32 % (top - 23));
        let r = 1 + rng.next_u64() % (1u64 << (k - 24));
        (1u64 << k) + (1u64 << (k - 8)) + r
    }
    let i32s: Vec<i32> = (0..n)
        .map(|i| match i % 4 {
            0 => above_midpoint(&mut rng, i, 30) as i32,
            1 => -(above_midpoint(&mut rng, i, 30) as i32),
            _ => rng.next_u64() as i32 >> (rng.next_u64() % 16),
        })
        .collect();
    let u32s: Vec<u32> = (0..n)
        .map(|i| if i % 2 == 0 { above_midpoint(&mut rng, i, 31) as u32 } else { rng.next_u64() as u32 })
        .collect();
    let i64s: Vec<i64> = (0..n)
        .map(|i| match i % 4 {
            0 => above_midpoint(&mut rng, i, 62) as i64,
            1 => -(above_midpoint(&mut rng, i, 62) as i64),
            _ => rng.next_u64() as i64 >> (rng.next_u64() % 48),
        })
        .collect();
    let u64s: Vec<u64> = (0..n)
        .map(|i| if i % 2 == 0 { above_midpoint(&mut rng, i, 63) } else { rng.next_u64() >> (rng.next_u64() % 48) })
        .collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        const uint C = 24;
        device ushort* r = o + i * C;
        half h = as_type<half>(hx[i]); int n = ni[i];
        bfloat b = as_type<bfloat>(bx[i]); int m = mi[i];
        r[0] = as_type<ushort>(half(h * n)); r[1] = as_type<ushort>(half(h + n));
        r[2] = as_type<ushort>(half(n - h)); r[3] = as_type<ushort>(half(h / n));
        r[4] = ushort((h < n ? 1 : 0) + (h == n ? 2 : 0) + (n >= h ? 4 : 0));
        half t = h; t *= n; r[5] = as_type<ushort>(t);
        t = h; t += n; r[6] = as_type<ushort>(t);
        t = h; t -= n; r[7] = as_type<ushort>(t);
        t = h; t /= n; r[8] = as_type<ushort>(t);
        r[9] = as_type<ushort>(bfloat(b * m)); r[10] = as_type<ushort>(bfloat(b + m));
        r[11] = as_type<ushort>(bfloat(m - b)); r[12] = as_type<ushort>(bfloat(b / m));
        r[13] = ushort((b < m ? 1 : 0) + (b == m ? 2 : 0) + (m >= b ? 4 : 0));
        bfloat u = b; u *= m; r[14] = as_type<ushort>(u);
        u = b; u += m; r[15] = as_type<ushort>(u);
        u = b; u -= m; r[16] = as_type<ushort>(u);
        r[17] = as_type<ushort>(static_cast<half>(s32[i]));
        r[18] = as_type<ushort>(static_cast<bfloat>(s32[i]));
        r[19] = as_type<ushort>(static_cast<bfloat>(w32[i]));
        r[20] = as_type<ushort>(static_cast<bfloat>(s64[i]));
        r[21] = as_type<ushort>(static_cast<bfloat>(w64[i]));
        r[22] = as_type<ushort>(static_cast<half>(s64[i]));
        r[23] = as_type<ushort>((half2(h, h) * n).y);
    "#;
    let k = kernel("msl_small_with_int", &["hx", "ni", "bx", "mi", "s32", "w32", "s64", "w64"], &["o"], src);
    let (h2, b2, n2, m2) = (hs.clone(), bs.clone(), ni.clone(), mi.clone());
    let (a32, a32u, a64, a64u) = (i32s.clone(), u32s.clone(), i64s.clone(), u64s.clone());
    let check = move |o: &[Array]| {
        let got = host::<u16>(&o[0]);
        let mut bad = Vec::new();
        for i in 0..n {
            let (h, b) = (f16b(h2[i]), bf16b(b2[i]));
            let (hn, bm) = (round_to(n2[i] as f64, F16), round_scaled(m2[i] as i128, 0, BF16));
            let hf = |v: f64| round_to(v, F16);
            let bf = |v: f64| round_to(v, BF16);
            let cmp = |a: f64, c: f64| ((a < c) as u16 + 2 * (a == c) as u16 + 4 * (c >= a) as u16) as f64;
            let want: [(f64, Fmt); MIXED_COLS] = [
                (hf(h * hn), F16),
                (hf(h + hn), F16),
                (hf(hn - h), F16),
                (hf(h / hn), F16),
                (cmp(h, hn), F32),
                (hf(h * hn), F16),
                (hf(h + hn), F16),
                (hf(h - hn), F16),
                (hf(h / hn), F16),
                (bf(b * bm), BF16),
                (bf(b + bm), BF16),
                (bf(bm - b), BF16),
                (bf(b / bm), BF16),
                (cmp(b, bm), F32),
                (bf(b * bm), BF16),
                (bf(b + bm), BF16),
                (bf(b - bm), BF16),
                (round_scaled(a32[i] as i128, 0, F16), F16),
                (round_scaled(a32[i] as i128, 0, BF16), BF16),
                (round_scaled(a32u[i] as i128, 0, BF16), BF16),
                (round_scaled(a64[i] as i128, 0, BF16), BF16),
                (round_scaled(a64u[i] as i128, 0, BF16), BF16),
                (round_scaled(a64[i] as i128, 0, F16), F16),
                (hf(h * hn), F16),
            ];
            for (c, (w, f)) in want.into_iter().enumerate() {
                let bits = got[i * MIXED_COLS + c];
                let g = match (c, f.mant) {
                    (4 | 13, _) => bits as f64,
                    (_, 10) => f16b(bits),
                    _ => bf16b(bits),
                };
                if ulps(g, w, f) != 0.0 {
                    bad.push(format!(
                        "row {i} column {c}: got {g:e} want {w:e} (h={h}, n={}, b={b}, m={})",
                        n2[i], m2[i]
                    ));
                }
            }
        }
        expect_none("half/bfloat with integers", &bad);
    };
    let inputs = vec![arr(hs), arr(ni), arr(bs), arr(mi), arr(i32s), arr(u32s), arr(i64s), arr(u64s)];
    Case { kernel: k, inputs, spec: launch(n, &[(n * MIXED_COLS, DType::U16)]), check: Box::new(check) }
}

fn pi_functions_reduce_exactly(device: Device) {
    pi_case(11).check_on(device);
}
fn exp10_is_within_2_ulp(device: Device) {
    exp10_case(12).check_on(device);
}
fn fract_stays_below_one_in_its_type_and_keeps_nan(device: Device) {
    fract_case(13).check_on(device);
}
fn half_and_bfloat_fma_round_once(device: Device) {
    fma_case(14).check_on(device);
}
fn half_and_bfloat_with_integers_convert_the_integer_first(device: Device) {
    mixed_case(15).check_on(device);
}
fn integer_functions_are_exact_for_every_width(device: Device) {
    for (i, (dtype, width, signed)) in INT_TYPES.into_iter().enumerate() {
        int_case(20 + i as u64, dtype, width, signed).check_on(device);
    }
    mul24_case(30, true).check_on(device);
    mul24_case(31, false).check_on(device);
}

fn float_library_functions_match_their_definitions(device: Device) {
    float_library_case(40).check_on(device);
}
fn classification_uses_the_arguments_own_format(device: Device) {
    classify_case(41).check_on(device);
}
fn mlx_limits_are_constants_and_log1p_is_accurate(device: Device) {
    mlx_limits_case(42).check_on(device);
}
// Metal has no cbrt, log1p or expm1; a kernel that calls them must not compile.
fn cbrt_log1p_expm1_are_not_metal_functions(device: Device) {
    for (k, x) in unsupported_kernels() {
        let spec = launch(4, &[(4, DType::F32)]).device(device);
        match k.call(&[on(device, &x)], &spec) {
            Err(kiln::Error::Compile { log, .. }) => assert!(!log.is_empty(), "{}: empty compile log", k.name()),
            other => panic!("{}: expected a compile error, got {other:?}", k.name()),
        }
    }
}

fn all_cases() -> Vec<Case> {
    let mut v = vec![pi_case(1), exp10_case(2), fract_case(3), fma_case(4), mixed_case(5)];
    v.extend(INT_TYPES.into_iter().map(|(d, w, s)| int_case(6, d, w, s)));
    v.extend([
        mul24_case(7, true),
        mul24_case(8, false),
        float_library_case(9),
        classify_case(10),
        mlx_limits_case(11),
    ]);
    v
}

// The CUDA translations of every kernel above compile with NVRTC alone (CI has no GPU); the
// kernels that call functions Metal lacks do not.
#[test]
fn msl_math_kernels_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    for case in all_cases() {
        let program = case.kernel.program(&case.kernel.generate(&case.inputs, &case.spec).unwrap());
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{}: {e}", case.kernel.name()));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", case.kernel.name());
    }
    for (k, x) in unsupported_kernels() {
        let program = k.program(&k.generate(&[x], &launch(4, &[(4, DType::F32)])).unwrap());
        assert!(cuda::compile_cubin(&program, (9, 0)).is_err(), "{} compiled", k.name());
    }
}

backend_tests!(
    pi_functions_reduce_exactly,
    exp10_is_within_2_ulp,
    fract_stays_below_one_in_its_type_and_keeps_nan,
    half_and_bfloat_fma_round_once,
    half_and_bfloat_with_integers_convert_the_integer_first,
    integer_functions_are_exact_for_every_width,
    float_library_functions_match_their_definitions,
    classification_uses_the_arguments_own_format,
    mlx_limits_are_constants_and_log1p_is_accurate,
    cbrt_log1p_expm1_are_not_metal_functions,
);
