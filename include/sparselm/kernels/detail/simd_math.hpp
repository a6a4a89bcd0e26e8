#pragma once
// Small SIMD helpers shared by the element-wise kernels: a fast vector exp, partial loads/stores
// for row tails, horizontal reductions. Everything is templated on the xsimd architecture so the
// tests can run the portable (SSE2) and native paths side by side.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "sparselm/core/simd.hpp"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace sparselm::kernels::detail {

template <class Arch>
using fvec = simd<float, Arch>;

// exp(x) for a batch of floats: Cody–Waite range reduction x = n·ln2 + r, |r| <= ln2/2, then
// e^r = 1 + r + r²·P(r) with the degree-5 minimax P of Cephes' expf (≈1 ulp), then p·2^n.
// exp(x) = 0 for x < -87.33 (no denormals), +inf for x > 88.72; NaN stays NaN.
//
// The reduction and polynomial for a finite, clamped xc: returns n (integral) and p = e^r.
template <class Arch>
[[gnu::always_inline]] inline std::pair<fvec<Arch>, fvec<Arch>> exp_reduce(fvec<Arch> xc) noexcept {
  using F = fvec<Arch>;
  const F n = xsimd::nearbyint(xc * F(1.44269504088896341f));
  F r = xsimd::fnma(n, F(0.693359375f), xc);  // x - n·ln2 (high part, exact product)
  r = xsimd::fnma(n, F(-2.12194440e-4f), r);   // ... - n·ln2 (low part)
  F p(1.9875691500e-4f);
  p = xsimd::fma(p, r, F(1.3981999507e-3f));
  p = xsimd::fma(p, r, F(8.3334519073e-3f));
  p = xsimd::fma(p, r, F(4.1665795894e-2f));
  p = xsimd::fma(p, r, F(1.6666665459e-1f));
  p = xsimd::fma(p, r, F(5.0000001201e-1f));
  return {n, xsimd::fma(p, r * r, r + F(1.0f))};
}

// On AVX-512, p·2^n is one VSCALEFPS (overflow to +inf built in) with a masked zero for
// x < -87.33 (or -inf): no compare-and-select chains; NaN fails the "x < lo" test and propagates.
// Elsewhere 2^n is built in the exponent bits and the edge cases are selected.
template <class Arch>
[[gnu::always_inline]] inline fvec<Arch> exp(fvec<Arch> x) noexcept {
  using F = fvec<Arch>;
  constexpr float lo = -87.3365447504019f, hi = 88.72283935546875f;  // exp(lo) = FLT_MIN, exp(hi) = FLT_MAX
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512 v = x;
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(lo), _CMP_NLT_UQ);
    // min(88.8, v) returns v when v is NaN; the clamp keeps r finite for v = +inf.
    const auto [n, p] = exp_reduce<Arch>(F(_mm512_min_ps(_mm512_set1_ps(88.8f), v)));
    return F(_mm512_maskz_scalef_ps(keep, p, n));
  }
#endif
  using I = simd<std::int32_t, Arch>;
  const auto [n, p] = exp_reduce<Arch>(xsimd::min(xsimd::max(x, F(lo)), F(hi)));
  // 2^n as 2^n1 · 2^(n - n1) with n1 = n/2: n reaches 128 near the top of the range, where a
  // single exponent field would overflow.
  const I ni = xsimd::to_int(n), n1 = ni >> 1;
  const F y = p * xsimd::bitwise_cast<F>((n1 + I(127)) << 23) * xsimd::bitwise_cast<F>((ni - n1 + I(127)) << 23);
  F out = xsimd::select(x < F(lo), F(0.0f), y);
  out = xsimd::select(x > F(hi), F(std::numeric_limits<float>::infinity()), out);
  return xsimd::select(xsimd::isnan(x), x, out);  // (x != x is an ordered compare on some targets)
}

// Horizontal max of a batch.
template <class Arch>
inline float hmax(fvec<Arch> v) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return _mm512_reduce_max_ps(v);
#endif
  alignas(64) float t[fvec<Arch>::size];
  v.store_aligned(t);
  float m = t[0];
  for (std::size_t i = 1; i < fvec<Arch>::size; ++i) m = std::max(m, t[i]);
  return m;
}

// Horizontal sum of a batch.
template <class Arch>
inline float hsum(fvec<Arch> v) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return _mm512_reduce_add_ps(v);
#endif
  return xsimd::hadd(v);
}

// Loads n < W floats from p, filling the other lanes with `fill`.
// AVX-512 and AVX2 use masked loads (masked-off lanes never touch memory), others a scalar copy.
template <class Arch>
inline fvec<Arch> load_partial(const float* p, std::size_t n, float fill) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    return fvec<Arch>(_mm512_mask_loadu_ps(_mm512_set1_ps(fill), __mmask16((1u << n) - 1u), p));
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return fvec<Arch>(_mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m)));
  }
#endif
  alignas(64) float t[fvec<Arch>::size];
  for (std::size_t i = 0; i < fvec<Arch>::size; ++i) t[i] = i < n ? p[i] : fill;
  return fvec<Arch>::load_aligned(t);
}

// Stores the first n < W lanes of v to p.
template <class Arch>
inline void store_partial(fvec<Arch> v, float* p, std::size_t n) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1u), v);
    return;
  }
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) {
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
    return;
  }
#endif
  alignas(64) float t[fvec<Arch>::size];
  v.store_aligned(t);
  for (std::size_t i = 0; i < n; ++i) p[i] = t[i];
}

// Lane indices 0, 1, ..., W-1 as floats.
template <class Arch>
inline fvec<Arch> iota() noexcept {
  alignas(64) float t[fvec<Arch>::size];
  for (std::size_t i = 0; i < fvec<Arch>::size; ++i) t[i] = float(i);
  return fvec<Arch>::load_aligned(t);
}

// Loads n <= W floats (the full batch when n == W; other lanes = fill).
template <class Arch>
inline fvec<Arch> loadn(const float* p, std::size_t n, float fill = 0.0f) noexcept {
  return n == fvec<Arch>::size ? fvec<Arch>::load_unaligned(p) : load_partial<Arch>(p, n, fill);
}

// Stores the first n <= W lanes.
template <class Arch>
inline void storen(fvec<Arch> v, float* p, std::size_t n) noexcept {
  if (n == fvec<Arch>::size)
    v.store_unaligned(p);
  else
    store_partial<Arch>(v, p, n);
}

// Calls op(i, n) for batches covering [b, e): n == W for all but a possible partial last one.
// After inlining, the full-batch calls see a constant n, so loadn/storen compile to plain loads.
template <class Arch, class Op>
inline void for_each_batch(std::size_t b, std::size_t e, Op&& op) {
  constexpr std::size_t W = fvec<Arch>::size;
  std::size_t i = b;
  for (; i + W <= e; i += W) op(i, W);
  if (i < e) op(i, e - i);
}

inline constexpr std::size_t round_up(std::size_t n, std::size_t m) noexcept { return (n + m - 1) / m * m; }

}  // namespace sparselm::kernels::detail
