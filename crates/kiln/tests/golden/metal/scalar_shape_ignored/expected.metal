[[kernel]] void custom_kernel_scalar_shape_ignored_floats_float_float(
  const constant float& s [[buffer(0)]],
  const device float* x [[buffer(1)]],
  const constant int& x_ndim [[buffer(2)]],
  device float* out [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    // s_shape s_strides s_ndim are never generated for a 0-d input
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * s + x_ndim;

}

