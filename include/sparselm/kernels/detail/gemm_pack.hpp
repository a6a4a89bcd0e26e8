#pragma once
// Dense GEMM internals: packing op(A) and op(B) blocks into the micro-kernel layouts
// (see gemm_kernel.hpp). Every pack zero-pads partial tiles so the micro-kernel always runs
// full MR x NR tiles.
//
// The sources may be float, float rounded to bf16 on the way (the bf16 GEMM's portable path) or
// bf16 (widened on the way): conversions happen inside the pack, not in a separate pass.
//
// Only op(B) = B^T transposes. Its portable path is a scalar loop; on AVX-512 a 16 x 16
// register transpose (intrinsics, behind __AVX512F__ and only for an AVX-512 Arch) replaces it
// for whole 16 x 16 blocks. The tests run both paths against the same reference.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/detail/gemm_kernel.hpp"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace sparselm::kernels::detail {

// How float operands are rounded while packed: not at all (fp32), to the nearest bf16 (the bf16
// GEMM's portable path, so both paths multiply the same values) or to the nearest IEEE half
// (fp16 compute emulated on fp32 units: products of fp16 values, fp32 sums).
enum class gemm_round { none, bf16, f16 };

// Sources a packed panel may be read from: float (rounded as Round says) or bf16 (widened;
// Round changes nothing).
template <class S, gemm_round Round>
concept gemm_source = std::is_same_v<S, float> || std::is_same_v<S, bf16>;

// One element as the float the micro-kernel multiplies.
template <class S, gemm_round Round>
  requires gemm_source<S, Round>
inline float gemm_to_float(S x) noexcept {
  if constexpr (std::is_same_v<S, bf16>) return float(x);
  else if constexpr (Round == gemm_round::bf16) return float(bf16(x));
  else if constexpr (Round == gemm_round::f16) return float(half(x));
  else return x;
}

// W elements from p (unaligned) as floats, converted like gemm_to_float.
template <class Arch, class S, gemm_round Round>
  requires gemm_source<S, Round>
