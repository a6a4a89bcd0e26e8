#pragma once
// bf16 GEMM internals for AVX512-BF16: packing into k-pairs and the vdpbf16ps micro-kernel.
//
// vdpbf16ps multiplies 32 bf16 pairs and adds each pair's two products to one of 16 fp32 lanes:
//   acc[j] += a[2j] * b[2j] + a[2j+1] * b[2j+1]
// so both packed operands hold 32-bit words of two bf16 values adjacent in k (low half: the even
// k, high half: the odd k; an odd depth is padded with a zero). The tile is the fp32 kernel's
// (gemm_kernel.hpp): 14 x 32 of C in 28 zmm accumulators, per k-pair two B vectors (16 columns x
// 2 k each) and 14 broadcast A words, i.e. 28 instructions doing 896 multiply-adds.
//
// Packed layouts, in 32-bit words (all zero-padded to whole tiles):
//   B micro-panel: kp x NR, pair-major: b[p * NR + j] = (op(B)(2p, j), op(B)(2p+1, j))
//   A micro-panel: "row-major" a[r * A_STRIDE + p] (A not transposed: a row converted to bf16 is
//                  already its pairs) or "k-major" a[p * MR + r] (A transposed: two stored rows
//                  interleaved).
// Conversions from float (round to nearest even, NaN kept) happen inside the packing; bf16
// operands are copied.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/kernels/detail/gemm_kernel.hpp"
#include "sparselm/kernels/detail/gemm_pack.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define SPARSELM_GEMM_BF16_NATIVE 1
#else
#define SPARSELM_GEMM_BF16_NATIVE 0
#endif

namespace sparselm::kernels::detail {

#if SPARSELM_GEMM_BF16_NATIVE

// 16 elements (n <= 16 valid, the rest zero) as 16 bf16 values.
template <class S>
inline __m256i gemm_bf16_load16(const S* p, std::size_t n) noexcept {
  const __mmask16 m = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
  if constexpr (std::is_same_v<S, float>) {
    return __m256i(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p)));
  } else {
    return _mm256_maskz_loadu_epi16(m, p);
  }
}

// acc += the pair products of w and the word at x broadcast to all 16 lanes. GCC does not fold
// _mm512_set1_epi32(*x) into vdpbf16ps's broadcast memory operand (it emits a vpbroadcastd before
// every vdpbf16ps); the embedded-broadcast form is one instruction, like the fp32 kernels' FMAs
// with a {1to16} operand. Where one broadcast word feeds several vdpbf16ps, broadcast it once
// instead.
inline __m512 dpbf16_bcst(__m512 acc, __m512bh w, const std::uint32_t* x) noexcept {
#if defined(__GNUC__) && !defined(__clang__)
  __asm__("vdpbf16ps {%2%{1to16%}, %1, %0|%0, %1, %2%{1to16%}}" : "+v"(acc) : "v"(w), "m"(*x));
  return acc;
#else
  return _mm512_dpbf16_ps(acc, w, (__m512bh)_mm512_set1_epi32(int(*x)));
#endif
}

