//! One test per Metal semantic rule the backends must reproduce exactly: builtin values on
//! partial groups, partial and divergent simdgroups, barriers used for exchange, atomics under
//! contention, swizzle writes, bfloat rounding, IEEE special values and the fast-math macro,
//! and stopping a kernel that never finishes.

mod common;

use std::time::Duration;

use common::{assert_close, on, random_array, Rng};
use kiln::{Array, DType, Device, Error, LaunchSpec, MathMode, MetalKernel};

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

const FIELDS: usize = 14;

/// The builtin values Metal gives the thread at grid position `p`.
fn expected_builtins(p: [u32; 3], grid: [u32; 3], tg: [u32; 3]) -> [u32; FIELDS] {
    let gid = [0, 1, 2].map(|d| p[d] / tg[d]);
    let local = [0, 1, 2].map(|d| p[d] % tg[d]);
    let size = [0, 1, 2].map(|d| tg[d].min(grid[d] - gid[d] * tg[d]));
    let idx = local[0] + local[1] * size[0] + local[2] * size[0] * size[1];
    let n = size[0] * size[1] * size[2];
    let groups = [0, 1, 2].map(|d| grid[d].div_ceil(tg[d]));
    [
        idx,
        size[0],
        size[1],
        size[2],
        tg[0],
        idx / 32,
        idx % 32,
        gid[0],
        gid[1],
        gid[2],
        groups[1],
        n.div_ceil(32),
        grid[2],
        local[1],
    ]
}

fn builtins_on(device: Device, grid: [u32; 3], tg: [u32; 3]) {
    let src = r#"
        uint3 p = thread_position_in_grid;
        uint o = ((p.z * threads_per_grid.y + p.y) * threads_per_grid.x + p.x) * 14;
        out[o + 0] = thread_index_in_threadgroup;
        out[o + 1] = threads_per_threadgroup.x;
        out[o + 2] = threads_per_threadgroup.y;
        out[o + 3] = threads_per_threadgroup.z;
        out[o + 4] = dispatch_threads_per_threadgroup.x;
        out[o + 5] = simdgroup_index_in_threadgroup;
        out[o + 6] = thread_index_in_simdgroup;
        out[o + 7] = threadgroup_position_in_grid.x;
        out[o + 8] = threadgroup_position_in_grid.y;
        out[o + 9] = threadgroup_position_in_grid.z;
        out[o + 10] = threadgroups_per_grid.y;
        out[o + 11] = simdgroups_per_threadgroup;
        out[o + 12] = threads_per_grid.z;
        out[o + 13] = thread_position_in_threadgroup.y;
    "#;
    let k = MetalKernel::new("builtins", &["a"], &["out"], src).unwrap();
    let total = (grid[0] * grid[1] * grid[2]) as usize;
    let a = Array::full(DType::F32, &[8], 1.0).unwrap();
    let spec = LaunchSpec::new(grid, tg).output(&[total * FIELDS], DType::U32).device(device);
    let out = values(&k.call(&[on(device, &a)], &spec).unwrap()[0]);
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let o = (((z * grid[1] + y) * grid[0] + x) as usize) * FIELDS;
                let want = expected_builtins([x, y, z], grid, tg);
                let got: Vec<u32> = out[o..o + FIELDS].iter().map(|&v| v as u32).collect();
                assert_eq!(got, want.to_vec(), "thread ({x},{y},{z}) of grid {grid:?} tg {tg:?}");
            }
        }
    }
}

fn builtins_on_partial_1d_grid(device: Device) {
    builtins_on(device, [100, 1, 1], [64, 1, 1]);
}

fn builtins_on_partial_3d_grid(device: Device) {
    builtins_on(device, [7, 5, 3], [4, 3, 2]);
}

