//! The float library functions (frexp, ldexp, modf, ilogb, nextafter, fdim, fmin3, fmax3,
//! fmedian3, sincos), the classification functions (signbit of a negative half NaN included),
//! MLX's `Limits<T>` and `log1p`, and the kernels that call functions Metal does not have.

use super::*;

/// C's frexp: x = m * 2^e with 0.5 <= |m| < 1; zeros, infinities and NaN come back with e = 0.
fn frexp_ref(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let e = exponent(x) + 1;
    (x / 2f64.powi(e), e)
}

fn modf_ref(x: f64) -> (f64, f64) {
    let ip = x.trunc();
    let frac = if x.is_infinite() { 0.0 } else { x - ip };
    (frac.copysign(x), ip)
}

fn ilogb_ref(x: f64) -> i32 {
    if x.is_nan() || x == 0.0 {
        i32::MIN
    } else if x.is_infinite() {
        i32::MAX
    } else {
        exponent(x)
    }
}

/// The neighbour of `x` towards `y` on a grid of 16- or 32-bit patterns (`from`/`to` convert).
fn nextafter_bits(xb: u32, yb: u32, sign: u32, val: impl Fn(u32) -> f64) -> u32 {
    let (x, y) = (val(xb), val(yb));
    if x.is_nan() || y.is_nan() {
        return if x.is_nan() { xb } else { yb };
    }
    if x == y {
        return yb;
    }
    if x == 0.0 {
        return (yb & sign) | 1;
    }
    if (x < y) == (xb & sign == 0) {
        xb + 1
    } else {
        xb - 1
    }
}

fn median(a: f64, b: f64, c: f64) -> f64 {
    let mut v = [a, b, c];
    v.sort_by(|p, q| p.total_cmp(q));
    v[1]
}

const FL_COLS: usize = 21;
const HL_COLS: usize = 8;

