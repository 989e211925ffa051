//! The kernels' conversions to half and bfloat against the reference of crates/kiln-convert
//! (the same one the host conversions are checked against):
//! - every float32 bit pattern through `half(f)` and `bfloat(f)` (and, on CUDA, the paired
//!   `half2`/`bfloat2` forms), checked inside the kernel against the reference's midpoints (one
//!   thread walks 2^16 consecutive patterns; the table of midpoints comes from the reference);
//! - integers (int, long, ulong, around 2^24, 2^53 and every binade's midpoints) and doubles (every
//!   midpoint between neighbouring halves or bfloats, one f64 step and a relative 2^-40 either
//!   side), at run time;
//! - the same values in constant evaluation: `constant constexpr` tables of double and integer
//!   literals, and function constants given as f64 and i64 values.
//!
//! Numbers, infinities and signed zeros must match exactly. A NaN keeps its sign and comes out
//! quiet with the host's bits on the CPU (float16: the top 9 payload bits under the quiet bit;
//! bfloat16: 0x7fc0 with the sign); CUDA's instructions give their canonical NaN, which Metal
//! allows, so there only NaN-ness is checked.

mod common;

#[path = "../../kiln-convert/tests/reference/mod.rs"]
mod reference;

use kiln::backend::cuda;
use kiln::backend::{ConstantKey, ConstantValue, Dispatch};
use kiln::{Array, DType, Device, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};
use kiln_convert::Format;

use common::{on, Rng};

fn host<T: kiln::dtype::Element>(a: &Array) -> Vec<T> {
    a.to_host().unwrap().to_vec::<T>().unwrap()
}

/// The midpoints between neighbouring non-negative values of `f` (the last one the overflow
/// threshold), exact in float.
fn midpoints(f: Format) -> Vec<f32> {
    let mut vals = reference::values(f);
    vals.push(2f64.powi(f.bias() + 1));
    vals.windows(2)
        .map(|w| {
            let mid = (w[0] + w[1]) / 2.0;
            assert_eq!(mid as f32 as f64, mid, "{f:?} midpoint {mid:e} is not a float");
            mid as f32
        })
        .collect()
}

const WALK: &str = r#"
// The index of the value nearest to `a` (a non-negative float, no smaller than the last `a`):
// `mids[k]` lies between values k and k + 1; on a midpoint the even index wins.
inline uint walk(const device float* mids, uint n, thread uint& k, float a) {
    while (k < n && (a > mids[k] || (a == mids[k] && (k & 1u)))) ++k;
    return k;
}
inline uint lower_bound(const device float* mids, uint n, float a) {
    uint lo = 0, hi = n;
    while (lo < hi) {
        uint m = (lo + hi) / 2;
        if (mids[m] < a) lo = m + 1; else hi = m;
    }
    return lo;
}
// Whether `got` is right for the float `bits` whose rounded magnitude is `want` (NaN: `nan`).
inline bool agrees(ushort got, uint bits, ushort want, ushort nan_mask, bool exact_nan) {
    uint sign = (bits >> 16) & 0x8000u;
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        bool is_nan = (got & 0x7fffu) > nan_mask;
        return exact_nan ? got == (ushort)(sign | want) : is_nan;
    }
    return got == (ushort)(sign | want);
}
"#;

