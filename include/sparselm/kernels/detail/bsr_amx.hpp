#pragma once
// Block-sparse products with 16 x 16 blocks on Intel AMX tiles (TDPBF16PS), bf16 operands and
// fp32 accumulation: C (M x N) = beta*C + bf16(A) (M x K) · bf16(S) [+ bias], S walked one output
// block column at a time as in bsr_matmul.hpp (forward: S_s = W_s; data gradient: S_s = W_sᵀ).
//
// Tiles (their own configuration, loaded once per thread and call; the dense AMX GEMM reloads its
// own when it sees another): tmm0-3 hold a 64 x 16 tile of C (four row groups of 16) in fp32;
// tmm4-5 an A tile, 16 rows x 16 bf16 (one block's K range, 32 bytes per row) read in place from a
// packed bf16 panel of 64 rows of A; tmm6 a B tile, one block as 8 k-pairs x 16 columns (the
// layout of pack_blocks_bf16). Per block: one B load, four A loads, four TDPBF16PS of
// 16 x 16 x 16; the four C tiles are stored once per output block column: straight into C (the
// bias loaded into them first) for whole panels with beta = 0, else through a buffer that applies
// bias and beta. K = 16 per instruction is half the tile's depth: the instruction
// costs the same at either depth on the Xeon host, but at 14x the FMA rate (performance.md) the
// products are no longer what limits.
//
// Results equal an fp32 dot product over the bf16-rounded operands up to the order of the fp32
// additions, and AMX's handling of bf16 subnormals (inputs read as zero, see gemm_amx_kernel.hpp).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sparselm/kernels/detail/bsr_bf16.hpp"
#include "sparselm/kernels/detail/gemm_amx_kernel.hpp"

namespace sparselm::kernels::detail {

#if SPARSELM_GEMM_AMX

// tmm0-3 C (16 x 64 bytes), tmm4-5 A (16 x 32 bytes), tmm6-7 B (8 x 64 bytes).
inline void bsr_amx_configure() noexcept {
  static const amx_tile_config want = [] {
    amx_tile_config c;
    c.colsb[4] = c.colsb[5] = 32;
    c.rows[6] = c.rows[7] = 8;
    return c;
  }();
  amx_configure(want);
}

// Rows [0, rows) of A (K columns) as bf16, row r at P + r*ks words (ks = K rounded up to 32, over
// 2); rows [rows, 64) zero.
inline void bsr_amx_pack_panel(const float* A, std::size_t lda, std::size_t rows, std::size_t K, std::size_t ks,
                               std::uint32_t* P) {
  for (std::size_t r = 0; r < 64; ++r) {
    std::uint32_t* d = P + r * ks;
    if (r < rows) {
      const float* src = A + r * lda;
      for (std::size_t k = 0; k < K; k += 32) _mm512_store_si512(d + k / 2, gemm_bf16_row32(src + k, K - k));
    } else {
      for (std::size_t k = 0; k < K; k += 32) _mm512_store_si512(d + k / 2, _mm512_setzero_si512());
    }
  }
}

// One output block column over a 64-row panel: out (64 x 16 fp32, rows ldo floats apart) =
// init + Σ_t panel[:, kb[t]] · block t, where init is the 16 values at `init` in every row (the
// bias: a tile load with row stride 0), or zero.
inline void bsr_amx_column(const std::uint32_t* P, std::size_t ks, std::size_t n, const std::uint32_t* kb,
                           const std::uint32_t* words, const float* init, float* out, std::size_t ldo) {
  const std::size_t stride = ks * sizeof(std::uint32_t);
  if (init) {
    _tile_loadd(0, init, 0);
    _tile_loadd(1, init, 0);
    _tile_loadd(2, init, 0);
    _tile_loadd(3, init, 0);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (std::size_t t = 0; t < n; ++t) {
    const std::uint32_t* a = P + std::size_t(kb[t]) * 8;  // 16 bf16 = 8 words per block of K
    _tile_loadd(6, words + t * 128, 64);
    _tile_loadd(4, a, stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(5, a + 16 * ks, stride);
    _tile_dpbf16ps(1, 5, 6);
    _tile_loadd(4, a + 32 * ks, stride);
    _tile_dpbf16ps(2, 4, 6);
    _tile_loadd(5, a + 48 * ks, stride);
    _tile_dpbf16ps(3, 5, 6);
  }
  const std::size_t ob = ldo * sizeof(float);
  _tile_stored(0, out, ob);
  _tile_stored(1, out + 16 * ldo, ob);
  _tile_stored(2, out + 32 * ldo, ob);
  _tile_stored(3, out + 48 * ldo, ob);
}

// C (M x N) = beta*C + bf16(A) · bf16(S) [+ bias] for B = 16 (TransV as in pack_blocks). Work split
// as in bsr_product: 64-row panels, and output block column groups when there are few panels.
template <bool TransV, class Arch>
void bsr_product_amx(const float* A, std::size_t lda, std::size_t M, std::size_t K, const bsr_lists& L, const float* V,
                     float beta, float* C, std::size_t ldc, const float* bias) {
  constexpr std::size_t MR = 64;
  if (M == 0 || L.n_out_blocks == 0) return;
  const packed_blocks_bf16 pb = pack_blocks_bf16<16, TransV, Arch>(L, V);
  const std::size_t ks = (K + 31) / 32 * 16;  // words per packed row
  for_panel_items(M, MR, L.n_out_blocks, team_size(),
                  [&](std::size_t m0, std::size_t mv, std::size_t j0, std::size_t j1) {
                    auto* P = reinterpret_cast<std::uint32_t*>(bsr_scratch(ks * MR, 0));
                    bsr_amx_pack_panel(A + m0 * lda, lda, mv, K, ks, P);
                    bsr_amx_configure();
                    alignas(64) float acc[MR * 16];
                    const __m512 vbeta = _mm512_set1_ps(beta);
                    // A whole panel with beta = 0 is stored straight into C (the bias loaded into the tiles first).
                    const bool direct = mv == MR && beta == 0.0f;
                    for (std::size_t j = j0; j < j1; ++j) {
                      const std::size_t t0 = L.ptr[j];
                      if (direct) {
                        bsr_amx_column(P, ks, L.ptr[j + 1] - t0, pb.kb + t0, pb.words + t0 * 128,
                                       bias ? bias + j * 16 : nullptr, C + m0 * ldc + j * 16, ldc);
                        continue;
                      }
                      bsr_amx_column(P, ks, L.ptr[j + 1] - t0, pb.kb + t0, pb.words + t0 * 128, nullptr, acc, 16);
                      const __m512 b = bias ? _mm512_loadu_ps(bias + j * 16) : _mm512_setzero_ps();
                      float* c = C + m0 * ldc + j * 16;
                      for (std::size_t r = 0; r < mv; ++r, c += ldc) {
                        __m512 x = _mm512_add_ps(_mm512_load_ps(acc + r * 16), b);
                        if (beta != 0.0f) x = _mm512_fmadd_ps(vbeta, _mm512_loadu_ps(c), x);
                        _mm512_storeu_ps(c, x);
                      }
                    }
                  });
}

#endif  // SPARSELM_GEMM_AMX

}  // namespace sparselm::kernels::detail
