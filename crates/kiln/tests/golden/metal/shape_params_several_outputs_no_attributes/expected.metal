[[kernel]] void custom_kernel_shape_params_several_outputs_no_attributes_floatc_float_int32_t(
  const constant float* a [[buffer(0)]],
  const constant int* a_shape [[buffer(1)]],
  device float* o1 [[buffer(2)]]) {
  device int32_t* o2 [[buffer(3)]]) {
    o1[0] = a_shape[0];
    o2[0] = 1;

}

