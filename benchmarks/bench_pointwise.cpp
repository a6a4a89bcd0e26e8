// Element-wise and row-wise kernels (layer norm, masked softmax, GELU; forward and backward) in
// GB/s, beside a copy-bandwidth probe measured in the same process on the same array size.
//
// GB/s counts the bytes the kernel must move: every array it has to read once plus every array it
// has to write once (10^9 bytes). Small vectors (gamma, mean, ...) are counted too; write-allocate
// traffic is not (the copy probe pays it the same way). Shapes are GPT-2 small's at 4096 tokens:
//   layer_norm   x (4096 x 768)                 fwd: read x, write y (+ gamma, beta, mean, rstd)
//                                               bwd: read dy, x, write dx (+ gamma, mean, rstd, dgamma, dbeta r/w)
//   softmax      (8·12·128 x 128) causal        fwd: read the visible part of each row, write the full row
//                one (128 x 128) slice per (b,h) bwd: read y, dy, write dx
//   gelu (tanh)  h (4096 x 3072)                fwd: read x, write y;  bwd: read x, dy, write dx
// The softmax slices run from one parallel loop over (b,h), the kernel running serially inside it,
// which is how a per-head caller uses it (the causal row offset restarts at every slice).
//
// The copy probe (`copy/<floats>/threads:<t>`) streams src -> dst with the same SIMD loads and
// stores as the kernels, over chunks split between threads like parallel_chunks; counters on the
// kernel rows: GB/s, copy_GB/s (probe on an array of the kernel's main size, same thread count),
// of_copy = GB/s / copy_GB/s. The probe value is the median of 9 repetitions, cached per size.
//
//   ./build/benchmarks/bench_pointwise                                  # everything, 1 and 2 threads
//   ./build/benchmarks/bench_pointwise --benchmark_filter='layer_norm.*threads:2'
//   ./build/benchmarks/bench_pointwise --benchmark_format=json | benchmarks/summarize.py pointwise -
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/bandwidth.hpp"
#include "common/results_reporter.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/kernels/layer_norm.hpp"
#include "sparselm/kernels/softmax.hpp"

namespace {

using namespace sparselm;
using clk = std::chrono::steady_clock;

// 64-byte aligned, filled with values in [lo, hi).
struct buf {
  float* p = nullptr;
  std::size_t n = 0;
  buf(std::size_t count, std::uint32_t seed, float lo = -2.0f, float hi = 2.0f) : n(count) {
    p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
    for (std::size_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      p[i] = lo + (hi - lo) * float(seed >> 8) * (1.0f / 16777216.0f);
    }
  }
  buf(const buf&) = delete;
  buf& operator=(const buf&) = delete;
  ~buf() { std::free(p); }
  std::span<float> span() const { return {p, n}; }
};

// The copy probe: common/bandwidth.hpp.
using bench::copy_floats;
using bench::copy_gbs;

// Times `body` per iteration (manual time) and sets GB/s, copy_GB/s, of_copy.
template <class Body>
void timed(benchmark::State& state, double bytes, std::size_t main_floats, int threads, Body&& body) {
  const double copy = copy_gbs(main_floats, threads);
  set_num_threads(threads);
  body();  // warm-up
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = clk::now();
    body();
    const double s = std::chrono::duration<double>(clk::now() - t0).count();
    seconds += s;
    state.SetIterationTime(s);
  }
  const double gbs = bytes * double(state.iterations()) / seconds * 1e-9;
  state.counters["GB/s"] = gbs;
  state.counters["copy_GB/s"] = copy;
  state.counters["of_copy"] = gbs / copy;
  state.SetBytesProcessed(std::int64_t(bytes * double(state.iterations())));
}

constexpr std::size_t LN_N = 4096, LN_C = 768;
constexpr std::size_t SM_BH = 8 * 12, SM_T = 128;
constexpr std::size_t GE_N = 4096 * 3072;

void bm_copy(benchmark::State& state, std::size_t n, int threads) {
  buf src(n, 1), dst(n, 2);
  timed(state, 8.0 * double(n), n, threads, [&] { copy_floats(src.p, dst.p, n); });
}

