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
