#pragma once
// Measured fp32 FMA peak of this machine, for "fraction of peak" counters in benchmarks.
//
//   double p = measure_fma_peak_gflops(2);   // GFLOP/s with 2 threads (an FMA counts 2 flops)
//
// The probe runs `chains` independent fused multiply-add dependency chains per thread, all in
// SIMD registers of the native xsimd architecture. With at least latency x pipes chains (Zen 3-5:
// 4 cycles x 2 FMA pipes = 8; we use 12 or 16) the FMA units never wait for a result, so the rate is the
// throughput bound. Each repetition is timed as a whole parallel region (wall clock, barrier
// included); the result is the median over repetitions, after one warm-up repetition. Takes about
// 10-30 ms. Self-contained: xsimd, OpenMP and the standard library only.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <thread>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace sparselm::bench {

namespace detail {

// Runs `iters` iterations of `Chains` independent FMA chains; returns a value that depends on
// every chain so the compiler cannot drop the work.
template <class Arch, int Chains>
[[gnu::noinline]] float fma_chains(long iters, float seed) {
  using b = xsimd::batch<float, Arch>;
  b acc[Chains];
#pragma GCC unroll 32
  for (int c = 0; c < Chains; ++c) acc[c] = b(seed + 0.001f * float(c));
  // x <- x * m + a with m slightly below 1 and a small: the values stay bounded and normal.
  const b m(0.9999999f), a(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int c = 0; c < Chains; ++c) acc[c] = xsimd::fma(acc[c], m, a);
  }
  b s = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < Chains; ++c) s += acc[c];
  return xsimd::hadd(s);
}

}  // namespace detail

// Median fp32 FMA throughput in GFLOP/s over a few repetitions with `threads` OpenMP threads.
template <class Arch = xsimd::default_arch>
double measure_fma_peak_gflops(int threads, int repetitions = 7) {
  // Enough independent chains to cover latency x pipes (8 on Zen 3..5), few enough that the
  // accumulators and the two constants stay in registers: 16 vector registers on AVX2 (12 chains;
  // 16 would spill and measure half the peak), 32 on AVX-512 (16 chains).
  constexpr int chains = std::is_base_of_v<xsimd::avx512f, Arch> ? 16 : 12;
  constexpr long iters = 1L << 19;  // chains x 512Ki FMA instructions per thread per repetition
  const int nt = std::max(1, threads);
  const double flops =
      double(nt) * double(iters) * chains * double(xsimd::batch<float, Arch>::size) * 2.0;
  std::vector<double> gflops;
  [[maybe_unused]] volatile float sink = 0;  // the results are stored, so the chains are not optimised away
  for (int rep = 0; rep <= repetitions; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(nt) reduction(+ : total)
    total += detail::fma_chains<Arch, chains>(iters, 1.0f + float(omp_get_thread_num()));
#else
    total = detail::fma_chains<Arch, chains>(iters, 1.0f);
#endif
    sink = total;
    auto t1 = std::chrono::steady_clock::now();
    if (rep > 0) gflops.push_back(flops / std::chrono::duration<double>(t1 - t0).count() * 1e-9);
  }
  std::sort(gflops.begin(), gflops.end());
  return gflops[gflops.size() / 2];
}

// The FMA peak with `threads` threads, cached per thread count, for processes that also load
// OpenBLAS: its pthreads build starts worker threads when the library loads, and they spin for
// a while before they sleep; a probe run in that window shares the cores with them (measured: 67
// instead of 230 GFLOP/s on 2 threads). A multi-thread peak below 80 % of threads x the
// one-thread peak is therefore measured again after a pause (up to 5 times).
template <class Arch = xsimd::default_arch>
double settled_fma_peak_gflops(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  double p = measure_fma_peak_gflops<Arch>(threads);
  if (threads > 1) {
    const double one = settled_fma_peak_gflops<Arch>(1);
    for (int retry = 0; retry < 5 && p < 0.8 * threads * one; ++retry) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      p = measure_fma_peak_gflops<Arch>(threads);
    }
  }
  return cache.emplace(threads, p).first->second;
}

}  // namespace sparselm::bench

namespace sparselm {
using bench::measure_fma_peak_gflops;
using bench::settled_fma_peak_gflops;
}
