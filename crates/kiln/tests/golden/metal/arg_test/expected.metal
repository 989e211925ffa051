template <bool e, int f, typename T>
[[kernel]] void custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t(
  const device float* a [[buffer(0)]],
  const constant int32_t* b [[buffer(1)]],
  const constant bfloat16_t* c [[buffer(2)]],
  const constant float& d [[buffer(3)]],
  device float* out1 [[buffer(4)]],
  device int32_t* out2 [[buffer(5)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]]) {
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) {
            out1[elem] = a[1] + b[2] + c[3] + d + f;
        } else {
            out1[elem] = 1;
        }
        out2[elem] = a[1] + b[2] + c[1] - d;

}

template [[host_name("custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t")]] [[kernel]] decltype(custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t<1, 3, float16_t>) custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t<1, 3, float16_t>;