/// Every float32 pattern: thread t converts the patterns whose upper 16 bits are t, and counts
/// those that differ from the walk over the reference's midpoints.
fn exhaustive_kernel() -> MetalKernel {
    let src = r#"
    uint t = thread_position_in_grid.x;
    uint nh = uint(mids_h_shape[0]), nb = uint(mids_b_shape[0]);
    float a0 = as_type<float>((t << 16) & 0x7fffffffu);
    uint kh = lower_bound(mids_h, nh, a0), kb = lower_bound(mids_b, nb, a0);
    uint count = 0, first = 0xffffffffu;
    for (uint lo = 0; lo < 65536u; ++lo) {
        uint bits = (t << 16) | lo;
        uint mag = bits & 0x7fffffffu;
        float x = as_type<float>(bits);
        ushort wh, wb;
        if (mag > 0x7f800000u) {
            wh = (ushort)(0x7e00u | ((mag >> 13) & 0x1ffu));
            wb = 0x7fc0;
        } else if (mag == 0x7f800000u) {
            wh = 0x7c00;
            wb = 0x7f80;
        } else {
            float a = as_type<float>(mag);
            wh = (ushort)walk(mids_h, nh, kh, a);
            wb = (ushort)walk(mids_b, nb, kb, a);
        }
        bool ok = agrees(as_type<ushort>(half(x)), bits, wh, 0x7c00, EXACT_NAN) &&
                  agrees(as_type<ushort>(bfloat(x)), bits, wb, 0x7f80, EXACT_NAN);
        if (PAIRS) {
            half2 h2 = half2(float2(x, -x));
            bfloat2 b2 = bfloat2(float2(-x, x));
            ok = ok && agrees(as_type<ushort>(h2.x), bits, wh, 0x7c00, EXACT_NAN) &&
                 agrees(as_type<ushort>(h2.y), bits ^ 0x80000000u, wh, 0x7c00, EXACT_NAN) &&
                 agrees(as_type<ushort>(b2.x), bits ^ 0x80000000u, wb, 0x7f80, EXACT_NAN) &&
                 agrees(as_type<ushort>(b2.y), bits, wb, 0x7f80, EXACT_NAN);
        }
        if (!ok) {
            if (count == 0) first = bits;
            ++count;
        }
    }
    bad[t] = count;
    first_bad[t] = first;
    "#;
    MetalKernel::new("narrow_every_float", &["mids_h", "mids_b"], &["bad", "first_bad"], src).unwrap().header(WALK)
}

fn exhaustive_launch(device: Device) -> LaunchSpec {
    // The CPU converts pairs element by element (the scalar code), CUDA with paired instructions.
    LaunchSpec::new([65536, 1, 1], [256, 1, 1])
        .output(&[65536], DType::U32)
        .output(&[65536], DType::U32)
        .template("EXACT_NAN", device == Device::Cpu)
        .template("PAIRS", device != Device::Cpu)
        .init_value(12345.0)
        .device(device)
}

fn every_float_pattern_narrows_to_nearest_even(device: Device) {
    let mids_h = Array::from_vec(&[Format::F16.infinity() as usize], midpoints(Format::F16)).unwrap();
    let mids_b = Array::from_vec(&[Format::BF16.infinity() as usize], midpoints(Format::BF16)).unwrap();
    let k = exhaustive_kernel();
    let out = k.call(&[on(device, &mids_h), on(device, &mids_b)], &exhaustive_launch(device)).unwrap();
    let (bad, first): (Vec<u32>, Vec<u32>) = (host(&out[0]), host(&out[1]));
    let total: u64 = bad.iter().map(|&c| u64::from(c)).sum();
    let examples: Vec<String> = first
        .iter()
        .filter(|&&b| b != u32::MAX)
        .take(8)
        .map(|&b| {
            let x = f32::from_bits(b);
            let (h, g) = (reference::from_f32(Format::F16, x), reference::from_f32(Format::BF16, x));
            format!("{b:#010x} (want half {h:#06x}, bfloat {g:#06x})")
        })
        .collect();
    assert_eq!(total, 0, "{total} float patterns narrowed wrongly, first: {examples:#?}");
}

fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

fn next_down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

/// Doubles on and around every midpoint of both formats, both signs, and the edges.
fn double_cases() -> Vec<f64> {
    let mut xs = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, 5e-324, -1e-310, f64::MAX, 1e39, -3.4e38];
    xs.extend([f64::from_bits(0x7ff8_0000_0000_0000), f64::from_bits(0xfff0_0000_0000_0001)]);
    xs.push(f64::from_bits(0x7ff4_5000_0000_0000));
    for f in [Format::F16, Format::BF16] {
        let mut vals = reference::values(f);
        vals.push(2f64.powi(f.bias() + 1));
        for w in vals.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            let tiny = mid * 2f64.powi(-40);
            for x in [mid, next_up(mid), next_down(mid), mid + tiny, mid - tiny] {
                xs.extend([x, -x]);
            }
        }
    }
    xs
}

