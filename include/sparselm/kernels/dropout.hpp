#pragma once
// Counter-based dropout: nothing is stored between forward and backward.
//
// Legend: n elements (any tensor flattened), element index i in [0, n).
//   x, y, dy, dx (n)
//
//   keep_i = rng.uniform(stream, i) >= p          (sparselm::counter_rng, Philox4x32-10)
//   forward:  y_i = keep_i ? x_i / (1 − p) : 0
//   backward: dx_i = keep_i ? dy_i / (1 − p) : 0  (the mask is regenerated from (rng, stream))
//
// The mask is a pure function of (seed, stream, i), so it is the same for any thread count and
// SIMD width, and backward needs no saved mask. p = 0 is the identity; p = 1 gives zeros.
// The comparison is done exactly in integers: uniform = (bits >> 8)·2⁻²⁴ >= p  ⇔  (bits >> 8) >= p·2²⁴.
// y may alias x, dx may alias dy. Multi-threaded over contiguous chunks.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/detail/philox.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

namespace detail {

inline constexpr std::size_t dropout_block = 1024;         // elements per generated mask block
inline constexpr std::size_t dropout_min_chunk = 32768;    // elements per thread before splitting

inline float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// out[j] = keep(first + j) ? in[j]·scale : 0 for j < n; `bits` holds rng.bits(stream, first + j).
template <class Arch>
inline void apply_dropout_bits(const float* in, float* out, const std::uint32_t* bits, std::size_t n, float threshold,
                               float scale) {
  using F = fvec<Arch>;
  using U = simd<std::uint32_t, Arch>;
  using I = simd<std::int32_t, Arch>;
  const F thr(threshold), sc(scale), zero(0.0f);
  for_each_batch<Arch>(0, n, [&](std::size_t j, std::size_t m) {
    const F u = xsimd::to_float(xsimd::bitwise_cast<I>(U::load_unaligned(bits + j) >> 8));  // exact: < 2^24
    storen<Arch>(xsimd::select(u >= thr, loadn<Arch>(in + j, m) * sc, zero), out + j, m);
  });
}

template <class Arch>
void dropout_apply(const char* fn, std::span<const float> x, std::span<float> y, float p, const counter_rng& rng,
                   std::uint64_t stream) {
  SPARSELM_CHECK(x.size() == y.size(), fn, ": input has ", x.size(), " elements but output has ", y.size());
  SPARSELM_CHECK(p >= 0.0f && p <= 1.0f, fn, ": probability p = ", p, " is outside [0, 1]");
  if (p == 0.0f) {
    if (x.data() != y.data()) std::copy(x.begin(), x.end(), y.begin());
    return;
  }
  const float threshold = p * 16777216.0f;  // exact: p·2^24
  const float scale = dropout_scale(p);
  const float* xp = x.data();
  float* yp = y.data();
  parallel_chunks(x.size(), [&](int, std::size_t b, std::size_t e) {
    alignas(64) std::uint32_t bits[dropout_block + 16];
    for (std::size_t i = b; i < e; i += dropout_block) {
      const std::size_t n = std::min(dropout_block, e - i);
      philox_bits<Arch>(rng, stream, i, n, bits);
      apply_dropout_bits<Arch>(xp + i, yp + i, bits, n, threshold, scale);
    }
  }, dropout_min_chunk);
}

}  // namespace detail

// y = dropout(x). x, y (n).
template <class Arch = native_arch>
void dropout_forward(std::span<const float> x, std::span<float> y, float p, const counter_rng& rng, std::uint64_t stream) {
  detail::dropout_apply<Arch>("dropout_forward", x, y, p, rng, stream);
}

// dx = dropout'(dy) with the mask regenerated from (rng, stream). dy, dx (n); dx is assigned.
template <class Arch = native_arch>
void dropout_backward(std::span<const float> dy, std::span<float> dx, float p, const counter_rng& rng,
                      std::uint64_t stream) {
  detail::dropout_apply<Arch>("dropout_backward", dy, dx, p, rng, stream);
}

}  // namespace sparselm::kernels
