//! What library headers such as MLX's `steel` GEMM headers use, one idiom per test: Metal's
//! `<metal_type_traits>`, the `metal::`-qualified vector and matrix names, a `const thread`
//! member function whose unrolled loop calls a SIMD-group function, and class template
//! specialisations that differ only in address spaces (folded when their definitions agree,
//! refused by name when not). Each runs on every backend against a plain-Rust reference, and
//! compiles with NVRTC.

mod common;

use common::{assert_close, on, Rng};
use kiln::backend::cuda;
use kiln::{Array, DType, Device, Error, LaunchSpec, MetalKernel};

/// Every trait result the `traits` kernel writes, in order, with what Metal gives.
const TRAITS: &[(&str, i32)] = &[
    ("metal::is_same_v<int, int32_t>", 1),
    ("metal::is_same_v<metal::remove_cv_t<const volatile float>, float>", 1),
    ("metal::is_integral<uint>::value", 1),
    ("metal::is_integral_v<float>", 0),
    ("metal::is_floating_point_v<half>", 1),
    ("metal::is_floating_point<bfloat>::value", 1),
    ("metal::is_arithmetic_v<half>", 1),
    ("metal::is_signed_v<short>", 1),
    ("metal::is_signed_v<half>", 1),
    ("metal::is_unsigned_v<ushort>", 1),
    ("metal::is_unsigned_v<float>", 0),
    ("metal::is_scalar_v<float>", 1),
    ("metal::is_scalar_v<float4>", 0),
    ("metal::is_vector_v<float4>", 1),
    ("metal::is_vector<const half2>::value", 1),
    ("metal::is_vector<float>::value", 0),
    ("metal::vec_elements<half3>::value", 3),
    ("metal::vec_elements_v<float>", 1),
    ("metal::is_same_v<metal::make_scalar_t<int2>, int>", 1),
    ("metal::is_same_v<metal::conditional_t<true, char, long>, char>", 1),
    ("int(sizeof(metal::conditional_t<false, char, long>))", 8),
    ("metal::bool_constant<(3 > 2)>::value", 1),
    ("metal::integral_constant<int, 7>{}", 7),
    ("metal::true_type{}()", 1),
    ("metal::is_same_v<metal::make_unsigned_t<int>, uint>", 1),
    ("metal::is_same_v<metal::make_signed_t<const ushort>, const short>", 1),
    ("metal::is_same_v<metal::decay_t<const float(&)[4]>, const float*>", 1),
    ("metal::is_same_v<metal::remove_reference_t<thread int&>, int>", 1),
    ("metal::is_same_v<metal::common_type_t<int, float>, float>", 1),
    ("metal::is_same_v<metal::common_type_t<half, float>, float>", 1),
    ("metal::is_same_v<metal::common_type_t<half, short, half>, half>", 1),
    ("metal::is_pointer_v<device float*>", 1),
    ("metal::is_const_v<const int>", 1),
    ("metal::is_convertible_v<int, float>", 1),
    ("metal::is_convertible_v<float*, int>", 0),
    ("metal::is_base_of_v<metal::false_type, metal::is_integral<float>>", 1),
    ("metal::is_class_v<float2>", 1),
    ("metal::is_enum_v<Mode>", 1),
    ("metal::is_same_v<metal::underlying_type_t<Mode>, short>", 1),
    ("metal::is_trivially_copyable_v<float4>", 1),
    ("metal::conjunction_v<metal::true_type, metal::is_integral<int>>", 1),
    ("metal::disjunction_v<metal::false_type, metal::is_vector<float>>", 0),
    ("metal::negation_v<metal::is_void<int>>", 1),
    ("metal::is_same_v<metal::remove_addrspace_t<float>, float>", 1),
    ("int(metal::rank_v<int[2][3]>)", 2),
    ("int(metal::extent_v<int[2][3], 1>)", 3),
    ("kind_of(1.5f)", 1),
    ("kind_of(3)", 2),
    ("kind_of(half2(1.0h))", 3),
];

