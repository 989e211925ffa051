[[kernel]] void custom_kernel_strided_views_float_float_float(
  const device float* x [[buffer(0)]],
  const constant int* x_shape [[buffer(1)]],
  const constant int64_t* x_strides [[buffer(2)]],
  const constant int& x_ndim [[buffer(3)]],
  const device float* y [[buffer(4)]],
  const constant int* y_shape [[buffer(5)]],
  const constant int64_t* y_strides [[buffer(6)]],
  const constant int& y_ndim [[buffer(7)]],
  device float* out [[buffer(8)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)] * y[elem_to_loc(i, y_shape, y_strides, y_ndim)];

}

