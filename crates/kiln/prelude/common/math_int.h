// kiln common prelude: Metal's integer functions for every integer width, scalar and vector
// (element-wise). Results are exact, with no intermediate overflow:
//   absdiff |x - y|; addsat, subsat, madsat (a * b + c) saturate to the type's range;
//   hadd (x + y) >> 1 and rhadd (x + y + 1) >> 1 (signed: floor); mulhi the high half of the
//   double-width product, madhi mulhi(a, b) + c (wrapping); mul24, mad24 (int and uint) multiply
//   the low 24 bits (sign-extended for int); min3, max3, median3 (floats too);
//   popcount, clz, ctz, reverse_bits, rotate (left); extract_bits(x, offset, bits) (signed
//   types sign-extend from the field's top bit; bits == 0 gives 0) and
//   insert_bits(base, insert, offset, bits), with offset + bits <= the width.
#pragma once

namespace kiln {
template <class T> struct unsigned_of { typedef T type; };
template <> struct unsigned_of<char> { typedef unsigned char type; };
template <> struct unsigned_of<signed char> { typedef unsigned char type; };
template <> struct unsigned_of<short> { typedef unsigned short type; };
template <> struct unsigned_of<int> { typedef unsigned int type; };
template <> struct unsigned_of<long> { typedef unsigned long type; };
template <> struct unsigned_of<long long> { typedef unsigned long long type; };
template <class T> struct is_signed_int { static constexpr bool value = T(-1) < T(0); };
// The return type of a function defined for integers only (absent otherwise, so vectors and
// floats pick other overloads).
template <class T> using int_fn = typename enable_if<is_integral<T>::value, T>::type;

// The high 64 bits of the 128-bit product.
KILN_HD inline long long mulhi_s64(long long a, long long b) {
#ifdef KILN_CUDA
  return __mul64hi(a, b);
#else
  return (long long)(((__int128)a * (__int128)b) >> 64);
#endif
}
KILN_HD inline unsigned long long mulhi_u64(unsigned long long a, unsigned long long b) {
#ifdef KILN_CUDA
  return __umul64hi(a, b);
#else
  return (unsigned long long)(((unsigned __int128)a * (unsigned __int128)b) >> 64);
#endif
}
// Ones in the `bits` lowest places (bits <= 64).
KILN_HD inline unsigned long long low_mask(uint bits) { return bits >= 64 ? ~0ull : ((1ull << bits) - 1ull); }
}  // namespace kiln

