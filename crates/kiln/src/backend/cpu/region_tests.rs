//! Kernels whose barriers all stand at the top level of their body run as region loops
//! (`lower::regions`, prelude/cpu/runtime.h "region loops"). Each runs three ways — its region
//! form, as coroutines (the same kernel with each barrier in a block of its own, which the
//! region pass refuses) and with fibers (the barriers in a helper) — over groups that fill
//! SIMD-groups, leave one partial, one thread, and a last group cut short: bit for bit alike,
//! and against a Rust reference. Also: what a region keeps across barriers (several
//! declarators, `const`, pointers, arrays, vectors, constants sized arrays), threads that return
//! early, atomics, a fault naming its thread, a region form the compiler refuses built again
//! without it, and a compile error on the user's line.

use crate::check::Rng;
use crate::source::lower::{lower, LowerTarget};
use crate::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

const BARRIER: &str = "threadgroup_barrier(mem_flags::mem_threadgroup);";
const SEED_RMS_NORM: &str = include_str!("../../../../../bench/kernels/seed_rms_norm.body");
const SEED_SOFTMAX: &str = include_str!("../../../../../bench/kernels/seed_softmax.body");

/// The three ways `body` (with `SYNC;` for each barrier) is written: region form, coroutines,
/// fibers, with whether each should have a region form and coroutines.
fn variants(body: &str) -> [(String, &'static str, bool, bool); 3] {
    [
        (body.replace("SYNC;", BARRIER), "", true, true),
        (body.replace("SYNC;", &format!("{{ {BARRIER} }}")), "", false, true),
        (
            body.replace("SYNC;", "sync_all();"),
            "inline void sync_all() { threadgroup_barrier(mem_flags::mem_threadgroup); }\n",
            false,
            false,
        ),
    ]
}

/// Runs `body` the three ways over `x` in groups of `tg` with `outputs` floats out; returns
/// the region form's output after checking the others match it bit for bit.
fn run_three(name: &str, body: &str, x: &[f32], tg: u32, threads: u32, outputs: usize) -> Vec<f32> {
    let input = Array::from_vec(&[x.len()], x.to_vec()).unwrap();
    let spec = LaunchSpec::new([threads, 1, 1], [tg, 1, 1]).output(&[outputs], DType::F32).device(Device::Cpu);
    let mut results: Vec<Vec<f32>> = Vec::new();
    for (way, (src, header, regions, coroutines)) in variants(body).into_iter().enumerate() {
        // The region form is built here (a fresh source, not found in the disk cache), and as
        // written: not again without it.
        let src = if regions { format!("// {}\n{src}", fresh_tag()) } else { src };
        let refused = super::compile::built_without_regions_on_this_thread();
        let kernel = MetalKernel::new(format!("{name}_{way}"), &["x"], &["out"], src).unwrap().header(header);
        let generated = kernel.generate(std::slice::from_ref(&input), &spec).unwrap();
        let module = lower(&kernel.program(&generated), LowerTarget::Cpu).unwrap();
        assert_eq!(!module.regions.is_empty(), regions, "{name} way {way}: region form");
        assert_eq!(module.coroutines, coroutines, "{name} way {way}: coroutines");
        let out = kernel.call(&[(&input).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(
            super::compile::built_without_regions_on_this_thread(),
            refused,
            "{name} way {way}: built without regions"
        );
        if let Some(first) = results.first() {
            for (i, (a, b)) in first.iter().zip(&out).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{name}, groups of {tg}, way {way}: element {i}: {a} vs {b}");
            }
        }
        results.push(out);
    }
    results.swap_remove(0)
}

fn inputs(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.normal() as f32).collect()
}

/// Text no earlier run wrote (the time and this process).
fn fresh_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos} {}", std::process::id())
}

const GROUPS: [u32; 5] = [32, 96, 100, 256, 1];

