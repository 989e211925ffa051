//! float64 and integer sources, and the named edges: midpoints between neighbouring 16-bit
//! values and their nearest f64 neighbours, subnormals, signed zeros, infinities and NaN
//! payloads, integers past 2^24 and 2^53, each against the reference.

mod reference;

use kiln_convert::Format;

const FORMATS: [Format; 2] = [Format::F16, Format::BF16];

fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

fn next_down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[track_caller]
fn check_f64(f: Format, x: f64) {
    let (got, want) = (f.round_f64(x), reference::from_f64(f, x));
    assert_eq!(got, want, "{f:?} from f64 {x:e} ({:#018x}): {got:#06x}, want {want:#06x}", x.to_bits());
}

#[track_caller]
fn check_int(f: Format, v: i128) {
    let (got, want) = (f.round_int(v), reference::from_int(f, v));
    assert_eq!(got, want, "{f:?} from integer {v}: {got:#06x}, want {want:#06x}");
}

#[test]
fn values_just_past_a_midpoint_round_away_from_it() {
    // float32 0x3eaa8003 lies 3 float32 steps above a bfloat16 midpoint.
    assert_eq!(Format::BF16.round_f32(f32::from_bits(0x3eaa_8003)), 0x3eab);
    assert_eq!(Format::BF16.round_f64(f64::from(f32::from_bits(0x3eaa_8003))), 0x3eab);
    // 1 + 2^-11 is the float16 midpoint above 1; 2^-40 more must round up.
    assert_eq!(Format::F16.round_f64(1.0 + 2f64.powi(-11) + 2f64.powi(-40)), 0x3c01);
    assert_eq!(Format::F16.round_f64(1.0 + 2f64.powi(-11)), 0x3c00);
    assert_eq!(Format::BF16.round_f64(1.0 + 2f64.powi(-8) + 2f64.powi(-40)), 0x3f81);
    assert_eq!(Format::BF16.round_f64(-(1.0 + 2f64.powi(-8) + 2f64.powi(-40))), 0xbf81);
}

// Every midpoint between neighbouring finite values (and the overflow threshold), exactly, one
// f64 step either side, and a relative 2^-40 either side, with both signs.
#[test]
fn float64_midpoints_and_their_neighbours_round_to_nearest_even() {
    for f in FORMATS {
        let mut vals = reference::values(f);
        vals.push(2f64.powi(f.bias() + 1));
        for w in vals.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            let tiny = mid * 2f64.powi(-40);
            for x in [mid, next_up(mid), next_down(mid), mid + tiny, mid - tiny, w[0], w[1]] {
                check_f64(f, x);
                check_f64(f, -x);
            }
        }
    }
}

#[test]
fn float64_subnormals_zeros_and_infinities() {
    for f in FORMATS {
        for x in [0.0, f64::MIN_POSITIVE, 5e-324, 1e-310, f64::MAX, f64::INFINITY, 1e300, 1e-300] {
            check_f64(f, x);
            check_f64(f, -x);
        }
        assert_eq!(f.round_f64(0.0), 0x0000);
        assert_eq!(f.round_f64(-0.0), 0x8000);
        assert_eq!(f.round_f64(f64::INFINITY), f.infinity());
        assert_eq!(f.round_f64(f64::NEG_INFINITY), f.infinity() | 0x8000);
        assert_eq!(f.round_f64(-5e-324), 0x8000);
    }
    // The smallest float16 subnormal is 2^-24: half of it ties to zero, anything more rounds up.
    assert_eq!(Format::F16.round_f64(2f64.powi(-25)), 0x0000);
    assert_eq!(Format::F16.round_f64(next_up(2f64.powi(-25))), 0x0001);
    assert_eq!(Format::F16.round_f64(3.0 * 2f64.powi(-25)), 0x0002);
    assert_eq!(Format::BF16.round_f64(2f64.powi(-134)), 0x0000);
    assert_eq!(Format::BF16.round_f64(next_up(2f64.powi(-134))), 0x0001);
    // The largest subnormal rounds up into the smallest normal.
    assert_eq!(Format::F16.round_f64(2f64.powi(-14) - 2f64.powi(-26)), 0x0400);
    // float16 overflows at 65520, bfloat16 at (2 - 2^-8) 2^127.
    assert_eq!(Format::F16.round_f64(next_down(65520.0)), 0x7bff);
    assert_eq!(Format::F16.round_f64(65520.0), 0x7c00);
    assert_eq!(Format::BF16.round_f64(next_down((2.0 - 2f64.powi(-8)) * 2f64.powi(127))), 0x7f7f);
    assert_eq!(Format::BF16.round_f64((2.0 - 2f64.powi(-8)) * 2f64.powi(127)), 0x7f80);
}

