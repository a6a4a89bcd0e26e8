// The three GEMMs of a tied LM head at the S1 step's shapes (benchmarks/results/2026-11-27-zen5-sparsity.md, "Where the sparse
// step's time goes"): logits = x·Eᵀ (1024 x 128 x 50000, NT), dx = dlogits·E (NN, depth 50000,
// 128 columns) and dE += dlogitsᵀ·x (TN, 50000 rows of output), median of 7 calls each, with the
// FMA peak measured in the same process. An experiment, not a benchmark target. Not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/lm_head_gemms.cpp -o lm_head_gemms
//   ./lm_head_gemms [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gemm.hpp"

using namespace sparselm;
using kernels::trans;

int main(int argc, char** argv) {
  const int nt = argc > 1 ? std::atoi(argv[1]) : 2;
  set_num_threads(nt);
  const std::size_t M = 1024, C = 128, V = 50000;
  std::vector<float> x(M * C), E(V * C), L(M * V), dx(M * C), dE(V * C);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) * 0.1f;
  for (std::size_t i = 0; i < E.size(); ++i) E[i] = float(i % 5) * 0.1f;
  for (std::size_t i = 0; i < L.size(); ++i) L[i] = float(i % 3) * 0.01f;
  auto cv = [](const std::vector<float>& v, std::size_t r, std::size_t c) {
    return const_matrix_view<float>{v.data(), r, c, c};
  };
  auto mv = [](std::vector<float>& v, std::size_t r, std::size_t c) { return matrix_view<float>{v.data(), r, c, c}; };
  const double peak = bench::measure_fma_peak_gflops(nt);
  std::printf("%d thread(s), FMA peak %.0f GFLOP/s\n", nt, peak);
  const char* names[3] = {"x·Eᵀ (NT)", "dlogits·E (NN)", "dlogitsᵀ·x (TN)"};
  for (int op = 0; op < 3; ++op) {
    std::vector<double> ts;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      if (op == 0) kernels::gemm(trans::n, trans::t, 1.f, cv(x, M, C), cv(E, V, C), 0.f, mv(L, M, V));
      if (op == 1) kernels::gemm(trans::n, trans::n, 1.f, cv(L, M, V), cv(E, V, C), 0.f, mv(dx, M, C));
      if (op == 2) kernels::gemm(trans::t, trans::n, 1.f, cv(L, M, V), cv(x, M, C), 1.f, mv(dE, V, C));
      ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    const double gf = 2.0 * double(M) * double(C) * double(V) / ts[3] * 1e-9;
    std::printf("%-18s %7.2f ms %6.0f GFLOP/s %5.1f %% of peak\n", names[op], ts[3] * 1e3, gf, 100.0 * gf / peak);
  }
}