/// Integers around 2^24 and 2^53, the extremes, and midpoints (and one either side) in every
/// binade of both formats.
fn long_cases(rng: &mut Rng) -> Vec<i64> {
    let mut vs = vec![0, 1, -1, 65519, 65520, 2049, 2051, i64::MIN, i64::MAX, i64::MIN + 1, (1 << 60) + (1 << 52) + 1];
    for e in [24, 53] {
        vs.extend([(1i64 << e) - 1, 1 << e, (1 << e) + 1, (1 << e) + 3]);
    }
    for m in [7u32, 10] {
        for e in 11..62 {
            let q = 1i64 << (e - m);
            for _ in 0..20 {
                let k = (1i64 << m) + (rng.next_u64() % (1 << m)) as i64;
                let mid = k * q + q / 2;
                for v in [mid - 1, mid, mid + 1] {
                    vs.extend([v, -v]);
                }
            }
        }
    }
    vs.extend((0..2000).map(|_| rng.next_u64() as i64 >> (rng.next_u64() % 64)));
    vs
}

fn runtime_kernel() -> MetalKernel {
    let src = r#"
    uint i = thread_position_in_grid.x;
    if (i < uint(longs_shape[0])) {
        long v = longs[i];
        ulong u = as_type<ulong>(v);
        int w = int(v);
        from_long[2 * i] = as_type<ushort>(half(v));
        from_long[2 * i + 1] = as_type<ushort>(bfloat(v));
        from_ulong[2 * i] = as_type<ushort>(half(u));
        from_ulong[2 * i + 1] = as_type<ushort>(bfloat(u));
        from_int[2 * i] = as_type<ushort>(static_cast<half>(w));
        from_int[2 * i + 1] = as_type<ushort>(static_cast<bfloat>(w));
    }
    for (uint k = i; k < uint(doubles_shape[0]); k += uint(threads_per_grid.x)) {
        double d = as_type<double>(doubles[k]);
        from_double[2 * k] = as_type<ushort>(half(d));
        from_double[2 * k + 1] = as_type<ushort>(bfloat(d));
    }
    "#;
    MetalKernel::new(
        "narrow_ints_doubles",
        &["longs", "doubles"],
        &["from_long", "from_ulong", "from_int", "from_double"],
        src,
    )
    .unwrap()
}

/// Checks pairs (half, bfloat) of `got` against the reference for each source value.
#[track_caller]
fn check_pairs(what: &str, got: &[u16], want: impl Fn(usize) -> (u16, u16), exact_nan: bool) {
    let mut bad = Vec::new();
    for (i, pair) in got.chunks_exact(2).enumerate() {
        let (h, b) = want(i);
        let ok = |g: u16, w: u16, inf: u16| g == w || (!exact_nan && (w & 0x7fff) > inf && (g & 0x7fff) > inf);
        if !ok(pair[0], h, 0x7c00) || !ok(pair[1], b, 0x7f80) {
            bad.push(format!("[{i}] got ({:#06x}, {:#06x}) want ({h:#06x}, {b:#06x})", pair[0], pair[1]));
        }
    }
    assert!(bad.is_empty(), "{what}: {} wrong, first: {:#?}", bad.len(), &bad[..bad.len().min(8)]);
}

fn both(v: i128) -> (u16, u16) {
    (reference::from_int(Format::F16, v), reference::from_int(Format::BF16, v))
}

