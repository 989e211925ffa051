[[kernel]] void custom_kernel_scalars_bools_int32_ts_int64_ts_floats_float16_ts_float(
  const constant bool& flag [[buffer(0)]],
  const constant int32_t& count [[buffer(1)]],
  const constant int64_t& big [[buffer(2)]],
  const constant float& scale [[buffer(3)]],
  const constant float16_t& halfscale [[buffer(4)]],
  device float* out [[buffer(5)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
    out[i] = flag ? scale * count + big : halfscale;

}

