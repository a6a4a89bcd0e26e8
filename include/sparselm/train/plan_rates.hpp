#pragma once
// The measured rates of a plan (train/plan.hpp's run_plan::measure_rates): the library's own kernels
// timed at a run's sizes, shrunk until each call is modest (at most 4M elements per matrix and
// 4 GFLOP), each for about `seconds`. The results are FLOP/s.
//
//   std::size_t m = 8192, k = 768, n = 3072;
//   plan_rates::fit(m, k, n);                                       // 4096 x 768 x 3072 -> modest
//   double dense = plan_rates::linear(dtype::f32, m, k, n, 0.2);    // forward + both backward products
//   double sparse = plan_rates::block_sparse(dtype::f32, 16, 0.9, m, k, n, 0.2);

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/sparse/init.hpp"

namespace sparselm::plan_rates {

// FLOP/s of `call`, which does flops_per_call, run (after one warm-up call) for at least `seconds`
// and at least twice.
template <class F>
double timed_rate(double flops_per_call, double seconds, F&& call) {
  call();  // warm-up: packing buffers, threads
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::size_t calls = 0;
  double elapsed = 0;
  do {
    call();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < seconds || calls < 2);
  return flops_per_call * double(calls) / elapsed;
}
// Halves the largest of a product's sizes (not below 64) until its matrices and FLOPs are modest.
inline void fit(std::size_t& m, std::size_t& k, std::size_t& n) {
  const double cap = double(1 << 22);
  auto big = [&] {
    return double(m) * double(k) > cap || double(k) * double(n) > cap || double(m) * double(n) > cap ||
           6.0 * double(m) * double(k) * double(n) > 4e9;
  };
  m = std::max<std::size_t>(m, 64), k = std::max<std::size_t>(k, 64), n = std::max<std::size_t>(n, 64);
  while (big() && std::max({m, k, n}) > 64) {
    std::size_t& d = m >= k && m >= n ? m : (n >= k ? n : k);
    d = std::max<std::size_t>(64, d / 2);
  }
}
// y = x·W, dx = dy·Wᵀ, dW += xᵀ·dy for x (m,k), W (k,n).
inline double linear(dtype compute, std::size_t m, std::size_t k, std::size_t n, double seconds) {
  aligned_vector<float> x(m * k), w(k * n), y(m * n), dx(m * k), dw(k * n);
  counter_rng rng(7);
  rng.fill_normal(std::span<float>(x.data(), x.size()), 1, 0.0f, 1.0f);
  rng.fill_normal(std::span<float>(w.data(), w.size()), 2, 0.0f, 1.0f);
  std::fill(dw.begin(), dw.end(), 0.0f);
  const_matrix_view<float> X{x.data(), m, k}, W{w.data(), k, n}, Y{y.data(), m, n};
  using kernels::trans;
  return timed_rate(6.0 * double(m * k * n), seconds, [&] {
    kernels::gemm_as(compute, trans::n, trans::n, 1.0f, X, W, 0.0f, matrix_view<float>{y.data(), m, n});
    kernels::gemm_as(compute, trans::n, trans::t, 1.0f, Y, W, 0.0f, matrix_view<float>{dx.data(), m, k});
    kernels::gemm_as(compute, trans::t, trans::n, 1.0f, X, Y, 1.0f, matrix_view<float>{dw.data(), k, n});
  });
}
inline double block_sparse(dtype compute, std::size_t B, double sparsity, std::size_t m, std::size_t k, std::size_t n,
                  double seconds) {
  k = k / B * B;
  n = n / B * B;
  const std::size_t nnz = std::max<std::size_t>(1, sparse::nnz_blocks("plan", k, n, B, sparsity));
  counter_rng rng(11);
  const auto p = sparse::random_pattern("plan", k, n, B, nnz, rng, 3);
  aligned_vector<float> x(m * k), w(nnz * B * B), y(m * n);
  rng.fill_normal(std::span<float>(x.data(), x.size()), 1, 0.0f, 1.0f);
  rng.fill_normal(std::span<float>(w.data(), w.size()), 2, 0.0f, 1.0f);
  const_matrix_view<float> X{x.data(), m, k};
  matrix_view<float> Y{y.data(), m, n};
  const bool bf16 = compute == dtype::bf16 && B != 1 &&
                    (kernels::bsr_bf16_pays() || (B == 16 && kernels::bsr_bf16_amx_chosen()));
  const double flops = 2.0 * double(m * nnz * B * B);
  return timed_rate(flops, seconds, [&] {
    auto run = [&]<std::size_t Bk>() {
      if constexpr (Bk != 1)
        if (bf16) return kernels::bsr_matmul_bf16<Bk>(X, p, w.data(), 0.0f, Y);
      kernels::bsr_matmul<Bk>(X, p, w.data(), 0.0f, Y);
    };
    switch (B) {
      case 1: return run.template operator()<1>();
      case 4: return run.template operator()<4>();
      case 8: return run.template operator()<8>();
      default: return run.template operator()<16>();
    }
  });
}

}  // namespace sparselm::plan_rates
