// The one-pass block-sparse backward timed alone, for comparing two versions of the kernel:
// bench_bsr's step adds the forward and its noise. kernels::bsr_backward<B> (fp32), or
// kernels::bsr_backward_bf16<B> with X in bf16 as the layers keep it; s = 0.9, the four transformer
// shapes of bench_bsr, M rows; prints the minimum and the median over `reps` calls. An experiment,
// not a benchmark target (benchmarks/results/2026-11-29-zen4-precision.md, "The data gradient's panels from the strips";
// benchmarks/results/2026-11-30-zen5-sparsity.md, "The lanes-M one-pass backward"). Not built by CMake; build it once per
// checkout and run the binaries in alternation:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude -Ibenchmarks \
//       benchmarks/experiments/bsr_backward_alone.cpp -o bsr_backward_alone
//   ./bsr_backward_alone [threads = 1] [reps = 30] [block sizes = 16,8,4] [M = 4096] [fp32|bf16 = fp32]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/random_pattern.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
using namespace sparselm;

template <std::size_t B>
void run(std::size_t M, std::size_t in, std::size_t out, int reps, bool bf16_x) {
  const auto p = bench::random_pattern(B, in, out, 0.9, 7);
  std::vector<float> X(M * in), dY(M * out), dX(M * in), v(p.nnz() * B * B), dv(p.nnz() * B * B);
  for (std::size_t i = 0; i < X.size(); ++i) X[i] = float((i * 7919) % 1000) / 1000.f - 0.5f;
  for (std::size_t i = 0; i < dY.size(); ++i) dY[i] = float((i * 104729) % 1000) / 1000.f - 0.5f;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float((i * 31) % 100) / 100.f;
  std::vector<bf16> Xb(bf16_x ? X.size() : 0);
  for (std::size_t i = 0; i < Xb.size(); ++i) Xb[i] = bf16(X[i]);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (bf16_x)
      kernels::bsr_backward_bf16<B>(const_matrix_view<bf16>(Xb.data(), M, in), {dY.data(), M, out}, p, v.data(), 0.0f,
                                    {dX.data(), M, in}, dv.data());
    else
      kernels::bsr_backward<B>({X.data(), M, in}, {dY.data(), M, out}, p, v.data(), 0.0f, {dX.data(), M, in},
                               dv.data());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("%s B=%zu %zux%zu M=%zu: min %.3f  median %.3f ms\n", bf16_x ? "bf16" : "fp32", B, in, out, M, t[0],
              t[t.size() / 2]);
}

int main(int argc, char** argv) {
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 1);
  const int reps = std::max(1, argc > 2 ? std::atoi(argv[2]) : 30);
  const char* blocks = argc > 3 ? argv[3] : "16,8,4";
  const std::size_t M = argc > 4 ? std::size_t(std::atol(argv[4])) : 4096;
  const bool bf16_x = argc > 5 && std::strcmp(argv[5], "bf16") == 0;
  const std::size_t shapes[4][2] = {{768, 768}, {768, 3072}, {3072, 768}, {768, 2304}};
  for (const auto& s : shapes) {
    if (std::strstr(blocks, "16")) run<16>(M, s[0], s[1], reps, bf16_x);
    if (std::strchr(blocks, '8')) run<8>(M, s[0], s[1], reps, bf16_x);
    if (std::strchr(blocks, '4')) run<4>(M, s[0], s[1], reps, bf16_x);
  }
}
