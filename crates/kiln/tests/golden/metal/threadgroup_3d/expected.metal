[[kernel]] void custom_kernel_threadgroup_3d_float_float(
  const device float* x [[buffer(0)]],
  device float* out [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
  uint3 threads_per_grid [[threads_per_grid]]) {
    uint3 p = thread_position_in_grid;
    uint3 n = threads_per_grid;
    uint idx = (p.z * n.y + p.y) * n.x + p.x;
    out[idx] = x[idx] + threadgroup_position_in_grid.x;

}

