[[kernel]] void custom_kernel_integer_dtypes_uint8_t_int8_t_uint16_t_int16_t_uint64_t_int64_t_uint8_t_int64_t_uint64_t_bool(
  const device uint8_t* a [[buffer(0)]],
  const device int8_t* b [[buffer(1)]],
  const device uint16_t* c [[buffer(2)]],
  const device int16_t* d [[buffer(3)]],
  const device uint64_t* e [[buffer(4)]],
  const device int64_t* f [[buffer(5)]],
  device uint8_t* o1 [[buffer(6)]],
  device int64_t* o2 [[buffer(7)]],
  device uint64_t* o3 [[buffer(8)]],
  device bool* o4 [[buffer(9)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    o1[i] = a[i] + b[i];
    o2[i] = c[i] + d[i];
    o3[i] = e[i];
    o4[i] = f[i] > 0;

}

