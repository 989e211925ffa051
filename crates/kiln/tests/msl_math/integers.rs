//! The integer functions of every width against i128 arithmetic (u128 for 64-bit unsigned
//! products), scalar and vector forms, and mul24/mad24 of int and uint.

use super::*;

const INT_COLS: usize = 19;

/// The integer functions of one type `T` (`width` bits, `signed`).
pub(super) fn int_case(seed: u64, dtype: DType, width: u32, signed: bool) -> Case {
    let mut rng = Rng::new(seed);
    let n = 192;
    let (lo, hi): (i128, i128) =
        if signed { (-(1 << (width - 1)), (1 << (width - 1)) - 1) } else { (0, (1 << width) - 1) };
    let wrap = move |v: i128| -> i128 {
        let m = v.rem_euclid(1i128 << width);
        if signed && m > hi {
            m - (1i128 << width)
        } else {
            m
        }
    };
    let specials =
        [lo, hi, 0, 1, hi - 1, lo + 1, if signed { -1 } else { hi / 2 }, if signed { -2 } else { hi / 2 + 1 }];
    let mut gen = |k: usize| -> Vec<i128> {
        (0..n)
            .map(|i| if i < specials.len() { specials[(i + k) % specials.len()] } else { wrap(rng.next_u64() as i128) })
            .collect()
    };
    let (x, y, z) = (gen(0), gen(3), gen(5));
    let bits: Vec<u32> = (0..n)
        .map(|i| if i < 4 { [0, width, 1, width - 1][i] } else { (x[i] as u32 ^ z[i] as u32) % (width + 1) })
        .collect();
    let off: Vec<u32> = (0..n).map(|i| (y[i] as u32).wrapping_mul(7) % (width - bits[i] + 1)).collect();
    let src = r#"
        uint i = thread_position_in_grid.x;
        const uint C = 19;
        T X = x[i], Y = y[i], Z = z[i];
        uint b = nb[i], f = off[i];
        device T* r = o + i * C;
        r[0] = absdiff(X, Y); r[1] = addsat(X, Y); r[2] = subsat(X, Y);
        r[3] = hadd(X, Y); r[4] = rhadd(X, Y); r[5] = mulhi(X, Y);
        r[6] = madhi(X, Y, Z); r[7] = madsat(X, Y, Z);
        r[8] = min3(X, Y, Z); r[9] = max3(X, Y, Z); r[10] = median3(X, Y, Z);
        r[11] = extract_bits(X, f, b); r[12] = insert_bits(X, Y, f, b);
        r[13] = addsat(vec<T, 2>(X, Y), vec<T, 2>(Y, Z)).y;
        r[14] = mulhi(vec<T, 3>(X), vec<T, 3>(Y)).z;
        r[15] = extract_bits(vec<T, 2>(Y, X), f, b).y;
        r[16] = popcount(vec<T, 2>(X, Y)).y;
        r[17] = madsat(vec<T, 4>(X), vec<T, 4>(Y), vec<T, 4>(Z)).w;
        r[18] = insert_bits(vec<T, 2>(X, Y), vec<T, 2>(Y, X), f, b).x;
    "#;
    let k = kernel(&format!("msl_int_{dtype}"), &["x", "y", "z", "nb", "off"], &["o"], src);
    let to_array = |v: &[i128]| -> Array {
        let f: Vec<f64> = v.iter().map(|&e| e as f64).collect();
        match dtype {
            DType::I64 => arr(v.iter().map(|&e| e as i64).collect()),
            DType::U64 => arr(v.iter().map(|&e| e as u64).collect()),
            _ => Array::from_f64(dtype, &[v.len()], &f).expect("array"),
        }
    };
    let inputs = vec![to_array(&x), to_array(&y), to_array(&z), arr(bits.clone()), arr(off.clone())];
    let check = move |o: &[Array]| {
        let got: Vec<i128> = match dtype {
            DType::I64 => host::<i64>(&o[0]).into_iter().map(i128::from).collect(),
            DType::U64 => host::<u64>(&o[0]).into_iter().map(i128::from).collect(),
            _ => o[0].to_host().unwrap().to_f64_vec().unwrap().into_iter().map(|v| v as i128).collect(),
        };
        let sat = |v: i128| v.clamp(lo, hi);
        let ubits = |v: i128| (v.rem_euclid(1i128 << width)) as u128;
        let extract = |v: i128, f: u32, b: u32| -> i128 {
            if b == 0 {
                return 0;
            }
            let fld = ((ubits(v) >> f) & ((1u128 << b) - 1)) as i128;
            if signed && (fld >> (b - 1)) & 1 == 1 {
                fld - (1i128 << b)
            } else {
                fld
            }
        };
        let insert = |base: i128, ins: i128, f: u32, b: u32| -> i128 {
            let mask = ((1u128 << b) - 1) << f;
            wrap(((ubits(base) & !mask) | ((ubits(ins) << f) & mask)) as i128)
        };
        // u64 products overflow i128: those go through u128.
        let wide = width == 64 && !signed;
        let mul_hi = |a: i128, b: i128| {
            if wide {
                ((a as u128 * b as u128) >> 64) as i128
            } else {
                (a * b) >> width
            }
        };
        let mad_sat = |a: i128, b: i128, c: i128| {
            if wide {
                (a as u128 * b as u128 + c as u128).min(hi as u128) as i128
            } else {
                sat(a * b + c)
            }
        };
        let med = |a: i128, b: i128, c: i128| {
            let mut v = [a, b, c];
            v.sort();
            v[1]
        };
        let mut bad = Vec::new();
        for i in 0..n {
            let (a, b, c, nb, f) = (x[i], y[i], z[i], bits[i], off[i]);
            let want: [i128; INT_COLS] = [
                wrap((a - b).abs()),
                sat(a + b),
                sat(a - b),
                (a + b).div_euclid(2),
                (a + b + 1).div_euclid(2),
                mul_hi(a, b),
                wrap(mul_hi(a, b) + c),
                mad_sat(a, b, c),
                a.min(b).min(c),
                a.max(b).max(c),
                med(a, b, c),
                extract(a, f, nb),
                insert(a, b, f, nb),
                sat(b + c),
                mul_hi(a, b),
                extract(a, f, nb),
                ubits(b).count_ones() as i128,
                mad_sat(a, b, c),
                insert(a, b, f, nb),
            ];
            for (col, w) in want.into_iter().enumerate() {
                if got[i * INT_COLS + col] != w {
                    bad.push(format!(
                        "column {col}: x={a} y={b} z={c} bits={nb} offset={f}: got {} want {w}",
                        got[i * INT_COLS + col]
                    ));
                }
            }
        }
        expect_none(&format!("integer functions of {dtype}"), &bad);
    };
    let spec = launch(n, &[(n * INT_COLS, dtype)]).template("T", dtype);
    Case { kernel: k, inputs, spec, check: Box::new(check) }
}

