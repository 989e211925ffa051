//! Metal's launch contract on every backend: the macros Metal predefines, function constants
//! (required ones need values, values need the declared type), every `[[buffer(n)]]` and
//! `[[threadgroup(n)]]` parameter bound, `max_total_threads_per_threadgroup`, the 32 KiB of
//! threadgroup memory (and kiln's own kernels within it at their largest footprint), and the
//! spec file's output names and NumPy integer indexing. Refused launches must fail with an
//! error naming the kernel; accepted ones are checked against values computed here, with
//! outputs poisoned before the run.

mod common;

use std::path::PathBuf;

use common::{assert_close, on, Rng};
use kiln::backend::{ConstantKey, ConstantValue, Dispatch};
use kiln::kernel::predefined::METAL_VERSION;
use kiln::ops::{attention, cholesky, scatter_add};
use kiln::{Array, DType, Device, LaunchSpec, LibraryArg, LibraryLaunch, MetalKernel, MetalLibrary};
use kiln_tools::spec::KernelSpec;

/// The error text of a call that must fail.
#[track_caller]
fn error_of<T>(what: &str, r: kiln::Result<T>) -> String {
    match r {
        Ok(_) => panic!("{what}: expected an error, but it ran"),
        Err(e) => e.to_string(),
    }
}

#[track_caller]
fn assert_mentions(what: &str, text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{what}: the error does not mention {p:?}: {text}");
    }
}

/// Random float32 values on `device`, and the values as stored.
fn f32_input(rng: &mut Rng, device: Device, n: usize) -> (Array, Vec<f64>) {
    let host = Array::from_f64(DType::F32, &[n], &rng.normals(n, 1.0)).unwrap();
    let values = host.to_f64_vec().unwrap();
    (host.to_device(device).unwrap(), values)
}

fn output(shape: &[usize], dtype: DType, poison: f64) -> LibraryArg {
    LibraryArg::Output { shape: shape.to_vec(), dtype, init_value: Some(poison) }
}

