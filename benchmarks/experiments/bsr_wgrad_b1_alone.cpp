// kernels::bsr_weight_grad<1> timed alone at M = 64, 1024 and 4096 rows (s = 0.9, the four
// transformer shapes of bench_bsr), minimum and median of 20 calls on the same pattern, for
// comparing two versions of the kernel (benchmarks/results/2026-11-30-zen4-sparsity.md, "B = 1: the slot order kept with the
// pattern"). At M = 64 the products are one 128-row chunk, so the time is mostly what a call pays
// besides them. An experiment, not a benchmark target. Not built by CMake; build it once per
// checkout and run the binaries in alternation:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/bsr_wgrad_b1_alone.cpp -o bsr_wgrad_b1_alone
//   ./bsr_wgrad_b1_alone [threads = 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/random_pattern.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr.hpp"
using namespace sparselm;

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  const std::size_t shapes[4][2] = {{768, 768}, {768, 3072}, {3072, 768}, {768, 2304}};
  for (const auto& s : shapes) {
    const auto p = bench::random_pattern(1, s[0], s[1], 0.9, 7);
    for (std::size_t M : {64, 1024, 4096}) {
      std::vector<float> X(M * s[0]), dY(M * s[1]), dv(p.nnz());
      for (std::size_t i = 0; i < X.size(); ++i) X[i] = float((i * 7919) % 1000) / 1000.f - 0.5f;
      for (std::size_t i = 0; i < dY.size(); ++i) dY[i] = float((i * 104729) % 1000) / 1000.f - 0.5f;
      std::vector<double> t;
      for (int r = 0; r < 20; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        kernels::bsr_weight_grad<1>({X.data(), M, s[0]}, {dY.data(), M, s[1]}, p, dv.data());
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      std::printf("%zux%zu M=%zu: min %.3f  median %.3f ms\n", s[0], s[1], M, t[0], t[t.size() / 2]);
    }
  }
}