void bm_layer_norm_fwd(benchmark::State& state, int threads) {
  const std::size_t N = LN_N, C = LN_C;
  buf x(N * C, 1), y(N * C, 2), g(C, 3), b(C, 4), mean(N, 5), rstd(N, 6);
  const double bytes = 4.0 * (2.0 * N * C + 2.0 * C + 2.0 * N);
  timed(state, bytes, N * C, threads, [&] {
    kernels::layer_norm_forward({x.p, N, C}, g.span(), b.span(), {y.p, N, C}, mean.span(), rstd.span(), 1e-5f);
  });
}

void bm_layer_norm_bwd(benchmark::State& state, int threads) {
  const std::size_t N = LN_N, C = LN_C;
  buf x(N * C, 1), dy(N * C, 2), dx(N * C, 3), g(C, 4), b(C, 5), mean(N, 6), rstd(N, 7), dg(C, 8), db(C, 9);
  kernels::layer_norm_forward({x.p, N, C}, g.span(), b.span(), {dx.p, N, C}, mean.span(), rstd.span(), 1e-5f);
  const double bytes = 4.0 * (3.0 * N * C + C + 2.0 * N + 4.0 * C);
  timed(state, bytes, N * C, threads, [&] {
    kernels::layer_norm_backward({dy.p, N, C}, {x.p, N, C}, g.span(), mean.span(), rstd.span(), {dx.p, N, C},
                                 dg.span(), db.span());
  });
}

void bm_softmax_fwd(benchmark::State& state, int threads) {
  const std::size_t BH = SM_BH, T = SM_T, n = BH * T * T;
  buf x(n, 1, -8.0f, 8.0f), y(n, 2);
  const double bytes = 4.0 * (double(BH) * double(T) * double(T + 1) / 2.0 + double(n));  // visible reads + full writes
  timed(state, bytes, n, threads, [&] {
    parallel_for(0, BH, [&](std::size_t s) {
      kernels::softmax_forward({x.p + s * T * T, T, T}, {y.p + s * T * T, T, T}, kernels::softmax_mask::causal);
    });
  });
}

void bm_softmax_bwd(benchmark::State& state, int threads) {
  const std::size_t BH = SM_BH, T = SM_T, n = BH * T * T;
  buf x(n, 1, -8.0f, 8.0f), y(n, 2), dy(n, 3), dx(n, 4);
  kernels::softmax_forward({x.p, BH * T, T}, {y.p, BH * T, T}, kernels::softmax_mask::none);
  timed(state, 4.0 * 3.0 * double(n), n, threads, [&] {
    parallel_for(0, BH, [&](std::size_t s) {
      kernels::softmax_backward({y.p + s * T * T, T, T}, {dy.p + s * T * T, T, T}, {dx.p + s * T * T, T, T});
    });
  });
}

void bm_gelu_fwd(benchmark::State& state, int threads) {
  buf x(GE_N, 1, -6.0f, 6.0f), y(GE_N, 2);
  timed(state, 4.0 * 2.0 * double(GE_N), GE_N, threads, [&] {
    kernels::gelu_forward<kernels::gelu_kind::tanh>(std::span<const float>(x.span()), y.span());
  });
}

void bm_gelu_bwd(benchmark::State& state, int threads) {
  buf x(GE_N, 1, -6.0f, 6.0f), dy(GE_N, 2), dx(GE_N, 3);
  timed(state, 4.0 * 3.0 * double(GE_N), GE_N, threads, [&] {
    kernels::gelu_backward<kernels::gelu_kind::tanh>(std::span<const float>(x.span()), std::span<const float>(dy.span()),
                                                     dx.span());
  });
}

}  // namespace

int main(int argc, char** argv) {
  const auto reg = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  for (int t : {2, 1}) {
    const std::string th = "/threads:" + std::to_string(t);
    for (std::size_t n : {LN_N * LN_C, SM_BH * SM_T * SM_T, GE_N}) reg("copy/" + std::to_string(n) + th, bm_copy, n, t);
    reg("layer_norm_fwd/4096x768" + th, bm_layer_norm_fwd, t);
    reg("layer_norm_bwd/4096x768" + th, bm_layer_norm_bwd, t);
    reg("softmax_causal_fwd/96x128x128" + th, bm_softmax_fwd, t);
    reg("softmax_bwd/96x128x128" + th, bm_softmax_bwd, t);
    reg("gelu_fwd/4096x3072" + th, bm_gelu_fwd, t);
    reg("gelu_bwd/4096x3072" + th, bm_gelu_bwd, t);
  }
  return sparselm::bench::benchmark_main("bench_pointwise", argc, argv);  // --json FILE: results lines
}