#[test]
fn random_float64_values_match_the_reference() {
    let mut rng = Rng(7);
    for _ in 0..2_000_000 {
        // Random bits, and random values in the formats' ranges.
        let bits = rng.next();
        let x = f64::from_bits(bits);
        let scaled = (bits as i64 as f64) * 2f64.powi((rng.next() % 200) as i32 - 190);
        for f in FORMATS {
            check_f64(f, x);
            check_f64(f, scaled);
        }
    }
}

// NaN stays NaN with its sign and comes out quiet: float16 keeps the top 9 payload bits under
// the quiet bit (NumPy 2.4 gives these bits for quiet NaNs; it leaves 0x7f800001 signalling as
// 0x7c01), bfloat16 is 0x7fc0 with the sign (ml_dtypes 0.6 gives exactly these).
#[test]
fn nan_keeps_its_sign_and_is_quiet() {
    let cases: [(u32, u16, u16); 8] = [
        (0x7fc0_0000, 0x7e00, 0x7fc0),
        (0xffc0_0001, 0xfe00, 0xffc0),
        (0xffc0_2000, 0xfe01, 0xffc0),
        (0x7fff_ffff, 0x7fff, 0x7fc0),
        (0x7fe0_0000, 0x7f00, 0x7fc0),
        (0x7f80_0001, 0x7e00, 0x7fc0),
        (0xff80_0001, 0xfe00, 0xffc0),
        (0x7fa0_1234, 0x7f00, 0x7fc0),
    ];
    for (bits, h, b) in cases {
        let x = f32::from_bits(bits);
        assert_eq!(Format::F16.round_f32(x), h, "float16 from {bits:#010x}");
        assert_eq!(Format::BF16.round_f32(x), b, "bfloat16 from {bits:#010x}");
        // The same NaN as f64 (payload left-aligned) gives the same bits.
        let wide = (u64::from(bits >> 31) << 63) | 0x7ff0_0000_0000_0000 | (u64::from(bits & 0x7f_ffff) << 29);
        assert_eq!(Format::F16.round_f64(f64::from_bits(wide)), h, "float16 from f64 {wide:#018x}");
        assert_eq!(Format::BF16.round_f64(f64::from_bits(wide)), b, "bfloat16 from f64 {wide:#018x}");
    }
    assert_eq!(Format::F16.round_f64(f64::from_bits(0x7ff0_0000_0000_0001)), 0x7e00);
}

#[test]
fn integers_round_once_from_their_exact_value() {
    // 2^60 + 2^52 + 1 lies just above a bfloat16 midpoint; through f64 it would be the midpoint
    // itself and round down to 2^60.
    assert_eq!(Format::BF16.round_int((1 << 60) + (1 << 52) + 1), 0x5d81);
    assert_eq!(Format::BF16.round_int(-((1 << 60) + (1 << 52) + 1)), 0xdd81);
    assert_eq!(Format::BF16.round_int((1 << 60) + (1 << 52)), 0x5d80);
    assert_eq!(Format::F16.round_int(65519), 0x7bff);
    assert_eq!(Format::F16.round_int(65520), 0x7c00);
    assert_eq!(Format::F16.round_int(2049), 0x6800); // tie between 2048 and 2050: even
    assert_eq!(Format::F16.round_int(2051), 0x6802);
    assert_eq!(Format::F16.round_int(0), 0);
    let edges = [i128::from(i64::MIN), i128::from(i64::MAX), i128::from(u64::MAX), i128::MAX, i128::MIN, 1 << 24];
    let mut rng = Rng(11);
    for f in FORMATS {
        for &v in &edges {
            check_int(f, v);
            check_int(f, v + 1);
            check_int(f, v - 1);
        }
        // Every midpoint k·q + q/2 between neighbours of 2^e..2^(e+1) for e up to 120, and one
        // either side, with random steps k.
        for e in 11..120 {
            let q = 1i128 << (e - f.mantissa_bits() as i32);
            for _ in 0..200 {
                let k = (1i128 << f.mantissa_bits()) + (rng.next() % (1 << f.mantissa_bits())) as i128;
                let mid = k * q + q / 2;
                for v in [mid - 1, mid, mid + 1] {
                    check_int(f, v);
                    check_int(f, -v);
                }
            }
        }
        for _ in 0..200_000 {
            let v = rng.next() as i64;
            check_int(f, i128::from(v));
            check_int(f, i128::from(v >> (rng.next() % 64)));
            check_int(f, i128::from(v as u64));
        }
    }
}
