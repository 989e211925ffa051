[[kernel]] void custom_kernel_no_inputs_int32_t(
  device int32_t* out [[buffer(0)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = int(i) * 2;

}

