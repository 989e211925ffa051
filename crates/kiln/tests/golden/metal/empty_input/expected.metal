[[kernel]] void custom_kernel_empty_input_floatc_float_float(
  const constant float* e [[buffer(0)]],
  const constant int& e_ndim [[buffer(1)]],
  const device float* x [[buffer(2)]],
  device float* out [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = x[i] + e_ndim;

}

