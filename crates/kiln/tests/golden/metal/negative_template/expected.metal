template <int OFFSET, bool NEG>
[[kernel]] void custom_kernel_negative_template___3_0_float_float(
  const device float* x [[buffer(0)]],
  device float* out [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * OFFSET + (NEG ? 1 : 0);

}

template [[host_name("custom_kernel_negative_template___3_0_float_float")]] [[kernel]] decltype(custom_kernel_negative_template___3_0_float_float<-3, 0>) custom_kernel_negative_template___3_0_float_float<-3, 0>;

