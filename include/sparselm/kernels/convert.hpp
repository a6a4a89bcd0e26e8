#pragma once
// Conversions between float and bf16 buffers, and the vector loads and stores behind them.
//
// Legend: n elements (any shape flattened).
//   to_bf16(x (n) float, y (n) bf16):  y = bf16(x), rounded to nearest even; NaN stays a quiet NaN
//                                      with its sign, overflow rounds to infinity, subnormals are
//                                      kept (bit for bit what bf16(float) in core/dtype.hpp gives)
//   to_float(x (n) bf16, y (n) float): exact widening
// Multi-threaded over contiguous chunks; serial inside a parallel region. The detail:: helpers
// load and store one vector of the architecture (the first n lanes) for element-wise kernels that
// read or write bf16 directly (kernels/gelu.hpp).

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

namespace sparselm::kernels {

namespace detail {

inline constexpr std::size_t convert_min_chunk = 32768;  // elements per thread before splitting

// Each lane rounded to the nearest bf16 (ties to even) and returned as a float (low 16 bits zero);
// a NaN becomes a quiet NaN with its sign. (NaN is found by xsimd::isnan, an unordered compare:
// xsimd's x != x is an ordered compare on AVX and AVX-512, false for NaN. The blend is on floats:
// xsimd 8's integer select on AVX-512BW does not compile without optimisation.)
template <class Arch>
inline fvec<Arch> round_to_bf16(fvec<Arch> x) noexcept {
  using U = xsimd::batch<std::uint32_t, Arch>;
  using F = fvec<Arch>;
  const U u = xsimd::bitwise_cast<U>(x);
  const F rounded = xsimd::bitwise_cast<F>((u + U(0x7fffu) + ((u >> 16) & U(1u))) & U(0xffff0000u));
  const F quiet = xsimd::bitwise_cast<F>((u | U(0x00400000u)) & U(0xffff0000u));
  return xsimd::select(xsimd::isnan(x), quiet, rounded);
}

// The bf16 bits of each lane (in the low 16 bits of a 32-bit lane), rounded as above.
template <class Arch>
inline xsimd::batch<std::uint32_t, Arch> bf16_bits(fvec<Arch> x) noexcept {
  return xsimd::bitwise_cast<xsimd::batch<std::uint32_t, Arch>>(round_to_bf16<Arch>(x)) >> 16;
}

// Stores the first n <= W lanes of x as bf16 at p.
template <class Arch>
inline void store_bf16(fvec<Arch> x, bf16* p, std::size_t n) noexcept {
  constexpr std::size_t W = fvec<Arch>::size;
  const auto b = bf16_bits<Arch>(x);
#if defined(__AVX512F__)
  if constexpr (W == 16 && std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512i v = b;
    if (n == W)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
    else
      _mm512_mask_cvtepi32_storeu_epi16(p, __mmask16((1u << n) - 1u), v);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (W == 8 && std::is_base_of_v<xsimd::avx2, Arch>) {
    const __m256i v = b;
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    if (n == W) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    } else {
      alignas(16) std::uint16_t t[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), packed);
      for (std::size_t i = 0; i < n; ++i) p[i] = bf16::from_bits(t[i]);
    }
    return;
  }
#endif
  alignas(64) std::uint32_t t[W];
  b.store_aligned(t);
  for (std::size_t i = 0; i < n; ++i) p[i] = bf16::from_bits(std::uint16_t(t[i]));
}

// Loads n <= W bf16 values from p as floats (other lanes 0).
template <class Arch>
inline fvec<Arch> load_bf16(const bf16* p, std::size_t n) noexcept {
  constexpr std::size_t W = fvec<Arch>::size;
  const auto* bits = reinterpret_cast<const std::uint16_t*>(p);
#if defined(__AVX512F__)
  if constexpr (W == 16 && std::is_base_of_v<xsimd::avx512f, Arch>) {
    if (n == W) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits));
      return fvec<Arch>(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
  }
#endif
#if defined(__AVX2__)
  if constexpr (W == 8 && std::is_base_of_v<xsimd::avx2, Arch>) {
    if (n == W) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits));
      return fvec<Arch>(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
  }
#endif
  alignas(64) std::uint32_t t[W] = {};
  for (std::size_t i = 0; i < n; ++i) t[i] = std::uint32_t(bits[i]) << 16;
  return xsimd::bitwise_cast<fvec<Arch>>(xsimd::batch<std::uint32_t, Arch>::load_aligned(t));
}

}  // namespace detail

namespace detail {
// y = x converted element by element, S -> D (float -> bf16 or bf16 -> float).
template <class Arch, class S, class D>
void convert(const char* what, std::span<const S> x, std::span<D> y) {
  SPARSELM_CHECK(x.size() == y.size(), what, ": x has ", x.size(), " elements but y has ", y.size());
  const S* xp = x.data();
  D* yp = y.data();
  parallel_chunks(x.size(), [&](int, std::size_t b, std::size_t e) {
    for_each_batch<Arch>(b, e, [&](std::size_t i, std::size_t n) {
      if constexpr (std::is_same_v<D, bf16>) store_bf16<Arch>(loadn<Arch>(xp + i, n), yp + i, n);
      else storen<Arch>(load_bf16<Arch>(xp + i, n), yp + i, n);
    });
  }, convert_min_chunk);
}
}  // namespace detail

// y = bf16(x). x (n) float, y (n) bf16.
template <class Arch = native_arch>
void to_bf16(std::span<const float> x, std::span<bf16> y) {
  detail::convert<Arch>("to_bf16", x, y);
}

// y = float(x). x (n) bf16, y (n) float.
template <class Arch = native_arch>
void to_float(std::span<const bf16> x, std::span<float> y) {
  detail::convert<Arch>("to_float", x, y);
}

}  // namespace sparselm::kernels