pub(super) fn float_library_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let n = 256;
    let mut x: Vec<f32> =
        vec![0.0, -0.0, 1.0, -8.0, 0.75, 3.5, -3.5, -0.5, 1e20, 1e-40, -3e-44, f32::MAX, 1.1754944e-38];
    x.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 2.0, 3.0]);
    let base = x.len();
    x.extend((base..n).map(|_| (sign(&mut rng) * 10f64.powf(rng.uniform(-40.0, 30.0))) as f32));
    let mut y: Vec<f32> = (0..n).map(|_| rng.uniform(-10.0, 10.0) as f32).collect();
    y[2] = 2.0;
    y[16] = 2.0;
    y[17] = 3.0;
    y[3] = f32::NAN;
    let z: Vec<f32> = (0..n).map(|_| rng.uniform(-10.0, 10.0) as f32).collect();
    let k: Vec<i32> =
        (0..n).map(|i| if i < 4 { [200, -200, 0, -126][i] } else { rng.uniform(-40.0, 41.0) as i32 }).collect();
    let hv = |v: f64| f16::from_f64(v).to_bits();
    let mut hx: Vec<u16> = vec![hv(0.0), hv(1.0), hv(-2.5), hv(2f64.powi(-20)), hv(65504.0), 0x7c00, 0x7e00, hv(-0.0)];
    hx.extend((hx.len()..n).map(|_| hv(sign(&mut rng) * 2f64.powf(rng.uniform(-24.0, 15.0)))));
    let hy: Vec<u16> = (0..n).map(|i| if i == 1 { hv(1.0) } else { hv(rng.uniform(-100.0, 100.0)) }).collect();
    let hz: Vec<u16> = (0..n).map(|_| hv(rng.uniform(-100.0, 100.0))).collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        float X = as_type<float>(x[i]), Y = as_type<float>(y[i]), Z = as_type<float>(z[i]);
        int K = kk[i];
        device uint* r = o + i * 21;
        int e; float ip, c;
        r[0] = as_type<uint>(metal::frexp(X, e)); r[1] = as_type<uint>(e);
        r[2] = as_type<uint>(metal::ldexp(X, K));
        r[3] = as_type<uint>(metal::modf(X, ip)); r[4] = as_type<uint>(ip);
        r[5] = as_type<uint>(metal::ilogb(X));
        r[6] = as_type<uint>(metal::nextafter(X, Y));
        r[7] = as_type<uint>(metal::fdim(X, Y));
        r[8] = as_type<uint>(metal::fmin3(X, Y, Z));
        r[9] = as_type<uint>(metal::fmax3(X, Y, Z));
        r[10] = as_type<uint>(metal::fmedian3(X, Y, Z));
        r[11] = as_type<uint>(metal::sincos(X, c)); r[12] = as_type<uint>(c);
        int4 e4; float4 m4 = metal::frexp(float4(Y, X, X, Y), e4);
        r[13] = as_type<uint>(m4.y); r[14] = as_type<uint>(e4.y);
        r[15] = as_type<uint>(metal::ldexp(float2(X, Y), int2(K, K)).x);
        float3 ip3; float3 f3 = metal::modf(float3(Y, X, Z), ip3);
        r[16] = as_type<uint>(f3.y); r[17] = as_type<uint>(ip3.y);
        r[18] = as_type<uint>(metal::nextafter(float2(Y, X), float2(X, Y)).y);
        r[19] = as_type<uint>(metal::ilogb(float2(X, Y)).x);
        float4 c4; r[20] = as_type<uint>(metal::precise::sincos(float4(X), c4).z);
        half A = as_type<half>(hx[i]), B = as_type<half>(hy[i]), D = as_type<half>(hz[i]);
        device ushort* s = ho + i * 8;
        int he; half hip, hc;
        s[0] = as_type<ushort>(metal::frexp(A, he)); hi[2 * i] = he;
        s[1] = as_type<ushort>(metal::ldexp(A, K));
        s[2] = as_type<ushort>(metal::modf(A, hip)); s[3] = as_type<ushort>(hip);
        s[4] = as_type<ushort>(metal::nextafter(A, B));
        s[5] = as_type<ushort>(metal::fdim(A, B));
        s[6] = as_type<ushort>(metal::fmedian3(A, B, D));
        metal::sincos(A, hc); s[7] = as_type<ushort>(hc);
        hi[2 * i + 1] = metal::ilogb(A);
    "#;
    let kern = kernel("msl_float_library", &["x", "y", "z", "kk", "hx", "hy", "hz"], &["o", "ho", "hi"], src);
    let bits = |v: &[f32]| arr(v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>());
    let inputs = vec![bits(&x), bits(&y), bits(&z), arr(k.clone()), arr(hx.clone()), arr(hy.clone()), arr(hz.clone())];
    let check = move |o: &[Array]| {
        let got = host::<u32>(&o[0]);
        let mut bad = Vec::new();
        for i in 0..n {
            let (xb, yb) = (x[i].to_bits(), y[i].to_bits());
            let (a, b, c) = (x[i] as f64, y[i] as f64, z[i] as f64);
            let (m, e) = frexp_ref(a);
            let (fr, ip) = modf_ref(a);
            let next = f32b(nextafter_bits(xb, yb, 0x8000_0000, f32b));
            let fdim = if a > b {
                (x[i] - y[i]) as f64
            } else if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                0.0
            };
            let ldexp = (a * 2f64.powi(k[i])) as f32 as f64;
            let any_nan = a.is_nan() || b.is_nan() || c.is_nan();
            // (value, tolerance in ulps; NaN tolerance: the column is not compared)
            let want: [(f64, f64); FL_COLS] = [
                (m, 0.0),
                (e as f64, 0.0),
                (ldexp, 0.0),
                (fr, 0.0),
                (ip, 0.0),
                (ilogb_ref(a) as f64, 0.0),
                (next, 0.0),
                (fdim, 0.0),
                (a.min(b).min(c), 0.0),
                (a.max(b).max(c), 0.0),
                (if any_nan { 0.0 } else { median(a, b, c) }, if any_nan { f64::NAN } else { 0.0 }),
                (a.sin(), 2.0),
                (a.cos(), 2.0),
                (m, 0.0),
                (e as f64, 0.0),
                (ldexp, 0.0),
                (fr, 0.0),
                (ip, 0.0),
                (next, 0.0),
                (ilogb_ref(a) as f64, 0.0),
                (a.sin(), 2.0),
            ];
            for (col, (w, tol)) in want.into_iter().enumerate() {
                if tol.is_nan() {
                    continue;
                }
                let gb = got[i * FL_COLS + col];
                let g = if matches!(col, 1 | 5 | 14 | 19) { gb as i32 as f64 } else { f32b(gb) };
                if ulps(g, w, F32) > tol {
                    bad.push(format!("column {col}: x={a:e} y={b:e} z={c:e} k={}: got {g:e} want {w:e}", k[i]));
                }
            }
            let (ha, hb, hd) = (f16b(hx[i]), f16b(hy[i]), f16b(hz[i]));
            let (hm, he) = frexp_ref(ha);
            let (hfr, hip) = modf_ref(ha);
            let hnext = f16b(nextafter_bits(hx[i] as u32, hy[i] as u32, 0x8000, |b| f16b(b as u16)) as u16);
            let hdim = if ha > hb {
                round_to(ha - hb, F16)
            } else if ha.is_nan() || hb.is_nan() {
                f64::NAN
            } else {
                0.0
            };
            let hwant: [(f64, f64); HL_COLS] = [
                (hm, 0.0),
                (round_to(ha * 2f64.powi(k[i]), F16), 0.0),
                (hfr, 0.0),
                (hip, 0.0),
                (hnext, 0.0),
                (hdim, 0.0),
                (median(ha, hb, hd), if ha.is_nan() { f64::NAN } else { 0.0 }),
                (ha.cos(), 1.0),
            ];
            let hgot = host::<u16>(&o[1]);
            for (col, (w, tol)) in hwant.into_iter().enumerate() {
                if tol.is_nan() {
                    continue;
                }
                let g = f16b(hgot[i * HL_COLS + col]);
                if ulps(g, w, F16) > tol {
                    bad.push(format!("half column {col}: x={ha:e} y={hb:e} k={}: got {g:e} want {w:e}", k[i]));
                }
            }
            let hints = host::<i32>(&o[2]);
            if (hints[2 * i], hints[2 * i + 1]) != (he, ilogb_ref(ha)) {
                bad.push(format!("half frexp/ilogb of {ha:e}: got {:?}", (hints[2 * i], hints[2 * i + 1])));
            }
        }
        expect_none("float library functions", &bad);
    };
    let spec = launch(n, &[(n * FL_COLS, DType::U32), (n * HL_COLS, DType::U16), (2 * n, DType::I32)]);
    Case { kernel: kern, inputs, spec, check: Box::new(check) }
}

