[[kernel]] void custom_kernel_dispatch_substrings_float_float(
  const device float* x [[buffer(0)]],
  device float* y [[buffer(1)]],
  uint dispatch_simdgroups_per_threadgroup [[dispatch_simdgroups_per_threadgroup]],
  uint3 dispatch_threads_per_threadgroup [[dispatch_threads_per_threadgroup]],
  uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {
    uint3 d = dispatch_threads_per_threadgroup;
    uint s = dispatch_simdgroups_per_threadgroup;
    y[0] = d.x + s;

}

