#pragma once
// Internals shared by the block-sparse kernels (kernels/bsr.hpp): architecture traits, reusable
// thread-local scratch buffers, a thread-team helper, and the panel transposes used for packing.
//
// ISA-specific code (AVX-512 16x16 and AVX 8x8 in-register transposes with masked edges, the
// transpose-add reductions) runs only when the kernel's Arch is such an arch and the translation
// unit is compiled for it; otherwise the portable loops beside it run (the tests run both).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"

// GCC 12 warns "may be used uninitialized" inside its own AVX-512 unpack/shuffle intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace sparselm::kernels::detail {

template <class Arch>
inline constexpr bool arch_is_avx512 =
#if defined(__AVX512F__)
    std::is_base_of_v<xsimd::avx512f, Arch>;
#else
    false;
#endif

template <class Arch>
inline constexpr bool arch_is_avx =
#if defined(__AVX__)
    std::is_base_of_v<xsimd::avx, Arch>;
#else
    false;
#endif

// Vector registers the micro-kernels may plan for.
template <class Arch>
inline constexpr std::size_t vec_regs = arch_is_avx512<Arch> ? 32 : 16;

// Thread-local, 64-byte aligned, grow-only buffers: after the first call of a given size a kernel
// allocates nothing. `which` tells apart buffers that are alive at the same time.
inline float* bsr_scratch(std::size_t n, int which) {
  struct buffer {
    float* p = nullptr;
    std::size_t cap = 0;
    ~buffer() { std::free(p); }
  };
  thread_local buffer bufs[13];
  buffer& b = bufs[which];
  if (b.cap < n) {
    std::free(b.p);
    b.p = nullptr;
    b.cap = 0;
    std::size_t bytes = (std::max<std::size_t>(n, 16) * sizeof(float) + 63) / 64 * 64;
    b.p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!b.p) throw std::bad_alloc();
    b.cap = n;
  }
  return b.p;
}

// Prefetches the cache lines of N floats starting at p (read, keep in all levels).
template <std::size_t N>
inline void prefetch_span(const float* p) noexcept {
#pragma GCC unroll 16
  for (std::size_t o = 0; o < N; o += 16) __builtin_prefetch(p + o, 0, 3);
  if constexpr (N % 16 != 0) __builtin_prefetch(p + N - 1, 0, 3);
}

// Keeps a loaded vector in a register: GCC otherwise folds a load that several FMAs share into
// each FMA's memory operand when registers run short (the B = 4 lanes-M tile re-read its 6 panel
// vectors 4 times each, 34 loads per 24 FMAs). An empty asm that claims to modify the register
// forbids the refold; no instruction is emitted.
template <class V>
inline void pin_register([[maybe_unused]] V& v) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (requires { v.data; })
    __asm__("" : "+v"(v.data));  // an xsimd batch
  else
    __asm__("" : "+v"(v));  // an intrinsic vector type
#endif
}

// Threads a kernel may use here: one inside an enclosing parallel region.
inline int team_size() noexcept { return in_parallel() ? 1 : num_threads(); }

// run_team and team_barrier: core/threads.hpp.

// After a barrier of the team: thread t of T adds its share of positions to dvalues, each the T
// threads' partial gradients of that position in thread order (position q: block slot
// row_slots[q], bb floats; thread u's partials at partial + (u*nnz + q)*bb). Deterministic for a
// thread count.
inline void add_thread_partials(const float* partial, std::size_t nnz, std::size_t bb, const std::uint32_t* row_slots,
                                float* dvalues, int t, int T) {
  const std::size_t qb = nnz * std::size_t(t) / std::size_t(T), qe = nnz * std::size_t(t + 1) / std::size_t(T);
  // Per element g = partial_0 + partial_1 + ... in thread order, then o += g; 64 elements at a time
  // so that the loops over them vectorise.
  for (std::size_t q = qb; q < qe; ++q) {
    float* o = dvalues + std::size_t(row_slots[q]) * bb;
    for (std::size_t e0 = 0; e0 < bb; e0 += 64) {
      const std::size_t n = std::min<std::size_t>(64, bb - e0);
      alignas(64) float g[64];
      std::memcpy(g, partial + q * bb + e0, n * sizeof(float));
      for (int u = 1; u < T; ++u) {
        const float* src = partial + (std::size_t(u) * nnz + q) * bb + e0;
        for (std::size_t e = 0; e < n; ++e) g[e] += src[e];
      }
      for (std::size_t e = 0; e < n; ++e) o[e0 + e] += g[e];
    }
  }
}

