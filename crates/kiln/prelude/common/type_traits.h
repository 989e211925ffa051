// kiln common prelude: Metal's <metal_type_traits>, in namespace metal. The C++14 type traits
// (with the C++17 `_v` forms, conjunction/disjunction/negation, also as Apple's internal
// _conjunction/_disjunction/_negation, and bool_constant), where half and
// bfloat are floating-point arithmetic types, plus Metal's own: is_vector, vec_elements,
// make_scalar and remove_addrspace (address spaces do not exist in kiln's C++, so that one is
// the identity). No standard headers are available (NVRTC has none), so everything is written
// here, with the compiler builtins host compilers and NVRTC share where C++ needs them.
// Deliberately absent, as in Metal (MLX's steel headers define them themselves): is_empty,
// is_empty_v, void_t and make_void.
#pragma once

namespace metal {

template <class T, T v> struct integral_constant {
  static constexpr T value = v;
  typedef T value_type;
  typedef integral_constant type;
  KILN_HD constexpr operator value_type() const noexcept { return value; }
  KILN_HD constexpr value_type operator()() const noexcept { return value; }
};
template <bool B> using bool_constant = integral_constant<bool, B>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;

// Transformations that the predicates below need.
template <class T> struct remove_const { typedef T type; };
template <class T> struct remove_const<const T> { typedef T type; };
template <class T> struct remove_volatile { typedef T type; };
template <class T> struct remove_volatile<volatile T> { typedef T type; };
template <class T> struct remove_cv { typedef typename remove_volatile<typename remove_const<T>::type>::type type; };
template <class T> struct add_const { typedef const T type; };
template <class T> struct add_volatile { typedef volatile T type; };
template <class T> struct add_cv { typedef const volatile T type; };
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T*> { typedef T type; };
template <class T> struct remove_pointer<T* const> { typedef T type; };
template <class T> struct remove_pointer<T* volatile> { typedef T type; };
template <class T> struct remove_pointer<T* const volatile> { typedef T type; };
template <class T> struct remove_extent { typedef T type; };
template <class T> struct remove_extent<T[]> { typedef T type; };
template <class T, unsigned long N> struct remove_extent<T[N]> { typedef T type; };
template <class T> struct remove_all_extents { typedef T type; };
template <class T> struct remove_all_extents<T[]> { typedef typename remove_all_extents<T>::type type; };
template <class T, unsigned long N> struct remove_all_extents<T[N]> { typedef typename remove_all_extents<T>::type type; };
template <class T> struct remove_addrspace { typedef T type; };
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };

namespace kiln_detail {
template <class T> struct type_identity { typedef T type; };
template <class T> auto add_lref(int) -> type_identity<T&>;
template <class T> auto add_lref(...) -> type_identity<T>;
template <class T> auto add_rref(int) -> type_identity<T&&>;
template <class T> auto add_rref(...) -> type_identity<T>;
template <class T> auto add_ptr(int) -> type_identity<typename remove_reference<T>::type*>;
template <class T> auto add_ptr(...) -> type_identity<T>;
}  // namespace kiln_detail
template <class T> struct add_lvalue_reference : decltype(kiln_detail::add_lref<T>(0)) {};
template <class T> struct add_rvalue_reference : decltype(kiln_detail::add_rref<T>(0)) {};
template <class T> struct add_pointer : decltype(kiln_detail::add_ptr<T>(0)) {};
template <class T> typename add_rvalue_reference<T>::type declval() noexcept;

