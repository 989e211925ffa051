//! The float `fmax`, `fmin`, `max`, `min`, `clamp` and `saturate` of the CPU prelude, which it
//! computes inline (so that loops over them vectorize) with the results of the libm calls they
//! stand for: on x86-64 the bits glibc's `fmaxf` / `fminf` give, signed zeros and NaN payloads
//! included, for every pair of special values (zeros, infinities, quiet and signaling NaNs of
//! both signs, subnormals) and for random pairs with equal values among them; elsewhere the
//! ordered cases. Run through the direct loop of a barrier-free kernel (thousands of threads,
//! spans the compiler vectorizes) and through the per-thread path of a checked launch. The
//! expectations are glibc's rules, written out here; inputs and outputs travel as bits.

mod common;

use common::Rng;
use kiln::backend::cpu::CheckedScope;
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

const QUIET: u32 = 0x0040_0000;

fn is_nan(b: u32) -> bool {
    b & 0x7fff_ffff > 0x7f80_0000
}

/// glibc's unordered result (x86-64): with a signaling NaN, y quieted where y is a NaN, else x
/// quieted; otherwise the operand that is not a NaN, or y when both are.
fn unordered(x: u32, y: u32) -> u32 {
    let signaling = |b: u32| is_nan(b) && b & QUIET == 0;
    if signaling(x) || signaling(y) {
        (if is_nan(y) { y } else { x }) | QUIET
    } else if is_nan(y) && !is_nan(x) {
        x
    } else {
        y
    }
}

fn fmax_ref(x: u32, y: u32) -> u32 {
    if is_nan(x) || is_nan(y) {
        return unordered(x, y);
    }
    if f32::from_bits(x) >= f32::from_bits(y) {
        x
    } else {
        y
    }
}

fn fmin_ref(x: u32, y: u32) -> u32 {
    if is_nan(x) || is_nan(y) {
        return unordered(x, y);
    }
    if f32::from_bits(x) <= f32::from_bits(y) {
        x
    } else {
        y
    }
}

const SPECIAL: [u32; 14] = [
    0x0000_0000,
    0x8000_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_0001,
    0x7fc1_2345,
    0x7fa0_0000,
    0xff80_0001,
    0x0000_0001,
    0x8000_0001,
    0x7f7f_ffff,
];

#[test]
fn float_min_and_max_give_libms_bits() {
    let mut pairs: Vec<(u32, u32)> = SPECIAL.iter().flat_map(|&x| SPECIAL.iter().map(move |&y| (x, y))).collect();
    let mut rng = Rng::new(0x006d_6178);
    while pairs.len() < 8192 {
        let x = (rng.normal() * 4.0) as f32;
        // A quarter of the pairs equal, some of them zeros of either sign.
        let y = match rng.next_u64() % 8 {
            0 | 1 => x,
            2 => -0.0f32 * x.signum(),
            _ => (rng.normal() * 4.0) as f32,
        };
        pairs.push((x.to_bits(), y.to_bits()));
    }
    let n = pairs.len();
    let xs = Array::from_vec(&[n], pairs.iter().map(|p| p.0).collect::<Vec<u32>>()).unwrap();
    let ys = Array::from_vec(&[n], pairs.iter().map(|p| p.1).collect::<Vec<u32>>()).unwrap();
    let src = "uint i = thread_position_in_grid.x;\n\
               float x = as_type<float>(xb[i]), y = as_type<float>(yb[i]);\n\
               out[6 * i + 0] = as_type<uint>(metal::fmax(x, y));\n\
               out[6 * i + 1] = as_type<uint>(metal::fmin(x, y));\n\
               out[6 * i + 2] = as_type<uint>(metal::max(x, y));\n\
               out[6 * i + 3] = as_type<uint>(metal::min(x, y));\n\
               out[6 * i + 4] = as_type<uint>(metal::clamp(x, -0.5f, y));\n\
               out[6 * i + 5] = as_type<uint>(metal::saturate(x));";
    let kernel = MetalKernel::new("cpu_float_min_max", &["xb", "yb"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([n as u32, 1, 1], [256, 1, 1]).output(&[6 * n], DType::U32).device(Device::Cpu);
    let direct = kernel.call(&[(&xs).into(), (&ys).into()], &spec).unwrap()[0].to_vec::<u32>().unwrap();
    let per_thread = {
        let _checked = CheckedScope::enter();
        kernel.call(&[(&xs).into(), (&ys).into()], &spec).unwrap()[0].to_vec::<u32>().unwrap()
    };
    assert_eq!(direct, per_thread, "the direct loop and the per-thread path agree");
    let half = (-0.5f32).to_bits();
    let mut wrong = Vec::new();
    for (i, &(x, y)) in pairs.iter().enumerate() {
        let want = [
            fmax_ref(x, y),
            fmin_ref(x, y),
            fmax_ref(x, y),
            fmin_ref(x, y),
            fmin_ref(fmax_ref(x, half), y),
            fmin_ref(fmax_ref(x, 0), 1.0f32.to_bits()),
        ];
        let ordered = !is_nan(x) && !is_nan(y) && f32::from_bits(x) != f32::from_bits(y);
        for (k, &w) in want.iter().enumerate() {
            let got = direct[6 * i + k];
            // Off x86-64 the prelude calls libm, whose zeros and NaNs may differ: ordered pairs only.
            if got != w && (cfg!(target_arch = "x86_64") || (ordered && k < 4)) {
                wrong.push(format!("op {k} of ({x:#010x}, {y:#010x}): {got:#010x}, want {w:#010x}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} wrong, first: {:?}", wrong.len(), &wrong[..wrong.len().min(8)]);
}
