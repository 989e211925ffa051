//! SIMD-group and quad-group functions against models of MSL 6.9.2/6.9.3 written here: each
//! function combines the lanes active at the call (lanes that took another branch, left a loop
//! or returned do not take part, and lanes meet again where a branch ends); votes, shuffle-and-
//! fill and the quad-group functions follow the specification's definitions. Inputs are random,
//! outputs start as a sentinel, results are integers compared exactly.

mod common;

use common::{on, Rng};
use kiln::{Array, DType, Device, LaunchSpec, MetalKernel};

const SENTINEL: i32 = -7777;

/// Runs `source` on int32 inputs over a 1-D grid and returns the int32 output of `cols`
/// values per thread.
fn run(
    device: Device,
    name: &str,
    header: &str,
    source: &str,
    inputs: &[(&str, &[i32])],
    (n, tg): (u32, u32),
    cols: usize,
) -> Vec<i32> {
    let names: Vec<&str> = inputs.iter().map(|(name, _)| *name).collect();
    let kernel = MetalKernel::new(name, &names, &["out"], source).unwrap().header(header);
    let arrays: Vec<Array> = inputs.iter().map(|(_, v)| Array::from_vec(&[v.len()], v.to_vec()).unwrap()).collect();
    let args: Vec<kiln::KernelInput> = arrays.iter().map(|a| on(device, a)).collect();
    let spec = LaunchSpec::new([n, 1, 1], [tg, 1, 1])
        .output(&[n as usize * cols], DType::I32)
        .init_value(SENTINEL as f64)
        .device(device);
    let out = kernel.call(&args, &spec).unwrap();
    out[0].to_host().unwrap().to_vec::<i32>().unwrap()
}

/// The threads of each SIMD-group of a 1-D launch of `n` threads in groups of `tg`.
fn simdgroups(n: usize, tg: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for g0 in (0..n).step_by(tg) {
        let end = (g0 + tg).min(n);
        for s0 in (g0..end).step_by(32) {
            out.push((s0..(s0 + 32).min(end)).collect());
        }
    }
    out
}

fn ints(rng: &mut Rng, n: usize, lo: i64, hi: i64) -> Vec<i32> {
    (0..n).map(|_| (lo + (rng.next_u64() % (hi - lo + 1) as u64) as i64) as i32).collect()
}

/// Compares `got` with `want` where `want` is defined, naming the first difference.
#[track_caller]
fn check(what: &str, got: &[i32], want: &[Option<i32>], cols: usize, names: &[&str]) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    let mut checked = 0;
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(w) = w {
            checked += 1;
            assert_eq!(g, w, "{what}: thread {} column {} ({})", k / cols, k % cols, names[k % cols]);
        }
    }
    assert!(checked * 2 > want.len(), "{what}: too few defined results ({checked})");
}

