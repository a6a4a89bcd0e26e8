#pragma once
// Dense GEMM internals: blocking parameters and the register-tiled micro-kernel.
//
// C is computed in MR x NR tiles (NR = NV SIMD vectors of one row of C). For one tile the kernel
// runs kc rank-1 updates: per k it loads NV vectors of the packed B micro-panel and broadcasts MR
// values of the packed A micro-panel, MR * NV fused multiply-adds into MR * NV accumulator
// registers. On AVX-512 (32 zmm registers) the tile is 14 x 32: 28 accumulators + 2 B vectors,
// the A values come in as embedded broadcasts. With 16 registers (SSE/AVX2) it is 6 x 2W.
//
// Packed layouts (all zero-padded to whole tiles):
//   B micro-panel: kc x NR, k-major: b[k * NR + j]                       (vector loads)
//   A micro-panel: either "row-major" a[r * a_stride + k] (A not transposed: rows copied as-is)
//                  or "k-major"   a[k * MR + r]           (A transposed: rows of A^T copied as-is)
// so that packing A never transposes; only op(B) = B^T needs a transposing pack.
// A not transposed may also be read in place, rows lda apart (gemm_micro_kernel_in_place): when
// few columns of C use each packed A panel, the copy costs more than it saves (gemm_driver.hpp).

#include <algorithm>
#include <cstddef>

#include "sparselm/core/simd.hpp"

namespace sparselm::kernels::detail {

template <class Arch>
struct gemm_config {
  using batch = xsimd::batch<float, Arch>;
  static constexpr std::size_t W = batch::size;
  static constexpr bool many_regs = W >= 16;  // AVX-512: 32 vector registers
  static constexpr std::size_t MR = many_regs ? 14 : 6;
  static constexpr std::size_t NV = 2;
  static constexpr std::size_t NR = NV * W;
  // Cache blocking (L1d 32-48 KiB, L2 1 MiB per core, L3 shared).
  //   KC: depth of one pass. On AVX-512 the B micro-panel (KC x NR) lives in L2, not L1: a deep
  //       pass amortises the write-out of C (one load+store of the C tile per KC rank-1 updates)
  //       and measured best on Zen 4 (1 thread, M = 4096: KC 128 -> 81 %, 256 -> 86 %,
  //       512 -> 90 %, 1024 -> 93 % of peak; benchmarks/results/2026-11-23-zen4-performance.md).
  //   MC: rows of the packed A block (MC x KC, 0.7 MB at KC = 1024), kept in L2.
  //   NC: columns of the packed B panel (KC x NC), kept in L3.
  static constexpr std::size_t KC = many_regs ? 1024 : 256;
  static constexpr std::size_t MC = many_regs ? 14 * 12 : 6 * 24;
  static constexpr std::size_t NC = many_regs ? 32 * 64 : 16 * 128;
  // Row stride of a row-major packed A micro-panel: KC plus one cache line, so the MR rows do
  // not all fall into the same few L1 sets.
  static constexpr std::size_t A_STRIDE = KC + 64 / sizeof(float);
  static constexpr std::size_t A_PANEL = MR * A_STRIDE;  // floats per packed A micro-panel
};

// How a tile is written to C: C = alpha * acc + beta * C + bias (beta == 0: C is not read).
struct gemm_epilogue {
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* bias = nullptr;  // already offset to the tile's first column
};

#if defined(__GNUC__)
#define SPARSELM_GEMM_PREFETCH(p) __builtin_prefetch(p, 1, 3)
#else
#define SPARSELM_GEMM_PREFETCH(p) ((void)0)
#endif

// Starts an MR x NR tile: prefetches the rows of C it will write (every 64-byte line of a row: an
// AVX-512 tile row is 128 bytes; prefetching only its first line left the second to be fetched
// when the tile is written, and the bf16 GEMM's deep products measured 3-7 % slower that way on
// the Zen 5 host, benchmarks/results/2026-11-30-zen5-performance.md), zeroes the accumulators.
template <class Arch, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void gemm_start_tile(xsimd::batch<float, Arch> (&acc)[MR][NV], const float* c,
                                                   std::size_t ldc, std::size_t mr) {
  constexpr std::size_t line = 64 / sizeof(float), lines = (NV * xsimd::batch<float, Arch>::size + line - 1) / line;
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r) {
    const float* cr = c + std::min(r, mr - 1) * ldc;
#pragma GCC unroll 4
    for (std::size_t l = 0; l < lines; ++l) SPARSELM_GEMM_PREFETCH(cr + l * line);
  }
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NV; ++v) acc[r][v] = xsimd::batch<float, Arch>(0.0f);
}

