// The attention kernels' forward + backward in three forms: fp32 products, bf16 products over fp32
// qkv and out, and bf16 products over qkv and out held in bf16 (what the attention layer keeps under
// bf16 activations; benchmarks/results/2026-11-29-zen4-precision.md, "bf16 attention"). Dense causal attention on one GPT-2 small
// layer's shapes (B = 8, T = 128, 12 heads of 64), or with --block-sparse DENSITY the static
// block-sparse kernels (blocks of 16, that density) on the S1 heads (B = 4, T = 256, 16 heads of
// 32). An experiment, not a benchmark target; not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude \
//       benchmarks/experiments/attention_bf16_storage.cpp -o attention_bf16_storage
//   ./attention_bf16_storage                        # three rounds, median of 31 runs each, all threads
//   ./attention_bf16_storage --block-sparse 0.25
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/block_sparse_attention.hpp"

using namespace sparselm;

namespace {

template <class F>
double median_ms(F&& f) {
  std::vector<double> t;
  for (int r = 0; r < 31; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<double> density;
  if (argc == 3 && std::string(argv[1]) == "--block-sparse")
    density = std::atof(argv[2]);
  else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--block-sparse DENSITY]\n", argv[0]);
    return 2;
  }
  const std::size_t B = density ? 4 : 8, T = density ? 256 : 128, H = density ? 16 : 12, D = density ? 32 : 64;
  const std::size_t N = B * T, HD = H * D;
  std::vector<float> qkv(N * 3 * HD), out(N * HD), dout(N * HD), dqkv(N * 3 * HD), lse(B * H * T);
  counter_rng(5).fill_uniform(qkv, 1);
  counter_rng(5).fill_uniform(dout, 2);
  std::vector<bf16> q16(qkv.size()), o16(out.size());
  for (std::size_t i = 0; i < qkv.size(); ++i) q16[i] = bf16(qkv[i]);
  const kernels::attention_shape s{B, T, H, D};
  const auto mask = kernels::attention_mask::causal;
  const kernels::block_causal_pattern pattern({.block = 16, .density = density.value_or(1.0), .seed = 1}, T);
  const float scale = 1.0f / std::sqrt(float(D));
  const const_matrix_view<float> q32v(qkv.data(), N, 3 * HD), o32v(out.data(), N, HD);
  const const_matrix_view<bf16> q16v(q16.data(), N, 3 * HD), o16v(o16.data(), N, HD);
  // forward + backward with qkv and out in the storage type of the views
  auto step = [&](auto qv, auto ov, dtype compute) {
    return median_ms([&] {
      if (density) {
        kernels::block_sparse_attention_forward(qv, {out.data(), N, HD}, lse, s, pattern, scale, {}, {}, compute);
        kernels::block_sparse_attention_backward({dout.data(), N, HD}, qv, ov, lse, {dqkv.data(), N, 3 * HD}, s,
                                                 pattern, scale, {}, {}, compute);
      } else {
        kernels::attention_forward(qv, {out.data(), N, HD}, lse, s, mask, scale, {}, {}, compute);
        kernels::attention_backward({dout.data(), N, HD}, qv, ov, lse, {dqkv.data(), N, 3 * HD}, s, mask, scale, {}, {},
                                    compute);
      }
    });
  };
  if (density) std::printf("block-sparse attention, density %.2f, B %zu T %zu H %zu D %zu\n", *density, B, T, H, D);
  for (int round = 0; round < 3; ++round) {
    const double f = step(q32v, o32v, dtype::f32), a = step(q32v, o32v, dtype::bf16), b = step(q16v, o16v, dtype::bf16);
    std::printf("fp32 %.3f ms, bf16 products over fp32 qkv %.3f ms, over bf16 qkv %.3f ms\n", f, a, b);
  }
  return 0;
}