// The work split of the block-sparse products: panels of MR rows of M, and groups of output block
// columns when there are fewer than 4 panels per thread; f(m0, rows, j0, j1) per item (a
// parallel_for over them).
template <class F>
void for_panel_items(std::size_t M, std::size_t MR, std::size_t n_out_blocks, int nt, F&& f) {
  const std::size_t npan = (M + MR - 1) / MR;
  const std::size_t ngrp =
      npan >= 4 * std::size_t(nt) ? 1 : std::min(n_out_blocks, (4 * std::size_t(nt) + npan - 1) / npan);
  parallel_for(0, npan * ngrp, [&](std::size_t item) {
    const std::size_t q = item / ngrp, g = item % ngrp;
    const std::size_t m0 = q * MR, j0 = g * n_out_blocks / ngrp, j1 = (g + 1) * n_out_blocks / ngrp;
    if (j0 < j1) f(m0, std::min(MR, M - m0), j0, j1);
  });
}

#if defined(__AVX512F__)
// In-register transpose of 16 rows of 16 floats: r[i][j] -> r[j][i].
inline void transpose16(__m512 r[16]) noexcept {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // r[4i+q], 128-bit lane L, now holds column 4L+q of rows 4i..4i+3.
  for (int q = 0; q < 4; ++q) {
    t[q] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88);
    t[q + 4] = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
    t[q + 8] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
    t[q + 12] = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
    r[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xDD);
    r[q + 4] = _mm512_shuffle_f32x4(t[q + 4], t[q + 12], 0x88);
    r[q + 12] = _mm512_shuffle_f32x4(t[q + 4], t[q + 12], 0xDD);
  }
}
#endif

#if defined(__AVX__)
// In-register transpose of 8 rows of 8 floats: r[i][j] -> r[j][i]. Written with GCC's generic
// shuffles: lane_source<Step>(i) says which lane of the pair (a: 0-7, b: 8-15) output lane i takes.
//   step 0 / 1: interleave the low / high halves of each 128-bit lane (unpcklps / unpckhps)
//   step 2 / 3: elements 0-1 / 2-3 of each 128-bit lane of a, then of b (shufps 0x44 / 0xEE)
//   step 4 / 5: the low / high 128 bits of a, then of b (vperm2f128 0x20 / 0x31)
template <int Step>
constexpr int lane_source(int i) {
  const int lane = i / 4 * 4, j = i % 4;
  switch (Step) {
    case 0: return (j % 2) * 8 + lane + j / 2;
    case 1: return (j % 2) * 8 + lane + 2 + j / 2;
    case 2: return (j / 2) * 8 + lane + j % 2;
    case 3: return (j / 2) * 8 + lane + 2 + j % 2;
    case 4: return (i / 4) * 8 + j;
    default: return (i / 4) * 8 + 4 + j;
  }
}
template <int Step, int... I>
inline __m256 shuffle8(__m256 a, __m256 b, std::integer_sequence<int, I...>) noexcept {
  return __builtin_shufflevector(a, b, lane_source<Step>(I)...);
}
inline void transpose8(__m256 r[8]) noexcept {
  constexpr auto lanes = std::make_integer_sequence<int, 8>{};
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {  // pairs of rows interleaved
    t[i] = shuffle8<0>(r[i], r[i + 1], lanes);
    t[i + 1] = shuffle8<1>(r[i], r[i + 1], lanes);
  }
  for (int g = 0; g < 8; g += 4) {  // 4 x 4 transposes in each 128-bit lane of rows g..g+3
    r[g] = shuffle8<2>(t[g], t[g + 2], lanes);
    r[g + 1] = shuffle8<3>(t[g], t[g + 2], lanes);
    r[g + 2] = shuffle8<2>(t[g + 1], t[g + 3], lanes);
    r[g + 3] = shuffle8<3>(t[g + 1], t[g + 3], lanes);
  }
  // r[q] (rows 0-3) and r[4+q] (rows 4-7) hold columns q (low 128 bits) and 4+q (high).
  for (int q = 0; q < 4; ++q) {
    t[q] = shuffle8<4>(r[q], r[4 + q], lanes);
    t[4 + q] = shuffle8<5>(r[q], r[4 + q], lanes);
  }
  for (int i = 0; i < 8; ++i) r[i] = t[i];
}

// Mask of the first n (<= 8) of 8 lanes, for maskload/maskstore.
inline __m256i lanes_mask8(std::size_t n) noexcept {
  alignas(64) static constexpr std::int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 - std::min<std::size_t>(n, 8)));
}
#endif

