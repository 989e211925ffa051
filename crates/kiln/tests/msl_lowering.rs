//! The lowering of MSL that depends on preprocessing and on C++ statement forms: kernels chosen
//! by `#if`, kernels and instantiations made by macros (MLX's `instantiate_kernel`), swizzles
//! and pasting inside macro bodies, Metal's predefined macros, constexpr functions with loops,
//! loop conditions that declare a variable; and the errors for what cannot be lowered (a host
//! name defined twice, overloads that differ only in address spaces). Each runnable case runs on
//! every backend against a plain-Rust reference, with poisoned outputs, and compiles with NVRTC
//! (skipped when NVRTC is missing, unless `KILN_REQUIRE_BACKEND=nvrtc`).

mod common;

use common::{assert_close, random_array, Rng};
use kiln::backend::{Dispatch, MetalProgram, ProgramKind};
use kiln::source::lower::{lower, LowerTarget};
use kiln::{
    Array, DType, Device, Error, KernelInput, LaunchSpec, LibraryArg, LibraryLaunch, MathMode, MetalKernel,
    MetalLibrary,
};

const POISON_F32: f64 = f64::NAN;
const POISON_I32: f64 = -123_456_789.0;

fn values(a: &Array) -> Vec<f64> {
    a.to_host().unwrap().to_f64_vec().unwrap()
}

/// `n` random int32 values in `lo..=hi`.
fn random_ints(rng: &mut Rng, n: usize, lo: i32, hi: i32) -> Array {
    let span = (hi - lo + 1) as u64;
    let v: Vec<i32> = (0..n).map(|_| lo + (rng.next_u64() % span) as i32).collect();
    Array::from_vec(&[n], v).unwrap()
}

fn file_program(name: &str, source: &str, function: &str) -> MetalProgram {
    MetalProgram {
        kernel: name.into(),
        source: source.into(),
        kind: ProgramKind::FullFile,
        function: function.into(),
        math_mode: MathMode::Safe,
        constants: vec![],
    }
}

fn host_names(program: &MetalProgram) -> Vec<String> {
    let module = lower(program, LowerTarget::Cpu).unwrap();
    assert_eq!(module.code.lines().count(), program.source.lines().count(), "line count changed");
    module.entries.iter().map(|e| e.host_name.clone()).collect()
}

// ---- kernels chosen by the preprocessor -----------------------------------------------------

