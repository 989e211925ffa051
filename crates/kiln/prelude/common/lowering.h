// kiln common prelude: helpers that the MSL lowering writes into user code. Usable from host
// C++17 and CUDA C++17 (after types.h).
#pragma once

// <metal_stdlib>'s function annotation, which full files use as well as MLX's headers (the same
// definition as the MLX preamble's, so both may appear).
#define METAL_FUNC inline

namespace kiln {

template <class T> struct tern_decay_ { typedef typename remove_cv<T>::type type; };
template <class T> struct tern_decay_<T&> { typedef typename remove_cv<T>::type type; };
template <class T> struct tern_decay_<T&&> { typedef typename remove_cv<T>::type type; };

// The type one arm of `c ? M : F` is cast to. Metal applies the usual arithmetic conversions
// when the arms are different scalar types, and half/bfloat take part in them; in C++ a class
// `half` that converts both ways makes such a conditional ambiguous. So a half/bfloat arm
// against another scalar type converts to Metal's common type (float beats half and bfloat,
// half/bfloat beat integers, half with bfloat is float); every other arm keeps its exact type
// and value category (`Own` is `decltype((arm))`, so the cast is then an identity).
template <class Own, class Other, class A = typename tern_decay_<Own>::type,
          class B = typename tern_decay_<Other>::type,
          bool Convert = !is_same<A, B>::value && (is_small_float<A>::value || is_small_float<B>::value) &&
                         is_scalar<A>::value && is_scalar<B>::value>
struct tern_arm_ { typedef Own type; };
template <class Own, class Other, class A, class B> struct tern_arm_<Own, Other, A, B, true> {
  typedef typename mixed_result<A, B>::type type;
};
template <class Own, class Other> using tern_arm = typename tern_arm_<Own, Other>::type;

}  // namespace kiln

namespace kiln {
// A member of an anonymous struct, placed at byte `Off` of the union the lowering makes of the
// struct (source/lower/anon_structs.rs): at offset 0 the member itself; a class behind `Off`
// padding bytes, as its derived class (so it reads, converts and assigns as the class does);
// a scalar or array behind the padding, with the operations of the value.
template <unsigned long Off> struct pad_bytes { unsigned char kiln_pad[Off]; };
template <unsigned long Off, class T> struct placed_value : pad_bytes<Off> {
  T v;
  KILN_HD operator T&() { return v; }
  KILN_HD operator const T&() const { return v; }
  template <class U> KILN_HD placed_value& operator=(const U& u) { v = u; return *this; }
#define KILN_PLACED_ASSIGN(OP) \
  template <class U> KILN_HD placed_value& operator OP(const U& u) { v OP u; return *this; }
  KILN_PLACED_ASSIGN(+=) KILN_PLACED_ASSIGN(-=) KILN_PLACED_ASSIGN(*=) KILN_PLACED_ASSIGN(/=)
  KILN_PLACED_ASSIGN(%=) KILN_PLACED_ASSIGN(&=) KILN_PLACED_ASSIGN(|=) KILN_PLACED_ASSIGN(^=)
  KILN_PLACED_ASSIGN(<<=) KILN_PLACED_ASSIGN(>>=)
#undef KILN_PLACED_ASSIGN
  KILN_HD T operator++(int) { return v++; }
  KILN_HD T operator--(int) { return v--; }
  KILN_HD placed_value& operator++() { ++v; return *this; }
  KILN_HD placed_value& operator--() { --v; return *this; }
};
template <unsigned long Off, class T, unsigned long N> struct placed_value<Off, T[N]> : pad_bytes<Off> {
  T v[N];
  KILN_HD operator T*() { return v; }
  KILN_HD operator const T*() const { return v; }
};
template <unsigned long Off, class T> struct placed_class : pad_bytes<Off>, T {
  using T::operator=;
};
template <unsigned long Off, class T, int Kind = Off == 0 ? 0 : (__is_class(T) && !__is_final(T) ? 1 : 2)>
struct placed_ { typedef T type; };
template <unsigned long Off, class T> struct placed_<Off, T, 1> { typedef placed_class<Off, T> type; };
template <unsigned long Off, class T> struct placed_<Off, T, 2> { typedef placed_value<Off, T> type; };
template <unsigned long Off, class T> using placed = typename placed_<Off, T>::type;

// The standard layout of a struct whose members have types T... in order: the offset of the
// last, the struct's alignment and size.
KILN_HD constexpr unsigned long round_up(unsigned long x, unsigned long a) { return (x + a - 1) / a * a; }
template <unsigned long At, class... T> struct offset_;
template <unsigned long At, class Last> struct offset_<At, Last> {
  static constexpr unsigned long value = round_up(At, alignof(Last));
};
template <unsigned long At, class A, class B, class... R>
struct offset_<At, A, B, R...> : offset_<round_up(At, alignof(A)) + sizeof(A), B, R...> {};
template <class... T> constexpr unsigned long offset_of_last = offset_<0, T...>::value;
template <class... T> struct align_ { static constexpr unsigned long value = 1; };
template <class A, class... R> struct align_<A, R...> {
  static constexpr unsigned long value = alignof(A) > align_<R...>::value ? alignof(A) : align_<R...>::value;
};
template <class... T> constexpr unsigned long struct_align = align_<T...>::value;
template <class... T> struct last_ { typedef char type; };
template <class A> struct last_<A> { typedef A type; };
template <class A, class B, class... R> struct last_<A, B, R...> : last_<B, R...> {};
template <class... T>
constexpr unsigned long struct_size = round_up(offset_of_last<T...> + sizeof(typename last_<T...>::type), struct_align<T...>);

// `[lo ... hi] = v` of an array initialiser (source/lower/designators.rs).
template <class A, class V> KILN_HD inline void fill_range(A& a, long lo, long hi, const V& v) {
  for (long i = lo; i <= hi; ++i) a[i] = v;
}
}  // namespace kiln