pub(super) fn classify_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let n = 128;
    let fvals = [1.0, 1e-40, 0.0, -0.0, f64::NAN, f64::INFINITY, 1e-5, -3.0, 1.1754944e-38, -1e-39];
    let hvals = [1.0, 2f64.powi(-20), 0.0, f64::NAN, f64::INFINITY, 6.1e-5, 6.2e-5, -7.0, 1e-7];
    let bvals = [1.0, 1e-39, 0.0, f64::NAN, f64::NEG_INFINITY, 1e-30, -2.0, 1.2e-38];
    let mut pick = |vals: &[f64]| -> f64 { vals[(rng.next_u64() % vals.len() as u64) as usize] };
    let f: Vec<u32> = (0..2 * n).map(|_| (pick(&fvals) as f32).to_bits()).collect();
    // Every seventh a NaN with its sign bit set.
    let h: Vec<u16> =
        (0..2 * n).map(|i| if i % 7 == 3 { 0xfe00 } else { f16::from_f64(pick(&hvals)).to_bits() }).collect();
    let b: Vec<u16> =
        (0..2 * n).map(|i| if i % 7 == 5 { 0xffc0 } else { bf16::from_f64(pick(&bvals)).to_bits() }).collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        float a = as_type<float>(fx[2 * i]), c = as_type<float>(fx[2 * i + 1]);
        half g = as_type<half>(hx[2 * i]), k = as_type<half>(hx[2 * i + 1]);
        bfloat p = as_type<bfloat>(bx[2 * i]), q = as_type<bfloat>(bx[2 * i + 1]);
        uint r = 0;
        r |= uint(metal::isnormal(a)) << 0; r |= uint(metal::isordered(a, c)) << 1;
        r |= uint(metal::isunordered(a, c)) << 2;
        r |= uint(metal::isnormal(g)) << 3; r |= uint(metal::isordered(g, k)) << 4;
        r |= uint(metal::isunordered(g, k)) << 5;
        r |= uint(metal::isnormal(p)) << 6; r |= uint(metal::isordered(p, q)) << 7;
        r |= uint(metal::isunordered(p, q)) << 8;
        r |= uint(metal::isnormal(float2(c, a)).y) << 9;
        r |= uint(metal::isunordered(half2(g, k), half2(k, g)).x) << 10;
        r |= uint(metal::all(metal::isordered(float4(a), float4(c)))) << 11;
        r |= uint(metal::isnormal(half4(g)).w) << 12;
        r |= uint(metal::signbit(g)) << 13; r |= uint(metal::signbit(p)) << 14;
        r |= uint(metal::signbit(half2(k, g)).y) << 15;
        r |= uint(metal::signbit(metal::copysign(half(1), g))) << 16;
        r |= uint(metal::signbit(metal::copysign(bfloat4(p), bfloat4(q)).z)) << 17;
        o[i] = r;
    "#;
    let kern = kernel("msl_classify", &["fx", "hx", "bx"], &["o"], src);
    let inputs = vec![arr(f.clone()), arr(h.clone()), arr(b.clone())];
    let check = move |o: &[Array]| {
        let got = host::<u32>(&o[0]);
        let mut bad = Vec::new();
        for i in 0..n {
            let (a, c) = (f32::from_bits(f[2 * i]), f32::from_bits(f[2 * i + 1]));
            let (g, k) = (f16::from_bits(h[2 * i]), f16::from_bits(h[2 * i + 1]));
            let (p, q) = (bf16::from_bits(b[2 * i]), bf16::from_bits(b[2 * i + 1]));
            let bits = [
                a.is_normal(),
                !a.is_nan() && !c.is_nan(),
                a.is_nan() || c.is_nan(),
                g.is_normal(),
                !g.is_nan() && !k.is_nan(),
                g.is_nan() || k.is_nan(),
                p.is_normal(),
                !p.is_nan() && !q.is_nan(),
                p.is_nan() || q.is_nan(),
                a.is_normal(),
                g.is_nan() || k.is_nan(),
                !a.is_nan() && !c.is_nan(),
                g.is_normal(),
                h[2 * i] >> 15 == 1,
                b[2 * i] >> 15 == 1,
                h[2 * i] >> 15 == 1,
                h[2 * i] >> 15 == 1,
                b[2 * i + 1] >> 15 == 1,
            ];
            let want: u32 = bits.iter().enumerate().map(|(j, &v)| (v as u32) << j).sum();
            if got[i] != want {
                bad.push(format!("{a:e} {c:e} / {g} {k} / {p} {q}: got {:#x} want {want:#x}", got[i]));
            }
        }
        expect_none("isnormal/isordered/isunordered", &bad);
    };
    Case { kernel: kern, inputs, spec: launch(n, &[(n, DType::U32)]), check: Box::new(check) }
}