// Primary categories.
template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class T> struct is_void : is_same<void, typename remove_cv<T>::type> {};
template <class T> struct is_null_pointer : is_same<decltype(nullptr), typename remove_cv<T>::type> {};
namespace kiln_detail {
template <class T> struct integral : false_type {};
#define KILN_TRAIT_INTEGRAL(T) template <> struct integral<T> : true_type {};
KILN_TRAIT_INTEGRAL(bool) KILN_TRAIT_INTEGRAL(char) KILN_TRAIT_INTEGRAL(signed char)
KILN_TRAIT_INTEGRAL(unsigned char) KILN_TRAIT_INTEGRAL(char16_t) KILN_TRAIT_INTEGRAL(char32_t)
KILN_TRAIT_INTEGRAL(wchar_t) KILN_TRAIT_INTEGRAL(short) KILN_TRAIT_INTEGRAL(unsigned short)
KILN_TRAIT_INTEGRAL(int) KILN_TRAIT_INTEGRAL(unsigned int) KILN_TRAIT_INTEGRAL(long)
KILN_TRAIT_INTEGRAL(unsigned long) KILN_TRAIT_INTEGRAL(long long) KILN_TRAIT_INTEGRAL(unsigned long long)
#undef KILN_TRAIT_INTEGRAL
template <class T> struct floating : false_type {};
template <> struct floating<half> : true_type {};
template <> struct floating<bfloat> : true_type {};
template <> struct floating<float> : true_type {};
template <> struct floating<double> : true_type {};
template <> struct floating<long double> : true_type {};
template <class T> struct pointer : false_type {};
template <class T> struct pointer<T*> : true_type {};
template <class T> struct member_pointer : false_type {};
template <class T, class C> struct member_pointer<T C::*> : true_type {};
}  // namespace kiln_detail
template <class T> struct is_integral : kiln_detail::integral<typename remove_cv<T>::type> {};
template <class T> struct is_floating_point : kiln_detail::floating<typename remove_cv<T>::type> {};
template <class T> struct is_array : false_type {};
template <class T> struct is_array<T[]> : true_type {};
template <class T, unsigned long N> struct is_array<T[N]> : true_type {};
template <class T> struct is_pointer : kiln_detail::pointer<typename remove_cv<T>::type> {};
template <class T> struct is_lvalue_reference : false_type {};
template <class T> struct is_lvalue_reference<T&> : true_type {};
template <class T> struct is_rvalue_reference : false_type {};
template <class T> struct is_rvalue_reference<T&&> : true_type {};
template <class T> struct is_reference : bool_constant<is_lvalue_reference<T>::value || is_rvalue_reference<T>::value> {};
template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> struct is_volatile : false_type {};
template <class T> struct is_volatile<volatile T> : true_type {};
// Only functions and references stay unqualified under `const`.
template <class T> struct is_function : bool_constant<!is_const<const T>::value && !is_reference<T>::value> {};
template <class T> struct is_member_pointer : kiln_detail::member_pointer<typename remove_cv<T>::type> {};
namespace kiln_detail {
template <class T> struct member_function_pointer : false_type {};
template <class T, class C> struct member_function_pointer<T C::*> : is_function<T> {};
}  // namespace kiln_detail
template <class T> struct is_member_function_pointer : kiln_detail::member_function_pointer<typename remove_cv<T>::type> {};
template <class T>
struct is_member_object_pointer : bool_constant<is_member_pointer<T>::value && !is_member_function_pointer<T>::value> {};
template <class T> struct is_enum : bool_constant<__is_enum(T)> {};
template <class T> struct is_union : bool_constant<__is_union(T)> {};
template <class T> struct is_class : bool_constant<__is_class(T)> {};

// Composite categories.
template <class T> struct is_arithmetic : bool_constant<is_integral<T>::value || is_floating_point<T>::value> {};
template <class T>
struct is_fundamental : bool_constant<is_arithmetic<T>::value || is_void<T>::value || is_null_pointer<T>::value> {};
template <class T>
struct is_scalar : bool_constant<is_arithmetic<T>::value || is_enum<T>::value || is_pointer<T>::value ||
                                 is_member_pointer<T>::value || is_null_pointer<T>::value> {};
template <class T>
struct is_object : bool_constant<is_scalar<T>::value || is_array<T>::value || is_union<T>::value || is_class<T>::value> {};
template <class T> struct is_compound : bool_constant<!is_fundamental<T>::value> {};