// Reductions and prefixes over the active lanes of partial and divergent SIMD-groups and quads:
// each active lane's value counts once (XOR cancels a value counted twice).
fn reductions_and_prefixes_count_each_active_lane_once(device: Device) {
    const C: usize = 20;
    let (n, tg) = (100usize, 64usize);
    let mut rng = Rng::new(301);
    let a = ints(&mut rng, n, -1000, 1000);
    let b = ints(&mut rng, n, i32::MIN as i64, i32::MAX as i64);
    let p = ints(&mut rng, n, 1, 7);
    let names = [
        "simd_xor",
        "simd_and",
        "simd_or",
        "simd_product",
        "simd_min",
        "simd_max",
        "simd_prefix_inclusive_sum",
        "simd_prefix_exclusive_sum",
        "simd_prefix_inclusive_product",
        "simd_prefix_exclusive_product",
        "quad_xor",
        "quad_and",
        "quad_or",
        "quad_product",
        "quad_prefix_inclusive_sum",
        "quad_prefix_exclusive_sum",
        "quad_prefix_inclusive_product",
        "quad_prefix_exclusive_product",
        "simd_sum",
        "quad_sum",
    ];
    let arg = |f: &str| {
        if f.ends_with("product") {
            "pv"
        } else if f.ends_with("xor") || f.ends_with("and") || f.ends_with("_or") {
            "bv"
        } else {
            "av"
        }
    };
    let calls: String =
        names.iter().enumerate().map(|(c, f)| format!("    out[i * {C} + {c}] = int({f}({}));\n", arg(f))).collect();
    let src = format!(
        "uint i = thread_position_in_grid.x;\nint av = a[i];\nint bv = b[i];\nuint pv = uint(p[i]);\nif (av % 3 != 0) {{\n{calls}}}\n"
    );
    let got = run(device, "simd_reductions", "", &src, &[("a", &a), ("b", &b), ("p", &p)], (n as u32, tg as u32), C);

    let mut want = vec![Some(SENTINEL); n * C];
    for sg in simdgroups(n, tg) {
        let act: Vec<usize> = sg.iter().copied().filter(|&i| a[i] % 3 != 0).collect();
        for &i in &act {
            let quad: Vec<usize> = act.iter().copied().filter(|&j| (j - sg[0]) / 4 == (i - sg[0]) / 4).collect();
            let below = |set: &[usize], incl: bool| -> Vec<usize> {
                set.iter().copied().filter(|&j| j < i || (incl && j == i)).collect()
            };
            let xor = |set: &[usize]| set.iter().fold(0i32, |s, &j| s ^ b[j]);
            let and = |set: &[usize]| set.iter().fold(-1i32, |s, &j| s & b[j]);
            let or = |set: &[usize]| set.iter().fold(0i32, |s, &j| s | b[j]);
            let prod = |set: &[usize]| set.iter().fold(1u32, |s, &j| s.wrapping_mul(p[j] as u32)) as i32;
            let sum = |set: &[usize]| set.iter().map(|&j| a[j]).sum::<i32>();
            let row = [
                xor(&act),
                and(&act),
                or(&act),
                prod(&act),
                act.iter().map(|&j| a[j]).min().unwrap(),
                act.iter().map(|&j| a[j]).max().unwrap(),
                sum(&below(&act, true)),
                sum(&below(&act, false)),
                prod(&below(&act, true)),
                prod(&below(&act, false)),
                xor(&quad),
                and(&quad),
                or(&quad),
                prod(&quad),
                sum(&below(&quad, true)),
                sum(&below(&quad, false)),
                prod(&below(&quad, true)),
                prod(&below(&quad, false)),
                sum(&act),
                sum(&quad),
            ];
            for (c, v) in row.iter().enumerate() {
                want[i * C + c] = Some(*v);
            }
        }
    }
    check("reductions", &got, &want, C, &names);
}

/// Shuffle-and-fill over vectors of `m` lanes starting at `base` (MSL 6.9.2): lane j reads
/// data from j - delta (up) or j + delta (down) of its vector, or filling data from the lane it
/// wraps around to.
fn fill_model(d: &[i32], f: &[i32], lane: usize, m: usize, delta: usize, up: bool) -> i32 {
    let (base, j) = (lane - lane % m, lane % m);
    if up {
        if j >= delta {
            d[base + j - delta]
        } else {
            f[base + m - delta + j]
        }
    } else if j + delta < m {
        d[base + j + delta]
    } else {
        f[base + j + delta - m]
    }
}