pub(super) const INT_TYPES: [(DType, u32, bool); 8] = [
    (DType::I8, 8, true),
    (DType::U8, 8, false),
    (DType::I16, 16, true),
    (DType::U16, 16, false),
    (DType::I32, 32, true),
    (DType::U32, 32, false),
    (DType::I64, 64, true),
    (DType::U64, 64, false),
];

pub(super) fn mul24_case(seed: u64, signed: bool) -> Case {
    let mut rng = Rng::new(seed);
    let n = 128;
    let (lo, hi) = if signed { (-(1i64 << 23), (1i64 << 23) - 1) } else { (0, (1i64 << 24) - 1) };
    let mut g = |a: i64, b: i64| -> Vec<i64> { (0..n).map(|_| rng.uniform(a as f64, b as f64 + 1.0) as i64).collect() };
    let (x, y, z) = (g(lo, hi), g(lo, hi), g(i32::MIN as i64, i32::MAX as i64));
    let dtype = if signed { DType::I32 } else { DType::U32 };
    let src = r#"
        uint i = thread_position_in_grid.x;
        o[3 * i] = mul24(x[i], y[i]);
        o[3 * i + 1] = mad24(x[i], y[i], z[i]);
        o[3 * i + 2] = mad24(vec<T, 2>(x[i], y[i]), vec<T, 2>(y[i], x[i]), vec<T, 2>(z[i])).y;
    "#;
    let k = kernel(&format!("msl_mul24_{dtype}"), &["x", "y", "z"], &["o"], src);
    let to_array = |v: &[i64]| -> Array {
        if signed {
            arr(v.iter().map(|&e| e as i32).collect())
        } else {
            arr(v.iter().map(|&e| e as i32 as u32).collect())
        }
    };
    let inputs = vec![to_array(&x), to_array(&y), to_array(&z)];
    let check = move |o: &[Array]| {
        let got: Vec<i64> = o[0].to_host().unwrap().to_f64_vec().unwrap().into_iter().map(|v| v as i64).collect();
        let wrap = |v: i64| if signed { v as i32 as i64 } else { v as u32 as i64 };
        let mut bad = Vec::new();
        for i in 0..n {
            let z = wrap(z[i]);
            let want = [wrap(x[i] * y[i]), wrap(x[i] * y[i] + z), wrap(y[i] * x[i] + z)];
            for (c, w) in want.into_iter().enumerate() {
                if got[3 * i + c] != w {
                    bad.push(format!("column {c}: {} {} {z}: got {} want {w}", x[i], y[i], got[3 * i + c]));
                }
            }
        }
        expect_none(&format!("mul24/mad24 of {dtype}"), &bad);
    };
    let spec = launch(n, &[(3 * n, dtype)]).template("T", dtype);
    Case { kernel: k, inputs, spec, check: Box::new(check) }
}
