[[kernel]] void custom_kernel_substring_detection_float_float_float(
  const device float* a [[buffer(0)]],
  const constant int* a_shape [[buffer(1)]],
  const device float* b [[buffer(2)]],
  device float* out [[buffer(3)]],
  uint thread_index_in_threadgroup [[thread_index_in_threadgroup]]) {
    // data_shape mentions a_shape by accident; b is indexed through thread_index_in_threadgroup
    out[thread_index_in_threadgroup] = a[0] + b[thread_index_in_threadgroup];

}