fn shuffle_and_fill_wraps_filling_data_in(device: Device) {
    let (n, tg) = (128usize, 64usize);
    let mut rng = Rng::new(302);
    let d = ints(&mut rng, n, -100_000, 100_000);
    let f = ints(&mut rng, n, -100_000, 100_000);
    // (expression, vector width, delta, up)
    let cases: [(&str, usize, usize, bool); 11] = [
        ("simd_shuffle_and_fill_up(dv, fv, 3)", 32, 3, true),
        ("simd_shuffle_and_fill_down(dv, fv, 5)", 32, 5, false),
        ("simd_shuffle_and_fill_up(dv, fv, 2, 8)", 8, 2, true),
        ("simd_shuffle_and_fill_down(dv, fv, 3, 16)", 16, 3, false),
        ("simd_shuffle_and_fill_up(dv, fv, ushort(1), ushort(4))", 4, 1, true),
        ("quad_shuffle_and_fill_up(dv, fv, 1)", 4, 1, true),
        ("quad_shuffle_and_fill_down(dv, fv, 3)", 4, 3, false),
        ("quad_shuffle_and_fill_up(dv, fv, 1, 2)", 2, 1, true),
        ("quad_shuffle_and_fill_down(dv, fv, 1, 2)", 2, 1, false),
        ("int(simd_shuffle_and_fill_up(float(dv), float(fv), 7))", 32, 7, true),
        ("int(simd_shuffle_and_fill_down(long(dv) << 20, long(fv) << 20, 4) >> 20)", 32, 4, false),
    ];
    let c_n = cases.len();
    let body: String = cases.iter().enumerate().map(|(c, (e, ..))| format!("out[i * {c_n} + {c}] = {e};\n")).collect();
    let src = format!("uint i = thread_position_in_grid.x;\nint dv = d[i];\nint fv = f[i];\n{body}");
    let got = run(device, "shuffle_fill", "", &src, &[("d", &d), ("f", &f)], (n as u32, tg as u32), c_n);
    let mut want = vec![None; n * c_n];
    for sg in simdgroups(n, tg) {
        let (ds, fs) = (&d[sg[0]..sg[0] + 32], &f[sg[0]..sg[0] + 32]);
        for lane in 0..32 {
            for (c, &(_, m, delta, up)) in cases.iter().enumerate() {
                want[(sg[0] + lane) * c_n + c] = Some(fill_model(ds, fs, lane, m, delta, up));
            }
        }
    }
    let names: Vec<&str> = cases.iter().map(|c| c.0).collect();
    check("shuffle and fill", &got, &want, c_n, &names);
}

// Quad-group and vote functions in divergent code: ballots hold the active lanes' votes, all()
// and any() of a vote read every lane's bit (so a ballot of part of a group is not all()).
fn quad_and_vote_functions_follow_active_lanes(device: Device) {
    let (n, tg) = (96usize, 96usize);
    let mut rng = Rng::new(303);
    let a = ints(&mut rng, n, -1000, 1000);
    let names = [
        "quad_broadcast_first",
        "quad_ballot",
        "quad_active_threads_mask",
        "quad_all",
        "quad_any",
        "quad_is_first",
        "quad_shuffle_rotate_up",
        "quad_shuffle_rotate_down",
        "quad_ballot.all",
        "quad_ballot.any",
        "simd_ballot",
        "simd_ballot(true).all",
        "simd_active_threads_mask",
        "simd_is_first",
        "simd_broadcast_first",
        "full simd_ballot(true).all",
        "full quad_ballot(true).all",
        "simd_vote top bits",
        "simd_vote(~0).all",
        "quad_vote(0xff)",
    ];
    const C: usize = 20;
    let src = format!(
        "uint i = thread_position_in_grid.x;\nint av = a[i];\nif (av > 0) {{\n\
         out[i * {C} + 0] = quad_broadcast_first(av);\n\
         out[i * {C} + 1] = int(static_cast<quad_vote::vote_t>(quad_ballot(av > 500)));\n\
         out[i * {C} + 2] = int(static_cast<quad_vote::vote_t>(quad_active_threads_mask()));\n\
         out[i * {C} + 3] = quad_all(av > 500) ? 1 : 0;\n\
         out[i * {C} + 4] = quad_any(av > 500) ? 1 : 0;\n\
         out[i * {C} + 5] = quad_is_first() ? 1 : 0;\n\
         out[i * {C} + 6] = quad_shuffle_rotate_up(av, 1);\n\
         out[i * {C} + 7] = quad_shuffle_rotate_down(av, 3);\n\
         out[i * {C} + 8] = quad_ballot(av > 500).all() ? 1 : 0;\n\
         out[i * {C} + 9] = quad_ballot(av > 500).any() ? 1 : 0;\n\
         out[i * {C} + 10] = int(uint(static_cast<simd_vote::vote_t>(simd_ballot(av > 500))));\n\
         out[i * {C} + 11] = simd_ballot(true).all() ? 1 : 0;\n\
         out[i * {C} + 12] = int(uint(static_cast<simd_vote::vote_t>(simd_active_threads_mask())));\n\
         out[i * {C} + 13] = simd_is_first() ? 1 : 0;\n\
         out[i * {C} + 14] = simd_broadcast_first(av);\n}}\n\
         out[i * {C} + 15] = simd_ballot(true).all() ? 1 : 0;\n\
         out[i * {C} + 16] = quad_ballot(true).all() ? 1 : 0;\n\
         out[i * {C} + 17] = simd_vote(simd_vote::vote_t(0xffffffff00000000ul)).any() ? 1 : 0;\n\
         out[i * {C} + 18] = simd_vote(~simd_vote::vote_t(0)).all() ? 1 : 0;\n\
         out[i * {C} + 19] = int(static_cast<quad_vote::vote_t>(quad_vote(0xffu)));\n"
    );
    let got = run(device, "quad_votes", "", &src, &[("a", &a)], (n as u32, tg as u32), C);
    let mut want = vec![Some(SENTINEL); n * C];
    for sg in simdgroups(n, tg) {
        let act: Vec<usize> = sg.iter().copied().filter(|&i| a[i] > 0).collect();
        let bits = |set: &[usize], base: usize, pred: &dyn Fn(usize) -> bool| -> i32 {
            set.iter().filter(|&&j| pred(j)).fold(0u32, |m, &j| m | 1 << (j - base)) as i32
        };
        for &i in &act {
            let q0 = sg[0] + (i - sg[0]) / 4 * 4;
            let quad: Vec<usize> = act.iter().copied().filter(|&j| j >= q0 && j < q0 + 4).collect();
            let big = |j: usize| a[j] > 500;
            let rot = |src: usize| if quad.contains(&src) { Some(a[src]) } else { None };
            let row = [
                Some(a[quad[0]]),
                Some(bits(&quad, q0, &big)),
                Some(bits(&quad, q0, &|_| true)),
                Some(quad.iter().all(|&j| big(j)) as i32),
                Some(quad.iter().any(|&j| big(j)) as i32),
                Some((quad[0] == i) as i32),
                rot(q0 + (i - q0 + 3) % 4),
                rot(q0 + (i - q0 + 3) % 4),
                Some((quad.len() == 4 && quad.iter().all(|&j| big(j))) as i32),
                Some(quad.iter().any(|&j| big(j)) as i32),
                Some(bits(&act, sg[0], &big)),
                Some((act.len() == 32) as i32),
                Some(bits(&act, sg[0], &|_| true)),
                Some((act[0] == i) as i32),
                Some(a[act[0]]),
            ];
            for (c, v) in row.iter().enumerate() {
                want[i * C + c] = *v;
            }
        }
        for &i in &sg {
            want[i * C + 15] = Some((sg.len() == 32) as i32);
            want[i * C + 16] = Some(1);
            want[i * C + 17] = Some(0);
            want[i * C + 18] = Some(1);
            want[i * C + 19] = Some(15);
        }
    }
    check("quad and vote functions", &got, &want, C, &names);
}