// out[q] = sum of the lanes of v[q], q < W (a horizontal-add transpose). xsimd 8.1's haddp returns
// the sums in a permuted order on AVX-512, so this does its own. On AVX-512 it adds while it
// shuffles, halving the data at every step (30 shuffles and 15 adds for 16 vectors, against 64
// shuffles for a full transpose): pairs within 128-bit lanes, then quads, then across lanes.
template <class Arch>
inline void hsum_rows(const xsimd::batch<float, Arch>* v, float* out) {
  using vec = xsimd::batch<float, Arch>;
#if defined(__AVX512F__)
  if constexpr (arch_is_avx512<Arch>) {
    __m512 s1[8], s2[4];
    // s1[k], per 128-bit lane: elements 0, 2 partial sums of v[2k], elements 1, 3 of v[2k+1].
    for (int k = 0; k < 8; ++k)
      s1[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    // s2[j], per 128-bit lane L: element e is the sum of lane L of v[4j+e].
    for (int j = 0; j < 4; ++j)
      s2[j] = _mm512_add_ps(_mm512_shuffle_ps(s1[2 * j], s1[2 * j + 1], 0x44),
                            _mm512_shuffle_ps(s1[2 * j], s1[2 * j + 1], 0xEE));
    // Across the 128-bit lanes: lanes (0+1, 2+3) of s2[0], s2[1] and of s2[2], s2[3], then all four.
    const __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(s2[0], s2[1], 0x88), _mm512_shuffle_f32x4(s2[0], s2[1], 0xDD));
    const __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(s2[2], s2[3], 0x88), _mm512_shuffle_f32x4(s2[2], s2[3], 0xDD));
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD)));
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (arch_is_avx<Arch> && vec::size == 8) {
    // Pairs, then quads within 128-bit lanes; then the two lanes: 6 hadds, 2 permutes, 1 add.
    const __m256 s0 = _mm256_hadd_ps(v[0], v[1]), s1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s2 = _mm256_hadd_ps(v[4], v[5]), s3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 a = _mm256_hadd_ps(s0, s1), b = _mm256_hadd_ps(s2, s3);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31)));
    return;
  }
#endif
  for (std::size_t q = 0; q < vec::size; ++q) out[q] = xsimd::hadd(v[q]);
}

// G[a][c] += sum over m in [m0, m1) of X[m][a] * dY[m][c] for a < RA, c < NB*W: a register tile of
// Xᵀ·dY, lanes along c, X broadcast from its rows. Used by the weight gradient and the pooled dense one.
template <std::size_t RA, std::size_t NB, class Arch>
inline void xty_tile(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t m0,
                        std::size_t m1, float* Gt, std::size_t ldg) {
  using vec = xsimd::batch<float, Arch>;
  constexpr std::size_t W = vec::size;
  vec acc[RA][NB];
#pragma GCC unroll 16
  for (std::size_t a = 0; a < RA; ++a)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) acc[a][v] = vec::load_unaligned(Gt + a * ldg + v * W);
  const float* x = X + m0 * ldx;
  const float* d = dY + m0 * ldd;
  for (std::size_t m = m0; m < m1; ++m, x += ldx, d += ldd) {
    vec dy[NB];
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) {
      dy[v] = vec::load_unaligned(d + v * W);
      pin_register(dy[v]);
    }
#pragma GCC unroll 16
    for (std::size_t a = 0; a < RA; ++a) {
      const vec xb(x[a]);
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NB; ++v) acc[a][v] = xsimd::fma(xb, dy[v], acc[a][v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t a = 0; a < RA; ++a)
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NB; ++v) acc[a][v].store_unaligned(Gt + a * ldg + v * W);
}

