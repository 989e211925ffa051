// kiln common prelude: Metal's reflection and refraction functions on float and half vectors
// (`metal::reflect`, `refract`, `faceforward`), as the Metal specification defines them:
//   reflect(I, N)          = I - 2 dot(N, I) N                 (N normalised by the caller)
//   refract(I, N, eta)     = k < 0 ? 0 : eta I - (eta dot(N, I) + sqrt(k)) N,
//                            k = 1 - eta^2 (1 - dot(N, I)^2)
//   faceforward(N, I, Nr)  = dot(Nr, I) < 0 ? N : -N
// Each operation rounds to the element type, as dot() and the vector operators do.
#pragma once

namespace metal {
template <class T, int N> KILN_HD inline vec<T, N> reflect(const vec<T, N>& i, const vec<T, N>& n) {
  T d = dot(n, i);
  return i - T(T(2) * d) * n;
}
template <class T, int N, class S, class = typename kiln::enable_if<kiln::is_scalar<S>::value>::type>
KILN_HD inline vec<T, N> refract(const vec<T, N>& i, const vec<T, N>& n, S eta_) {
  T eta = T(eta_);
  T d = dot(n, i);
  T k = T(T(1) - T(eta * eta) * T(T(1) - T(d * d)));
  if (k < T(0)) return vec<T, N>(T(0));
  return eta * i - T(T(eta * d) + sqrt(k)) * n;
}
template <class T, int N>
KILN_HD inline vec<T, N> faceforward(const vec<T, N>& n, const vec<T, N>& i, const vec<T, N>& nref) {
  return dot(nref, i) < T(0) ? n : -n;
}
}  // namespace metal