const HELPERS: &str = r#"
template <typename T> T lanesum(T v) { return simd_sum(v); }
int loopsum(int v, uint n) {
    int s = 0;
    for (uint k = 0; k < n; ++k) s += simd_sum(v + int(k));
    return s;
}
int inner(int v) { return simd_max(v); }
int outer(int v, uint n) {
    int s = 0;
    for (uint k = 0; k < n; ++k) {
        if (((uint(v) + k) & 1u) != 0u) s += inner(v); else s -= inner(-v);
    }
    return s;
}
"#;

const CONVERGENCE: &str = r#"
uint i = thread_position_in_grid.x;
int v = a[i];
uint n = uint(c[i]) % 4u;
uint m = uint(c[i] / 4) % 5u;
int r0 = 0;
if (v & 1) r0 = simd_sum(v);
int r1 = simd_sum(v);
int r2 = (v & 2) ? lanesum(v) : lanesum(-v);
int r3;
if (v & 4) r3 = lanesum(v * 2); else r3 = lanesum(v * 3);
int r4 = loopsum(v, n);
int r5 = 0;
for (uint it = 0; it < 3u; ++it) {
    if (((uint(v) >> it) & 1u) == 0u) continue;
    r5 += simd_sum(int(it) + 1);
    if (it == 1u && (v & 8)) break;
}
int r6 = simd_prefix_exclusive_sum(1);
int r7 = outer(v, n);
uint w = 0, cnt = 0;
while (simd_any(w < m)) { if (w < m) w += 1; cnt += 1; }
int r8 = int(w * 100u + cnt);
uint d = 0;
int r9 = 0;
do { r9 += simd_sum(1); d += 1; } while (d < m);
out[i * 10 + 0] = r0; out[i * 10 + 1] = r1; out[i * 10 + 2] = r2; out[i * 10 + 3] = r3;
out[i * 10 + 4] = r4; out[i * 10 + 5] = r5; out[i * 10 + 6] = r6; out[i * 10 + 7] = r7;
out[i * 10 + 8] = r8; out[i * 10 + 9] = r9;
"#;

