// Narrow NN products (C at most 128 columns wide per thread) with A read in place, as the GEMM now
// does (kernels/detail/gemm_driver.hpp), against the same driver with A packed, alternating in
// one process; the FMA peak measured in the same process. An experiment, not a benchmark target
// (benchmarks/results/2026-11-25-zen5-performance.md, "Narrow products read A in place"). Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/gemm_in_place.cpp -o gemm_in_place
//   for s in "1024 128 50000" "1024 128 1600" "1024 64 768" "4096 128 768" "1024 256 3072"; do
//     ./gemm_in_place 1 $s; done          # threads M N K
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gemm.hpp"

namespace {
using namespace sparselm::kernels::detail;
using Arch = sparselm::native_arch;
using in_place = gemm_fp32_family<Arch>;
struct packed_a : gemm_fp32_family<Arch> {
  static constexpr bool reads_a_in_place = false;
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s threads M N K\n", argv[0]);
    return 2;
  }
  const int nt = std::atoi(argv[1]);
  sparselm::set_num_threads(nt);
  const std::size_t M = std::strtoul(argv[2], nullptr, 10), N = std::strtoul(argv[3], nullptr, 10),
                    K = std::strtoul(argv[4], nullptr, 10);
  std::vector<float> A(M * K), B(K * N), C1(M * N), C2(M * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = float(i % 3) * 0.01f;
  for (std::size_t i = 0; i < B.size(); ++i) B[i] = float(i % 5) * 0.1f;
  const double peak = sparselm::bench::measure_fma_peak_gflops(nt);
  const double gflop = 2.0 * double(M) * double(N) * double(K) * 1e-9;
  const int reps = gflop > 1 ? 7 : 51;
  std::printf("%zu x %zu x %zu, %d thread(s), FMA peak %.0f GFLOP/s\n", M, N, K, nt, peak);
  for (int round = 0; round < 3; ++round) {
    double t[2];
    for (int alt = 0; alt < 2; ++alt) {
      const gemm_problem<float, float> p{
          false, false, M, N, K, 1.f, 0.f, A.data(), K, B.data(), N, (alt ? C2 : C1).data(), N, nullptr};
      std::vector<double> ts;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (alt)
          gemm_run<in_place>(p);
        else
          gemm_run<packed_a>(p);
        ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ts.begin(), ts.end());
      t[alt] = ts[std::size_t(reps / 2)];
    }
    std::printf("packed %.3f ms (%.0f %% of peak)  in place %.3f ms (%.0f %%)  ratio %.2f  bit-identical: %s\n",
                t[0] * 1e3, 100 * gflop / t[0] / peak, t[1] * 1e3, 100 * gflop / t[1] / peak, t[1] / t[0],
                C1 == C2 ? "yes" : "NO");
  }
}