// Properties.
template <class T> struct is_trivial : bool_constant<__is_trivial(T)> {};
template <class T> struct is_trivially_copyable : bool_constant<__is_trivially_copyable(T)> {};
template <class T> struct is_standard_layout : bool_constant<__is_standard_layout(T)> {};
template <class T> struct is_pod : bool_constant<__is_pod(T)> {};
template <class T> struct is_polymorphic : bool_constant<__is_polymorphic(T)> {};
template <class T> struct is_abstract : bool_constant<__is_abstract(T)> {};
template <class T> struct is_final : bool_constant<__is_final(T)> {};
template <class T> struct has_virtual_destructor : bool_constant<__has_virtual_destructor(T)> {};
namespace kiln_detail {
template <class T, bool = is_arithmetic<T>::value> struct is_signed_ : bool_constant<T(-1) < T(0)> {};
template <class T> struct is_signed_<T, false> : false_type {};
template <> struct is_signed_<half, true> : true_type {};
template <> struct is_signed_<bfloat, true> : true_type {};
template <class T, bool = is_integral<T>::value> struct is_unsigned_ : bool_constant<T(0) < T(-1)> {};
template <class T> struct is_unsigned_<T, false> : false_type {};
}  // namespace kiln_detail
template <class T> struct is_signed : kiln_detail::is_signed_<typename remove_cv<T>::type> {};
template <class T> struct is_unsigned : kiln_detail::is_unsigned_<typename remove_cv<T>::type> {};
template <class T, class... A> struct is_constructible : bool_constant<__is_constructible(T, A...)> {};
template <class T, class... A>
struct is_trivially_constructible : bool_constant<__is_trivially_constructible(T, A...)> {};
template <class T> struct is_default_constructible : is_constructible<T> {};
template <class T>
struct is_copy_constructible : is_constructible<T, typename add_lvalue_reference<const T>::type> {};
template <class T> struct is_move_constructible : is_constructible<T, typename add_rvalue_reference<T>::type> {};
template <class T, class U> struct is_assignable : bool_constant<__is_assignable(T, U)> {};
template <class T, class U> struct is_trivially_assignable : bool_constant<__is_trivially_assignable(T, U)> {};
template <class T>
struct is_copy_assignable
    : is_assignable<typename add_lvalue_reference<T>::type, typename add_lvalue_reference<const T>::type> {};
template <class T>
struct is_move_assignable
    : is_assignable<typename add_lvalue_reference<T>::type, typename add_rvalue_reference<T>::type> {};
template <class T> struct alignment_of : integral_constant<unsigned long, alignof(T)> {};
template <class T> struct rank : integral_constant<unsigned long, 0> {};
template <class T> struct rank<T[]> : integral_constant<unsigned long, rank<T>::value + 1> {};
template <class T, unsigned long N> struct rank<T[N]> : integral_constant<unsigned long, rank<T>::value + 1> {};
template <class T, unsigned I = 0> struct extent : integral_constant<unsigned long, 0> {};
template <class T> struct extent<T[], 0> : integral_constant<unsigned long, 0> {};
template <class T, unsigned I> struct extent<T[], I> : extent<T, I - 1> {};
template <class T, unsigned long N> struct extent<T[N], 0> : integral_constant<unsigned long, N> {};
template <class T, unsigned long N, unsigned I> struct extent<T[N], I> : extent<T, I - 1> {};

// Relationships.
template <class B, class D> struct is_base_of : bool_constant<__is_base_of(B, D)> {};
namespace kiln_detail {
template <class To> void convert_to(To) noexcept;
template <class F, class T, class = decltype(convert_to<T>(declval<F>()))> true_type convertible(int);
template <class F, class T> false_type convertible(...);
}  // namespace kiln_detail
template <class From, class To>
struct is_convertible
    : bool_constant<(is_void<From>::value && is_void<To>::value) ||
                    (!is_void<To>::value && !is_array<To>::value && !is_function<To>::value &&
                     decltype(kiln_detail::convertible<From, To>(0))::value)> {};

