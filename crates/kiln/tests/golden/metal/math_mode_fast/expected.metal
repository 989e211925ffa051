[[kernel]] void custom_kernel_math_mode_fast_floatc_float(
  const constant float* a [[buffer(0)]],
  device float* out [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    uint i = thread_position_in_grid.x;
#if defined(__FAST_MATH__) && __FAST_MATH__
    out[i] = 1.0;
#else
    out[i] = 0.0;
#endif

}

