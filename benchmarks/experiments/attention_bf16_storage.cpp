// The attention kernels' forward + backward on one GPT-2 small layer's shapes (B = 8, T = 128,
// 12 heads of 64) in three forms: fp32 products, bf16 products over fp32 qkv and out, and bf16
// products over qkv and out held in bf16 (what the attention layer keeps under bf16 activations;
// docs/precision.md, "bf16 attention"). An experiment, not a benchmark target; not built by CMake:
//
//   g++ -std=c++20 -O3 -march=native -fopenmp -DNDEBUG -Iinclude \
//       benchmarks/experiments/attention_bf16_storage.cpp -o attention_bf16_storage
//   ./attention_bf16_storage            # three rounds, median of 31 runs each, all threads
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/attention.hpp"

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

int main() {
  const std::size_t B = 8, T = 128, H = 12, D = 64, N = B * T, HD = H * D;
  std::vector<float> qkv(N * 3 * HD), out(N * HD), dout(N * HD), dqkv(N * 3 * HD), lse(B * H * T);
  counter_rng(5).fill_uniform(qkv, 1);
  counter_rng(5).fill_uniform(dout, 2);
  std::vector<bf16> q16(qkv.size()), o16(out.size());
  for (std::size_t i = 0; i < qkv.size(); ++i) q16[i] = bf16(qkv[i]);
  const kernels::attention_shape s{B, T, H, D};
  const auto mask = kernels::attention_mask::causal;
  const float scale = 0.125f;
  const const_matrix_view<float> q32v(qkv.data(), N, 3 * HD), o32v(out.data(), N, HD);
  const const_matrix_view<bf16> q16v(q16.data(), N, 3 * HD), o16v(o16.data(), N, HD);
  auto f32_storage = [&](dtype compute) {
    return median_ms([&] {
      kernels::attention_forward(q32v, {out.data(), N, HD}, lse, s, mask, scale, {}, {}, compute);
      kernels::attention_backward({dout.data(), N, HD}, q32v, o32v, lse, {dqkv.data(), N, 3 * HD}, s, mask, scale, {},
                                  {}, compute);
    });
  };
  for (int round = 0; round < 3; ++round) {
    const double f = f32_storage(dtype::f32), a = f32_storage(dtype::bf16);
    const double b = median_ms([&] {
      kernels::attention_forward(q16v, {out.data(), N, HD}, lse, s, mask, scale, {}, {}, dtype::bf16);
      kernels::attention_backward({dout.data(), N, HD}, q16v, o16v, lse, {dqkv.data(), N, 3 * HD}, s, mask, scale, {},
                                  {}, dtype::bf16);
    });
    std::printf("fp32 %.3f ms, bf16 products over fp32 qkv %.3f ms, over bf16 qkv %.3f ms\n", f, a, b);
  }
  return 0;
}
