[[kernel]] void custom_kernel_attributes_floatc_uint32_t(
  const constant float* a [[buffer(0)]],
  device uint32_t* out [[buffer(1)]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {
        out[0] = threads_per_threadgroup.x;

}

