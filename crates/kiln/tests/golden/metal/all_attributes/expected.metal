[[kernel]] void custom_kernel_all_attributes_float_uint32_t(
  const device float* a [[buffer(0)]],
  device uint32_t* out [[buffer(1)]],
  uint dispatch_quadgroups_per_threadgroup [[dispatch_quadgroups_per_threadgroup]],
  uint dispatch_simdgroups_per_threadgroup [[dispatch_simdgroups_per_threadgroup]],
  uint3 dispatch_threads_per_threadgroup [[dispatch_threads_per_threadgroup]],
  uint3 grid_origin [[grid_origin]],
  uint3 grid_size [[grid_size]],
  uint quadgroup_index_in_threadgroup [[quadgroup_index_in_threadgroup]],
  uint quadgroups_per_threadgroup [[quadgroups_per_threadgroup]],
  uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
  uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]],
  uint thread_execution_width [[thread_execution_width]],
  uint thread_index_in_quadgroup [[thread_index_in_quadgroup]],
  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
  uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
  uint3 thread_position_in_grid [[thread_position_in_grid]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
  uint3 threadgroups_per_grid [[threadgroups_per_grid]],
  uint3 threads_per_grid [[threads_per_grid]],
  uint threads_per_simdgroup [[threads_per_simdgroup]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {
    // threads_per_threadgroup
    // threads_per_simdgroup
    // threads_per_grid
    // threadgroups_per_grid
    // threadgroup_position_in_grid
    // thread_position_in_threadgroup
    // thread_position_in_grid
    // thread_index_in_threadgroup
    // thread_index_in_simdgroup
    // thread_index_in_quadgroup
    // thread_execution_width
    // simdgroups_per_threadgroup
    // simdgroup_index_in_threadgroup
    // quadgroups_per_threadgroup
    // quadgroup_index_in_threadgroup
    // grid_size
    // grid_origin
    // dispatch_threads_per_threadgroup
    // dispatch_simdgroups_per_threadgroup
    // dispatch_quadgroups_per_threadgroup
    out[0] = 1;

}

