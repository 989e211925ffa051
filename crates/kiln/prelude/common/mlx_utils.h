// kiln common prelude: what MLX's Metal utils preamble gives body-only kernels: complex64_t,
// Limits<T> (constants used without parentheses: `Limits<T>::max`; floats: max/min are ±inf,
// finite_max/finite_min ±the largest finite value; integers: the type's range; bool: max and
// min only), WorkPerThread, ceildiv, log1p for float and bfloat (x * log(1 + x) / ((1 + x) - 1),
// which cancels the rounding error of 1 + x), and the elem_to_loc family (uint3 overloads pair
// x with the last axis; elem_to_loc_2/3 pair x with the LAST stride, as MLX does).
#pragma once

#define METAL_FUNC inline
// Metal's `static constant constexpr const`; a constexpr value needs no address space here.
#define MLX_MTL_CONST static constexpr const
#ifdef KILN_CUDA
#define MLX_MTL_PRAGMA_UNROLL _Pragma("unroll")
#else
#define MLX_MTL_PRAGMA_UNROLL
#endif

struct complex64_t {
  float real;
  float imag;
  complex64_t() = default;
  KILN_HD constexpr complex64_t(float r, float i) : real(r), imag(i) {}
  template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
  KILN_HD complex64_t(T r) : real((float)r), imag(0.0f) {}
};
typedef complex64_t complex32_t;
KILN_HD inline complex64_t operator+(complex64_t a, complex64_t b) { return complex64_t(a.real + b.real, a.imag + b.imag); }
KILN_HD inline complex64_t operator-(complex64_t a, complex64_t b) { return complex64_t(a.real - b.real, a.imag - b.imag); }
KILN_HD inline complex64_t operator*(complex64_t a, complex64_t b) {
  return complex64_t(a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real);
}
KILN_HD inline complex64_t operator/(complex64_t a, complex64_t b) {
  float d = b.real * b.real + b.imag * b.imag;
  return complex64_t((a.real * b.real + a.imag * b.imag) / d, (a.imag * b.real - a.real * b.imag) / d);
}
KILN_HD inline complex64_t operator-(complex64_t a) { return complex64_t(-a.real, -a.imag); }
KILN_HD inline bool operator==(complex64_t a, complex64_t b) { return a.real == b.real && a.imag == b.imag; }
KILN_HD inline bool operator!=(complex64_t a, complex64_t b) { return !(a == b); }
KILN_HD inline complex64_t& operator+=(complex64_t& a, complex64_t b) { a = a + b; return a; }
KILN_HD inline complex64_t& operator-=(complex64_t& a, complex64_t b) { a = a - b; return a; }
KILN_HD inline complex64_t& operator*=(complex64_t& a, complex64_t b) { a = a * b; return a; }

template <class U> struct Limits {
  static constexpr U max = metal::numeric_limits<U>::max();
  static constexpr U min = metal::numeric_limits<U>::min();
  static constexpr U finite_max = metal::numeric_limits<U>::max();
  static constexpr U finite_min = metal::numeric_limits<U>::min();
};
#define KILN_FLOAT_LIMITS(T)                                                                    \
  template <> struct Limits<T> {                                                                \
    static constexpr T max = metal::numeric_limits<T>::infinity();                              \
    static constexpr T min = -metal::numeric_limits<T>::infinity();                             \
    static constexpr T finite_max = metal::numeric_limits<T>::max();                            \
    static constexpr T finite_min = -metal::numeric_limits<T>::max();                           \
  };
KILN_FLOAT_LIMITS(float) KILN_FLOAT_LIMITS(half) KILN_FLOAT_LIMITS(bfloat)
#undef KILN_FLOAT_LIMITS
template <> struct Limits<bool> {
  static constexpr bool max = true;
  static constexpr bool min = false;
};
template <> struct Limits<complex64_t> {
  static constexpr complex64_t max = complex64_t(metal::numeric_limits<float>::infinity(),
                                                 metal::numeric_limits<float>::infinity());
  static constexpr complex64_t min = complex64_t(-metal::numeric_limits<float>::infinity(),
                                                 -metal::numeric_limits<float>::infinity());
};

template <class U> struct WorkPerThread {
  static constexpr int n = 8 / sizeof(U) > 0 ? 8 / sizeof(U) : 1;
};

template <class T, class U> KILN_HD inline T ceildiv(T n, U m) { return (n + T(m) - T(1)) / T(m); }

// u = 1 + x rounds; x / (u - 1) is the factor that rounding introduced, so it cancels.
KILN_HD inline float log1p(float x) {
  float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (u == Limits<float>::max) return u;
  return x * (metal::log(u) / (u - 1.0f));
}
KILN_HD inline bfloat16_t log1p(bfloat16_t x) {
  float xf = (float)x, u = 1.0f + xf;
  if (u == 1.0f) return x;
  if (u == Limits<float>::max) return Limits<bfloat16_t>::max;
  return bfloat16_t(xf * (metal::log(u) / (u - 1.0f)));
}
// Metal converts a half argument to float (half does not convert to bfloat there).
KILN_HD inline float log1p(half x) { return log1p((float)x); }

template <class IdxT = int64_t>
KILN_HD inline IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += IdxT(elem % IdxT(shape[i])) * IdxT(strides[i]);
    elem /= IdxT(shape[i]);
  }
  return loc;
}
template <class IdxT = int64_t>
KILN_HD inline IdxT elem_to_loc(uint3 elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = IdxT(elem.x) * IdxT(strides[ndim - 1]) + IdxT(elem.y) * IdxT(strides[ndim - 2]);
  for (int d = ndim - 3; d >= 0; --d) {
    loc += IdxT(elem.z % uint(shape[d])) * IdxT(strides[d]);
    elem.z /= uint(shape[d]);
  }
  return loc;
}
template <class IdxT = int64_t>
KILN_HD inline IdxT elem_to_loc_1(uint elem, const int64_t& stride) { return IdxT(elem) * IdxT(stride); }
template <class IdxT = int64_t>
KILN_HD inline IdxT elem_to_loc_2(uint2 elem, const int64_t strides[2]) {
  return IdxT(elem.x) * IdxT(strides[1]) + IdxT(elem.y) * IdxT(strides[0]);
}
template <class IdxT = int64_t>
KILN_HD inline IdxT elem_to_loc_3(uint3 elem, const int64_t strides[3]) {
  return IdxT(elem.x) * IdxT(strides[2]) + IdxT(elem.y) * IdxT(strides[1]) + IdxT(elem.z) * IdxT(strides[0]);
}
template <class IdxT = int64_t>
KILN_HD inline vec<IdxT, 2> elem_to_loc_2_nd(uint3 elem, const int* shape, const int64_t* a_strides,
                                             const int64_t* b_strides, int ndim) {
  vec<IdxT, 2> loc(IdxT(elem.x) * IdxT(a_strides[ndim - 1]) + IdxT(elem.y) * IdxT(a_strides[ndim - 2]),
                   IdxT(elem.x) * IdxT(b_strides[ndim - 1]) + IdxT(elem.y) * IdxT(b_strides[ndim - 2]));
  for (int d = ndim - 3; d >= 0; --d) {
    uint l = elem.z % uint(shape[d]);
    loc.x += IdxT(l) * IdxT(a_strides[d]);
    loc.y += IdxT(l) * IdxT(b_strides[d]);
    elem.z /= uint(shape[d]);
  }
  return loc;
}