// More transformations.
namespace kiln_detail {
template <unsigned long Size> struct sized_ints {};
template <> struct sized_ints<1> { typedef signed char s; typedef unsigned char u; };
template <> struct sized_ints<2> { typedef short s; typedef unsigned short u; };
template <> struct sized_ints<4> { typedef int s; typedef unsigned int u; };
template <> struct sized_ints<8> { typedef long s; typedef unsigned long u; };
template <class From, class To> struct copy_cv { typedef To type; };
template <class From, class To> struct copy_cv<const From, To> { typedef const To type; };
template <class From, class To> struct copy_cv<volatile From, To> { typedef volatile To type; };
template <class From, class To> struct copy_cv<const volatile From, To> { typedef const volatile To type; };
template <class T, bool = is_integral<T>::value || is_enum<T>::value> struct make_signed_ {};
template <class T> struct make_signed_<T, true> {
  typedef typename copy_cv<T, typename sized_ints<sizeof(T)>::s>::type type;
};
template <class T, bool = is_integral<T>::value || is_enum<T>::value> struct make_unsigned_ {};
template <class T> struct make_unsigned_<T, true> {
  typedef typename copy_cv<T, typename sized_ints<sizeof(T)>::u>::type type;
};
}  // namespace kiln_detail
template <class T> struct make_signed : kiln_detail::make_signed_<T> {};
template <> struct make_signed<bool> {};
template <> struct make_signed<long long> { typedef long long type; };
template <> struct make_signed<unsigned long long> { typedef long long type; };
template <class T> struct make_unsigned : kiln_detail::make_unsigned_<T> {};
template <> struct make_unsigned<bool> {};
template <> struct make_unsigned<long long> { typedef unsigned long long type; };
template <> struct make_unsigned<unsigned long long> { typedef unsigned long long type; };
template <class T> struct decay {
 private:
  typedef typename remove_reference<T>::type U;

 public:
  typedef typename conditional<
      is_array<U>::value, typename remove_extent<U>::type*,
      typename conditional<is_function<U>::value, typename add_pointer<U>::type, typename remove_cv<U>::type>::type>::
      type type;
};
namespace kiln_detail {
template <class A, class B, class = void> struct common2 {};
template <class A, class B>
struct common2<A, B, decltype((void)(true ? declval<A>() : declval<B>()))> {
  typedef typename decay<decltype(true ? declval<A>() : declval<B>())>::type type;
};
}  // namespace kiln_detail
template <class... T> struct common_type {};
template <class T> struct common_type<T> : common_type<T, T> {};
namespace kiln_detail {
// With half or bfloat, the type their arithmetic gives (`half + float` is float).
template <class A, class B> struct small_common { typedef typename ::kiln::mixed_result<A, B>::type type; };
}  // namespace kiln_detail
template <class A, class B>
struct common_type<A, B>
    : conditional<::kiln::small_op<typename decay<A>::type, typename decay<B>::type>::value,
                  kiln_detail::small_common<typename decay<A>::type, typename decay<B>::type>,
                  kiln_detail::common2<typename decay<A>::type, typename decay<B>::type>>::type {};
namespace kiln_detail {
template <class Void, class A, class B, class... R> struct common_more {};
template <class A, class B, class... R>
struct common_more<decltype((void)declval<typename common_type<A, B>::type>()), A, B, R...>
    : common_type<typename common_type<A, B>::type, R...> {};
}  // namespace kiln_detail
template <class A, class B, class C, class... R> struct common_type<A, B, C, R...> : kiln_detail::common_more<void, A, B, C, R...> {};
template <class T> struct underlying_type { typedef __underlying_type(T) type; };
template <class... B> struct conjunction : true_type {};
template <class B> struct conjunction<B> : B {};
template <class B, class... R> struct conjunction<B, R...> : conditional<bool(B::value), conjunction<R...>, B>::type {};
template <class... B> struct disjunction : false_type {};
template <class B> struct disjunction<B> : B {};
template <class B, class... R> struct disjunction<B, R...> : conditional<bool(B::value), B, disjunction<R...>>::type {};
template <class B> struct negation : bool_constant<!bool(B::value)> {};
// The names Apple's headers give these behind `#pragma METAL internals` (MLX's atomic.h).
template <class... B> using _conjunction = conjunction<B...>;
template <class... B> using _disjunction = disjunction<B...>;
template <class B> using _negation = negation<B>;

// Metal's vector traits: vec_elements is a vector's length (1 for a scalar), make_scalar its
// element type (a scalar is its own).
template <class T> struct is_vector : false_type {};
template <class T, int N> struct is_vector<vec<T, N>> : true_type {};
template <class T> struct is_vector<const T> : is_vector<T> {};
template <class T> struct is_vector<volatile T> : is_vector<T> {};
template <class T> struct is_vector<const volatile T> : is_vector<T> {};
template <class T> struct vec_elements : integral_constant<int, 1> {};
template <class T, int N> struct vec_elements<vec<T, N>> : integral_constant<int, N> {};
template <class T> struct vec_elements<const T> : vec_elements<T> {};
template <class T> struct make_scalar { typedef T type; };
template <class T, int N> struct make_scalar<vec<T, N>> { typedef T type; };
template <class T> struct make_scalar<const T> { typedef const typename make_scalar<T>::type type; };