#[test]
fn variables_kept_across_barriers_match_coroutines_fibers_and_the_reference() {
    // Several declarators, a const, a pointer, a private array, a vector and a constant that
    // sizes an array after the barrier, each read after one or two barriers; threads that
    // return before the second barrier; threadgroup storage zeroed once for the group.
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
        constexpr int K = 3;
        threadgroup float buf[256];
        threadgroup float zeroed[4] = {0};
        const float own = x[i];
        device const float* row = x + (i - t);
        float acc[K];
        float2 pair = float2(own, own * 2.0f);
        for (int k = 0; k < K; ++k) acc[k] = own * float(k + 1);
        buf[t] = own;
        if (t == 0) zeroed[1] = 1.0f;
        SYNC;
        float left = buf[(t + n - 1) % n], right = buf[(t + 1) % n];
        if (t % 5 == 4) { out[i] = -1.0f; return; }
        SYNC;
        float more[K];
        for (int k = 0; k < K; ++k) more[k] = acc[k] + row[t];
        out[i] = left + right * 0.5f + more[K - 1] + pair.y + zeroed[1] + zeroed[0];
    "#;
    let n = 1000usize;
    let x = inputs(11, n);
    for tg in GROUPS {
        let out = run_three("cpu_regions_kept", body, &x, tg, n as u32, n);
        for (g, chunk) in x.chunks(tg as usize).enumerate() {
            let m = chunk.len();
            for t in 0..m {
                let i = g * tg as usize + t;
                let want = if t % 5 == 4 {
                    -1.0f32
                } else {
                    let (left, right, own) = (chunk[(t + m - 1) % m], chunk[(t + 1) % m], chunk[t]);
                    left + right * 0.5f32 + (own * 3.0f32 + own) + own * 2.0f32 + 1.0f32 + 0.0f32
                };
                assert_eq!(out[i].to_bits(), want.to_bits(), "groups of {tg}, element {i}: {} vs {want}", out[i]);
            }
        }
    }
}

