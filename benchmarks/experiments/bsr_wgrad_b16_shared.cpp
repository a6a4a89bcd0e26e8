// The AVX-512 B = 16 weight-gradient kernel (wgrad_block_n, kernels/detail/bsr_wgrad.hpp: one dY
// strip row loaded and 16 X values broadcast per row of M) against a variant in which 3 slots of
// one block row share each X broadcast (8 block rows x 3 slots per pass, 24 accumulators), over the
// strips of one chunk (default 64 rows of a 768 x 768 product at density 0.1, in L2), one thread,
// against the one-thread FMA peak. An experiment, not a benchmark target (benchmarks/results/2026-11-30-all-hosts-sparsity-left-to-do.md, "Left
// to do"). Needs AVX-512. Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/bsr_wgrad_b16_shared.cpp -o bsr_wgrad_b16_shared
//   ./bsr_wgrad_b16_shared [rows] [out]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"
using namespace sparselm::kernels::detail;
using Arch = sparselm::native_arch;
using vec = xsimd::batch<float, Arch>;
using buffer = std::vector<float, xsimd::aligned_allocator<float, 64>>;
constexpr std::size_t B = 16;
static_assert(vec::size == B, "needs AVX-512: one vector per block row");

// U slots of one block row, rows a0..a0+RA of the block: X strip xs, dY strips ds[u]
template <std::size_t RA, std::size_t U>
inline void grouped(const float* xs, const float* const* ds, std::size_t rows, float* const* dv) {
  vec acc[RA][U];
#pragma GCC unroll 16
  for (std::size_t a = 0; a < RA; ++a)
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) acc[a][u] = vec::load_unaligned(dv[u] + a * B);
  for (std::size_t m = 0; m < rows; ++m) {
    vec dy[U];
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) {
      dy[u] = vec::load_unaligned(ds[u] + m * B);
      pin_register(dy[u]);
    }
#pragma GCC unroll 16
    for (std::size_t a = 0; a < RA; ++a) {
      const vec xb(xs[m * B + a]);
#pragma GCC unroll 4
      for (std::size_t u = 0; u < U; ++u) acc[a][u] = xsimd::fma(xb, dy[u], acc[a][u]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t a = 0; a < RA; ++a)
#pragma GCC unroll 4
    for (std::size_t u = 0; u < U; ++u) acc[a][u].store_unaligned(dv[u] + a * B);
}

template <std::size_t RA, std::size_t U>
void run_group(const float* xs, const float* const* ds, std::size_t rows, float* const* dv, std::size_t n) {
  // n <= U slots
  if constexpr (U > 1) {
    if (n < U) return run_group<RA, U - 1>(xs, ds, rows, dv, n);
  }
  for (std::size_t a0 = 0; a0 < B; a0 += RA) {
    float* dva[U];
    for (std::size_t u = 0; u < U; ++u) dva[u] = dv[u] + a0 * B;
    grouped<RA, U>(xs + a0, ds, rows, dva);
  }
}

int main(int argc, char** argv) {
  const std::size_t rows = argc > 1 ? std::atoi(argv[1]) : 64, in = 768, out = argc > 2 ? std::atoi(argv[2]) : 768;
  const std::size_t ss = strip_stride<B>(rows);
  buffer X(ss * (in / B)), D(ss * (out / B));
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : X) x = u(g);
  for (auto& x : D) x = u(g);
  // pattern: density 0.1, slots sorted by row
  std::vector<std::pair<int, int>> slots;
  for (std::size_t i = 0; i < in / B; ++i)
    for (std::size_t j = 0; j < out / B; ++j)
      if (u(g) < -0.8f) slots.push_back({int(i), int(j)});
  const std::size_t nnz = slots.size();
  buffer dv1(nnz * B * B, 0.f), dv2(nnz * B * B, 0.f);
  const double peak = sparselm::bench::measure_fma_peak_gflops(1);
  const double flop = 2.0 * nnz * B * B * rows;
  const int calls = 2000;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c)
      for (std::size_t q = 0; q < nnz; ++q)
        wgrad_block_n<B, Arch>(X.data() + slots[q].first * ss, D.data() + slots[q].second * ss, rows,
                               dv1.data() + q * B * B);
    double t1 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) {
      std::size_t q = 0;
      while (q < nnz) {
        std::size_t e = q;
        while (e < nnz && slots[e].first == slots[q].first) ++e;
        for (std::size_t g0 = q; g0 < e; g0 += 3) {
          const std::size_t n = std::min<std::size_t>(3, e - g0);
          const float* ds[3];
          float* dvs[3];
          for (std::size_t k = 0; k < n; ++k) {
            ds[k] = D.data() + slots[g0 + k].second * ss;
            dvs[k] = dv2.data() + (g0 + k) * B * B;
          }
          run_group<8, 3>(X.data() + slots[q].first * ss, ds, rows, dvs, n);
        }
        q = e;
      }
    }
    double t2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double md = 0;
    for (std::size_t i = 0; i < dv1.size(); ++i)
      md = std::max(md, double(std::abs(dv1[i] - dv2[i]) / (1 + std::abs(dv1[i]))));
    std::printf("rows %zu nnz %zu: per-slot %.1f GFLOP/s (%.0f%%), grouped 8x3 %.1f GFLOP/s (%.0f%%) reldiff %.2g\n",
                rows, nnz, flop * calls / t1 * 1e-9, 100 * flop * calls / t1 * 1e-9 / peak, flop * calls / t2 * 1e-9,
                100 * flop * calls / t2 * 1e-9 / peak, md);
  }
}