// Writes an MR x NR accumulator tile (mr x nr valid) to C through the epilogue:
// C = alpha * acc + beta * C + bias. Shared by the fp32 and the bf16 micro-kernels.
template <class Arch, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void gemm_store_tile(const xsimd::batch<float, Arch> (&acc)[MR][NV], float* c,
                                                 std::size_t ldc, std::size_t mr, std::size_t nr,
                                                 const gemm_epilogue& ep) {
  using batch = xsimd::batch<float, Arch>;
  constexpr std::size_t W = batch::size, NR = NV * W;
  const batch alpha(ep.alpha);
  if (mr == MR && nr == NR) {
    // Full tile: straight vector write-out.
    auto write = [&](auto mode) {
      constexpr int m = decltype(mode)::value;  // 0: beta == 0, 1: beta == 1, 2: general beta
#pragma GCC unroll 16
      for (std::size_t r = 0; r < MR; ++r) {
        float* cr = c + r * ldc;
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
          batch x;
          if constexpr (m == 0) {
            x = acc[r][v] * alpha;
          } else if constexpr (m == 1) {
            x = xsimd::fma(acc[r][v], alpha, batch::load_unaligned(cr + v * W));
          } else {
            x = xsimd::fma(acc[r][v], alpha, batch::load_unaligned(cr + v * W) * batch(ep.beta));
          }
          if (ep.bias) x += batch::load_unaligned(ep.bias + v * W);
          x.store_unaligned(cr + v * W);
        }
      }
    };
    if (ep.beta == 0.0f)
      write(std::integral_constant<int, 0>{});
    else if (ep.beta == 1.0f)
      write(std::integral_constant<int, 1>{});
    else
      write(std::integral_constant<int, 2>{});
    return;
  }
  // Edge tile: spill the accumulators, write the valid mr x nr part.
  alignas(64) float tile[MR * NR];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NV; ++v) (acc[r][v] * alpha).store_aligned(tile + r * NR + v * W);
  for (std::size_t r = 0; r < mr; ++r) {
    float* cr = c + r * ldc;
    const float* tr = tile + r * NR;
    std::size_t j = 0;
    for (; j + W <= nr; j += W) {
      batch x = batch::load_aligned(tr + j);
      if (ep.beta != 0.0f) x = xsimd::fma(batch::load_unaligned(cr + j), batch(ep.beta), x);
      if (ep.bias) x += batch::load_unaligned(ep.bias + j);
      x.store_unaligned(cr + j);
    }
    for (; j < nr; ++j) {
      float x = tr[j];
      if (ep.beta != 0.0f) x += ep.beta * cr[j];
      if (ep.bias) x += ep.bias[j];
      cr[j] = x;
    }
  }
}

// The kc rank-1 updates of one tile into acc: A's value of row r at depth k from a_at(r, k), B from
// its packed micro-panel.
template <class Arch, class AAt>
[[gnu::always_inline]] inline void gemm_tile_updates(
    std::size_t kc, const float* __restrict b,
    xsimd::batch<float, Arch> (&acc)[gemm_config<Arch>::MR][gemm_config<Arch>::NV], AAt a_at) {
  using cfg = gemm_config<Arch>;
  using batch = typename cfg::batch;
  constexpr std::size_t MR = cfg::MR, NV = cfg::NV, W = cfg::W, NR = cfg::NR;
#pragma GCC unroll 2
  for (std::size_t k = 0; k < kc; ++k) {
    batch bv[NV];
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_aligned(b + k * NR + v * W);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < MR; ++r) {
      const batch av(a_at(r, k));
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NV; ++v) acc[r][v] = xsimd::fma(av, bv[v], acc[r][v]);
    }
  }
}

// One MR x NR tile of C (mr x nr valid) from packed micro-panels of depth kc.
template <class Arch, bool KMajorA>
void gemm_micro_kernel(std::size_t kc, const float* __restrict a, const float* __restrict b, float* c, std::size_t ldc,
                       std::size_t mr, std::size_t nr, const gemm_epilogue& ep) {
  using cfg = gemm_config<Arch>;
  constexpr std::size_t MR = cfg::MR, NV = cfg::NV;
  constexpr std::size_t AR = KMajorA ? 1 : cfg::A_STRIDE;  // stride between rows of A
  constexpr std::size_t AK = KMajorA ? MR : 1;             // stride between k of A
  typename cfg::batch acc[MR][NV];
  gemm_start_tile<Arch, MR, NV>(acc, c, ldc, mr);
  gemm_tile_updates<Arch>(kc, b, acc, [a](std::size_t r, std::size_t k) { return a[r * AR + k * AK]; });
  gemm_store_tile<Arch, MR, NV>(acc, c, ldc, mr, nr, ep);
}

// One full-height MR x NR tile (nr valid columns) with A read in place: row r of the tile's A at
// a + r * lda (A not transposed, not packed); B packed as above. The same products in the same
// order as gemm_micro_kernel<Arch, false> over the packed copy, so the results are bit-identical.
template <class Arch>
void gemm_micro_kernel_in_place(std::size_t kc, const float* a, std::size_t lda, const float* __restrict b, float* c,
                                std::size_t ldc, std::size_t nr, const gemm_epilogue& ep) {
  using cfg = gemm_config<Arch>;
  constexpr std::size_t MR = cfg::MR, NV = cfg::NV;
  const float* row[MR];
#pragma GCC unroll 16
  for (std::size_t r = 0; r < MR; ++r) row[r] = a + r * lda;
  typename cfg::batch acc[MR][NV];
  gemm_start_tile<Arch, MR, NV>(acc, c, ldc, MR);
  gemm_tile_updates<Arch>(kc, b, acc, [&row](std::size_t r, std::size_t k) { return row[r][k]; });
  gemm_store_tile<Arch, MR, NV>(acc, c, ldc, MR, nr, ep);
}

}  // namespace sparselm::kernels::detail
