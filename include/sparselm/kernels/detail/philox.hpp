#pragma once
// Vectorised Philox4x32-10 matching sparselm::counter_rng bit for bit: fills out[j] with
// rng.bits(stream, first + j). Used by dropout and by attention-probability dropout, so masks are a
// pure function of (seed, stream, element index) whatever the thread count or SIMD width.
//
// Each 64-bit SIMD lane runs one Philox block (four 32-bit words, one per element); the 32x32->64
// products use the ISA's widening multiply (pmuludq) where xsimd is on x86, else a 64-bit multiply.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "sparselm/core/rng.hpp"
#include "sparselm/core/simd.hpp"

namespace sparselm::kernels::detail {

template <class Arch>
using u64vec = simd<std::uint64_t, Arch>;

// Low 32 bits of a times low 32 bits of b, as a full 64-bit product per lane.
template <class Arch>
inline u64vec<Arch> mul_32x32(u64vec<Arch> a, u64vec<Arch> b) noexcept {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) return u64vec<Arch>(_mm512_mul_epu32(a, b));
#endif
#if defined(__AVX2__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch>) return u64vec<Arch>(_mm256_mul_epu32(a, b));
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, Arch>) return u64vec<Arch>(_mm_mul_epu32(a, b));
#endif
  return a * b;  // portable: operands are < 2^32, so the 64-bit product is exact
}

// out[j] = rng.bits(stream, first + j) for j < n.
template <class Arch = native_arch>
void philox_bits(const counter_rng& rng, std::uint64_t stream, std::uint64_t first, std::size_t n,
                 std::uint32_t* out) noexcept {
  using U = u64vec<Arch>;
  constexpr std::size_t L = U::size;  // blocks per vector
  std::size_t j = 0;
  // Head: up to the next block boundary.
  while (j < n && ((first + j) & 3) != 0) {
    out[j] = rng.bits(stream, first + j);
    ++j;
  }
  const std::uint64_t seed = rng.seed();
  const std::uint32_t key0 = std::uint32_t(seed), key1 = std::uint32_t(seed >> 32);
  const U mask32(0xffffffffull), m0(0xD2511F53ull), m1(0xCD9E8D57ull);
  const U s_lo = U(std::uint64_t(stream & 0xffffffffu)), s_hi = U(std::uint64_t(stream >> 32));
  alignas(64) std::uint64_t lane[L];
  for (std::size_t l = 0; l < L; ++l) lane[l] = l;
  const U lane_off = U::load_aligned(lane);
  alignas(64) std::uint64_t a[L], b[L];
  while (n - j >= 4 * L) {
    const std::uint64_t blk = (first + j) >> 2;
    U ctr = U(blk) + lane_off;
    U c0 = ctr & mask32, c1 = ctr >> 32, c2 = s_lo, c3 = s_hi;
    std::uint32_t k0 = key0, k1 = key1;
    for (int r = 0; r < 10; ++r) {
      U p0 = mul_32x32<Arch>(c0, m0), p1 = mul_32x32<Arch>(c2, m1);
      U n0 = (p1 >> 32) ^ c1 ^ U(std::uint64_t(k0));
      U n2 = (p0 >> 32) ^ c3 ^ U(std::uint64_t(k1));
      c1 = p1 & mask32;
      c3 = p0 & mask32;
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    (c0 | (c1 << 32)).store_aligned(a);  // words 0,1 of each block (little endian)
    (c2 | (c3 << 32)).store_aligned(b);  // words 2,3
    for (std::size_t l = 0; l < L; ++l) {
      std::memcpy(out + j + 4 * l, &a[l], 8);
      std::memcpy(out + j + 4 * l + 2, &b[l], 8);
    }
    j += 4 * L;
  }
  while (j < n) {  // tail: whole blocks, scalar
    auto w = rng.block(stream, (first + j) >> 2);
    for (std::size_t k = 0; k < 4 && j < n; ++k, ++j) out[j] = w[k];
  }
}

}  // namespace sparselm::kernels::detail
