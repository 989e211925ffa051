[[kernel]] void custom_kernel_atomic_outputs_float_int32_t_float_int32_t(
  const device float* values [[buffer(0)]],
  const device int32_t* idx [[buffer(1)]],
  device atomic<float>* hist [[buffer(2)]],
  device atomic<int32_t>* counts [[buffer(3)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    int b = idx[i];
    atomic_fetch_add_explicit(&hist[b], values[i], memory_order_relaxed);
    atomic_fetch_add_explicit(&counts[b], 1, memory_order_relaxed);

}