// Per-ISA vector operations for the transposing pack/unpack below: W lanes, loads and stores of
// the first n lanes (the rest read as zero / left alone), an in-register W x W transpose.
template <class Arch, class = void>
struct transpose_ops {
  static constexpr bool available = false;
};
#if defined(__AVX512F__)
inline __mmask16 lanes_mask(std::size_t n) noexcept { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }
template <class Arch>
struct transpose_ops<Arch, std::enable_if_t<arch_is_avx512<Arch>>> {
  static constexpr bool available = true;
  static constexpr std::size_t W = 16;
  using V = __m512;
  static V zero() noexcept { return _mm512_setzero_ps(); }
  static V set1(float x) noexcept { return _mm512_set1_ps(x); }
  static V load(const float* p, std::size_t n) noexcept { return _mm512_maskz_loadu_ps(lanes_mask(n), p); }
  static void store(float* p, std::size_t n, V v) noexcept { _mm512_mask_storeu_ps(p, lanes_mask(n), v); }
  static V add(V a, V b) noexcept { return _mm512_add_ps(a, b); }
  static V mul_add(V a, V b, V c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static void transpose(V* r) noexcept { transpose16(r); }
};
#endif
#if defined(__AVX__)
template <class Arch>
struct transpose_ops<Arch, std::enable_if_t<arch_is_avx<Arch> && !arch_is_avx512<Arch>>> {
  static constexpr bool available = true;
  static constexpr std::size_t W = 8;
  using V = __m256;
  static V zero() noexcept { return _mm256_setzero_ps(); }
  static V set1(float x) noexcept { return _mm256_set1_ps(x); }
  // Masked moves only at the edges: they are much slower than plain ones on AMD cores.
  static V load(const float* p, std::size_t n) noexcept {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes_mask8(n));
  }
  static void store(float* p, std::size_t n, V v) noexcept {
    if (n >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lanes_mask8(n), v);
  }
  static V add(V a, V b) noexcept { return _mm256_add_ps(a, b); }
  static V mul_add(V a, V b, V c) noexcept { return _mm256_add_ps(_mm256_mul_ps(a, b), c); }
  static void transpose(V* r) noexcept { transpose8(r); }
};
#endif

// dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols, and 0 for rows <= r < rows_pad.
template <class Arch>
void pack_transpose(const float* src, std::size_t lds, std::size_t rows, std::size_t rows_pad, std::size_t cols,
                    float* dst, std::size_t ldd) {
  using ops = transpose_ops<Arch>;
  if constexpr (ops::available) {
    constexpr std::size_t W = ops::W;
    for (std::size_t r0 = 0; r0 < rows_pad; r0 += W) {
      const std::size_t nr = rows > r0 ? std::min(W, rows - r0) : 0, ns = rows_pad - r0;
      for (std::size_t c0 = 0; c0 < cols; c0 += W) {
        const std::size_t nc = std::min(W, cols - c0);
        typename ops::V v[W];
        for (std::size_t i = 0; i < W; ++i) v[i] = i < nr ? ops::load(src + (r0 + i) * lds + c0, nc) : ops::zero();
        ops::transpose(v);
        for (std::size_t i = 0; i < nc; ++i) ops::store(dst + (c0 + i) * ldd + r0, ns, v[i]);
      }
    }
    return;
  }
  constexpr std::size_t tb = 8;  // cache blocking of the portable loop
  for (std::size_t rb = 0; rb < rows_pad; rb += tb)
    for (std::size_t cb = 0; cb < cols; cb += tb)
      for (std::size_t c = cb; c < std::min(cols, cb + tb); ++c)
        for (std::size_t r = rb; r < std::min(rows_pad, rb + tb); ++r)
          dst[c * ldd + r] = r < rows ? src[r * lds + c] : 0.0f;
}

// Y[r*ldy + c] = src[c*lds + r] + (bias ? bias[c] : 0) + (beta ? beta*Y[r*ldy + c] : 0), r < rows, c < cols.
// beta == 0 never reads Y.
template <class Arch>
void unpack_transpose(const float* src, std::size_t lds, std::size_t rows, std::size_t cols, float* Y,
                      std::size_t ldy, float beta, const float* bias) {
  using ops = transpose_ops<Arch>;
  if constexpr (ops::available) {
    constexpr std::size_t W = ops::W;
    const auto vbeta = ops::set1(beta);
    for (std::size_t r0 = 0; r0 < rows; r0 += W) {
      const std::size_t nr = std::min(W, rows - r0);
      for (std::size_t c0 = 0; c0 < cols; c0 += W) {
        const std::size_t nc = std::min(W, cols - c0);
        typename ops::V v[W];
        for (std::size_t i = 0; i < W; ++i) v[i] = i < nc ? ops::load(src + (c0 + i) * lds + r0, nr) : ops::zero();
        ops::transpose(v);
        const auto vb = bias ? ops::load(bias + c0, nc) : ops::zero();
        for (std::size_t i = 0; i < nr; ++i) {
          float* y = Y + (r0 + i) * ldy + c0;
          auto o = ops::add(v[i], vb);
          if (beta != 0.0f) o = ops::mul_add(vbeta, ops::load(y, nc), o);
          ops::store(y, nc, o);
        }
      }
    }
    return;
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      float& y = Y[r * ldy + c];
      y = src[c * lds + r] + (bias ? bias[c] : 0.0f) + (beta != 0.0f ? beta * y : 0.0f);
    }
}

}  // namespace sparselm::kernels::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
