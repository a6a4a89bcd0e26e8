#pragma once
// The block-sparse weight gradient with 16 x 16 blocks on Intel AMX tiles: dvalues (slot order)
// += bf16(X)ᵀ · bf16(dY) on the active blocks, fp32 accumulation (bsr_bf16.hpp's contract).
//
// TDPBF16PS C, A, B sums over pairs along its inner dimension, here the rows m:
//   C[a][b] += Σ_p X(2p, a)·dY(2p, b) + X(2p+1, a)·dY(2p+1, b)   (one block: a, b < 16)
// so B is a strip of dY as for the native kernel (pairs of rows x 16 columns, one word per pair)
// and A the same for X transposed: row a holds the pairs of column a. Per chunk of rows each
// thread packs both (16 pairs = 32 rows per tile, the chunk zero-padded to whole tiles), then per
// active block loads its 16 x 16 fp32 partial into C, issues one TDPBF16PS per 32 rows and stores
// C back. Threads split the rows; their partials are added in thread order (deterministic for a
// thread count, as the native kernel). The tiles use the dense AMX GEMM's configuration (all
// 16 rows x 64 bytes, gemm_amx_kernel.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sparselm/kernels/detail/bsr_bf16.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
#include "sparselm/kernels/detail/gemm_amx_kernel.hpp"

namespace sparselm::kernels::detail {

#if SPARSELM_GEMM_AMX

// Rows [0, rows) of src (cols columns, a multiple of 16) as strips of pairs: for block column b,
// dst[b*np*16 + p*16 + j] = (src(2p, 16b + j), src(2p + 1, 16b + j)), p < np (np >= ceil(rows/2);
// missing rows read as zero). transposed: dst[b*np*16 + j*np + p] instead (row j of the strip
// holds column j's pairs; np a multiple of 16).
inline void bsr_amx_pack_pairs(const float* src, std::size_t lds, std::size_t rows, std::size_t cols, std::size_t np,
                               bool transposed, std::uint32_t* dst) {
  alignas(64) std::uint32_t tile[256];
  for (std::size_t b = 0; b < cols / 16; ++b) {
    std::uint32_t* d = dst + b * np * 16;
    for (std::size_t p0 = 0; p0 < np; p0 += 16) {
      std::uint32_t* t = transposed ? tile : d + p0 * 16;
      for (std::size_t p = p0; p < p0 + 16; ++p) {
        const std::size_t r = 2 * p;
        const __m256i lo = r < rows ? gemm_bf16_load16(src + r * lds + 16 * b, 16) : _mm256_setzero_si256();
        const __m256i hi = r + 1 < rows ? gemm_bf16_load16(src + (r + 1) * lds + 16 * b, 16) : _mm256_setzero_si256();
        _mm512_store_si512(t + (p - p0) * 16, gemm_bf16_pairs(lo, hi));
      }
      if (transposed)  // 16 pairs x 16 columns -> 16 columns x 16 pairs, at column p0 of the rows
        gemm_transpose16_avx512(reinterpret_cast<const float*>(tile), 16, reinterpret_cast<float*>(d + p0), np);
    }
  }
}

inline void bsr_wgrad_amx(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                          const sparse::block_pattern& p, float* dvalues) {
  constexpr std::size_t B = 16;
  const std::size_t nnz = p.nnz(), in = p.in(), out = p.out();
  if (M == 0 || nnz == 0) return;
  const int nt = int(std::min<std::size_t>(std::size_t(team_size()), std::max<std::size_t>(1, M / 64)));
  float* const partial = bsr_scratch(std::size_t(nt) * nnz * B * B, 3);
  const std::size_t mc = (2 * wgrad_chunk(in, out, 32, 256, 16) + 31) / 32 * 32;  // rows per chunk
  run_team(nt, [&](int t, int T) {
    const std::size_t mb = M * std::size_t(t) / std::size_t(T), me = M * std::size_t(t + 1) / std::size_t(T);
    float* const dv = partial + std::size_t(t) * nnz * B * B;
    std::memset(dv, 0, nnz * B * B * sizeof(float));
    auto* Xt = reinterpret_cast<std::uint32_t*>(bsr_scratch(mc / 2 * in, 0));
    auto* dYs = reinterpret_cast<std::uint32_t*>(bsr_scratch(mc / 2 * out, 1));
    amx_configure();
    for (std::size_t m0 = mb; m0 < me; m0 += mc) {
      const std::size_t mv = std::min(mc, me - m0), np = (mv + 31) / 32 * 16;  // pairs, whole tiles
      bsr_amx_pack_pairs(X + m0 * ldx, ldx, mv, in, np, true, Xt);
      bsr_amx_pack_pairs(dY + m0 * ldd, ldd, mv, out, np, false, dYs);
      for (std::size_t q = 0; q < nnz; ++q) {
        const std::uint32_t s = p.row_slots[q];
        const std::uint32_t* a = Xt + std::size_t(p.row[s]) * np * 16;
        const std::uint32_t* b = dYs + std::size_t(p.col[s]) * np * 16;
        float* c = dv + q * B * B;
        _tile_loadd(0, c, 64);
        for (std::size_t p0 = 0; p0 < np; p0 += 16) {
          _tile_loadd(4, a + p0, np * sizeof(std::uint32_t));
          _tile_loadd(6, b + p0 * 16, 64);
          _tile_dpbf16ps(0, 4, 6);
        }
        _tile_stored(0, c, 64);
      }
    }
    team_barrier(T);
    add_thread_partials(partial, nnz, B * B, p.row_slots.data(), dvalues, t, T);
  });
}

#endif  // SPARSELM_GEMM_AMX

}  // namespace sparselm::kernels::detail