// 16 words (lo[j], hi[j]) from two vectors of 16 bf16 values.
inline __m512i gemm_bf16_pairs(__m256i lo, __m256i hi) noexcept {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

// 32 consecutive elements (n <= 32 valid) as 16 words of consecutive pairs.
template <class S>
inline __m512i gemm_bf16_row32(const S* p, std::size_t n) noexcept {
  const __m256i lo = gemm_bf16_load16(p, std::min<std::size_t>(n, 16));
  const __m256i hi = n > 16 ? gemm_bf16_load16(p + 16, n - 16) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// A kernel family (see gemm_fp32_family in gemm_driver.hpp) for AVX-512 architectures with
// AVX512-BF16.
template <class Arch>
struct gemm_bf16_family {
  static_assert(xsimd::batch<float, Arch>::size == 16, "gemm_bf16_family: AVX-512 architectures only");
  using packed = std::uint32_t;
  static constexpr std::size_t MR = 14, NV = 2, W = 16, NR = NV * W;
  // Depth of one pass in k (KC / 2 pairs: a B micro-panel of 64 KiB, half the fp32 kernel's);
  // MC and NC as in the fp32 kernel.
  static constexpr std::size_t KC = 1024, MC = 14 * 12, NC = 32 * 64;
  static constexpr std::size_t A_STRIDE = KC / 2 + 16;  // words; one cache line of padding
  static constexpr std::size_t A_PANEL = MR * A_STRIDE;
  static constexpr std::size_t b_panel(std::size_t kc) { return (kc + 1) / 2 * NR; }

  template <class S>
  static void pack_a(bool transposed, const S* A, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t p0,
                     std::size_t kc, std::uint32_t* __restrict dst) {
    const std::size_t kp = (kc + 1) / 2;
    if (transposed) {
      // Pair by pair across all the micro-panels: each stored row of A is read once, front to back
      // (as in gemm_pack_a; panel by panel it packed 2.2-2.7x slower at K = 768, measured on a Zen 5).
      const __mmask16 m = __mmask16((1u << MR) - 1u);
      const std::size_t np = (mc + MR - 1) / MR;
      for (std::size_t p = 0; p < kp; ++p) {
        const S* r0 = A + (p0 + 2 * p) * lda + i0;
        const bool odd = 2 * p + 1 < kc;
        for (std::size_t q = 0; q < np; ++q) {
          const std::size_t mr = std::min(MR, mc - q * MR);
          const __m256i lo = gemm_bf16_load16(r0 + q * MR, mr);
          const __m256i hi = odd ? gemm_bf16_load16(r0 + lda + q * MR, mr) : _mm256_setzero_si256();
          _mm512_mask_storeu_epi32(dst + q * A_PANEL + p * MR, m, gemm_bf16_pairs(lo, hi));
        }
      }
      return;
    }
    for (std::size_t ip = 0; ip < mc; ip += MR, dst += A_PANEL) {
      const std::size_t mr = std::min(MR, mc - ip);
      for (std::size_t r = 0; r < mr; ++r) {
        const S* src = A + (i0 + ip + r) * lda + p0;
        std::uint32_t* d = dst + r * A_STRIDE;
        for (std::size_t k = 0; k < kc; k += 32)
          _mm512_mask_storeu_epi32(d + k / 2, (k + 32 <= kc ? __mmask16(0xffff) : __mmask16((1u << ((kc - k + 1) / 2)) - 1u)),
                                   gemm_bf16_row32(src + k, kc - k));
      }
      for (std::size_t r = mr; r < MR; ++r) std::memset(dst + r * A_STRIDE, 0, kp * sizeof(std::uint32_t));
    }
  }

  template <class S>
  static void pack_b(bool transposed, const S* B, std::size_t ldb, std::size_t p0, std::size_t kc, std::size_t j0,
                     std::size_t nc, std::uint32_t* __restrict dst) {
    const std::size_t kp = (kc + 1) / 2;
    for (std::size_t jp = 0; jp < nc; jp += NR, dst += kp * NR) {
      const std::size_t nr = std::min(NR, nc - jp);
      if (!transposed) {
        const S* src = B + p0 * ldb + j0 + jp;
        for (std::size_t p = 0; p < kp; ++p) {
          const S* r0 = src + 2 * p * ldb;
          const bool odd = 2 * p + 1 < kc;
          for (std::size_t v = 0; v < NV; ++v) {
            const std::size_t n = nr > v * W ? nr - v * W : 0;
            const __m256i lo = gemm_bf16_load16(r0 + v * W, n);
            const __m256i hi = odd ? gemm_bf16_load16(r0 + ldb + v * W, n) : _mm256_setzero_si256();
            _mm512_store_si512(dst + p * NR + v * W, gemm_bf16_pairs(lo, hi));
          }
        }
        continue;
      }
      // src[j * ldb + k] = op(B)(p0 + k, j0 + jp + j): a row converted to bf16 is its pairs; 16 rows
      // x 16 pairs are transposed as 32-bit words.
      const S* src = B + (j0 + jp) * ldb + p0;
      alignas(64) std::uint32_t tile[16 * 16];
      for (std::size_t jb = 0; jb < NR; jb += 16) {
        for (std::size_t k = 0; k < kc; k += 32) {
          for (std::size_t i = 0; i < 16; ++i) {
            const __m512i w = jb + i < nr ? gemm_bf16_row32(src + (jb + i) * ldb + k, kc - k) : _mm512_setzero_si512();
            _mm512_store_si512(tile + i * 16, w);
          }
          const std::size_t pairs = std::min<std::size_t>(16, kp - k / 2);
          if (pairs == 16) {
            gemm_transpose16_avx512(reinterpret_cast<const float*>(tile), 16,
                                    reinterpret_cast<float*>(dst + (k / 2) * NR + jb), NR);
          } else {
            for (std::size_t q = 0; q < pairs; ++q)
              for (std::size_t i = 0; i < 16; ++i) dst[(k / 2 + q) * NR + jb + i] = tile[i * 16 + q];
          }
        }
      }
    }
  }

  template <bool KMajorA>
  static void micro_kernel(std::size_t kc, const std::uint32_t* __restrict a, const std::uint32_t* __restrict b,
                           float* c, std::size_t ldc, std::size_t mr, std::size_t nr, const gemm_epilogue& ep) {
    using batch = xsimd::batch<float, Arch>;
    constexpr std::size_t AR = KMajorA ? 1 : A_STRIDE;  // stride between rows of A
    constexpr std::size_t AK = KMajorA ? MR : 1;         // stride between pairs of A
    const std::size_t kp = (kc + 1) / 2;
    batch acc[MR][NV];
    gemm_start_tile<Arch, MR, NV>(acc, c, ldc, mr);
#pragma GCC unroll 2
    for (std::size_t p = 0; p < kp; ++p) {
      __m512bh bv[NV];
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(b + p * NR + v * W);
#pragma GCC unroll 16
      for (std::size_t r = 0; r < MR; ++r) {
        const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * AR + p * AK]));
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) acc[r][v] = batch(_mm512_dpbf16_ps(acc[r][v], av, bv[v]));
      }
    }
    gemm_store_tile<Arch, MR, NV>(acc, c, ldc, mr, nr, ep);
  }

  using kernel_fn = void (*)(std::size_t, const std::uint32_t*, const std::uint32_t*, float*, std::size_t,
                             std::size_t, std::size_t, const gemm_epilogue&);
  static kernel_fn kernel(bool ta) { return ta ? &micro_kernel<true> : &micro_kernel<false>; }
};

#endif  // SPARSELM_GEMM_BF16_NATIVE

}  // namespace sparselm::kernels::detail
