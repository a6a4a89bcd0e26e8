#pragma once
// GELU activation, forward and backward, element-wise over flat spans.
//
// Legend: n elements (any shape flattened, e.g. (N,4C) of a feed-forward layer).
//   x (n), y (n), dy (n), dx (n)
//
//   tanh form (GPT-2 "gelu_new"):  y = 0.5·x·(1 + tanh(k·(x + 0.044715·x³))),  k = sqrt(2/π)
//                                    = x · σ(2u),  u = k·(x + 0.044715·x³)   (σ the logistic)
//                                  dy/dx = σ(2u) + 2x·σ(2u)·(1 − σ(2u))·k·(1 + 3·0.044715·x²)
//   erf form (BERT "gelu"):        y = 0.5·x·(1 + erf(x/√2)) = x·Φ(x),   dy/dx = Φ(x) + x·φ(x)
//                                  with Φ(x) = 0.5·erfc(−x/√2), accurate in the negative tail
//
// The σ(2u) rewrite of 0.5·(1 + tanh(u)) needs one exp and one division and is exact algebra;
// it saturates cleanly (exp overflow gives σ = 0, y = −0). y may alias x; dx may alias dy.
// The bf16 forms (a feed-forward layer under bf16 compute, layers/feed_forward.hpp) write y and a
// copy of x in bf16 in the same pass, and take the backward's x in bf16: gelu' is evaluated in
// float at the bf16 value of x.
// Multi-threaded over contiguous chunks; serial inside a parallel region.

#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>

#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

enum class gelu_kind { tanh, erf };

namespace detail {

inline constexpr float gelu_k = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float gelu_a = 0.044715f;
inline constexpr float inv_sqrt2 = 0.7071067811865476f;
inline constexpr float inv_sqrt_2pi = 0.3989422804014327f;
inline constexpr std::size_t gelu_min_chunk = 16384;  // elements per thread before splitting

template <gelu_kind K, class Arch>
inline fvec<Arch> gelu_value(fvec<Arch> x) noexcept {
  using F = fvec<Arch>;
  if constexpr (K == gelu_kind::tanh) {
    F u2 = F(-2.0f * gelu_k) * x * xsimd::fma(F(gelu_a) * x, x, F(1.0f));  // -2u
    return x / (F(1.0f) + detail::exp<Arch>(u2));
  } else {
    return F(0.5f) * x * xsimd::erfc(x * F(-inv_sqrt2));  // 1 + erf(z) = erfc(-z): no cancellation for x < 0
  }
}

template <gelu_kind K, class Arch>
inline fvec<Arch> gelu_grad(fvec<Arch> x) noexcept {
  using F = fvec<Arch>;
  if constexpr (K == gelu_kind::tanh) {
    x = xsimd::min(xsimd::max(x, F(-20.0f)), F(20.0f));  // gelu' is exactly 0 / 1 in float beyond
    F x2 = x * x;
    F u2 = F(-2.0f * gelu_k) * x * xsimd::fma(F(gelu_a), x2, F(1.0f));
    F s = F(1.0f) / (F(1.0f) + detail::exp<Arch>(u2));
    F du = F(2.0f * gelu_k) * xsimd::fma(F(3.0f * gelu_a), x2, F(1.0f));  // d(2u)/dx
    return xsimd::fma(x * s * (F(1.0f) - s), du, s);
  } else {
    F cdf = F(0.5f) * xsimd::erfc(x * F(-inv_sqrt2));
    F pdf = F(inv_sqrt_2pi) * detail::exp<Arch>(F(-0.5f) * x * x);
    return xsimd::fma(x, pdf, cdf);
  }
}

}  // namespace detail

// y = gelu(x). x, y (n); y may alias x.
template <gelu_kind K, class Arch = native_arch>
void gelu_forward(std::span<const float> x, std::span<float> y) {
  SPARSELM_CHECK(x.size() == y.size(), "gelu_forward: x has ", x.size(), " elements but y has ", y.size());
  using F = detail::fvec<Arch>;
  const float* xp = x.data();
  float* yp = y.data();
  parallel_chunks(x.size(), [&](int, std::size_t b, std::size_t e) {
    detail::for_each_batch<Arch>(b, e, [&](std::size_t i, std::size_t n) {
      F v = detail::gelu_value<K, Arch>(detail::loadn<Arch>(xp + i, n));
      detail::storen<Arch>(v, yp + i, n);
    });
  }, detail::gelu_min_chunk);
}

namespace detail {
// dx = gelu'(x)·dy (+ dx): x float or bf16 (widened).
template <gelu_kind K, class Arch, class S>
void gelu_backward_from(std::span<const S> x, std::span<const float> dy, std::span<float> dx, bool accumulate) {
  SPARSELM_CHECK(x.size() == dy.size() && x.size() == dx.size(), "gelu_backward: sizes differ: x ", x.size(), ", dy ",
                 dy.size(), ", dx ", dx.size());
  using F = fvec<Arch>;
  const S* xp = x.data();
  const float* gp = dy.data();
  float* dp = dx.data();
  parallel_chunks(x.size(), [&](int, std::size_t b, std::size_t e) {
    for_each_batch<Arch>(b, e, [&](std::size_t i, std::size_t n) {
      F v;
      if constexpr (std::is_same_v<S, bf16>) v = load_bf16<Arch>(xp + i, n);
      else v = loadn<Arch>(xp + i, n);
      F d = gelu_grad<K, Arch>(v) * loadn<Arch>(gp + i, n);
      if (accumulate) d += loadn<Arch>(dp + i, n);
      storen<Arch>(d, dp + i, n);
    });
  }, gelu_min_chunk);
}
}  // namespace detail

// dx = gelu'(x)·dy (or dx += when accumulate). x, dy, dx (n); dx may alias dy.
template <gelu_kind K, class Arch = native_arch>
void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx, bool accumulate = false) {
  detail::gelu_backward_from<K, Arch>(x, dy, dx, accumulate);
}

// y = bf16(gelu(x)) and x16 = bf16(x). x (n) float; y, x16 (n) bf16.
template <gelu_kind K, class Arch = native_arch>
void gelu_forward(std::span<const float> x, std::span<bf16> y, std::span<bf16> x16) {
  SPARSELM_CHECK(x.size() == y.size() && x.size() == x16.size(), "gelu_forward: sizes differ: x ", x.size(), ", y ",
                 y.size(), ", x16 ", x16.size());
  const float* xp = x.data();
  bf16 *yp = y.data(), *cp = x16.data();
  parallel_chunks(x.size(), [&](int, std::size_t b, std::size_t e) {
    detail::for_each_batch<Arch>(b, e, [&](std::size_t i, std::size_t n) {
      const auto v = detail::loadn<Arch>(xp + i, n);
      detail::store_bf16<Arch>(v, cp + i, n);
      detail::store_bf16<Arch>(detail::gelu_value<K, Arch>(v), yp + i, n);
    });
  }, detail::gelu_min_chunk);
}

// dx = gelu'(x)·dy (or dx += when accumulate) with x in bf16. x (n) bf16; dy, dx (n); dx may alias dy.
template <gelu_kind K, class Arch = native_arch>
void gelu_backward(std::span<const bf16> x, std::span<const float> dy, std::span<float> dx, bool accumulate = false) {
  detail::gelu_backward_from<K, Arch>(x, dy, dx, accumulate);
}

}  // namespace sparselm::kernels