fn integers_and_doubles_narrow_once_at_run_time(device: Device) {
    let longs = long_cases(&mut Rng::new(77));
    let doubles = double_cases();
    let n = longs.len().max(1 << 16);
    let spec = LaunchSpec::new([n.div_ceil(256) as u32 * 256, 1, 1], [256, 1, 1])
        .output(&[2 * longs.len()], DType::U16)
        .output(&[2 * longs.len()], DType::U16)
        .output(&[2 * longs.len()], DType::U16)
        .output(&[2 * doubles.len()], DType::U16)
        .init_value(12345.0)
        .device(device);
    let a = Array::from_vec(&[longs.len()], longs.clone()).unwrap();
    let d = Array::from_vec(&[doubles.len()], doubles.iter().map(|x| x.to_bits()).collect()).unwrap();
    let out = runtime_kernel().call(&[on(device, &a), on(device, &d)], &spec).unwrap();
    let exact = device == Device::Cpu;
    check_pairs("long", &host::<u16>(&out[0]), |i| both(i128::from(longs[i])), exact);
    check_pairs("ulong", &host::<u16>(&out[1]), |i| both(i128::from(longs[i] as u64)), exact);
    check_pairs("int", &host::<u16>(&out[2]), |i| both(i128::from(longs[i] as i32)), exact);
    let want = |i: usize| (reference::from_f64(Format::F16, doubles[i]), reference::from_f64(Format::BF16, doubles[i]));
    check_pairs("double", &host::<u16>(&out[3]), want, exact);
}

/// Doubles and integers whose rounding differs from rounding through float first.
fn constant_cases() -> (Vec<f64>, Vec<i64>) {
    let mut doubles = Vec::new();
    for (m, emin) in [(10, -14), (7, -126)] {
        for e in [emin - 3, emin, -1, 0, 5, 12] {
            let half_step = 2f64.powi(e - m - 1);
            let mid = 2f64.powi(e) + half_step; // a midpoint above an even value
            doubles.extend([
                mid,
                mid + mid * 2f64.powi(-40),
                mid - mid * 2f64.powi(-40),
                -(mid + mid * 2f64.powi(-40)),
            ]);
        }
    }
    doubles.extend([1e-30, 65519.99, 65520.0, 3.3961e38, -0.0]);
    let ints = vec![
        (1 << 60) + (1 << 52) + 1,
        -((1 << 60) + (1 << 52) + 1),
        (1 << 40) + (1 << 32) - 1,
        i64::MAX,
        i64::MIN,
        2049,
    ];
    (doubles, ints)
}

/// A constant expression of type double with the value `x`: an unsuffixed literal would be a
/// float in Metal (and kiln), so the value is built as an exact product `double(N) * 2^a * 2^b`.
fn double_expression(x: f64) -> String {
    let bits = x.to_bits();
    let field = ((bits >> 52) & 0x7ff) as i32;
    let mantissa = bits & ((1 << 52) - 1);
    let (n, mut e) = if field == 0 { (mantissa, -1074) } else { (mantissa | 1 << 52, field - 1075) };
    let mut text = format!("{}double({n}l)", if x.is_sign_negative() { "-" } else { "" });
    while e != 0 {
        let step = e.clamp(-100, 100);
        text.push_str(&format!(" * 0x1p{step}f"));
        e -= step;
    }
    format!("({text})")
}