// 40 threads per group: the second simdgroup has 8 lanes; sums and prefixes cover those only.
fn partial_simdgroups_reduce_over_their_lanes(device: Device) {
    let mut rng = Rng::new(11);
    let x = random_array(&mut rng, DType::F32, &[80]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        float v = x[i];
        sum[i] = simd_sum(v);
        pre[i] = simd_prefix_exclusive_sum(v);
        mx[i] = simd_max(v);
        sh[i] = simd_shuffle_down(v, 1);
    "#;
    let k = MetalKernel::new("partial_simd", &["x"], &["sum", "pre", "mx", "sh"], src).unwrap();
    let spec = LaunchSpec::new([80, 1, 1], [40, 1, 1])
        .output(&[80], DType::F32)
        .output(&[80], DType::F32)
        .output(&[80], DType::F32)
        .output(&[80], DType::F32)
        .device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap();
    let xv: Vec<f32> = values(&x).iter().map(|&v| v as f32).collect();
    let (mut sum, mut pre, mut mx, mut sh) = (vec![0.0; 80], vec![0.0; 80], vec![0.0; 80], vec![0.0; 80]);
    for g in 0..2 {
        for (s0, s1) in [(0, 32), (32, 40)] {
            let lanes: Vec<usize> = (g * 40 + s0..g * 40 + s1).collect();
            let total: f32 = lanes.iter().map(|&i| xv[i]).sum();
            let max = lanes.iter().map(|&i| xv[i]).fold(f32::MIN, f32::max);
            let mut run = 0.0f32;
            for (k, &i) in lanes.iter().enumerate() {
                sum[i] = total as f64;
                mx[i] = max as f64;
                pre[i] = run as f64;
                run += xv[i];
                sh[i] = if k + 1 < lanes.len() { xv[i + 1] } else { xv[i] } as f64;
            }
        }
    }
    assert_close("simd_sum", &out[0], &sum, DType::F32);
    assert_close("simd_prefix_exclusive_sum", &out[1], &pre, DType::F32);
    assert_eq!(values(&out[2]), mx, "simd_max");
    assert_eq!(values(&out[3]), sh, "simd_shuffle_down");
}

// Lanes in different branches of an `if` and lanes that returned early do not take part.
fn divergent_simd_calls_use_active_lanes(device: Device) {
    let mut rng = Rng::new(12);
    let x = random_array(&mut rng, DType::F32, &[64]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        if (lane >= 28) { return; }
        float v = x[i];
        float r;
        if (lane % 3 == 0) {
            r = simd_sum(v);
        } else {
            r = simd_max(v);
        }
        out[i] = r;
    "#;
    let k = MetalKernel::new("divergent", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [64, 1, 1]).output(&[64], DType::F32).init_value(-7.0).device(device);
    let out = values(&k.call(&[on(device, &x)], &spec).unwrap()[0]);
    let xv: Vec<f32> = values(&x).iter().map(|&v| v as f32).collect();
    for sg in 0..2 {
        let base = sg * 32;
        let sum: f32 = (0..28).filter(|l| l % 3 == 0).map(|l| xv[base + l]).sum();
        let max = (0..28).filter(|l| l % 3 != 0).map(|l| xv[base + l]).fold(f32::MIN, f32::max);
        for l in 0..32 {
            let want = if l >= 28 {
                -7.0
            } else if l % 3 == 0 {
                sum
            } else {
                max
            };
            let got = out[base + l] as f32;
            assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "lane {l} of simdgroup {sg}: {got} vs {want}");
        }
    }
}

// A `mem_none` barrier orders execution, and the exchange that follows sees the writes before it
// (as on the GPUs kernels that do this run on); Metal does not order the memory, so the sanitizer
// warns (below).
fn mem_none_barrier_exchanges_data(device: Device) {
    let mut rng = Rng::new(13);
    let x = random_array(&mut rng, DType::F32, &[192]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        uint t = thread_index_in_threadgroup;
        uint n = threads_per_threadgroup.x;
        threadgroup float buf[64];
        buf[t] = x[i] * 2.0f;
        threadgroup_barrier(mem_flags::mem_none);
        out[i] = buf[n - 1 - t];
    "#;
    let k = MetalKernel::new("exchange", &["x"], &["out"], src).unwrap();
    // 192 = 2 full groups of 64 and one of 64; use 150 threads for a partial last group.
    let spec = LaunchSpec::new([150, 1, 1], [64, 1, 1]).output(&[150], DType::F32).device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap();
    let xv = values(&x);
    let want: Vec<f64> = (0..150)
        .map(|i| {
            let (g, t) = (i / 64, i % 64);
            let n = 64.min(150 - g * 64);
            xv[g * 64 + n - 1 - t] * 2.0
        })
        .collect();
    assert_close("mem_none exchange", &out[0], &want, DType::F32);
}

fn device_atomics_under_contention(device: Device) {
    let mut rng = Rng::new(14);
    let x = random_array(&mut rng, DType::F32, &[4096]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&counts[i % 4], 1, memory_order_relaxed);
        atomic_fetch_max_explicit(&counts[4], i, memory_order_relaxed);
    "#;
    let k = MetalKernel::new("atomics_int", &["x"], &["counts"], src).unwrap().atomic_outputs(true);
    let spec = LaunchSpec::new([4096, 1, 1], [64, 1, 1]).output(&[5], DType::U32).init_value(0.0).device(device);
    let out = values(&k.call(&[on(device, &x)], &spec).unwrap()[0]);
    assert_eq!(out, vec![1024.0, 1024.0, 1024.0, 1024.0, 4095.0]);

    // Float atomics through a pointer cast of a plain output.
    let src = r#"
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit((device atomic_float*)&out[i % 2], x[i], memory_order_relaxed);
    "#;
    let k = MetalKernel::new("atomics_float", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([4096, 1, 1], [128, 1, 1]).output(&[2], DType::F32).init_value(0.0).device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap();
    let xv = values(&x);
    let want = [0, 1].map(|p| xv.iter().skip(p).step_by(2).sum::<f64>());
    // Order of float additions is not fixed under contention; allow rounding of 2048 terms.
    let got = values(&out[0]);
    for p in 0..2 {
        assert!((got[p] - want[p]).abs() < 1e-2, "float atomic sum {p}: {} vs {}", got[p], want[p]);
    }
}

fn threadgroup_atomics_count_the_group(device: Device) {
    let src = r#"
        threadgroup atomic_uint count;
        uint t = thread_index_in_threadgroup;
        if (t == 0) { atomic_store_explicit(&count, 0u, memory_order_relaxed); }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = atomic_load_explicit(&count, memory_order_relaxed) + x[0] * 0;
    "#;
    let x = Array::full(DType::F32, &[8], 3.0).unwrap();
    let k = MetalKernel::new("tg_atomics", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([300, 1, 1], [128, 1, 1]).output(&[300], DType::U32).device(device);
    let out = values(&k.call(&[on(device, &x)], &spec).unwrap()[0]);
    let want: Vec<f64> = (0..300).map(|i| if i < 256 { 128.0 } else { 44.0 }).collect();
    assert_eq!(out, want);
}

fn vector_swizzle_writes(device: Device) {
    let mut rng = Rng::new(15);
    let x = random_array(&mut rng, DType::F32, &[64]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        float4 v = float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
        v.xz = v.zx;
        v.yw += float2(1.0f, 2.0f);
        float3 w = v.wzy;
        v.x = dot(w, float3(1.0f));
        out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
    "#;
    let k = MetalKernel::new("swizzle", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([16, 1, 1], [8, 1, 1]).output(&[64], DType::F32).device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap();
    let xv = values(&x);
    let mut want = vec![0.0; 64];
    for i in 0..16 {
        let mut v = [xv[4 * i], xv[4 * i + 1], xv[4 * i + 2], xv[4 * i + 3]];
        v.swap(0, 2);
        v[1] += 1.0;
        v[3] += 2.0;
        v[0] = v[3] + v[2] + v[1];
        want[4 * i..4 * i + 4].copy_from_slice(&v);
    }
    assert_close("swizzles", &out[0], &want, DType::F32);
}

// float -> bfloat rounds to nearest even, including exact ties.
fn bfloat_rounds_to_nearest_even(device: Device) {
    let mut rng = Rng::new(16);
    let mut bits: Vec<u32> = vec![0x3F80_8000, 0x3F81_8000, 0xBF80_8000, 0x3F80_8001, 0x7F7F_FFFF, 0x0000_8000];
    bits.extend((0..58).map(|_| (rng.next_u64() as u32) & 0xBFFF_FFFF));
    let xs: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    let x = Array::from_vec(&[64], xs.clone()).unwrap();
    let k =
        MetalKernel::new("to_bf16", &["x"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = bfloat(x[i]);")
            .unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::BF16).device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap()[0].to_host().unwrap();
    let got: Vec<u16> = out.to_vec::<half::bf16>().unwrap().iter().map(|v| v.to_bits()).collect();
    let want: Vec<u16> = xs.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
    assert_eq!(got, want);
}

// Safe math keeps IEEE special values: exp(-inf) == 0, NaN stays NaN.
fn safe_math_keeps_ieee_special_values(device: Device) {
    let x = Array::from_vec(&[4], vec![f32::NEG_INFINITY, 0.0, f32::NAN, f32::INFINITY]).unwrap();
    let k =
        MetalKernel::new("ieee", &["x"], &["out"], "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(x[i]);")
            .unwrap()
            .math_mode(MathMode::Safe);
    let spec = LaunchSpec::new([4, 1, 1], [4, 1, 1]).output(&[4], DType::F32).device(device);
    let out = values(&k.call(&[on(device, &x)], &spec).unwrap()[0]);
    assert_eq!(out[0], 0.0);
    assert_eq!(out[1], 1.0);
    assert!(out[2].is_nan());
    assert_eq!(out[3], f64::INFINITY);
}

fn fast_math_macro_only_in_fast_mode(device: Device) {
    let x = Array::full(DType::F32, &[8], 1.0).unwrap();
    let src =
        "#ifdef __FAST_MATH__\nout[thread_position_in_grid.x] = 1;\n#else\nout[thread_position_in_grid.x] = 0;\n#endif";
    for (mode, want) in [(MathMode::Safe, 0.0), (MathMode::Relaxed, 0.0), (MathMode::Fast, 1.0)] {
        let k = MetalKernel::new("fastmacro", &["x"], &["out"], src).unwrap().math_mode(mode);
        let spec = LaunchSpec::new([2, 1, 1], [2, 1, 1]).output(&[2], DType::F32).device(device);
        assert_eq!(values(&k.call(&[on(device, &x)], &spec).unwrap()[0]), vec![want; 2], "{mode:?}");
    }
}

// A kernel that never finishes is stopped by the timeout with a typed error.
fn hanging_kernel_times_out(device: Device) {
    let x = Array::full(DType::F32, &[8], 1.0).unwrap();
    let src = "uint n = 0;\nwhile (x[0] > 0.0f) { n++; }\nout[0] = n;";
    let k = MetalKernel::new("hang", &["x"], &["out"], src).unwrap();
    let spec = LaunchSpec::new([64, 1, 1], [32, 1, 1])
        .output(&[1], DType::U32)
        .timeout(Duration::from_millis(300))
        .device(device);
    match k.call(&[on(device, &x)], &spec) {
        Err(Error::Timeout { kernel, .. }) => assert_eq!(kernel, "hang"),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

// Lanes that leave a lane-dependent branch or conditional meet again at the collective that
// follows, however the compiler lays out the code after the branch.
fn collectives_after_divergent_branches_see_every_lane(device: Device) {
    let mut rng = Rng::new(17);
    let x = random_array(&mut rng, DType::F32, &[96]);
    let src = r#"
        uint i = thread_position_in_grid.x;
        bool valid = x[i] > 0.0f;
        float v = valid ? x[i] : -INFINITY;
        float m = simd_max(v);
        float w;
        if (valid) {
            w = x[i] * 2.0f;
        } else {
            w = 0.0f;
        }
        float s = simd_sum(w);
        uint lane = thread_index_in_simdgroup;
        uint src_lane = valid ? (lane + 1) % 32 : (lane + 31) % 32;
        float sh = simd_shuffle(x[i], src_lane);
        mx[i] = m;
        sm[i] = s;
        shf[i] = sh;
    "#;
    let k = MetalKernel::new("divergent_then_collective", &["x"], &["mx", "sm", "shf"], src).unwrap();
    let spec = LaunchSpec::new([96, 1, 1], [96, 1, 1])
        .output(&[96], DType::F32)
        .output(&[96], DType::F32)
        .output(&[96], DType::F32)
        .device(device);
    let out = k.call(&[on(device, &x)], &spec).unwrap();
    let xv: Vec<f32> = values(&x).iter().map(|&v| v as f32).collect();
    let (mut mx, mut sm, mut shf) = (vec![0.0; 96], vec![0.0; 96], vec![0.0; 96]);
    for sg in 0..3 {
        let lanes = sg * 32..sg * 32 + 32;
        let m = lanes.clone().map(|i| if xv[i] > 0.0 { xv[i] } else { f32::NEG_INFINITY }).fold(f32::MIN, f32::max);
        let s: f32 = lanes.clone().map(|i| if xv[i] > 0.0 { xv[i] * 2.0 } else { 0.0 }).sum();
        for i in lanes {
            let lane = i % 32;
            let src = if xv[i] > 0.0 { (lane + 1) % 32 } else { (lane + 31) % 32 };
            mx[i] = m as f64;
            sm[i] = s as f64;
            shf[i] = xv[sg * 32 + src] as f64;
        }
    }
    assert_eq!(values(&out[0]), mx, "simd_max after a conditional");
    assert_close("simd_sum after an if/else", &out[1], &sm, DType::F32);
    assert_eq!(values(&out[2]), shf, "simd_shuffle with a lane-dependent source");
}

backend_tests!(
    collectives_after_divergent_branches_see_every_lane,
    builtins_on_partial_1d_grid,
    builtins_on_partial_3d_grid,
    partial_simdgroups_reduce_over_their_lanes,
    divergent_simd_calls_use_active_lanes,
    mem_none_barrier_exchanges_data,
    device_atomics_under_contention,
    threadgroup_atomics_count_the_group,
    vector_swizzle_writes,
    bfloat_rounds_to_nearest_even,
    safe_math_keeps_ieee_special_values,
    fast_math_macro_only_in_fast_mode,
);

// A running CUDA kernel cannot be interrupted from the host, so the timeout is a CPU behaviour.
#[test]
fn hanging_kernel_times_out_on_cpu() {
    hanging_kernel_times_out(Device::Cpu);
}

// A write past the end of an output is reported as a fault naming that output, and the caller's
// other data stays intact.
fn out_of_bounds_output_write_is_a_fault(device: Device) {
    let x = Array::full(DType::F32, &[16], 2.0).unwrap();
    let k =
        MetalKernel::new("oob", &["x"], &["out"], "uint i = thread_position_in_grid.x;\nout[i + 4] = x[i];").unwrap();
    let spec = LaunchSpec::new([16, 1, 1], [8, 1, 1]).output(&[16], DType::F32).device(device);
    match k.call(&[on(device, &x)], &spec) {
        Err(Error::KernelFault { kernel, msg }) => {
            assert_eq!(kernel, "oob");
            assert!(
                (msg.contains("output 0") || msg.contains("output `out`")) && msg.contains("past the end"),
                "{msg}"
            );
        }
        other => panic!("expected a kernel fault, got {other:?}"),
    }
    assert_eq!(values(&x), vec![2.0; 16]);
}

#[test]
fn out_of_bounds_write_faults_on_cpu() {
    out_of_bounds_output_write_is_a_fault(Device::Cpu);
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
// `divergent_simd_calls_use_active_lanes` is left out: it calls SIMD-group functions from divergent
// branches on purpose, which the sanitizer rightly reports.
sanitizer_clean_tests!(threadgroup_atomics_count_the_group);

// The exchange across a `mem_none` barrier is a warning, never an error.
#[test]
fn mem_none_barrier_exchange_is_a_sanitizer_warning() {
    let (_, found) = kiln::sanitize::check(|| mem_none_barrier_exchanges_data(Device::Cpu));
    let text: Vec<String> = found.iter().map(|f| f.render()).collect();
    assert!(!found.is_empty(), "no finding");
    for f in &found {
        assert_eq!((f.kind, f.severity), ("race", kiln::sanitize::Severity::Warning), "{}", text.join("\n"));
        assert!(f.message.contains("mem_flags::mem_none"), "{}", f.message);
    }
}