// Lanes split by branches, loops (continue, break, lane-dependent trip counts, conditions that
// are SIMD-group functions) and helper functions called from several places meet exactly as on
// Metal: once after the branch, per call site and per iteration.
fn divergent_lanes_meet_where_metal_reconverges(device: Device) {
    let (n, tg) = (80usize, 80usize);
    let mut rng = Rng::new(304);
    let a = ints(&mut rng, n, -1000, 1000);
    let c = ints(&mut rng, n, 0, 1 << 20);
    let got = run(device, "convergence", HELPERS, CONVERGENCE, &[("a", &a), ("c", &c)], (n as u32, tg as u32), 10);
    let names = [
        "if",
        "after if",
        "ternary helper",
        "if/else helper",
        "loop in helper",
        "continue/break",
        "after loop",
        "helper in loop in helper",
        "while simd_any",
        "do-while",
    ];
    let mut want = vec![None; n * 10];
    for sg in simdgroups(n, tg) {
        let nn = |j: usize| (c[j] as u32) % 4;
        let mm = |j: usize| ((c[j] / 4) as u32) % 5;
        let bit = |j: usize, b: u32| (a[j] as u32 >> b) & 1 == 1;
        let sum_over = |pred: &dyn Fn(usize) -> bool, val: &dyn Fn(usize) -> i32| -> i32 {
            sg.iter().copied().filter(|&j| pred(j)).map(val).sum()
        };
        let max_over = |pred: &dyn Fn(usize) -> bool, val: &dyn Fn(usize) -> i32| -> i32 {
            sg.iter().copied().filter(|&j| pred(j)).map(val).max().unwrap()
        };
        let broken = |j: usize| bit(j, 1) && bit(j, 3);
        let in_iter = |j: usize, it: u32| bit(j, it) && !(it == 2 && broken(j));
        let max_m = sg.iter().map(|&j| mm(j)).max().unwrap();
        for (lane, &i) in sg.iter().enumerate() {
            let r0 = if bit(i, 0) { sum_over(&|j| bit(j, 0), &|j| a[j]) } else { 0 };
            let r1 = sum_over(&|_| true, &|j| a[j]);
            let r2 =
                if bit(i, 1) { sum_over(&|j| bit(j, 1), &|j| a[j]) } else { sum_over(&|j| !bit(j, 1), &|j| -a[j]) };
            let r3 = if bit(i, 2) {
                sum_over(&|j| bit(j, 2), &|j| 2 * a[j])
            } else {
                sum_over(&|j| !bit(j, 2), &|j| 3 * a[j])
            };
            let r4: i32 = (0..nn(i)).map(|k| sum_over(&|j| nn(j) > k, &|j| a[j] + k as i32)).sum();
            let r5: i32 = (0..3u32)
                .filter(|&it| in_iter(i, it))
                .map(|it| sum_over(&|j| in_iter(j, it), &|_| it as i32 + 1))
                .sum();
            let r7: i32 = (0..nn(i))
                .map(|k| {
                    let odd = |j: usize| (a[j] as u32).wrapping_add(k) & 1 == 1;
                    if odd(i) {
                        max_over(&|j| nn(j) > k && odd(j), &|j| a[j])
                    } else {
                        -max_over(&|j| nn(j) > k && !odd(j), &|j| -a[j])
                    }
                })
                .sum();
            let r8 = (mm(i) * 100 + max_m) as i32;
            let r9: i32 = (0..mm(i).max(1)).map(|k| sg.iter().filter(|&&j| mm(j).max(1) > k).count() as i32).sum();
            let row = [r0, r1, r2, r3, r4, r5, lane as i32, r7, r8, r9];
            for (col, x) in row.iter().enumerate() {
                want[i * 10 + col] = Some(*x);
            }
        }
    }
    check("convergence", &got, &want, 10, &names);
}