inline xsimd::batch<float, Arch> gemm_load(const S* p) noexcept {
  using batch = xsimd::batch<float, Arch>;
  constexpr std::size_t W = batch::size;
  if constexpr (std::is_same_v<S, float>) {
    const batch x = batch::load_unaligned(p);
    if constexpr (Round == gemm_round::none) {
      return x;
    } else if constexpr (Round == gemm_round::f16) {
      // Round to the nearest half and back (F16C conversions; overflow gives infinity).
#if defined(__AVX512F__)
      if constexpr (W == 16 && std::is_base_of_v<xsimd::avx512f, Arch>)
        return batch(_mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
#if defined(__F16C__) && defined(__AVX2__)
      if constexpr (W == 8 && std::is_base_of_v<xsimd::avx2, Arch>)
        return batch(_mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
#endif
      alignas(64) float t[W];
      x.store_aligned(t);
      for (std::size_t i = 0; i < W; ++i) t[i] = float(half(t[i]));
      return batch::load_aligned(t);
    } else {
      return round_to_bf16<Arch>(x);  // nearest even; a NaN stays a (quiet) NaN (kernels/convert.hpp)
    }
  } else {
    return load_bf16<Arch>(p, W);  // widened exactly (kernels/convert.hpp)
  }
}

// Copies n elements as floats (vector loads/stores of the architecture, scalar tail).
template <class Arch, class S = float, gemm_round Round = gemm_round::none>
inline void gemm_copy(float* __restrict dst, const S* __restrict src, std::size_t n) {
  using batch = xsimd::batch<float, Arch>;
  constexpr std::size_t W = batch::size;
  std::size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    batch x0 = gemm_load<Arch, S, Round>(src + i), x1 = gemm_load<Arch, S, Round>(src + i + W);
    x0.store_unaligned(dst + i);
    x1.store_unaligned(dst + i + W);
  }
  for (; i + W <= n; i += W) gemm_load<Arch, S, Round>(src + i).store_unaligned(dst + i);
  if constexpr (std::is_same_v<S, float> && Round != gemm_round::none) {
    // A rounded tail (e.g. the 14 rows of a k-major A micro-panel) through one padded vector:
    // the scalar half conversion costs ~20 times a vector one.
    if (i < n) {
      alignas(64) float t[W] = {};
      std::copy(src + i, src + n, t);
      gemm_load<Arch, S, Round>(t).store_aligned(t);
      std::copy(t, t + (n - i), dst + i);
    }
    return;
  }
  for (; i < n; ++i) dst[i] = gemm_to_float<S, Round>(src[i]);
}

// Packs rows [i0, i0+mc) x depth [p0, p0+kc) of op(A) into ceil(mc/MR) micro-panels, each
// A_PANEL floats apart. A not transposed: row-major micro-panels (rows are copied); A
// transposed: k-major micro-panels (rows of the stored A, i.e. columns of op(A), are copied).
template <class Arch, class S = float, gemm_round Round = gemm_round::none>
void gemm_pack_a(bool transposed, const S* A, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t p0,
                 std::size_t kc, float* __restrict dst) {
  using cfg = gemm_config<Arch>;
  constexpr std::size_t MR = cfg::MR, W = xsimd::batch<float, Arch>::size;
  if (!transposed) {
    for (std::size_t ip = 0; ip < mc; ip += MR, dst += cfg::A_PANEL) {
      const std::size_t mr = std::min(MR, mc - ip);
      for (std::size_t r = 0; r < mr; ++r) gemm_copy<Arch, S, Round>(dst + r * cfg::A_STRIDE, A + (i0 + ip + r) * lda + p0, kc);
      for (std::size_t r = mr; r < MR; ++r) std::memset(dst + r * cfg::A_STRIDE, 0, kc * sizeof(float));
    }
    return;
  }
  // Transposed: depth by depth across all the micro-panels, so that each stored row of A is read
  // once, front to back (panel by panel instead, every panel walked kc rows lda apart again:
  // 1.5-2.7x slower to pack measured on a Zen 5, where the TN products trailed NN by 5-8 %). Where a
  // whole vector fits in the row, one vector of W >= MR elements is stored: its W - MR extra
  // lanes land on the next depth's slots, written next (or, after the last depth, in the panel's
  // padding: A_PANEL >= (kc + 1) * MR).
  const std::size_t np = (mc + MR - 1) / MR;
  for (std::size_t k = 0; k < kc; ++k) {
    const S* src = A + (p0 + k) * lda + i0;
    float* d = dst + k * MR;
    for (std::size_t q = 0; q < np; ++q, src += MR, d += cfg::A_PANEL) {
      const std::size_t r0 = q * MR;
      if constexpr (W >= MR) {
        if (r0 + W <= mc) {
          gemm_load<Arch, S, Round>(src).store_unaligned(d);
          continue;
        }
      }
      const std::size_t mr = std::min(MR, mc - r0);
      if (mr == MR) {
        gemm_copy<Arch, S, Round>(d, src, MR);
        continue;
      }
      std::size_t r = 0;
      for (; r < mr; ++r) d[r] = gemm_to_float<S, Round>(src[r]);
      for (; r < MR; ++r) d[r] = 0.0f;
    }
  }
}

#if defined(__AVX512F__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push  // GCC 12 false positive on _mm512_undefined_ps inside the intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// dst[l * ldd + r] = src[r * lds + l] for a 16 x 16 block (dst 64-byte aligned rows), the
// elements read as floats like gemm_load.
template <class S = float, gemm_round Round = gemm_round::none>
inline void gemm_transpose16_avx512(const S* src, std::size_t lds, float* dst, std::size_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = gemm_load<xsimd::avx512f, S, Round>(src + i * lds);
  // Interleave pairs of rows: 2x2 blocks.
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // 4x4 blocks within 128-bit lanes.
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  // 128-bit lanes: first across groups of 4 rows, then of 8.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
  // r[l] is now column l of the source block.
  for (int l = 0; l < 16; ++l) _mm512_store_ps(dst + l * ldd, r[l]);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// Packs depth [p0, p0+kc) x columns [j0, j0+nc) of op(B) into ceil(nc/NR) micro-panels of
// kc x NR floats each (k-major). B not transposed: rows of B are copied; B transposed: the
// stored rows (columns of op(B)) are transposed.
template <class Arch, class S = float, gemm_round Round = gemm_round::none>
void gemm_pack_b(bool transposed, const S* B, std::size_t ldb, std::size_t p0, std::size_t kc, std::size_t j0,
                 std::size_t nc, float* __restrict dst) {
  using cfg = gemm_config<Arch>;
  constexpr std::size_t NR = cfg::NR;
  for (std::size_t jp = 0; jp < nc; jp += NR, dst += kc * NR) {
    const std::size_t nr = std::min(NR, nc - jp);
    if (!transposed) {
      const S* src = B + p0 * ldb + j0 + jp;
      for (std::size_t k = 0; k < kc; ++k) {
        gemm_copy<Arch, S, Round>(dst + k * NR, src + k * ldb, nr);
        for (std::size_t j = nr; j < NR; ++j) dst[k * NR + j] = 0.0f;
      }
      continue;
    }
    const S* src = B + (j0 + jp) * ldb + p0;  // src[j * ldb + k] = op(B)(p0 + k, j0 + jp + j)
    std::size_t k0 = 0;
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch> && NR % 16 == 0) {
      if (nr == NR)
        for (; k0 + 16 <= kc; k0 += 16)
          for (std::size_t j = 0; j < NR; j += 16) gemm_transpose16_avx512<S, Round>(src + j * ldb + k0, ldb, dst + k0 * NR + j, NR);
    }
#endif
    for (std::size_t k = k0; k < kc; ++k) {
      std::size_t j = 0;
      for (; j < nr; ++j) dst[k * NR + j] = gemm_to_float<S, Round>(src[j * ldb + k]);
      for (; j < NR; ++j) dst[k * NR + j] = 0.0f;
    }
  }
}

}  // namespace sparselm::kernels::detail