namespace metal {

template <class T> KILN_HD inline kiln::int_fn<T> absdiff(T x, T y) {
  typedef typename kiln::unsigned_of<T>::type U;
  return x > y ? T(U(U(x) - U(y))) : T(U(U(y) - U(x)));
}

template <class T> KILN_HD inline kiln::int_fn<T> addsat(T x, T y) {
  typedef typename kiln::unsigned_of<T>::type U;
  T r = T(U(U(x) + U(y)));
  if (!kiln::is_signed_int<T>::value) return r < x ? numeric_limits<T>::max() : r;
  // Signed overflow: both operands of one sign, the wrapped sum of the other.
  if ((x < 0) == (y < 0) && (r < 0) != (x < 0)) return x < 0 ? numeric_limits<T>::min() : numeric_limits<T>::max();
  return r;
}

template <class T> KILN_HD inline kiln::int_fn<T> subsat(T x, T y) {
  typedef typename kiln::unsigned_of<T>::type U;
  if (!kiln::is_signed_int<T>::value) return x > y ? T(U(U(x) - U(y))) : T(0);
  T r = T(U(U(x) - U(y)));
  if ((x < 0) != (y < 0) && (r < 0) != (x < 0)) return x < 0 ? numeric_limits<T>::min() : numeric_limits<T>::max();
  return r;
}

// floor((x + y) / 2) and floor((x + y + 1) / 2) without the wider sum (>> is arithmetic).
template <class T> KILN_HD inline kiln::int_fn<T> hadd(T x, T y) {
  return T((x >> 1) + (y >> 1) + (x & y & 1));
}
template <class T> KILN_HD inline kiln::int_fn<T> rhadd(T x, T y) {
  return T((x >> 1) + (y >> 1) + ((x | y) & 1));
}

template <class T> KILN_HD inline kiln::int_fn<T> mulhi(T a, T b) {
  if (sizeof(T) == 8) {
    if (kiln::is_signed_int<T>::value) return T(kiln::mulhi_s64((long long)a, (long long)b));
    return T(kiln::mulhi_u64((unsigned long long)a, (unsigned long long)b));
  }
  const int shift = (8 * sizeof(T)) & 63;  // the 64-bit case returned above
  if (kiln::is_signed_int<T>::value) return T(((long long)a * (long long)b) >> shift);
  return T(((unsigned long long)a * (unsigned long long)b) >> shift);
}

template <class T> KILN_HD inline kiln::int_fn<T> madhi(T a, T b, T c) {
  typedef typename kiln::unsigned_of<T>::type U;
  return T(U(U(mulhi(a, b)) + U(c)));
}

template <class T> KILN_HD inline kiln::int_fn<T> madsat(T a, T b, T c) {
  const T lo = numeric_limits<T>::min(), hi = numeric_limits<T>::max();
  if (sizeof(T) < 8) {
    // Exact in 64 bits: |a * b| < 2^62 (signed), a * b + c < 2^64 (unsigned).
    if (kiln::is_signed_int<T>::value) {
      long long v = (long long)a * (long long)b + (long long)c;
      return v < (long long)lo ? lo : v > (long long)hi ? hi : T(v);
    }
    unsigned long long v = (unsigned long long)a * (unsigned long long)b + (unsigned long long)c;
    return v > (unsigned long long)hi ? hi : T(v);
  }
  // 128-bit sum as (high, low) 64-bit halves.
  unsigned long long pl = (unsigned long long)a * (unsigned long long)b;
  unsigned long long sl = pl + (unsigned long long)c;
  unsigned long long carry = sl < pl ? 1ull : 0ull;
  if (!kiln::is_signed_int<T>::value) {
    unsigned long long sh = kiln::mulhi_u64((unsigned long long)a, (unsigned long long)b) + carry;
    return sh ? hi : T(sl);
  }
  long long sh = (long long)((unsigned long long)kiln::mulhi_s64((long long)a, (long long)b) +
                             (c < 0 ? ~0ull : 0ull) + carry);
  if (sh == ((long long)sl < 0 ? -1ll : 0ll)) return T(sl);
  return sh < 0 ? lo : hi;
}

// The low 24 bits, sign-extended for int.
KILN_HD inline int mul24(int x, int y) {
  int a = (int)((uint)x << 8) >> 8, b = (int)((uint)y << 8) >> 8;
  return (int)((uint)a * (uint)b);
}
KILN_HD inline uint mul24(uint x, uint y) { return (x & 0xffffffu) * (y & 0xffffffu); }
KILN_HD inline int mad24(int x, int y, int z) { return (int)((uint)mul24(x, y) + (uint)z); }
KILN_HD inline uint mad24(uint x, uint y, uint z) { return mul24(x, y) + z; }

template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline T min3(T x, T y, T z) { return T(min(min(x, y), z)); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline T max3(T x, T y, T z) { return T(max(max(x, y), z)); }
template <class T, class = typename kiln::enable_if<kiln::is_scalar<T>::value>::type>
KILN_HD inline T median3(T x, T y, T z) { return T(max(min(x, y), min(max(x, y), z))); }

template <class T> KILN_HD inline kiln::int_fn<T> popcount(T x) {
  unsigned long long v = (unsigned long long)x & kiln::low_mask(8 * sizeof(T));
  T n = 0;
  while (v) { n += T(v & 1u); v >>= 1; }
  return n;
}
template <class T> KILN_HD inline kiln::int_fn<T> clz(T x) {
  const int bits = 8 * sizeof(T);
  unsigned long long v = (unsigned long long)x & kiln::low_mask(bits);
  int n = 0;
  for (int i = bits - 1; i >= 0 && !((v >> i) & 1u); --i) ++n;
  return T(n);
}
template <class T> KILN_HD inline kiln::int_fn<T> ctz(T x) {
  const int bits = 8 * sizeof(T);
  unsigned long long v = (unsigned long long)x & kiln::low_mask(bits);
  int n = 0;
  for (int i = 0; i < bits && !((v >> i) & 1u); ++i) ++n;
  return T(n);
}
template <class T> KILN_HD inline kiln::int_fn<T> reverse_bits(T x) {
  const int bits = 8 * sizeof(T);
  unsigned long long v = (unsigned long long)x, r = 0;
  for (int i = 0; i < bits; ++i) r |= ((v >> i) & 1ull) << (bits - 1 - i);
  return T(r);
}
template <class T> KILN_HD inline kiln::int_fn<T> rotate(T v, T s) {
  const int bits = 8 * sizeof(T);
  unsigned long long m = kiln::low_mask(bits), u = (unsigned long long)v & m;
  int k = int((unsigned long long)s % bits);
  return k == 0 ? v : T(((u << k) | (u >> (bits - k))) & m);
}
template <class T> KILN_HD inline kiln::int_fn<T> extract_bits(T x, uint offset, uint bits) {
  if (bits == 0) return T(0);
  unsigned long long m = kiln::low_mask(bits);
  unsigned long long f = ((unsigned long long)x >> offset) & m;
  if (kiln::is_signed_int<T>::value && ((f >> (bits - 1)) & 1ull)) f |= ~m;
  return T(f);
}
template <class T> KILN_HD inline kiln::int_fn<T> insert_bits(T base, T insert, uint offset, uint bits) {
  if (bits == 0) return base;
  unsigned long long m = kiln::low_mask(bits) << offset;
  return T(((unsigned long long)base & ~m) | (((unsigned long long)insert << offset) & m));
}

// Vector forms, element by element.
#define KILN_IVEC1(NAME)                                                                        \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& a) {                 \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i]);                                              \
    return r;                                                                                   \
  }
#define KILN_IVEC2(NAME)                                                                        \
  template <class T, int N> KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b) { \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                        \
    return r;                                                                                   \
  }