fn host(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

// ---- predefined macros ------------------------------------------------------------------

const WIDEN_BF16: &str = r#"
#include <metal_stdlib>
using namespace metal;
#if __METAL_VERSION__ >= 310
typedef bfloat bf_t;
#else
typedef half bf_t;
#endif
kernel void widen(device const bf_t* inp [[buffer(0)]], device float* out [[buffer(1)]],
                  device int* facts [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[i] = float(inp[i]) * 2.0f;
  if (i == 0) {
    facts[0] = __METAL_VERSION__;
#if defined(__HAVE_BFLOAT__)
    facts[1] = 1;
#else
    facts[1] = 0;
#endif
  }
}
"#;

fn predefined_macros_select_metal_31_paths(device: Device) {
    let mut rng = Rng::new(31);
    let n = 96;
    let bf = Array::from_f64(DType::BF16, &[n], &rng.normals(n, 3.0)).unwrap();
    let want: Vec<f64> = bf.to_f64_vec().unwrap().iter().map(|v| v * 2.0).collect();
    let lib = MetalLibrary::new("widen", WIDEN_BF16);
    let launch = LibraryLaunch::new("widen", Dispatch::Threads([n as u32, 1, 1]), [32, 1, 1]);
    let args = [
        LibraryArg::Array(bf.to_device(device).unwrap()),
        output(&[n], DType::F32, f64::NAN),
        output(&[2], DType::I32, -7.0),
    ];
    let out = lib.dispatch(device, &args, &launch).unwrap();
    // bfloat16 values doubled are exact in float32: read as half, they would differ.
    assert_eq!(host(&out[0]), want, "bfloat16 buffer read through the __METAL_VERSION__ >= 310 typedef");
    assert_eq!(host(&out[1]), vec![f64::from(METAL_VERSION), 1.0]);

    // The same macros in a body kernel's header.
    let header = "#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 310 && defined(__HAVE_BFLOAT__)\n#define PICK(x) (x)\n#else\n#define PICK(x) (-1)\n#endif\n";
    let kernel = MetalKernel::new(
        "mver",
        &["a"],
        &["o"],
        "uint i = thread_position_in_grid.x;\no[i] = PICK(a[i]) + __METAL_VERSION__;",
    )
    .unwrap()
    .header(header);
    let values: Vec<i32> = (0..40).map(|_| (rng.uniform(-1000.0, 1000.0)) as i32).collect();
    let a = Array::from_vec(&[40], values.clone()).unwrap();
    let spec = LaunchSpec::new([40, 1, 1], [16, 1, 1]).output(&[40], DType::I32).init_value(-7.0);
    let o = kernel.call(&[on(device, &a)], &spec.device(device)).unwrap();
    let want: Vec<f64> = values.iter().map(|&v| f64::from(v) + f64::from(METAL_VERSION)).collect();
    assert_eq!(host(&o[0]), want);
}

// ---- function constants -------------------------------------------------------------------

const FC_FILE: &str = r#"
#include <metal_stdlib>
using namespace metal;
constant bool use_bias [[function_constant(0)]];
constant int n [[function_constant(1)]];
constant float alpha [[function_constant(2)]];
constant int only_other [[function_constant(3)]];
constant bool has_alpha = is_function_constant_defined(alpha);
constant int n2 = n * 2;

kernel void fc(device const float* x [[buffer(0)]], device const float* bias [[buffer(1)]],
               device float* y [[buffer(2)]], device int* info [[buffer(3)]],
               uint i [[thread_position_in_grid]]) {
  float v = x[i] * float(n);
  if (use_bias) v += bias[i];
  if (has_alpha) v *= alpha;
  y[i] = v;
  if (i == 0) { info[0] = n2; info[1] = has_alpha ? 1 : 0; }
}

kernel void other(device int* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  o[i] = only_other + int(i);
}

kernel void fcbuf(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  device const float* bias [[buffer(2), function_constant(use_bias)]],
                  uint i [[thread_position_in_grid]]) {
  float v = x[i];
  if (use_bias) v += bias[i];
  y[i] = v;
}
"#;

fn fc_launch(function: &str, n: u32, constants: Vec<(ConstantKey, ConstantValue)>) -> LibraryLaunch {
    let mut launch = LibraryLaunch::new(function, Dispatch::Threads([n, 1, 1]), [8, 1, 1]);
    launch.constants = constants;
    launch
}

fn name(s: &str) -> ConstantKey {
    ConstantKey::Name(s.to_string())
}

fn function_constants_follow_metal_rules(device: Device) {
    let mut rng = Rng::new(7);
    let len = 21;
    let (x, xv) = f32_input(&mut rng, device, len);
    let (bias, bv) = f32_input(&mut rng, device, len);
    let lib = MetalLibrary::new("fc", FC_FILE);
    let args = || {
        [
            LibraryArg::Array(x.clone()),
            LibraryArg::Array(bias.clone()),
            output(&[len], DType::F32, f64::NAN),
            output(&[2], DType::I32, -7.0),
        ]
    };
    let k = 2 + (rng.next_u64() % 5) as i64;
    let alpha = 0.75;
    // Required constants by index and by name, the optional one given.
    let constants = vec![
        (ConstantKey::Index(0), ConstantValue::Bool(true)),
        (name("n"), ConstantValue::Int(-k)),
        (name("alpha"), ConstantValue::Float(alpha)),
    ];
    let out = lib.dispatch(device, &args(), &fc_launch("fc", len as u32, constants)).unwrap();
    let want: Vec<f64> = xv.iter().zip(&bv).map(|(x, b)| (x * -k as f64 + b) * alpha).collect();
    assert_close("fc with alpha", &out[0], &want, DType::F32);
    assert_eq!(host(&out[1]), vec![(-2 * k) as f64, 1.0]);

    // The optional constant unset: is_function_constant_defined is false.
    let constants =
        vec![(name("use_bias"), ConstantValue::Bool(false)), (ConstantKey::Index(1), ConstantValue::Int(k))];
    let out = lib.dispatch(device, &args(), &fc_launch("fc", len as u32, constants)).unwrap();
    let want: Vec<f64> = xv.iter().map(|x| x * k as f64).collect();
    assert_close("fc without alpha", &out[0], &want, DType::F32);
    assert_eq!(host(&out[1]), vec![(2 * k) as f64, 0.0]);

    // A required constant unset, a float for an int, an int out of range, an int for a bool.
    let bias_on = (name("use_bias"), ConstantValue::Bool(true));
    let e = error_of("n unset", lib.dispatch(device, &args(), &fc_launch("fc", len as u32, vec![bias_on.clone()])));
    assert_mentions("n unset", &e, &["fc", "`n`", "function_constant(1)"]);
    for (value, why) in [
        (ConstantValue::Float(1.5), "not an integer"),
        (ConstantValue::Int(3_000_000_000), "out of range"),
        (ConstantValue::Int(i64::from(i32::MIN) - 1), "out of range"),
    ] {
        let launch = fc_launch("fc", len as u32, vec![bias_on.clone(), (name("n"), value)]);
        let e = error_of(why, lib.dispatch(device, &args(), &launch));
        assert_mentions(why, &e, &["fc", "`n`", why]);
    }
    let launch = fc_launch(
        "fc",
        len as u32,
        vec![(name("use_bias"), ConstantValue::Int(1)), (name("n"), ConstantValue::Int(1))],
    );
    assert_mentions(
        "bool",
        &error_of("int for bool", lib.dispatch(device, &args(), &launch)),
        &["use_bias", "boolean"],
    );

    // `other` uses only its own constant: `n` may stay unset there, `only_other` may not.
    let c = 1000 + (rng.next_u64() % 1000) as i64;
    let launch = fc_launch("other", 10, vec![(ConstantKey::Index(3), ConstantValue::Int(c))]);
    let out = lib.dispatch(device, &[output(&[10], DType::I32, -7.0)], &launch).unwrap();
    assert_eq!(host(&out[0]), (0..10).map(|i| (c + i) as f64).collect::<Vec<_>>());
    let e = error_of(
        "only_other unset",
        lib.dispatch(device, &[output(&[10], DType::I32, -7.0)], &fc_launch("other", 10, vec![])),
    );
    assert_mentions("only_other unset", &e, &["other", "`only_other`"]);

    // A buffer behind a false function constant needs no binding; behind a true one it does.
    let two = [LibraryArg::Array(x.clone()), output(&[len], DType::F32, f64::NAN)];
    let off = fc_launch("fcbuf", len as u32, vec![(name("use_bias"), ConstantValue::Bool(false))]);
    let out = lib.dispatch(device, &two, &off).unwrap();
    assert_eq!(host(&out[0]), xv);
    let on_ = fc_launch("fcbuf", len as u32, vec![(name("use_bias"), ConstantValue::Bool(true))]);
    assert_mentions("fcbuf", &error_of("bias unbound", lib.dispatch(device, &two, &on_)), &["fcbuf", "[[buffer(2)]]"]);
}

// ---- bindings -----------------------------------------------------------------------------

const BINDINGS_FILE: &str = r#"
#include <metal_stdlib>
using namespace metal;
kernel void add3(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                 device float* c [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  c[i] = a[i] + b[i];
}
kernel void tgsum(device const float* x [[buffer(0)]], device float* sums [[buffer(1)]],
                  threadgroup float* sh [[threadgroup(0)]], threadgroup float* spare [[threadgroup(1)]],
                  uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                  uint n [[threads_per_threadgroup]]) {
  sh[tid] = x[g * n + tid];
  spare[tid] = 2.0f * sh[tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) {
    float s = 0.0f;
    for (uint k = 0; k < n; ++k) s += spare[k];
    sums[g] = s;
  }
}
"#;

fn unbound_parameters_are_errors_naming_the_slot(device: Device) {
    let mut rng = Rng::new(11);
    let (a, av) = f32_input(&mut rng, device, 64);
    let (b, bv) = f32_input(&mut rng, device, 64);
    let lib = MetalLibrary::new("bindings", BINDINGS_FILE);
    let launch = LibraryLaunch::new("add3", Dispatch::Threads([64, 1, 1]), [32, 1, 1]);
    let full = [LibraryArg::Array(a.clone()), LibraryArg::Array(b), output(&[64], DType::F32, f64::NAN)];
    let out = lib.dispatch(device, &full, &launch).unwrap();
    assert_close("add3", &out[0], &av.iter().zip(&bv).map(|(x, y)| x + y).collect::<Vec<_>>(), DType::F32);
    let short = [LibraryArg::Array(a.clone()), output(&[64], DType::F32, f64::NAN)];
    let e = error_of("two of three buffers", lib.dispatch(device, &short, &launch));
    assert_mentions("two of three buffers", &e, &["add3", "`c`", "[[buffer(2)]]", "binds 2 buffers"]);

    let mut launch = LibraryLaunch::new("tgsum", Dispatch::Threadgroups([2, 1, 1]), [32, 1, 1]);
    let args = [LibraryArg::Array(a), output(&[2], DType::F32, f64::NAN)];
    for memory in [vec![], vec![128]] {
        launch.threadgroup_memory = memory.clone();
        let e = error_of("threadgroup memory missing", lib.dispatch(device, &args, &launch));
        let slot = format!("[[threadgroup({})]]", memory.len());
        assert_mentions("threadgroup memory missing", &e, &["tgsum", &slot, "threadgroup_memory"]);
    }
    launch.threadgroup_memory = vec![128, 128];
    let out = lib.dispatch(device, &args, &launch).unwrap();
    let want: Vec<f64> = av.chunks(32).map(|c| 2.0 * c.iter().sum::<f64>()).collect();
    assert_close("tgsum", &out[0], &want, DType::F32);
}

// ---- max_total_threads_per_threadgroup ---------------------------------------------------------

const CAPPED: &str = r#"
#include <metal_stdlib>
using namespace metal;
constant constexpr int CAP = 64;
[[max_total_threads_per_threadgroup(CAP)]]
kernel void capped(device float* o [[buffer(0)]], uint t [[thread_index_in_threadgroup]],
                   uint g [[threadgroup_position_in_grid]], ushort tpt [[threads_per_threadgroup]]) {
  o[g * 64 + t] = float(t) + float(tpt) * 1000.0f;
}
"#;

fn max_total_threads_per_threadgroup_is_enforced(device: Device) {
    let lib = MetalLibrary::new("capped", CAPPED);
    let launch = LibraryLaunch::new("capped", Dispatch::Threadgroups([2, 1, 1]), [128, 1, 1]);
    let e = error_of("128 > 64", lib.dispatch(device, &[output(&[256], DType::F32, f64::NAN)], &launch));
    assert_mentions("128 > 64", &e, &["capped", "max_total_threads_per_threadgroup(64)", "128"]);
    let e = error_of(
        "8 x 16",
        lib.dispatch(
            device,
            &[output(&[256], DType::F32, f64::NAN)],
            &LibraryLaunch::new("capped", Dispatch::Threadgroups([1, 1, 1]), [8, 16, 1]),
        ),
    );
    assert_mentions("8 x 16", &e, &["capped", "128"]);
    // At the cap it runs; a grid smaller than the requested group clamps it below the cap.
    let launch = LibraryLaunch::new("capped", Dispatch::Threadgroups([2, 1, 1]), [64, 1, 1]);
    let out = lib.dispatch(device, &[output(&[128], DType::F32, f64::NAN)], &launch).unwrap();
    let want: Vec<f64> = (0..128).map(|i| (i % 64) as f64 + 64_000.0).collect();
    assert_eq!(host(&out[0]), want);
    let launch = LibraryLaunch::new("capped", Dispatch::Threads([48, 1, 1]), [128, 1, 1]);
    let out = lib.dispatch(device, &[output(&[48], DType::F32, f64::NAN)], &launch).unwrap();
    assert_eq!(host(&out[0]), (0..48).map(|i| i as f64 + 48_000.0).collect::<Vec<_>>());
}

// ---- threadgroup memory ---------------------------------------------------------------------

/// A body kernel that fills `big` (`N` elements of `T`), then reads it reversed.
fn reverse_kernel() -> MetalKernel {
    MetalKernel::new(
        "tg_reverse",
        &["a"],
        &["o"],
        r#"
    threadgroup T big[N];
    uint t = thread_position_in_threadgroup.x;
    uint n = threads_per_threadgroup.x;
    for (uint k = t; k < uint(N); k += n) big[k] = T(k % 251) + T(a[t]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    o[t] = big[uint(N) - 1 - t];
"#,
    )
    .unwrap()
}

const TG_FILE: &str = r#"
#include <metal_stdlib>
using namespace metal;
constant int STATIC_FLOATS = 4096;
kernel void mixed(device float* o [[buffer(0)]], threadgroup float* d0 [[threadgroup(0)]],
                  threadgroup float* d1 [[threadgroup(1)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup float fixed[STATIC_FLOATS];
  fixed[t] = float(t);
  d0[t] = 2.0f * float(t);
  d1[t] = 3.0f * float(t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  o[t] = fixed[31 - t] + d0[31 - t] + d1[31 - t];
}
"#;

fn threadgroup_memory_over_32_kib_is_refused(device: Device) {
    let mut rng = Rng::new(3);
    let values: Vec<f64> = (0..32).map(|_| rng.uniform(0.0, 100.0).round()).collect();
    let a = Array::from_f64(DType::F32, &[32], &values).unwrap();
    let kernel = reverse_kernel();
    let spec = |ty: DType, n: i32| {
        LaunchSpec::new([32, 1, 1], [32, 1, 1])
            .output(&[32], ty)
            .template("T", ty)
            .template("N", n)
            .init_value(-7.0)
            .device(device)
    };
    // 8192 floats are exactly 32 KiB; 16384 halves too.
    for (ty, n) in [(DType::F32, 8192), (DType::F16, 16384)] {
        let out = kernel.call(&[on(device, &a)], &spec(ty, n)).unwrap();
        let want: Vec<f64> =
            (0..32).map(|t| ((n as usize - 1 - t) % 251) as f64 + values[(n as usize - 1 - t) % 32]).collect();
        assert_eq!(host(&out[0]), want, "{ty} x {n}");
    }
    for (ty, n, bytes) in [(DType::F32, 8193, "32772"), (DType::F16, 16385, "32770"), (DType::F32, 10240, "40960")] {
        let e = error_of("over 32 KiB", kernel.call(&[on(device, &a)], &spec(ty, n)));
        assert_mentions("over 32 KiB", &e, &["tg_reverse", bytes, "32768"]);
    }

    // 16 KiB static + 8 KiB + 8 KiB dynamic fit; 16 bytes more do not.
    let lib = MetalLibrary::new("tgmem", TG_FILE);
    let mut launch = LibraryLaunch::new("mixed", Dispatch::Threadgroups([1, 1, 1]), [32, 1, 1]);
    launch.threadgroup_memory = vec![8192, 8192];
    let out = lib.dispatch(device, &[output(&[32], DType::F32, f64::NAN)], &launch).unwrap();
    assert_eq!(host(&out[0]), (0..32).map(|t| 6.0 * (31 - t) as f64).collect::<Vec<_>>());
    for memory in [vec![8192, 8193], vec![65536, 16]] {
        launch.threadgroup_memory = memory;
        let e = error_of("dynamic over 32 KiB", lib.dispatch(device, &[output(&[32], DType::F32, f64::NAN)], &launch));
        assert_mentions("dynamic over 32 KiB", &e, &["mixed", "threadgroup_memory", "32768"]);
    }
}

/// kiln's own Metal kernels at the shapes that give them the most threadgroup memory run on
/// every backend (so also on an Apple GPU) and match their references.
fn library_kernels_at_their_largest_threadgroup_footprint_run(device: Device) {
    let mut rng = Rng::new(5);
    // Attention: the tiled path at D = 128 (32 KiB of float4 tiles) and the one-query-per-
    // simdgroup path at D = 256 in float32 (8-key tiles, 24.6 KiB).
    for dims in [[1, 2, 1, 37, 45, 128], [1, 1, 1, 9, 13, 256]] {
        let [b, hq, hkv, tq, tk, d] = dims;
        let mut input = |shape: &[usize]| {
            let n = shape.iter().product();
            let host = Array::from_f64(DType::F32, shape, &rng.normals(n, 1.0)).unwrap();
            (host.to_device(device).unwrap(), host.to_f64_vec().unwrap())
        };
        let (q, qv) = input(&[b, hq, tq, d]);
        let (k, kv) = input(&[b, hkv, tk, d]);
        let (v, vv) = input(&[b, hkv, tk, d]);
        let scale = 1.0 / (d as f32).sqrt();
        let out =
            attention::scaled_dot_product_attention_with(&q, &k, &v, scale, attention::Mask::None, Some(f64::NAN))
                .unwrap_or_else(|e| panic!("attention {dims:?}: {e}"));
        let want = attention::reference(&qv, &kv, &vv, dims, f64::from(scale), false, None);
        assert_close(&format!("attention {dims:?}"), &out, &want, DType::F32);
    }
    // Cholesky's blocked update: two 16 KiB tiles.
    let n = 70;
    let m = rng.normals(n * n, 1.0);
    let spd: Vec<f64> = (0..n * n)
        .map(|e| {
            (0..n).map(|p| m[(e / n) * n + p] * m[(e % n) * n + p]).sum::<f64>() / n as f64
                + f64::from(e % (n + 1) == 0)
        })
        .collect();
    let a = Array::from_f64(DType::F32, &[1, n, n], &spd).unwrap();
    let l = cholesky::cholesky_with(&a.to_device(device).unwrap(), Some(f64::NAN)).unwrap();
    let want = cholesky::reference(&a.to_f64_vec().unwrap(), n).unwrap();
    assert_close("cholesky 70", &l, &want, DType::F32);
    // The scatter-add histogram: 8192 four-byte bins.
    let len = 70_000;
    let bins = 9000;
    let values: Vec<i32> = (0..len).map(|_| rng.uniform(-50.0, 50.0) as i32).collect();
    let indices: Vec<i64> = (0..len).map(|_| (rng.next_u64() % bins as u64) as i64).collect();
    let va = Array::from_vec(&[len], values.clone()).unwrap().to_device(device).unwrap();
    let ia = Array::from_vec(&[len], indices.iter().map(|&i| i as i32).collect()).unwrap().to_device(device).unwrap();
    let out = scatter_add::scatter_add(&va, &ia, bins).unwrap();
    let want = scatter_add::reference_i32(&values, &indices, 1, bins);
    assert_eq!(host(&out), want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
}

backend_tests!(
    predefined_macros_select_metal_31_paths,
    function_constants_follow_metal_rules,
    unbound_parameters_are_errors_naming_the_slot,
    max_total_threads_per_threadgroup_is_enforced,
    threadgroup_memory_over_32_kib_is_refused,
    library_kernels_at_their_largest_threadgroup_footprint_run,
    integer_index_drops_the_axis,
);

// ---- spec files -----------------------------------------------------------------------------

/// A scratch directory unique to one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-spec-contract-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const LIBRARY_SPEC: &str = "[library]\nsource = '''\nkernel void k(device float* y [[buffer(0)]], device float* z [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = 1.0f; z[i] = 2.0f; }\n'''\nfunction = \"k\"\n\n[dispatch]\ngrid = [4, 1, 1]\nthreadgroup = [4, 1, 1]\n";

fn library_spec(first: &str, second: &str) -> String {
    format!(
        "{LIBRARY_SPEC}\n[[buffer]]\noutput = {first:?}\nshape = [4]\ndtype = \"float32\"\n\n[[buffer]]\noutput = {second:?}\nshape = [4]\ndtype = \"float32\"\n"
    )
}

#[test]
fn output_names_are_unique_plain_file_names() {
    let dir = scratch("names");
    let path = dir.join("spec.toml");
    assert!(KernelSpec::parse(&path, &library_spec("A", "B")).is_ok());
    let e = error_of("duplicate", KernelSpec::parse(&path, &library_spec("A", "A")));
    assert_mentions("duplicate", &e, &["buffer[1].output", "\"A\"", "unique"]);
    for bad in ["../escaped", "sub/x", "a\\b", "..", ".", ""] {
        let e = error_of(bad, KernelSpec::parse(&path, &library_spec("A", bad)));
        assert_mentions(bad, &e, &["buffer[1].output", "plain file name"]);
    }
    let body = |names: &str| {
        format!(
            "[kernel]\nname = \"k\"\ninput_names = []\noutput_names = {names}\nsource = \"\"\n\n[call]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\noutput_shapes = [[1], [1]]\noutput_dtypes = [\"float32\", \"float32\"]\n"
        )
    };
    assert!(KernelSpec::parse(&path, &body("[\"o\", \"p\"]")).is_ok());
    assert_mentions(
        "body duplicate",
        &error_of("body duplicate", KernelSpec::parse(&path, &body("[\"o\", \"o\"]"))),
        &["output_names[1]", "unique"],
    );
    assert_mentions(
        "body path",
        &error_of("body path", KernelSpec::parse(&path, &body("[\"o\", \"../p\"]"))),
        &["output_names[1]", "plain file name"],
    );
}

/// `slice` parts that are integers select one index and drop the axis, as NumPy's `a[2, ::-1]`.
fn integer_index_drops_the_axis(device: Device) {
    let dir = scratch(&format!("index-{device}").replace(':', "_"));
    let mut rng = Rng::new(9);
    let (d0, d1, d2) = (5, 4, 6);
    let values: Vec<i32> = (0..d0 * d1 * d2).map(|_| (rng.next_u64() % 100_000) as i32 - 50_000).collect();
    Array::from_vec(&[d0, d1, d2], values.clone()).unwrap().save_npy(dir.join("a.npy")).unwrap();
    let at = |i: usize, j: usize, k: usize| f64::from(values[(i * d1 + j) * d2 + k]);
    let cases: Vec<(&str, Vec<usize>, Vec<f64>)> = vec![
        ("2", vec![d1, d2], (0..d1 * d2).map(|e| at(2, e / d2, e % d2)).collect()),
        ("-1, ::-1", vec![d1, d2], (0..d1 * d2).map(|e| at(d0 - 1, d1 - 1 - e / d2, e % d2)).collect()),
        ("1:4, -3, 1::2", vec![3, 3], (0..9).map(|e| at(1 + e / 3, d1 - 3, 1 + 2 * (e % 3))).collect()),
        ("0, 3, -6", vec![], vec![at(0, 3, 0)]),
    ];
    for (slice, shape, want) in cases {
        let n = want.len();
        let spec = format!(
            "[kernel]\nname = \"gather\"\ninput_names = [\"a\"]\noutput_names = [\"o\", \"nd\"]\nsource = '''\nuint i = thread_position_in_grid.x;\no[i] = a[elem_to_loc(int64_t(i), a_shape, a_strides, a_ndim)];\nif (i == 0) nd[0] = a_ndim;\n'''\nensure_row_contiguous = false\n\n[call]\ngrid = [{n}, 1, 1]\nthreadgroup = [32, 1, 1]\noutput_shapes = [[{n}], [1]]\noutput_dtypes = [\"int32\", \"int32\"]\ninit_value = -7\n\n[[input]]\nfile = \"a.npy\"\nslice = {slice:?}\n"
        );
        let path = dir.join("spec.toml");
        let parsed = KernelSpec::parse(&path, &spec).unwrap_or_else(|e| panic!("{slice}: {e}"));
        if shape.is_empty() {
            // A 0-d view has no shape parameters: only the element is checked here.
            let kiln_tools::spec::KernelSpec::Body(b) = &parsed else { panic!("a body spec") };
            let kiln::KernelInput::Array(a) = &b.inputs[0] else { panic!("an array input") };
            assert_eq!((a.shape(), a.to_f64_vec().unwrap()), (&[][..], want.clone()), "{slice}");
            continue;
        }
        let out = parsed.run(device).unwrap_or_else(|e| panic!("{slice}: {e}"));
        assert_eq!(out[0].1.to_f64_vec().unwrap(), want, "{slice}");
        assert_eq!(out[1].1.to_f64_vec().unwrap(), vec![shape.len() as f64], "{slice}: ndim");
    }
    for (slice, why) in
        [("5", "out of bounds"), ("0, -5", "out of bounds"), ("1, 2, 3, 4", "4 index parts"), ("x", "malformed")]
    {
        let spec = format!(
            "[kernel]\nname = \"g\"\ninput_names = [\"a\"]\noutput_names = [\"o\"]\nsource = \"\"\n\n[call]\ngrid = [1, 1, 1]\nthreadgroup = [1, 1, 1]\noutput_shapes = [[1]]\noutput_dtypes = [\"int32\"]\n\n[[input]]\nfile = \"a.npy\"\nslice = {slice:?}\n"
        );
        let e = error_of(slice, KernelSpec::parse(&dir.join("spec.toml"), &spec));
        assert_mentions(slice, &e, &["input[0].slice", why]);
    }
}
