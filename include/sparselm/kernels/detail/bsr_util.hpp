#pragma once
// Internals shared by the block-sparse kernels (kernels/bsr.hpp): architecture traits, reusable
// thread-local scratch buffers, a thread-team helper, and the panel transposes used for packing.
//
// ISA-specific code (AVX-512 16x16 in-register transposes with masked edges, the transpose-add
// reduction) runs only when the kernel's Arch is an AVX-512 arch and the translation unit is
// compiled with AVX-512F; otherwise the portable loops beside it run (the tests run both).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

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
  thread_local buffer bufs[4];
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

// Threads a kernel may use here: one inside an enclosing parallel region.
inline int team_size() noexcept { return in_parallel() ? 1 : num_threads(); }

// Runs f(t, T) on a team of up to nt threads (serially, f(0, 1), when nt == 1 or when already
// inside a parallel region).
template <class F>
void run_team([[maybe_unused]] int nt, F&& f) {
#if defined(_OPENMP)
  if (nt > 1 && !in_parallel()) {
#pragma omp parallel num_threads(nt)
    f(omp_get_thread_num(), omp_get_num_threads());
    return;
  }
#endif
  f(0, 1);
}

// Barrier of a run_team team of T threads (nothing for one thread).
inline void team_barrier([[maybe_unused]] int T) {
#if defined(_OPENMP)
  if (T > 1) {
#pragma omp barrier
  }
#endif
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
    for (std::size_t v = 0; v < NB; ++v) dy[v] = vec::load_unaligned(d + v * W);
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

#if defined(__AVX512F__)
inline __mmask16 lanes_mask(std::size_t n) noexcept { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }
#endif

// dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols, and 0 for rows <= r < rows_pad.
template <class Arch>
void pack_transpose(const float* src, std::size_t lds, std::size_t rows, std::size_t rows_pad, std::size_t cols,
                    float* dst, std::size_t ldd) {
#if defined(__AVX512F__)
  if constexpr (arch_is_avx512<Arch>) {
    for (std::size_t r0 = 0; r0 < rows_pad; r0 += 16) {
      const std::size_t nr = rows > r0 ? std::min<std::size_t>(16, rows - r0) : 0;
      const __mmask16 smask = lanes_mask(rows_pad - r0);
      for (std::size_t c0 = 0; c0 < cols; c0 += 16) {
        const std::size_t nc = std::min<std::size_t>(16, cols - c0);
        const __mmask16 cmask = lanes_mask(nc);
        __m512 v[16];
        for (std::size_t i = 0; i < 16; ++i)
          v[i] = i < nr ? _mm512_maskz_loadu_ps(cmask, src + (r0 + i) * lds + c0) : _mm512_setzero_ps();
        transpose16(v);
        for (std::size_t i = 0; i < nc; ++i) _mm512_mask_storeu_ps(dst + (c0 + i) * ldd + r0, smask, v[i]);
      }
    }
    return;
  }
#endif
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
#if defined(__AVX512F__)
  if constexpr (arch_is_avx512<Arch>) {
    const __m512 vbeta = _mm512_set1_ps(beta);
    for (std::size_t r0 = 0; r0 < rows; r0 += 16) {
      const std::size_t nr = std::min<std::size_t>(16, rows - r0);
      const __mmask16 rmask = lanes_mask(nr);
      for (std::size_t c0 = 0; c0 < cols; c0 += 16) {
        const std::size_t nc = std::min<std::size_t>(16, cols - c0);
        const __mmask16 cmask = lanes_mask(nc);
        __m512 v[16];
        for (std::size_t i = 0; i < 16; ++i)
          v[i] = i < nc ? _mm512_maskz_loadu_ps(rmask, src + (c0 + i) * lds + r0) : _mm512_setzero_ps();
        transpose16(v);
        const __m512 vb = bias ? _mm512_maskz_loadu_ps(cmask, bias + c0) : _mm512_setzero_ps();
        for (std::size_t i = 0; i < nr; ++i) {
          float* y = Y + (r0 + i) * ldy + c0;
          __m512 o = _mm512_add_ps(v[i], vb);
          if (beta != 0.0f) o = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(cmask, y), o);
          _mm512_mask_storeu_ps(y, cmask, o);
        }
      }
    }
    return;
  }
#endif
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