#[test]
fn variables_changed_in_several_regions_and_storage_declared_late_match() {
    // `acc` is written in every region; `late` is declared in the second region and read in
    // the fourth; `tail` is threadgroup storage declared after two barriers.
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
        threadgroup float buf[256];
        float acc = x[i];
        buf[t] = acc;
        SYNC;
        acc += buf[(t + 1) % n];
        float late = acc * 0.5f;
        SYNC;
        threadgroup float tail[256];
        tail[t] = acc;
        acc *= 2.0f;
        SYNC;
        out[i] = acc + late + tail[(t + 2) % n];
    "#;
    let x = inputs(18, 700);
    for tg in GROUPS {
        let out = run_three("cpu_regions_rewritten", body, &x, tg, 700, 700);
        for (g, chunk) in x.chunks(tg as usize).enumerate() {
            let m = chunk.len();
            let acc1: Vec<f32> = (0..m).map(|t| chunk[t] + chunk[(t + 1) % m]).collect();
            for t in 0..m {
                let want = acc1[t] * 2.0f32 + acc1[t] * 0.5f32 + acc1[(t + 2) % m];
                let got = out[g * tg as usize + t];
                assert_eq!(got.to_bits(), want.to_bits(), "groups of {tg}, group {g}, thread {t}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn a_pointer_kept_across_a_barrier_still_points_at_its_variable() {
    // `p` points into `tmp`, which no later region names: the region form keeps `tmp` too.
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup;
        threadgroup float buf[256];
        float tmp[4];
        for (int k = 0; k < 4; ++k) tmp[k] = x[i] * float(k + 1);
        thread float* p = tmp + 1;
        buf[t] = x[i];
        SYNC;
        out[i] = p[0] + p[2] + buf[0];
    "#;
    let x = inputs(15, 500);
    for tg in GROUPS {
        let out = run_three("cpu_regions_pointer", body, &x, tg, 500, 500);
        for (i, o) in out.iter().enumerate() {
            let first = x[i - i % tg as usize];
            let want = x[i] * 2.0f32 + x[i] * 4.0f32 + first;
            assert_eq!(o.to_bits(), want.to_bits(), "groups of {tg}, element {i}: {o} vs {want}");
        }
    }
}

#[test]
fn a_row_norm_through_threadgroup_partials_matches_the_reference() {
    // The seed's RMSNorm shape without SIMD-group calls: strided sums per thread, partials
    // through threadgroup memory, thread 0 folds them, every thread scales its elements.
    let body = r#"
        uint row = threadgroup_position_in_grid.x, t = thread_index_in_threadgroup, n = threads_per_threadgroup.x;
        threadgroup float partial[256];
        const uint D = 200;
        float acc = 0.0f;
        for (uint j = t; j < D; j += n) { float v = x[row * D + j]; acc += v * v; }
        partial[t] = acc;
        SYNC;
        if (t == 0) {
            float total = 0.0f;
            for (uint k = 0; k < n; ++k) total += partial[k];
            partial[0] = total;
        }
        SYNC;
        float scale = 1.0f / sqrt(partial[0] / float(D) + 1e-5f);
        for (uint j = t; j < D; j += n) out[row * D + j] = x[row * D + j] * scale;
    "#;
    let rows = 9usize;
    let x = inputs(12, 200 * rows);
    for tg in [32u32, 64, 100, 256] {
        let out = run_three("cpu_regions_norm", body, &x, tg, tg * rows as u32, 200 * rows);
        let (mut err, mut norm) = (0f64, 0f64);
        for r in 0..rows {
            let row = &x[r * 200..(r + 1) * 200];
            let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / 200.0;
            for (j, &v) in row.iter().enumerate() {
                let want = v as f64 / (ms + 1e-5).sqrt();
                let got = out[r * 200 + j] as f64;
                assert!(!got.is_nan(), "row {r} element {j} is NaN");
                err += (got - want).powi(2);
                norm += want * want;
            }
        }
        assert!((err / norm).sqrt() < 1e-6, "groups of {tg}: relative L2 error {}", (err / norm).sqrt());
    }
}

/// The seed's RMSNorm (a top-level `simd_sum`, then one in a block only the first SIMD-group
/// runs) and softmax (`simd_max`, then `simd_sum`, each folded across SIMD-groups in such a
/// block, both blocks declaring `partial`), as the benches run them, over rows of 200 and
/// without the weight.
fn seed_body(text: &str) -> String {
    text.replace(BARRIER, "SYNC;").replace("const uint D = 4096;", "const uint D = 200;").replace(" * w[i]", "")
}

#[test]
fn the_seeds_norm_and_softmax_with_simd_sums_match_coroutines_fibers_and_the_reference() {
    let rows = 7usize;
    let x = inputs(16, 200 * rows);
    for tg in [32u32, 64, 96, 100, 256] {
        let norm = run_three("cpu_regions_simd_norm", &seed_body(SEED_RMS_NORM), &x, tg, tg * rows as u32, 200 * rows);
        let softmax =
            run_three("cpu_regions_simd_softmax", &seed_body(SEED_SOFTMAX), &x, tg, tg * rows as u32, 200 * rows);
        let (mut err, mut norm2, mut serr, mut snorm) = (0f64, 0f64, 0f64, 0f64);
        for r in 0..rows {
            let row = &x[r * 200..(r + 1) * 200];
            let ms = row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / 200.0;
            let m = row.iter().fold(f64::MIN, |a, &v| a.max(v as f64));
            let total: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
            for (j, &v) in row.iter().enumerate() {
                let (got, sgot) = (norm[r * 200 + j] as f64, softmax[r * 200 + j] as f64);
                assert!(!got.is_nan() && !sgot.is_nan(), "row {r} element {j}: NaN");
                let want = v as f64 / (ms + 1e-5).sqrt();
                let swant = (v as f64 - m).exp() / total;
                err += (got - want).powi(2);
                norm2 += want * want;
                serr += (sgot - swant).powi(2);
                snorm += swant * swant;
            }
        }
        assert!((err / norm2).sqrt() < 1e-5, "norm, groups of {tg}: relative L2 error {}", (err / norm2).sqrt());
        assert!((serr / snorm).sqrt() < 1e-5, "softmax, groups of {tg}: relative L2 error {}", (serr / snorm).sqrt());
    }
}

#[test]
fn shuffles_scans_ballots_and_divergent_blocks_match_coroutines_and_fibers() {
    // Collectives the region form runs through the prelude's own functions, in a block only
    // some lanes of a SIMD-group enter, an unbraced one, after threads returned, and one right
    // after a divergent block.
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup, lane = thread_index_in_simdgroup;
        threadgroup float buf[256];
        if (x[i] > 1.2f) { out[i] = -7.0f; return; }
        float v = x[i];
        float down = simd_shuffle_down(v, ushort(3));
        float scan = simd_prefix_exclusive_sum(v);
        uint votes = uint((simd_vote::vote_t)simd_ballot(v > 0.0f));
        float widened = simd_sum<float>(half(v) * half(3.0f));
        if (lane < 20) {
            float kept = v * 2.0f;
            v = simd_sum(kept);
            v += kept;
        }
        if (lane % 3 == 1) v = simd_max(v);
        v += simd_shuffle_xor(v, ushort(1));
        buf[t] = v + down + scan + float(popcount(votes)) + widened;
        SYNC;
        out[i] = buf[(t + 5) % threads_per_threadgroup.x];
    "#;
    let x = inputs(17, 1000);
    for tg in GROUPS {
        let out = run_three("cpu_regions_shuffles", body, &x, tg, 1000, 1000);
        for (i, &v) in x.iter().enumerate() {
            if v > 1.2 {
                assert_eq!(out[i], -7.0, "groups of {tg}, element {i}");
            }
            assert!(!out[i].is_nan(), "groups of {tg}, element {i}");
        }
    }
}

#[test]
fn atomics_between_barriers_match_coroutines_and_fibers() {
    // A threadgroup counter: each thread takes a ticket, then reads the total after a barrier.
    let body = r#"
        uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup;
        threadgroup atomic_uint count;
        if (t == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);
        SYNC;
        uint ticket = atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
        SYNC;
        out[i] = float(ticket) + float(atomic_load_explicit(&count, memory_order_relaxed)) * 1000.0f + x[i] * 0.0f;
    "#;
    let x = inputs(13, 300);
    for tg in [32u32, 100] {
        let out = run_three("cpu_regions_atomic", body, &x, tg, 300, 300);
        for (i, o) in out.iter().enumerate() {
            let g = i / tg as usize;
            let size = (300 - g * tg as usize).min(tg as usize);
            assert_eq!(*o, (i % tg as usize) as f32 + size as f32 * 1000.0, "groups of {tg}, element {i}");
        }
    }
}

#[test]
fn what_takes_a_region_form() {
    let x = Array::from_vec(&[64], vec![1.0f32; 64]).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let regions_with = |header: &str, body: &str| {
        let kernel = MetalKernel::new("cpu_regions_which", &["x"], &["out"], body).unwrap().header(header);
        let generated = kernel.generate(std::slice::from_ref(&x), &spec).unwrap();
        lower(&kernel.program(&generated), LowerTarget::Cpu).unwrap().regions.len()
    };
    let regions = |body: &str| regions_with("", body);
    let top = format!("uint i = thread_position_in_grid.x;\n{BARRIER}\nout[i] = x[i];");
    assert_eq!(regions(&top), 1);
    // A barrier in a branch, a loop or a block; a SIMD-group call; a kept `auto`: none.
    assert_eq!(regions(&format!("uint i = thread_position_in_grid.x;\nif (i < 9) {BARRIER}\nout[i] = x[i];")), 0);
    assert_eq!(
        regions(&format!(
            "uint i = thread_position_in_grid.x;\nfor (int k = 0; k < 2; ++k) {{ {BARRIER} }}\nout[i] = x[i];"
        )),
        0
    );
    assert_eq!(regions(&format!("uint i = thread_position_in_grid.x;\n{BARRIER}\nout[i] = simd_sum(x[i]);")), 1);
    // SIMD-group calls in a loop, a conditional operand, or with arguments that change
    // something (they are evaluated twice): none.
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nfloat v = 0.0f;\nfor (int k = 0; k < 2; ++k) v += simd_sum(x[i]);\nout[i] = v;"), 0);
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nout[i] = i > 3 ? simd_sum(x[i]) : 0.0f;"), 0);
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nuint j = i;\nout[i] = simd_sum(x[j++]);"), 0);
    // Or after a comma that runs something first: none; inside another call's arguments: one.
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nfloat a = x[i], b = simd_sum(a);\nout[i] = b;"), 0);
    assert_eq!(
        regions("uint i = thread_position_in_grid.x;\nfloat a = x[i], b;\nb = (a = 2.0f, simd_sum(a));\nout[i] = b;"),
        0
    );
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nfloat a = x[i];\nout[i] = max(a, simd_sum(a));"), 1);
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nuint k = i;\nout[simd_sum(k) % 64] = float(k = 3);"), 0);
    assert_eq!(regions("uint i = thread_position_in_grid.x;\nfloat a = x[i];\nout[i++] = simd_sum(a);"), 0);
    assert_eq!(regions(&format!("auto i = thread_position_in_grid.x;\n{BARRIER}\nout[i] = x[i];")), 0);
    // An `auto` used within its region only is not kept: the kernel qualifies.
    assert_eq!(
        regions(&format!(
            "uint i = thread_position_in_grid.x;\nauto v = x[i];\nout[i] = v;\n{BARRIER}\nout[i] += 1.0f;"
        )),
        1
    );
    // A kept name also used before its declaration (there an outer one) is refused.
    let header = "constant float scale = 2.0f;\n";
    let outer = format!(
        "uint i = thread_position_in_grid.x;\nout[i] = scale;\nfloat scale = x[i];\n{BARRIER}\nout[i] += scale;"
    );
    assert_eq!(regions_with(header, &outer), 0);
    assert_eq!(regions_with(header, &outer.replace("out[i] = scale;", "")), 1);
    // A type declared before a barrier: none.
    let typed = format!("uint i = thread_position_in_grid.x;\nstruct P {{ float v; }};\n{BARRIER}\nout[i] = x[i];");
    assert_eq!(regions(&typed), 0);
}

#[test]
fn a_fault_after_a_barrier_names_its_thread() {
    let x = Array::from_vec(&[64], vec![1.0f32; 64]).unwrap();
    let body = format!(
        "uint i = thread_position_in_grid.x;\nthreadgroup float buf[64];\nbuf[thread_index_in_threadgroup] = x[i % 64];\n{BARRIER}\n\
         int64_t far = i == 77 ? (int64_t(1) << 40) : 0;\nout[i] = buf[0] + x[far + i % 64];"
    );
    let kernel = MetalKernel::new("cpu_regions_fault", &["x"], &["out"], body).unwrap();
    let spec = LaunchSpec::new([128, 1, 1], [64, 1, 1]).output(&[128], DType::F32).device(Device::Cpu);
    let generated = kernel.generate(std::slice::from_ref(&x), &spec).unwrap();
    assert_eq!(lower(&kernel.program(&generated), LowerTarget::Cpu).unwrap().regions.len(), 1);
    for _ in 0..2 {
        match kernel.call(&[(&x).into()], &spec) {
            Err(Error::KernelFault { msg, .. }) => {
                assert!(msg.starts_with("thread (77, 0, 0)") && msg.contains("outside every buffer"), "{msg}")
            }
            other => panic!("expected a kernel fault, got {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn a_region_form_the_compiler_refuses_is_built_without_it() {
    // A kept variable of a type with its own copy constructor cannot live in the record: the
    // unit is built again without region forms, as coroutines. A fresh source each run, so
    // that it is built here rather than found in the disk cache.
    let header = "struct Acc { float v; Acc() : v(0.0f) {} Acc(const Acc& o) : v(o.v) {} };\n";
    let body = format!(
        "// {}\nuint i = thread_position_in_grid.x;\nAcc a;\na.v = x[i];\n{BARRIER}\nout[i] = a.v * 2.0f;",
        fresh_tag()
    );
    let kernel = MetalKernel::new("cpu_regions_refused", &["x"], &["out"], body).unwrap().header(header);
    let x = inputs(14, 64);
    let input = Array::from_vec(&[64], x.clone()).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32).device(Device::Cpu);
    let generated = kernel.generate(std::slice::from_ref(&input), &spec).unwrap();
    assert_eq!(lower(&kernel.program(&generated), LowerTarget::Cpu).unwrap().regions.len(), 1);
    let (refused, fibers) = (
        super::compile::built_without_regions_on_this_thread(),
        super::compile::built_with_fibers_instead_on_this_thread(),
    );
    let out = kernel.call(&[(&input).into()], &spec).unwrap()[0].to_vec::<f32>().unwrap();
    for (o, v) in out.iter().zip(&x) {
        assert_eq!(*o, v * 2.0);
    }
    assert_eq!(super::compile::built_without_regions_on_this_thread(), refused + 1);
    assert_eq!(super::compile::built_with_fibers_instead_on_this_thread(), fibers);
    // A kernel that compiles no way is reported on its own line, after the barrier; its errors
    // outside the region form take it straight to fibers (compiled twice, not three times).
    let broken =
        format!("// {}\nuint i = thread_position_in_grid.x;\n{BARRIER}\nout[i] = x[i] + no_such_name;", fresh_tag());
    let fibers = super::compile::built_with_fibers_instead_on_this_thread();
    match MetalKernel::new("cpu_regions_broken", &["x"], &["out"], broken).unwrap().call(&[(&input).into()], &spec) {
        Err(Error::Compile { log, .. }) => {
            assert!(log.contains("no_such_name") && log.contains("line 4") && !log.contains("region-form"), "{log}")
        }
        other => panic!("expected a compile error, got {:?}", other.map(|_| ())),
    }
    assert_eq!(super::compile::built_with_fibers_instead_on_this_thread(), fibers + 1);
}
