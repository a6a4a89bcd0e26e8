// Measured fp32 FMA peak (GFLOP/s) for 1 and 2 threads: the denominator of "% of peak" in the
// kernel benchmarks. Run: ./build/benchmarks/bench_peak
#include <benchmark/benchmark.h>

#include "common/peak.hpp"

static void BM_fma_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  double g = 0;
  for (auto _ : state) g = sparselm::measure_fma_peak_gflops(threads);
  state.counters["GFLOP/s"] = g;
  state.counters["threads"] = threads;
}
BENCHMARK(BM_fma_peak)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
