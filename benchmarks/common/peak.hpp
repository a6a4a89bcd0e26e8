#pragma once
// Measured fp32 FMA peak (and AVX512-BF16 dot-product peak) of this machine, for "fraction of peak" counters in benchmarks.
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

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

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

#if defined(__AVX512BF16__)
// The same with vdpbf16ps (each instruction: 16 lanes x 2 bf16 products added to an fp32 lane).
template <int Chains>
[[gnu::noinline]] float bf16_dot_chains(long iters, float seed) {
  __m512 acc[Chains];
#pragma GCC unroll 32
  for (int c = 0; c < Chains; ++c) acc[c] = _mm512_set1_ps(seed + 0.001f * float(c));
  // Products of 2^-20 and 1: each adds 2^-19 per instruction, staying normal and finite.
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-20f), _mm512_set1_ps(0x1p-20f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(1.0f));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int c = 0; c < Chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < Chains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_reduce_add_ps(s);
}
#endif

// Median GFLOP/s of run(iters, seed) on `threads` OpenMP threads, each doing `flops` per call.
template <class Run>
double measure_peak(int threads, int repetitions, long iters, double flops_per_thread, Run run) {
  const int nt = std::max(1, threads);
  const double flops = double(nt) * flops_per_thread;
  std::vector<double> gflops;
  [[maybe_unused]] volatile float sink = 0;  // the results are stored, so the chains are not optimised away
  for (int rep = 0; rep <= repetitions; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#if defined(_OPENMP)
#pragma omp parallel num_threads(nt) reduction(+ : total)
    total += run(iters, 1.0f + float(omp_get_thread_num()));
#else
    total = run(iters, 1.0f);
#endif
    sink = total;
    auto t1 = std::chrono::steady_clock::now();
    if (rep > 0) gflops.push_back(flops / std::chrono::duration<double>(t1 - t0).count() * 1e-9);
  }
  std::sort(gflops.begin(), gflops.end());
  return gflops[gflops.size() / 2];
}

}  // namespace detail

// True when this build can measure (and run) AVX512-BF16 dot products.
inline constexpr bool has_bf16_dot_peak =
#if defined(__AVX512BF16__)
    true;
#else
    false;
#endif

// Median bf16 dot-product throughput (vdpbf16ps, 64 flops per instruction: 32 multiply-adds) in
// GFLOP/s with `threads` threads; 0 when the build has no AVX512-BF16. The denominator of the
// bf16 GEMM's "% of bf16 peak". 16 chains as for the FMA probe (latency 6 x 2 pipes = 12 on Zen 5).
inline double measure_bf16_dot_peak_gflops([[maybe_unused]] int threads, [[maybe_unused]] int repetitions = 7) {
#if defined(__AVX512BF16__)
  constexpr int chains = 16;
  constexpr long iters = 1L << 19;
  return detail::measure_peak(threads, repetitions, iters, double(iters) * chains * 64.0,
                              [](long n, float seed) { return detail::bf16_dot_chains<chains>(n, seed); });
#else
  return 0.0;
#endif
}

// Median fp32 FMA throughput in GFLOP/s over a few repetitions with `threads` OpenMP threads.
template <class Arch = xsimd::default_arch>
double measure_fma_peak_gflops(int threads, int repetitions = 7) {
  // Enough independent chains to cover latency x pipes (8 on Zen 3..5), few enough that the
  // accumulators and the two constants stay in registers: 16 vector registers on AVX2 (12 chains;
  // 16 would spill and measure half the peak), 32 on AVX-512 (16 chains).
  constexpr int chains = std::is_base_of_v<xsimd::avx512f, Arch> ? 16 : 12;
  constexpr long iters = 1L << 19;  // chains x 512Ki FMA instructions per thread per repetition
  return detail::measure_peak(threads, repetitions, iters,
                              double(iters) * chains * double(xsimd::batch<float, Arch>::size) * 2.0,
                              [](long n, float seed) { return detail::fma_chains<Arch, chains>(n, seed); });
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
using bench::has_bf16_dot_peak;
using bench::measure_bf16_dot_peak_gflops;
using bench::measure_fma_peak_gflops;
using bench::settled_fma_peak_gflops;
}
