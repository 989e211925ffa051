//! The run cases, per library. Each runs on the CPU in CI; the same bodies run on CUDA where
//! an NVIDIA GPU is present (ignored otherwise).

pub mod candle;
pub mod candle_families;
pub mod ggml;
pub mod ggml_families;
pub mod mlx;
pub mod mlx_families;

use candle::*;

backend_tests!(
    unary_gelu_erf_f32,
    unary_exp_f16_strided,
    binary_add_f32_broadcast,
    cast_f32_bf16,
    affine_f16,
    where_u8_f32,
    softmax_f32,
    rmsnorm_f16,
    fast_sum_f32,
    index_select_u32_f32,
);

mod ggml_cases {
    use super::ggml::*;
    backend_tests!(get_rows_f16, get_rows_q4_0, rms_norm_mul_f32);
}

mod mlx_cases {
    use super::mlx::*;
    backend_tests!(unary_exp_f16, binary_add_broadcast, copy_f32_to_bf16, softmax_f32, rms_norm_f32);
}
