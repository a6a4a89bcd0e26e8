// The AVX-512 B = 4 and B = 8 weight-gradient micro-kernels (kernels/detail/bsr_wgrad.hpp) alone,
// on one thread, with their strips in L1 / L2: each call takes one X strip and U dY strips chosen
// at random from a pool of `strips` strips of 64 rows (192 strips of B = 4 are the 768 columns of
// a chunk), against the one-thread FMA peak. An experiment, not a benchmark target
// (benchmarks/results/2026-11-27-zen5-sparsity.md, "B = 4: panel vectors in registers, the weight gradient four rows at a
// time"). Needs AVX-512. Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/bsr_wgrad_kernels.cpp -o bsr_wgrad_kernels
//   ./bsr_wgrad_kernels [strips]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/kernels/detail/bsr_wgrad.hpp"

#if defined(__AVX512F__)
namespace {

using namespace sparselm::kernels::detail;
using buffer = std::vector<float, xsimd::aligned_allocator<float, 64>>;

// GFLOP/s of kernel(xs, ds, off, rows, dvs) over U slots of B x B, best of three rounds.
template <std::size_t B, std::size_t U, class Kernel>
double time_kernel(Kernel kernel, std::size_t strips) {
  constexpr std::size_t rows = 64, calls = 200000;
  const std::size_t ss = strip_stride<B>(rows), xstrips = 768 / B;
  buffer xs(rows * B * xstrips, 1.0f), ds(ss * strips, 0.5f), dv(B * B * 4096, 0.0f);
  std::size_t off[U];
  float* dvs[U];
  double best = 0.0;
  for (int round = 0; round < 3; ++round) {
    unsigned seed = 1;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t r = 0; r < calls; ++r) {
      for (std::size_t u = 0; u < U; ++u) {
        seed = seed * 1103515245u + 12345u;
        off[u] = (seed >> 8) % strips * ss;
        dvs[u] = dv.data() + ((r * U + u) % 4096) * B * B;
      }
      kernel(xs.data() + (r % xstrips) * rows * B, ds.data(), off, rows, dvs);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(U * B * B * rows * calls) / s * 1e-9);
  }
  return best;
}

}  // namespace
#endif

int main(int argc, char** argv) {
#if defined(__AVX512F__)
  const std::size_t strips = argc > 1 ? std::size_t(std::atoi(argv[1])) : 192;
  const double peak = sparselm::measure_fma_peak_gflops(1);
  std::printf("FMA peak, one thread: %.1f GFLOP/s; %zu dY strips of 64 rows\n", peak, strips);
  const auto report = [&](const char* what, double g) {
    std::printf("%-52s %6.1f GFLOP/s  %3.0f %%\n", what, g, 100 * g / peak);
  };
  report("B = 4, one row per step, 16 slots (block lanes)", time_kernel<4, 16>(wgrad_block_lanes<4, 16>, strips));
  report("B = 4, four rows per step, 6 slots (wgrad_b4_rows4)", time_kernel<4, 6>(wgrad_b4_rows4<6>, strips));
  report("B = 8, block lanes, 4 slots", time_kernel<8, 4>(wgrad_block_lanes<8, 4>, strips));
  report("B = 8, block lanes, 6 slots", time_kernel<8, 6>(wgrad_block_lanes<8, 6>, strips));
#else
  (void)argc;
  (void)argv;
  std::printf("needs AVX-512\n");
#endif
}
