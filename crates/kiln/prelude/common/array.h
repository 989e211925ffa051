// kiln common prelude: `metal::array<T, N>`, Metal's fixed-size array (an aggregate like
// std::array: `metal::array<int, 3> a = {1, 2, 3};`) with size(), empty(), operator[], front(),
// back(), data() and iteration. Usable for thread, threadgroup, device and constant data; a
// `constant` array is initialised at compile time.
#pragma once

namespace metal {
template <class T, size_t N> struct array {
  // Public, as in std::array, so that brace initialisation fills it; not part of Metal's API.
  T kiln_elems[N > 0 ? N : 1];

  KILN_HD constexpr size_t size() const { return N; }
  KILN_HD constexpr size_t max_size() const { return N; }
  KILN_HD constexpr bool empty() const { return N == 0; }
  KILN_HD T& operator[](size_t i) { return kiln_elems[i]; }
  KILN_HD constexpr const T& operator[](size_t i) const { return kiln_elems[i]; }
  KILN_HD T& front() { return kiln_elems[0]; }
  KILN_HD constexpr const T& front() const { return kiln_elems[0]; }
  KILN_HD T& back() { return kiln_elems[N - 1]; }
  KILN_HD constexpr const T& back() const { return kiln_elems[N - 1]; }
  KILN_HD T* data() { return kiln_elems; }
  KILN_HD constexpr const T* data() const { return kiln_elems; }
  KILN_HD T* begin() { return kiln_elems; }
  KILN_HD T* end() { return kiln_elems + N; }
  KILN_HD constexpr const T* begin() const { return kiln_elems; }
  KILN_HD constexpr const T* end() const { return kiln_elems + N; }
};
}  // namespace metal