// The `_t` aliases and `_v` constants.
template <class T> using remove_const_t = typename remove_const<T>::type;
template <class T> using remove_volatile_t = typename remove_volatile<T>::type;
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> using add_const_t = typename add_const<T>::type;
template <class T> using add_volatile_t = typename add_volatile<T>::type;
template <class T> using add_cv_t = typename add_cv<T>::type;
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using add_lvalue_reference_t = typename add_lvalue_reference<T>::type;
template <class T> using add_rvalue_reference_t = typename add_rvalue_reference<T>::type;
template <class T> using remove_pointer_t = typename remove_pointer<T>::type;
template <class T> using add_pointer_t = typename add_pointer<T>::type;
template <class T> using remove_extent_t = typename remove_extent<T>::type;
template <class T> using remove_all_extents_t = typename remove_all_extents<T>::type;
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;
template <class T> using make_signed_t = typename make_signed<T>::type;
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
template <class T> using decay_t = typename decay<T>::type;
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;
template <class... T> using common_type_t = typename common_type<T...>::type;
template <class T> using underlying_type_t = typename underlying_type<T>::type;
template <class T> using make_scalar_t = typename make_scalar<T>::type;
#define KILN_TRAIT_V(NAME) template <class T> constexpr bool NAME##_v = NAME<T>::value;
KILN_TRAIT_V(is_void) KILN_TRAIT_V(is_null_pointer) KILN_TRAIT_V(is_integral) KILN_TRAIT_V(is_floating_point)
KILN_TRAIT_V(is_array) KILN_TRAIT_V(is_pointer) KILN_TRAIT_V(is_lvalue_reference) KILN_TRAIT_V(is_rvalue_reference)
KILN_TRAIT_V(is_reference) KILN_TRAIT_V(is_function) KILN_TRAIT_V(is_member_pointer)
KILN_TRAIT_V(is_member_function_pointer) KILN_TRAIT_V(is_member_object_pointer) KILN_TRAIT_V(is_enum)
KILN_TRAIT_V(is_union) KILN_TRAIT_V(is_class) KILN_TRAIT_V(is_arithmetic) KILN_TRAIT_V(is_fundamental)
KILN_TRAIT_V(is_scalar) KILN_TRAIT_V(is_object) KILN_TRAIT_V(is_compound) KILN_TRAIT_V(is_const)
KILN_TRAIT_V(is_volatile) KILN_TRAIT_V(is_trivial) KILN_TRAIT_V(is_trivially_copyable)
KILN_TRAIT_V(is_standard_layout) KILN_TRAIT_V(is_pod) KILN_TRAIT_V(is_polymorphic) KILN_TRAIT_V(is_abstract)
KILN_TRAIT_V(is_final) KILN_TRAIT_V(has_virtual_destructor) KILN_TRAIT_V(is_signed) KILN_TRAIT_V(is_unsigned)
KILN_TRAIT_V(is_default_constructible) KILN_TRAIT_V(is_copy_constructible) KILN_TRAIT_V(is_move_constructible)
KILN_TRAIT_V(is_copy_assignable) KILN_TRAIT_V(is_move_assignable) KILN_TRAIT_V(is_vector) KILN_TRAIT_V(negation)
#undef KILN_TRAIT_V
template <class T> constexpr unsigned long alignment_of_v = alignment_of<T>::value;
template <class T> constexpr unsigned long rank_v = rank<T>::value;
template <class T, unsigned I = 0> constexpr unsigned long extent_v = extent<T, I>::value;
template <class T> constexpr int vec_elements_v = vec_elements<T>::value;
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;
template <class B, class D> constexpr bool is_base_of_v = is_base_of<B, D>::value;
template <class F, class T> constexpr bool is_convertible_v = is_convertible<F, T>::value;
template <class T, class... A> constexpr bool is_constructible_v = is_constructible<T, A...>::value;
template <class T, class... A> constexpr bool is_trivially_constructible_v = is_trivially_constructible<T, A...>::value;
template <class T, class U> constexpr bool is_assignable_v = is_assignable<T, U>::value;
template <class T, class U> constexpr bool is_trivially_assignable_v = is_trivially_assignable<T, U>::value;
template <class... B> constexpr bool conjunction_v = conjunction<B...>::value;
template <class... B> constexpr bool disjunction_v = disjunction<B...>::value;

}  // namespace metal
