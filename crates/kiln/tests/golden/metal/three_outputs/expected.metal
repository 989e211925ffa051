[[kernel]] void custom_kernel_three_outputs_float_float_float16_t_bfloat16_t(
  const device float* x [[buffer(0)]],
  device float* lo [[buffer(1)]],
  device float16_t* hi [[buffer(2)]],
  device bfloat16_t* mid [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    lo[i] = x[i] - 1;
    hi[i] = x[i] + 1;
    mid[i] = x[i];

}