fn constants_library() -> (MetalLibrary, usize) {
    let (doubles, ints) = constant_cases();
    let dl: Vec<String> = doubles.iter().map(|&x| double_expression(x)).collect();
    let il: Vec<String> = ints
        .iter()
        .map(|v| if *v == i64::MIN { "(-9223372036854775807l - 1)".to_string() } else { format!("{v}l") })
        .collect();
    let list = |ty: &str, xs: &[String]| xs.iter().map(|x| format!("{ty}({x})")).collect::<Vec<_>>().join(", ");
    let (nd, ni) = (doubles.len(), ints.len());
    let source = format!(
        r#"
#include <metal_stdlib>
using namespace metal;
constant half FC_H [[function_constant(0)]];
constant bfloat FC_B [[function_constant(1)]];
constant bfloat FC_I [[function_constant(2)]];
constant constexpr half HD[{nd}] = {{{}}};
constant constexpr bfloat BD[{nd}] = {{{}}};
constant constexpr half HI[{ni}] = {{{}}};
constant constexpr bfloat BI[{ni}] = {{{}}};
kernel void constant_narrowing(device ushort* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {{
    if (i < {nd}) {{ o[2 * i] = as_type<ushort>(HD[i]); o[2 * i + 1] = as_type<ushort>(BD[i]); }}
    if (i < {ni}) {{ o[2 * ({nd} + i)] = as_type<ushort>(HI[i]); o[2 * ({nd} + i) + 1] = as_type<ushort>(BI[i]); }}
    if (i == 0) {{ o[2 * ({nd} + {ni})] = as_type<ushort>(FC_H); o[2 * ({nd} + {ni}) + 1] = as_type<ushort>(FC_B);
                   o[2 * ({nd} + {ni}) + 2] = as_type<ushort>(FC_I); o[2 * ({nd} + {ni}) + 3] = 0; }}
}}
"#,
        list("half", &dl),
        list("bfloat", &dl),
        list("half", &il),
        list("bfloat", &il),
    );
    (MetalLibrary::new("constant_narrowing", &source), 2 * (nd + ni) + 4)
}

const FC_DOUBLE_H: f64 = 1.0 + 1.0 / 2048.0 + 1.0 / 1099511627776.0; // 1 + 2^-11 + 2^-40
const FC_DOUBLE_B: f64 = 1.0 + 1.0 / 256.0 + 1.0 / 1099511627776.0; // 1 + 2^-8 + 2^-40
const FC_INT_B: i64 = (1 << 60) + (1 << 52) + 1;

fn constants_launch() -> LibraryLaunch {
    let mut launch = LibraryLaunch::new("constant_narrowing", Dispatch::Threads([64, 1, 1]), [64, 1, 1]);
    launch.constants = vec![
        (ConstantKey::Index(0), ConstantValue::Float(FC_DOUBLE_H)),
        (ConstantKey::Index(1), ConstantValue::Float(FC_DOUBLE_B)),
        (ConstantKey::Index(2), ConstantValue::Int(FC_INT_B)),
    ];
    launch
}

fn literals_and_function_constants_narrow_once_in_constant_evaluation(device: Device) {
    let (library, n) = constants_library();
    let args = vec![LibraryArg::Output { shape: vec![n], dtype: DType::U16, init_value: Some(12345.0) }];
    let out = library.dispatch(device, &args, &constants_launch()).unwrap();
    let got: Vec<u16> = host(&out[0]);
    let (doubles, ints) = constant_cases();
    let mut want: Vec<(u16, u16)> =
        doubles.iter().map(|&x| (reference::from_f64(Format::F16, x), reference::from_f64(Format::BF16, x))).collect();
    want.extend(ints.iter().map(|&v| both(i128::from(v))));
    want.push((reference::from_f64(Format::F16, FC_DOUBLE_H), reference::from_f64(Format::BF16, FC_DOUBLE_B)));
    want.push((reference::from_int(Format::BF16, i128::from(FC_INT_B)), 0));
    assert_eq!(want[want.len() - 2], (0x3c01, 0x3f81));
    check_pairs("constant evaluation", &got, |i| want[i], true);
}

// The kernels above compile for CUDA with NVRTC alone, so CI without a GPU checks them.
#[test]
fn narrowing_kernels_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let mids = Array::from_vec(&[64], vec![0f32; 64]).unwrap();
    let k = exhaustive_kernel();
    let spec = LaunchSpec::new([65536, 1, 1], [256, 1, 1])
        .output(&[65536], DType::U32)
        .output(&[65536], DType::U32)
        .template("EXACT_NAN", false)
        .template("PAIRS", true);
    let program = k.program(&k.generate(&[mids.clone(), mids], &spec).unwrap());
    let mut programs = vec![program];
    let longs = Array::from_vec(&[64], vec![0i64; 64]).unwrap();
    let doubles = Array::from_vec(&[64], vec![0u64; 64]).unwrap();
    let k = runtime_kernel();
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[128], DType::U16).output(&[128], DType::U16);
    let spec = spec.output(&[128], DType::U16).output(&[128], DType::U16);
    programs.push(k.program(&k.generate(&[longs, doubles], &spec).unwrap()));
    let (library, _) = constants_library();
    programs.push(library.program(&constants_launch()));
    for program in &programs {
        let cubin = cuda::compile_cubin(program, (9, 0)).unwrap_or_else(|e| panic!("{}: {e}", program.kernel));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}

backend_tests!(
    every_float_pattern_narrows_to_nearest_even,
    integers_and_doubles_narrow_once_at_run_time,
    literals_and_function_constants_narrow_once_in_constant_evaluation,
);
