[[kernel]] void custom_kernel_small_inputs_with_shapes_floatc_floatc_float(
  const constant float* w [[buffer(0)]],
  const constant int* w_shape [[buffer(1)]],
  const constant float* v [[buffer(2)]],
  const constant int* v_shape [[buffer(3)]],
  const constant int64_t* v_strides [[buffer(4)]],
  const constant int& v_ndim [[buffer(5)]],
  device float* out [[buffer(6)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = w[i % w_shape[0]] + v[elem_to_loc(i, v_shape, v_strides, v_ndim)];

}