pub(super) fn mlx_limits_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let n = 64;
    let mut x: Vec<f32> = vec![0.0, 1e-8, -1e-8, -1.0, 1e30, -0.5, 3.0, 1e-3];
    x.extend((x.len()..n).map(|_| rng.uniform(-0.99, 50.0) as f32));
    let header = "template <typename U> U lowest_of() { return Limits<U>::min; }\n";
    let src = r#"
        uint i = thread_position_in_grid.x;
        float v = x[i];
        lp[i] = as_type<uint>(log1p(v));
        lb[i] = as_type<ushort>(log1p(static_cast<bfloat16_t>(v)));
        lh[i] = as_type<uint>(log1p(static_cast<half>(v)));
        if (i == 0) {
            float m = Limits<float>::min;
            for (int k = 0; k < x_shape[0]; ++k) m = metal::max(m, x[k]);
            lf[0] = as_type<uint>(m);
            lf[1] = as_type<uint>(Limits<float>::max); lf[2] = as_type<uint>(Limits<float>::min);
            lf[3] = as_type<uint>(Limits<float>::finite_max); lf[4] = as_type<uint>(Limits<float>::finite_min);
            lf[5] = as_type<uint>(lowest_of<float>());
            ls[0] = as_type<ushort>(Limits<half>::max); ls[1] = as_type<ushort>(Limits<half>::min);
            ls[2] = as_type<ushort>(Limits<half>::finite_max); ls[3] = as_type<ushort>(Limits<half>::finite_min);
            ls[4] = as_type<ushort>(Limits<bfloat16_t>::max); ls[5] = as_type<ushort>(Limits<bfloat16_t>::min);
            ls[6] = as_type<ushort>(Limits<bfloat16_t>::finite_max);
            ls[7] = as_type<ushort>(Limits<bfloat16_t>::finite_min);
            ls[8] = as_type<ushort>(lowest_of<bfloat16_t>());
            half h = Limits<half>::finite_max; ls[9] = as_type<ushort>(h);
            li[0] = Limits<int>::max; li[1] = Limits<int>::min; li[2] = Limits<uint8_t>::max;
            li[3] = Limits<int64_t>::min; li[4] = Limits<int64_t>::max; li[5] = as_type<long>(Limits<uint64_t>::max);
            li[6] = Limits<bool>::max; li[7] = Limits<bool>::min; li[8] = Limits<int16_t>::finite_min;
            li[9] = Limits<uint32_t>::finite_max; li[10] = lowest_of<int8_t>();
        }
    "#;
    let kern = MetalKernel::new("msl_mlx_limits", &["x"], &["lp", "lb", "lh", "lf", "ls", "li"], src)
        .expect("kernel")
        .header(header);
    let inputs = vec![arr(x.clone())];
    let check = move |o: &[Array]| {
        let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let lp: Vec<f64> = host::<u32>(&o[0]).into_iter().map(f32b).collect();
        check_ulps("log1p(float)", &lp, |i| xd[i].ln_1p(), 4.0, F32, &xd);
        let lb: Vec<f64> = host::<u16>(&o[1]).into_iter().map(bf16b).collect();
        check_ulps("log1p(bfloat)", &lb, |i| bf16::from_f64(xd[i]).to_f64().ln_1p(), 1.0, BF16, &xd);
        let lh: Vec<f64> = host::<u32>(&o[2]).into_iter().map(f32b).collect();
        check_ulps("log1p(half)", &lh, |i| f16::from_f64(xd[i]).to_f64().ln_1p(), 4.0, F32, &xd);
        let max = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let lf = host::<u32>(&o[3]);
        let want_f = [max, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, f32::NEG_INFINITY].map(f32::to_bits);
        assert_eq!(lf, want_f, "Limits<float>");
        let ls = host::<u16>(&o[4]);
        let want_s = [0x7c00, 0xfc00, 0x7bff, 0xfbff, 0x7f80, 0xff80, 0x7f7f, 0xff7f, 0xff80, 0x7bff];
        assert_eq!(ls, want_s, "Limits<half> and Limits<bfloat16_t>");
        let li = host::<i64>(&o[5]);
        let want_i =
            [i32::MAX as i64, i32::MIN as i64, 255, i64::MIN, i64::MAX, -1, 1, 0, -32768, u32::MAX as i64, -128];
        assert_eq!(li, want_i, "Limits of the integer types and bool");
    };
    let outs = [(n, DType::U32), (n, DType::U16), (n, DType::U32), (6, DType::U32), (10, DType::U16), (11, DType::I64)];
    Case { kernel: kern, inputs, spec: launch(n, &outs), check: Box::new(check) }
}

/// Kernels that call `metal::cbrt`, `metal::log1p` and `metal::expm1`, with an input for them.
pub(super) fn unsupported_kernels() -> Vec<(MetalKernel, Array)> {
    ["cbrt", "log1p", "expm1"]
        .into_iter()
        .map(|f| {
            let src = format!("uint i = thread_position_in_grid.x;\no[i] = metal::{f}(x[i]);\n");
            (kernel(&format!("msl_no_{f}"), &["x"], &["o"], &src), arr(vec![0.5f32; 16]))
        })
        .collect()
}
