//! The Metal standard library as Apple's headers declare it, in the forms whole libraries use:
//! <metal_math>'s float and half constants and the limit macros, `abs(float)` after `using
//! namespace metal`, `numeric_limits` built on `_numeric_limits_impl<T>` that a program
//! specialises for its own type (candle's reduce), the SIMD-group type traits, MLX's bf16_math.h
//! overloading `metal::` and `metal::fast::` functions for bfloat with the compiler's
//! `__metal_*` intrinsics, and members overloaded on the address space of `this`.

use kiln::{Array, DType, Device, LibraryArg, LibraryLaunch, MetalLibrary};

use crate::common;

const SOURCE: &str = r#"
#include <metal_stdlib>
using namespace metal;

template <typename T> struct indexed { uint i; T val; constexpr indexed<T>() threadgroup = default; };
template <typename T> struct _numeric_limits_impl<indexed<T>> {
  static constexpr METAL_FUNC indexed<T> max() { return indexed<T>{0, numeric_limits<T>::max()}; }
};
template <typename T> constexpr constant bool is_simd_t = __is_valid_simdgroup_type<T>::value;

typedef bfloat bfloat16_t;
namespace metal {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return static_cast<bfloat16_t>(__metal_exp(static_cast<float>(x), __METAL_MAYBE_FAST_MATH__)); }
METAL_FUNC bfloat16_t fma(bfloat16_t x, bfloat16_t y, bfloat16_t z) { return static_cast<bfloat16_t>(__metal_fma(float(x), float(y), float(z))); }
namespace fast {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return static_cast<bfloat16_t>(__metal_exp(static_cast<float>(x), __METAL_FAST_MATH__)); }
}
}

template <typename T> struct MD {
  T m;
  float d;
  constexpr MD<T>() = default;
  constexpr MD<T>() threadgroup = default;
  float sum() const thread { return m + d; }
  float sum() const threadgroup { return m + d; }
};

kernel void names(device float* out [[buffer(0)]], device const float* x [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  float v = x[i];
  MD<float> md{v, 1.0f};
  float r = 0.0f;
  r += abs(v) * M_SQRT1_2_F + M_2_SQRTPI_F * float(M_PI_H);
  r += (float(MAXHALF) == 65504.0f && FLT_MAX > 3.0e38f && HALF_MAX == MAXHALF && INT_MAX == 2147483647) ? 1.0f : 100.0f;
  r += float(numeric_limits<indexed<float>>::max().val == FLT_MAX);
  r += float(is_simd_t<float> && is_simd_t<half4> && !is_simd_t<indexed<float>>);
  r += float(metal::exp(bfloat16_t(v))) + float(metal::fast::exp(v)) + float(metal::fast::exp(bfloat16_t(v)));
  r += float(fma(bfloat16_t(v), bfloat16_t(2.0f), bfloat16_t(1.0f)));
  r += md.sum();
  out[i] = r;
}
"#;

fn reference(v: f64) -> f64 {
    let bf = |x: f64| kiln::bf16::from_f64(x).to_f64();
    let v32 = v as f32 as f64;
    let m_pi_h = 3.140625;
    let mut r = (v32.abs() * std::f32::consts::FRAC_1_SQRT_2 as f64) as f32 as f64;
    r += std::f32::consts::FRAC_2_SQRT_PI as f64 * m_pi_h;
    r += 1.0 + 1.0 + 1.0;
    let e = bf(bf(v).exp());
    r += e + v.exp() + e;
    r += bf(bf(v) * 2.0 + 1.0);
    r += v + 1.0;
    r
}

fn stdlib_names_run(device: Device) {
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 16.0).collect();
    let input = Array::from_slice(&[64], &x).unwrap().to_device(device).unwrap();
    let args = [
        LibraryArg::Output { shape: vec![64], dtype: DType::F32, init_value: Some(f64::NAN) },
        LibraryArg::Array(input),
    ];
    let out = MetalLibrary::new("stdlib_names.metal", SOURCE)
        .dispatch(device, &args, &LibraryLaunch::threads("names", 64usize, 32usize))
        .unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<f64> = x.iter().map(|&v| reference(v as f64)).collect();
    common::assert_close("stdlib names", &out[0], &want, DType::F32);
}

backend_tests!(stdlib_names_run);

#[test]
fn stdlib_names_compile_with_nvrtc() {
    if !common::nvrtc_or_skip() {
        return;
    }
    let program =
        MetalLibrary::new("stdlib_names.metal", SOURCE).program(&LibraryLaunch::threads("names", 64usize, 32usize));
    kiln::backend::cuda::compile_cubin(&program, (9, 0)).unwrap_or_else(|e| panic!("{e}"));
}