#define KILN_IVEC3(NAME)                                                                        \
  template <class T, int N>                                                                     \
  KILN_HD inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b, const vec<T, N>& c) {   \
    vec<T, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i], c[i]);                                  \
    return r;                                                                                   \
  }
KILN_IVEC1(popcount) KILN_IVEC1(clz) KILN_IVEC1(ctz) KILN_IVEC1(reverse_bits)
KILN_IVEC2(absdiff) KILN_IVEC2(addsat) KILN_IVEC2(subsat) KILN_IVEC2(hadd) KILN_IVEC2(rhadd)
KILN_IVEC2(mulhi) KILN_IVEC2(rotate) KILN_IVEC2(mul24)
KILN_IVEC3(madhi) KILN_IVEC3(madsat) KILN_IVEC3(mad24) KILN_IVEC3(min3) KILN_IVEC3(max3)
KILN_IVEC3(median3)
#undef KILN_IVEC1
#undef KILN_IVEC2
#undef KILN_IVEC3
template <class T, int N> KILN_HD inline vec<T, N> extract_bits(const vec<T, N>& x, uint offset, uint bits) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = extract_bits(x[i], offset, bits);
  return r;
}
template <class T, int N>
KILN_HD inline vec<T, N> insert_bits(const vec<T, N>& base, const vec<T, N>& insert, uint offset, uint bits) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = insert_bits(base[i], insert[i], offset, bits);
  return r;
}

}  // namespace metal
