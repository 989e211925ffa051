template <typename T>
T do_exp(T x) {
    return metal::precise::exp(x);
}
[[kernel]] void custom_kernel_helper_floatc_float(
  const constant float* a [[buffer(0)]],
  device float* out1 [[buffer(1)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
        uint elem = thread_position_in_grid.x;
        out1[elem] = do_exp(a[elem]);

}