const TRAITS_HEADER: &str = r#"
enum class Mode : short { a, b };
// Overloads chosen by the traits, as library code picks an implementation.
template <typename T, metal::enable_if_t<metal::is_floating_point_v<T>, int> = 0>
int kind_of(T) { return 1; }
template <typename T, metal::enable_if_t<metal::is_integral<T>::value, int> = 0>
int kind_of(T) { return 2; }
template <typename T, metal::enable_if_t<metal::is_vector_v<T>, int> = 0>
int kind_of(T) { return 3; }
"#;

fn traits_kernel() -> MetalKernel {
    let mut body = String::from("  if (thread_position_in_grid.x != 0) return;\n");
    for (i, (expr, _)) in TRAITS.iter().enumerate() {
        body.push_str(&format!("  out[{i}] = int({expr});\n"));
    }
    MetalKernel::new("traits", &["inp"], &["out"], body).expect("kernel").header(TRAITS_HEADER)
}

fn traits_spec() -> LaunchSpec {
    LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[TRAITS.len() + 4], DType::I32).init_value(-7.0)
}

fn type_traits(device: Device) {
    let inp = Array::from_vec(&[1], vec![1.0f32]).expect("input");
    let out = traits_kernel().call(&[on(device, &inp)], &traits_spec()).expect("traits kernel");
    let got = out[0].to_host().expect("download").to_f64_vec().expect("values");
    let mut wrong = Vec::new();
    for (i, (expr, want)) in TRAITS.iter().enumerate() {
        if got[i] != f64::from(*want) {
            wrong.push(format!("{expr}: {} (Metal: {want})", got[i]));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(got[TRAITS.len()..].iter().all(|&v| v == -7.0), "written past the traits: {got:?}");
}

const QUALIFIED_HEADER: &str = r#"
template <typename T, int N>
T lane_total(metal::vec<T, N> v) {
  T s = T(0);
  for (int j = 0; j < N; j++) {
    s += v[j];
  }
  return s;
}
"#;

const QUALIFIED_BODY: &str = r#"
  uint i = thread_position_in_grid.x;
  metal::float4 a = metal::float4(inp[4 * i], inp[4 * i + 1], inp[4 * i + 2], inp[4 * i + 3]);
  metal::vec<float, 4> b = a * 2.0f;
  metal::vec<half, 2> h = metal::vec<half, 2>(b.xy);
  metal::half2 h2 = h;
  metal::packed_float3 p = metal::packed_float3(b.x, b.y, b.z);
  metal::float2x2 m = metal::float2x2(metal::float2(1.0f, 2.0f), metal::float2(3.0f, 4.0f));
  metal::float2 mv = m * metal::float2(a.z, a.w);
  metal::int2 n = metal::int2(2, 3);
  out[i] = float(h2.x) + float(h2.y) + p[2] + mv.x + mv.y + lane_total(b) * float(n.x * n.y);
"#;

fn qualified_vector_names(device: Device) {
    let mut rng = Rng::new(11);
    let n = 64;
    // Multiples of 1/8 in [-8, 8]: every step below is exact in half and float.
    let x: Vec<f32> = (0..4 * n).map(|_| ((rng.uniform(-8.0, 8.0) * 8.0).round() / 8.0) as f32).collect();
    let reference: Vec<f64> = x
        .chunks(4)
        .map(|a| {
            let a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
            let b: Vec<f64> = a.iter().map(|v| 2.0 * v).collect();
            let mv = [a[2] + 3.0 * a[3], 2.0 * a[2] + 4.0 * a[3]];
            b[0] + b[1] + b[2] + mv[0] + mv[1] + b.iter().sum::<f64>() * 6.0
        })
        .collect();
    let inp = Array::from_vec(&[4 * n], x).expect("input");
    let kernel =
        MetalKernel::new("qualified", &["inp"], &["out"], QUALIFIED_BODY).expect("kernel").header(QUALIFIED_HEADER);
    let spec = LaunchSpec::new([n as u32, 1, 1], [32, 1, 1]).output(&[n], DType::F32).init_value(f64::NAN);
    let out = kernel.call(&[on(device, &inp)], &spec).expect("qualified kernel");
    assert_close("metal::-qualified vectors", &out[0], &reference, DType::F32);
}

const UNROLLED_HEADER: &str = r#"
#define UNROLL _Pragma("clang loop unroll(full)")
struct LaneScaler {
  float scale;
  METAL_FUNC float scaled_sum(float v) const thread {
    float acc = 0.0f;
    UNROLL
    for (short i = 0; i < 3; i++) {
      acc += simd_sum(v * float(i + 1)) * scale;
    }
    return acc;
  }
};
"#;

const UNROLLED_BODY: &str = r#"
  uint i = thread_position_in_grid.x;
  thread const LaneScaler op{0.5f};
  out[i] = inp[i] > 0.0f ? op.scaled_sum(inp[i]) : -op.scaled_sum(-inp[i]);
"#;

/// `simd_sum` inside a `const thread` member's unrolled loop, reached from both arms of a
/// branch: lanes of one arm sum together.
fn simd_loop_in_const_thread_member(device: Device) {
    let mut rng = Rng::new(12);
    let n = 128;
    let x: Vec<f32> = rng.normals(n, 1.0).iter().map(|&v| v as f32).collect();
    let mut reference = vec![0.0; n];
    for group in 0..n / 32 {
        let lanes = group * 32..group * 32 + 32;
        let pos: f64 = lanes.clone().filter(|&l| x[l] > 0.0).map(|l| f64::from(x[l])).sum();
        let neg: f64 = lanes.clone().filter(|&l| x[l] <= 0.0).map(|l| -f64::from(x[l])).sum();
        // (1 + 2 + 3) * 0.5 times the arm's sum.
        for l in lanes {
            reference[l] = if x[l] > 0.0 { 3.0 * pos } else { -3.0 * neg };
        }
    }
    let inp = Array::from_vec(&[n], x).expect("input");
    let kernel =
        MetalKernel::new("unrolled", &["inp"], &["out"], UNROLLED_BODY).expect("kernel").header(UNROLLED_HEADER);
    let spec = LaunchSpec::new([n as u32, 1, 1], [64, 1, 1]).output(&[n], DType::F32).init_value(f64::NAN);
    let out = kernel.call(&[on(device, &inp)], &spec).expect("unrolled kernel");
    assert_close("simd_sum in a const thread member", &out[0], &reference, DType::F32);
}

const SPECIALISED_HEADER: &str = r#"
template <typename T>
struct element_of {};
template <typename T>
struct element_of<thread T*> { using type = metal::remove_cv_t<T>; };
template <typename T>
struct element_of<device T*> { using type = metal::remove_cv_t<T>; };
template <typename T>
struct element_of<constant T*> { using type = metal::remove_cv_t<T>; };
template <typename T>
struct element_of<threadgroup T*> { using type = metal::remove_cv_t<T>; };

template <typename P>
METAL_FUNC void put(P dst, uint at, float v) {
  using U = typename element_of<P>::type;
  dst[at] = static_cast<U>(v);
}
"#;

const SPECIALISED_BODY: &str = r#"
  uint i = thread_position_in_grid.x;
  uint l = thread_position_in_threadgroup.x;
  threadgroup half staged[64];
  put(&staged[0], l, inp[i] * 3.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  put(out, i, float(staged[63 - l]) + float(sizeof(typename element_of<threadgroup half*>::type)));
"#;

/// Specialisations for each address space with one definition: folded into one.
fn address_space_specialisations(device: Device) {
    let mut rng = Rng::new(13);
    let n = 128;
    let x: Vec<f32> = (0..n).map(|_| ((rng.uniform(-4.0, 4.0) * 16.0).round() / 16.0) as f32).collect();
    let reference: Vec<f64> = (0..n).map(|i| 3.0 * f64::from(x[(i / 64) * 64 + 63 - i % 64]) + 2.0).collect();
    let inp = Array::from_vec(&[n], x).expect("input");
    let kernel = MetalKernel::new("specialised", &["inp"], &["out"], SPECIALISED_BODY)
        .expect("kernel")
        .header(SPECIALISED_HEADER);
    let spec = LaunchSpec::new([n as u32, 1, 1], [64, 1, 1]).output(&[n], DType::F32).init_value(f64::NAN);
    let out = kernel.call(&[on(device, &inp)], &spec).expect("specialised kernel");
    assert_close("address-space specialisations", &out[0], &reference, DType::F32);
}

/// Specialisations that differ only in address spaces but define different things: C++ would
/// see one specialisation defined twice, so kiln refuses the program by the template's name.
fn differing_address_space_specialisations_are_refused(device: Device) {
    let header = r#"
template <typename T> struct space_of {};
template <typename T> struct space_of<device T*> { static constexpr constant int value = 1; };
template <typename T> struct space_of<threadgroup T*> { static constexpr constant int value = 3; };
"#;
    let body = "  out[thread_position_in_grid.x] = space_of<device const float*>::value;\n";
    let inp = Array::from_vec(&[1], vec![1.0f32]).expect("input");
    let kernel = MetalKernel::new("spaces", &["inp"], &["out"], body).expect("kernel").header(header);
    let spec = LaunchSpec::new([32, 1, 1], [32, 1, 1]).output(&[32], DType::I32);
    match kernel.call(&[on(device, &inp)], &spec) {
        Err(Error::Compile { kernel, log, .. }) => {
            assert_eq!(kernel, "spaces");
            assert!(
                log.contains("template `space_of` is specialised for `device T*` (line")
                    && log.contains("and for `threadgroup T*` (line")
                    && log.contains("address spaces"),
                "{log}"
            );
            assert!(!log.contains("redefinition"), "a raw compiler error: {log}");
        }
        other => panic!("expected the program to be refused, got {other:?}"),
    }
}

backend_tests!(
    type_traits,
    qualified_vector_names,
    simd_loop_in_const_thread_member,
    address_space_specialisations,
    differing_address_space_specialisations_are_refused
);

#[test]
fn header_idioms_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let f32s = |n: usize| Array::from_vec(&[n], vec![1.0f32; n]).expect("input");
    let programs = [
        (traits_kernel(), f32s(1), traits_spec()),
        (
            MetalKernel::new("qualified", &["inp"], &["out"], QUALIFIED_BODY).expect("kernel").header(QUALIFIED_HEADER),
            f32s(256),
            LaunchSpec::new([64, 1, 1], [32, 1, 1]).output(&[64], DType::F32),
        ),
        (
            MetalKernel::new("unrolled", &["inp"], &["out"], UNROLLED_BODY).expect("kernel").header(UNROLLED_HEADER),
            f32s(128),
            LaunchSpec::new([128, 1, 1], [64, 1, 1]).output(&[128], DType::F32),
        ),
        (
            MetalKernel::new("specialised", &["inp"], &["out"], SPECIALISED_BODY)
                .expect("kernel")
                .header(SPECIALISED_HEADER),
            f32s(128),
            LaunchSpec::new([128, 1, 1], [64, 1, 1]).output(&[128], DType::F32),
        ),
    ];
    for (kernel, inp, spec) in programs {
        let generated = kernel.generate(&[inp], &spec).expect("generate");
        let program = kernel.program(&generated);
        let cubin = cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "{}: not a cubin", program.kernel);
    }
}

// A representative kernel or two of this file, run once more under the sanitizer (`kiln check`).
// `simd_loop_in_const_thread_member` is left out: it calls `simd_sum` from both arms of a branch on
// purpose, which the sanitizer rightly reports.
sanitizer_clean_tests!(address_space_specialisations);
