template <typename T>
[[kernel]] void custom_kernel_myexp__float_float16_t_float16_t(
  const device float16_t* inp [[buffer(0)]],
  device float16_t* out [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);

}

template [[host_name("custom_kernel_myexp__float_float16_t_float16_t")]] [[kernel]] decltype(custom_kernel_myexp__float_float16_t_float16_t<float>) custom_kernel_myexp__float_float16_t_float16_t<float>;