// A lambda called by name from two branches combines each branch's lanes apart.
fn lambdas_called_from_two_branches_keep_their_lanes_apart(device: Device) {
    let src = r#"
        uint i = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        int v = a[i];
        auto total = [&](int x) { return simd_sum(x); };
        auto bump = [&] { return simd_max(v); };
        int r = (v & 1) ? total(v) : total(-v);
        int s;
        if (v & 2) s = bump(); else s = -bump();
        out[i * 2] = r;
        out[i * 2 + 1] = s;
    "#;
    let (n, tg) = (96usize, 96usize);
    let mut rng = Rng::new(305);
    let a = ints(&mut rng, n, -1000, 1000);
    let got = run(device, "lambda_branches", "", src, &[("a", &a)], (n as u32, tg as u32), 2);
    let mut want = vec![None; n * 2];
    for sg in simdgroups(n, tg) {
        for &i in &sg {
            let odd = |j: usize| a[j] & 1 != 0;
            let two = |j: usize| a[j] & 2 != 0;
            let r: i32 = sg.iter().filter(|&&j| odd(j) == odd(i)).map(|&j| if odd(j) { a[j] } else { -a[j] }).sum();
            let m = sg.iter().filter(|&&j| two(j) == two(i)).map(|&j| a[j]).max().unwrap();
            want[i * 2] = Some(r);
            want[i * 2 + 1] = Some(if two(i) { m } else { -m });
        }
    }
    check("lambdas", &got, &want, 2, &["total", "bump"]);
}

backend_tests!(
    lambdas_called_from_two_branches_keep_their_lanes_apart,
    reductions_and_prefixes_count_each_active_lane_once,
    shuffle_and_fill_wraps_filling_data_in,
    quad_and_vote_functions_follow_active_lanes,
    divergent_lanes_meet_where_metal_reconverges,
);

/// The error a CPU launch of `source` reports.
fn cpu_error(name: &str, header: &str, source: &str) -> String {
    let kernel = MetalKernel::new(name, &[], &["out"], source).unwrap().header(header);
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::I32).device(Device::Cpu);
    match kernel.call(&[], &spec) {
        Ok(_) => panic!("{name}: the launch succeeded"),
        Err(e) => e.to_string(),
    }
}

// A function object's `operator()` holds a SIMD-group function. Called by every lane it runs;
// called from two branches, the emulator cannot tell its calls apart by source position and
// says so rather than risk merging them.
#[test]
fn function_object_called_from_divergent_branches_is_refused_on_cpu() {
    let header = "struct Total { int operator()(int v) const { return simd_sum(v); } };";
    let uniform = r#"
        uint lane = thread_index_in_simdgroup;
        Total total;
        out[thread_position_in_grid.x] = total(int(lane));
    "#;
    let k = MetalKernel::new("functor_uniform", &[], &["out"], uniform).unwrap().header(header);
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::I32).device(Device::Cpu);
    let got = k.call(&[], &spec).unwrap()[0].to_host().unwrap().to_vec::<i32>().unwrap();
    assert_eq!(got, vec![496; 64]);

    let divergent = r#"
        uint lane = thread_index_in_simdgroup;
        Total total;
        int r;
        if (lane & 1u) r = total(int(lane)); else r = total(1000);
        out[thread_position_in_grid.x] = r;
    "#;
    let e = cpu_error("functor_divergent", header, divergent);
    assert!(e.contains("functor_divergent") && e.contains("defined on line 1") && e.contains("cannot tell"), "{e}");
}

// Lanes held at a barrier inside a branch reach a SIMD-group function the others executed
// without them: refused, not combined late.
#[test]
fn barrier_in_divergent_code_before_a_collective_is_refused_on_cpu() {
    let src = r#"
        uint lane = thread_index_in_simdgroup;
        if (lane < 16u) threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = simd_sum(1);
    "#;
    let e = cpu_error("barrier_divergent", "", src);
    assert!(e.contains("barrier_divergent") && e.contains("already executed"), "{e}");
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
// Left out: `divergent_lanes_meet_where_metal_reconverges`,
// `lambdas_called_from_two_branches_keep_their_lanes_apart` and
// `quad_and_vote_functions_follow_active_lanes` call SIMD-group functions from divergent branches
// on purpose, which the sanitizer rightly reports.
sanitizer_clean_tests!(shuffle_and_fill_wraps_filling_data_in);