/// Two definitions of `k` with their buffers in opposite orders, one per `#if` branch, and a
/// kernel inside `#if 0`: only the active `k` exists, with its own signature.
fn variants_source(v2: bool) -> String {
    format!(
        r#"#include <metal_stdlib>
using namespace metal;
#define V2 {}
#if 0
kernel void ghost(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {{ y[i] = 5.0f; }}
#endif
#if V2
kernel void k(device float* y [[buffer(1)]], const device float* x [[buffer(0)]],
              uint i [[thread_position_in_grid]]) {{ y[i] = x[i] * 3.0f + 10.0f; }}
#else
kernel void k(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {{ y[i] = x[i] * 3.0f + 20.0f; }}
#endif
"#,
        u8::from(v2)
    )
}

fn kernel_variants_under_if_else_run_the_active_one(device: Device) {
    let n = 40;
    for v2 in [false, true] {
        let mut rng = Rng::new(11 + u64::from(v2));
        let x = random_array(&mut rng, DType::F32, &[n]);
        let xv = values(&x);
        let source = variants_source(v2);
        assert_eq!(host_names(&file_program("variants", &source, "k")), vec!["k"]);
        let x_dev = x.to_device(device).unwrap();
        let library = MetalLibrary::new("variants", source);
        let launch = LibraryLaunch::new("k", Dispatch::Threads([n as u32, 1, 1]), [16, 1, 1]);
        let args = [
            LibraryArg::Array(x_dev.clone()),
            LibraryArg::Output { shape: vec![n], dtype: DType::F32, init_value: Some(POISON_F32) },
        ];
        let out = library.dispatch(device, &args, &launch).unwrap();
        let add = if v2 { 10.0f32 } else { 20.0 };
        let want: Vec<f64> = xv.iter().map(|&v| (v as f32 * 3.0 + add) as f64).collect();
        assert_close(&format!("k with V2={v2}"), &out[0], &want, DType::F32);
        assert_eq!(values(&x_dev), xv, "V2={v2}: the input buffer was written");
    }
}

backend_tests!(kernel_variants_under_if_else_run_the_active_one);

// ---- kernels and instantiations made by macros ----------------------------------------------

const MACRO_KERNELS: &str = r#"#include <metal_stdlib>
using namespace metal;

#define instantiate_kernel(name, func, ...) \
  template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;

#define MAKE_AXPB(NAME, A, B) \
  kernel void NAME(const device float* x [[buffer(0)]], device float* y [[buffer(1)]], \
                   uint i [[thread_position_in_grid]]) { y[i] = x[i] * A + B; }

template <typename T, int N>
METAL_FUNC T sum_n(const device T* p) {
  T s = T(0);
  for (int k = 0; k < N; k++) s += p[k];
  return s;
}

template <typename T, int N, bool NEG>
[[kernel]] void rowsum(
    const device T* x [[buffer(0)]],
    device T* y [[buffer(1)]],
    uint i [[thread_position_in_grid]]) {
  T s = sum_n<T, N>(x + i * N);
  y[i] = NEG ? T(-s) : s;
}

template <typename T, int A, int B>
[[kernel]] void axpb_t(const device T* x [[buffer(0)]], device T* y [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) { y[i] = x[i] * T(A) + T(B); }

// As MLX names instantiations: a host name pasted from stringized pieces.
#define instantiate_axpb(tname, type, a, b) instantiate_kernel("axpb_" #tname "_" #a, axpb_t, type, a, b)

instantiate_kernel("rowsum_float_4_neg", rowsum, float, 4, true)
instantiate_kernel("rowsum_int_3", rowsum, int, 3, false)
instantiate_axpb(int32, int, 3, -7)
MAKE_AXPB(axpb_2_1, 2.0f, 1.0f)
MAKE_AXPB(axpb_m3_half,
          -3.0f, 0.5f)
"#;

fn run_file(device: Device, function: &str, x: &Array, out_len: usize, dtype: DType, tg: u32) -> Array {
    let library = MetalLibrary::new("macro_kernels", MACRO_KERNELS);
    let launch = LibraryLaunch::new(function, Dispatch::Threads([out_len as u32, 1, 1]), [tg, 1, 1]);
    let poison = if dtype == DType::F32 { POISON_F32 } else { POISON_I32 };
    let args = [
        LibraryArg::Array(x.to_device(device).unwrap()),
        LibraryArg::Output { shape: vec![out_len], dtype, init_value: Some(poison) },
    ];
    library.dispatch(device, &args, &launch).unwrap().remove(0)
}

fn kernels_made_by_macros_are_entries(device: Device) {
    // A file's unit wraps only the kernel it dispatches; one that names none wraps them all.
    assert_eq!(host_names(&file_program("macro_kernels", MACRO_KERNELS, "axpb_2_1")), vec!["axpb_2_1"]);
    let names = host_names(&file_program("macro_kernels", MACRO_KERNELS, ""));
    assert_eq!(names, vec!["rowsum_float_4_neg", "rowsum_int_3", "axpb_int32_3", "axpb_2_1", "axpb_m3_half"]);
    let rows = 7;
    let mut rng = Rng::new(21);

    let xf = random_array(&mut rng, DType::F32, &[rows * 4]);
    let xv = values(&xf);
    let out = run_file(device, "rowsum_float_4_neg", &xf, rows, DType::F32, 3);
    let want: Vec<f64> =
        (0..rows).map(|r| -xv[r * 4..r * 4 + 4].iter().map(|&v| v as f32).sum::<f32>() as f64).collect();
    assert_close("rowsum_float_4_neg", &out, &want, DType::F32);

    let xi = random_ints(&mut rng, rows * 3, -1000, 1000);
    let iv = values(&xi);
    let out = run_file(device, "rowsum_int_3", &xi, rows, DType::I32, 3);
    let want: Vec<f64> = (0..rows).map(|r| iv[r * 3..r * 3 + 3].iter().sum()).collect();
    assert_eq!(values(&out), want, "rowsum_int_3");

    let n = 29;
    let xi = random_ints(&mut rng, n, -100_000, 100_000);
    let out = run_file(device, "axpb_int32_3", &xi, n, DType::I32, 8);
    let want: Vec<f64> = values(&xi).iter().map(|&v| v * 3.0 - 7.0).collect();
    assert_eq!(values(&out), want, "axpb_int32_3");

    let x = random_array(&mut rng, DType::F32, &[n]);
    let xv = values(&x);
    for (function, a, b) in [("axpb_2_1", 2.0f32, 1.0f32), ("axpb_m3_half", -3.0, 0.5)] {
        let out = run_file(device, function, &x, n, DType::F32, 8);
        let want: Vec<f64> = xv.iter().map(|&v| (v as f32 * a + b) as f64).collect();
        assert_close(function, &out, &want, DType::F32);
    }
}

backend_tests!(kernels_made_by_macros_are_entries);

// ---- macros in a body kernel's header ---------------------------------------------------------

const MACRO_HEADER: &str = r#"
#define SWZ(v) v.wzyx
#define SETZW(v, a) v.zw = (a)
#define VEC(T, n) T##n
#define FIRST(a, ...) a
#if __METAL_VERSION__ >= 310 && defined(__HAVE_BFLOAT__)
#define METAL_31 1
#else
#define METAL_31 0
#endif
#ifdef __FAST_MATH__
#define FAST 1
#else
#define FAST 0
#endif
"#;

const MACRO_BODY: &str = r#"
    uint i = thread_position_in_grid.x;
    VEC(float, 4) v = VEC(float, 4)(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
    VEC(float, 4) r = SWZ(v);
    SETZW(r, v.xy);
    out[4 * i + 0] = r.x; out[4 * i + 1] = r.y; out[4 * i + 2] = r.z; out[4 * i + 3] = r.w;
    flags[2 * i] = METAL_31 * 10 + FAST;
    flags[2 * i + 1] = FIRST(7, 8, 9) + int(i);
"#;

fn macro_kernel(mode: MathMode) -> MetalKernel {
    MetalKernel::new("macro_swizzles", &["x"], &["out", "flags"], MACRO_BODY)
        .unwrap()
        .header(MACRO_HEADER)
        .math_mode(mode)
}

fn macro_spec(n: usize) -> LaunchSpec {
    LaunchSpec::new([n as u32, 1, 1], [8, 1, 1]).output(&[4 * n], DType::F32).output(&[2 * n], DType::I32)
}

fn swizzles_pasting_and_predefined_macros_in_headers(device: Device) {
    let n = 20;
    let mut rng = Rng::new(31);
    let x = random_array(&mut rng, DType::F32, &[4 * n]);
    let xv = values(&x);
    for (mode, fast) in [(MathMode::Safe, 0.0), (MathMode::Fast, 1.0)] {
        // Integer outputs are poisoned through the float one's init value too.
        let spec = macro_spec(n).init_value(POISON_I32).device(device);
        let out = macro_kernel(mode).call(&[common::on(device, &x)], &spec).unwrap();
        let mut want = Vec::new();
        for i in 0..n {
            let v = &xv[4 * i..4 * i + 4];
            // r = v.wzyx, then r.zw = v.xy.
            want.extend([v[3], v[2], v[0], v[1]]);
        }
        assert_eq!(values(&out[0]), want, "{mode:?}: swizzles from macros");
        let flags: Vec<f64> = (0..n).flat_map(|i| [10.0 + fast, 7.0 + i as f64]).collect();
        assert_eq!(values(&out[1]), flags, "{mode:?}: predefined macros and variadic arguments");
    }
}

backend_tests!(swizzles_pasting_and_predefined_macros_in_headers);

// ---- constexpr functions with loops, declaration conditions -----------------------------------

const CONSTEXPR_HEADER: &str = r#"
constexpr int fact(int n) { int r = 1; for (int k = 2; k <= n; ++k) r *= k; return r; }
constexpr int tri(int n) { int s = 0, k = 0; while (k < n) { s += k; ++k; } return s; }
constexpr int count_to(int n) { int k = 0; for (;;) { if (++k >= n) break; } return k; }
inline int next_val(thread int& st) { return st > 0 ? st-- : 0; }
"#;

const CONSTEXPR_BODY: &str = r#"
    uint i = thread_position_in_grid.x;
    static_assert(fact(5) == 120 && tri(4) == 6 && count_to(4) == 4, "loops fold in constant evaluation");
    thread int buf[fact(3) + tri(4)];
    int n = x[i] & 7;
    for (int j = 0; j < 12; ++j) buf[j] = j * n;
    out[5 * i + 0] = fact(n);
    out[5 * i + 1] = tri(n) + buf[11];
    out[5 * i + 2] = count_to(n + 1);
    int st = x[i] & 15, s = 0;
    while (int v = next_val(st)) { s += v; }
    out[5 * i + 3] = s;
    int t = 0;
    for (int j = 0; int w = (j < 4) ? x[(i + j) % count] : 0; ++j) { t += w; }
    out[5 * i + 4] = t;
"#;

fn constexpr_loops_and_declaration_conditions(device: Device) {
    let n = 37;
    let mut rng = Rng::new(41);
    // Non-zero values: the `for` condition above stops at the first zero.
    let x = random_ints(&mut rng, n, 1, 1000);
    let xv: Vec<i64> = values(&x).iter().map(|&v| v as i64).collect();
    let kernel = MetalKernel::new("constexpr_loops", &["x", "count"], &["out"], CONSTEXPR_BODY)
        .unwrap()
        .header(CONSTEXPR_HEADER);
    let spec = LaunchSpec::new([n as u32, 1, 1], [16, 1, 1])
        .output(&[5 * n], DType::I32)
        .init_value(POISON_I32)
        .device(device);
    let out = kernel.call(&[common::on(device, &x), KernelInput::from(n as i32)], &spec).unwrap();
    let mut want = Vec::new();
    for i in 0..n {
        let k = xv[i] & 7;
        let st = xv[i] & 15;
        let t: i64 = (0..4).map(|j| xv[(i + j) % n]).sum();
        want.extend([(1..=k).product::<i64>(), k * (k - 1) / 2 + 11 * k, k + 1, st * (st + 1) / 2, t]);
    }
    let want: Vec<f64> = want.into_iter().map(|v| v as f64).collect();
    assert_eq!(values(&out[0]), want);
}

backend_tests!(constexpr_loops_and_declaration_conditions);

// ---- what cannot be lowered is refused by name ------------------------------------------------

fn lowering_error(program: &MetalProgram) -> String {
    for target in [LowerTarget::Cpu, LowerTarget::Cuda] {
        match lower(program, target) {
            Err(Error::Compile { kernel, log, .. }) => {
                assert_eq!(kernel, program.kernel);
                if target == LowerTarget::Cuda {
                    return log;
                }
            }
            other => panic!("expected a translation error for {target:?}, got {other:?}"),
        }
    }
    unreachable!()
}

#[test]
fn a_host_name_defined_twice_is_an_error_naming_it() {
    let twice = "#include <metal_stdlib>\n#define ON 1\n#if ON\nkernel void k(device float* y [[buffer(0)]]) { y[0] = 1.0f; }\n#endif\nkernel void k(device int* y [[buffer(0)]]) { y[0] = 2; }\n";
    let log = lowering_error(&file_program("twice", twice, "k"));
    assert!(log.contains("kernel `k` is defined twice (lines 4 and 6)"), "{log}");
    let instantiated = "template <typename T> [[kernel]] void f(device T* y [[buffer(0)]]) { y[0] = T(1); }\ntemplate [[host_name(\"f1\")]] [[kernel]] decltype(f<float>) f<float>;\ntemplate [[host_name(\"f1\")]] [[kernel]] decltype(f<int>) f<int>;\n";
    let log = lowering_error(&file_program("instantiated", instantiated, "f1"));
    assert!(log.contains("kernel `f1` is defined twice (lines 2 and 3)"), "{log}");
}

#[test]
fn overloads_on_address_space_alone_are_refused_by_name() {
    let source = "#include <metal_stdlib>\ninline int which(device const float* p) { return 1; }\ninline int which(constant float* p) { return 4; }\nkernel void k(device const float* x [[buffer(0)]], device int* y [[buffer(1)]]) { y[0] = which(x); }\n";
    let log = lowering_error(&file_program("overloads", source, "k"));
    assert!(log.contains("function `which` (lines 2 and 3)") && log.contains("address spaces"), "{log}");
    assert!(log.contains("`device const float* p` and `constant float* p`"), "{log}");
}

#[test]
fn preprocessor_errors_name_the_users_line() {
    let source = "#include <metal_stdlib>\n#if __METAL_VERSION__ < 300\n#error needs Metal 3\n#endif\n#define F(a, b) a\nkernel void k(device float* y [[buffer(0)]]) { y[0] = F(1); }\n";
    let log = lowering_error(&file_program("pp_error", source, "k"));
    assert!(log.contains("line 6: macro `F` takes 2 arguments, but 1 were given"), "{log}");
}

// ---- every runnable case compiles for CUDA ----------------------------------------------------

#[test]
fn every_case_compiles_with_nvrtc() {
    use kiln::backend::cuda;
    if !common::nvrtc_or_skip() {
        return;
    }
    let x4 = Array::full(DType::F32, &[80], 1.0).unwrap();
    let xi = Array::full(DType::I32, &[37], 1.0).unwrap();
    let mut programs = vec![
        file_program("variants", &variants_source(false), "k"),
        file_program("variants", &variants_source(true), "k"),
    ];
    for function in ["rowsum_float_4_neg", "rowsum_int_3", "axpb_int32_3", "axpb_m3_half"] {
        programs.push(file_program("macro_kernels", MACRO_KERNELS, function));
    }
    for mode in [MathMode::Safe, MathMode::Fast] {
        let k = macro_kernel(mode);
        programs.push(k.program(&k.generate(std::slice::from_ref(&x4), &macro_spec(20)).unwrap()));
    }
    let k = MetalKernel::new("constexpr_loops", &["x", "count"], &["out"], CONSTEXPR_BODY)
        .unwrap()
        .header(CONSTEXPR_HEADER);
    let spec = LaunchSpec::new([37, 1, 1], [16, 1, 1]).output(&[185], DType::I32);
    programs.push(k.program(&k.generate(&[xi, Array::scalar(37i32)], &spec).unwrap()));
    for program in programs {
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| {
            let source = cuda::translate(&program).unwrap_or_default();
            panic!("{} ({}): {e}\n---- generated CUDA ----\n{source}", program.kernel, program.function)
        });
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}
