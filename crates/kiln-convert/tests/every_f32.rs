//! Every float32 bit pattern, rounded to float16 and to bfloat16, against the reference's walk
//! over the midpoints. The 2^32 patterns are split over the available cores; the crate is built
//! optimised even in the test profile (the workspace's profile override), so this takes seconds.

mod reference;

use kiln_convert::Format;

/// Mismatches among the magnitudes `first..=last` and their negatives (count, first few).
fn check_magnitudes(f: Format, first: u32, last: u32) -> (u64, Vec<String>) {
    let mut count = 0u64;
    let mut shown = Vec::new();
    let mut sweep = reference::Sweep::new(f, f64::from(f32::from_bits(first.min(0x7f7f_ffff))));
    for bits in first..=last {
        let x = f32::from_bits(bits);
        let want = if x.is_nan() {
            reference::from_f32(f, x)
        } else if x.is_infinite() {
            f.infinity()
        } else {
            sweep.round(f64::from(x))
        };
        for (pattern, want) in [(bits, want), (bits | 0x8000_0000, want | 0x8000)] {
            let got = f.round_f32(f32::from_bits(pattern));
            if got != want {
                count += 1;
                if shown.len() < 8 {
                    shown.push(format!("{f:?} {pattern:#010x}: {got:#06x}, want {want:#06x}"));
                }
            }
        }
    }
    (count, shown)
}

fn every_pattern(f: Format) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 64) as u32;
    let span = 0x8000_0000u32.div_ceil(threads);
    let results: Vec<(u64, Vec<String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let first = t * span;
                let last = (first + (span - 1)).min(0x7fff_ffff);
                s.spawn(move || check_magnitudes(f, first, last))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let count: u64 = results.iter().map(|r| r.0).sum();
    let shown: Vec<&String> = results.iter().flat_map(|r| &r.1).take(16).collect();
    assert_eq!(count, 0, "{f:?}: {count} wrong conversions, first: {shown:#?}");
}

#[test]
fn every_float32_pattern_rounds_to_nearest_even_float16() {
    every_pattern(Format::F16);
}

#[test]
fn every_float32_pattern_rounds_to_nearest_even_bfloat16() {
    every_pattern(Format::BF16);
}

// The walk's table decodes the same values as the half crate's (exact) widening.
#[test]
fn the_reference_tables_hold_the_formats_values() {
    for (h, v) in reference::values(Format::F16).into_iter().enumerate() {
        assert_eq!(v, half::f16::from_bits(h as u16).to_f64(), "f16 {h:#06x}");
    }
    for (h, v) in reference::values(Format::BF16).into_iter().enumerate() {
        assert_eq!(v, half::bf16::from_bits(h as u16).to_f64(), "bf16 {h:#06x}");
    }
}
