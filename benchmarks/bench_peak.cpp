// Measured fp32 FMA peak (GFLOP/s) for 1 and 2 threads: the denominator of "% of peak" in the
// kernel benchmarks; the AVX512-BF16 dot-product peak, the native bf16 GEMM's; and the AMX
// TDPBF16PS peak, the amx bf16 GEMM's. Run: ./build/benchmarks/bench_peak [--json results.jsonl]
#include <benchmark/benchmark.h>

#include "common/peak.hpp"
#include "common/results_reporter.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"

static void BM_fma_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  double g = 0;
  for (auto _ : state) g = sparselm::measure_fma_peak_gflops(threads);
  state.counters["GFLOP/s"] = g;
  state.counters["threads"] = threads;
}
BENCHMARK(BM_fma_peak)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// vdpbf16ps throughput (GFLOP/s, 64 per instruction); only in builds with AVX512-BF16.
static void BM_bf16_dot_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  if (!sparselm::has_bf16_dot_peak) {
    state.SkipWithError("this build has no AVX512-BF16 (needs -march=native on a CPU with it)");
    return;
  }
  double g = 0;
  for (auto _ : state) g = sparselm::measure_bf16_dot_peak_gflops(threads);
  state.counters["GFLOP/s"] = g;
  state.counters["threads"] = threads;
}
BENCHMARK(BM_bf16_dot_peak)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// AMX TDPBF16PS throughput (GFLOP/s, 16 x 16 x 32 multiply-adds per instruction); only where the
// build has AMX and this CPU and OS run it (kernels::gemm_bf16_amx_status() says why not).
static void BM_amx_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  if (!sparselm::kernels::gemm_bf16_amx_usable()) {
    state.SkipWithError(sparselm::kernels::gemm_bf16_amx_status());
    return;
  }
  double g = 0;
  for (auto _ : state) g = sparselm::kernels::gemm_bf16_amx_peak_gflops(threads);
  state.counters["GFLOP/s"] = g;
  state.counters["threads"] = threads;
}
BENCHMARK(BM_amx_peak)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// TDPBF16PS on smaller tiles, one thread: 16 rows x N fp32 columns x depth K bf16 per instruction
// (args K, N). What one instruction gives a 16 x 16, 8 x 8 or 4 x 4 block (K = N = B), or blocks
// gathered four or eight deep (K = 32): docs/design/precision.md, "Not done yet".
static void BM_amx_shape(benchmark::State& state) {
  const int k = int(state.range(0)), n = int(state.range(1));
  if (!sparselm::kernels::gemm_bf16_amx_usable()) {
    state.SkipWithError(sparselm::kernels::gemm_bf16_amx_status());
    return;
  }
  double g = 0;
  for (auto _ : state) g = sparselm::kernels::gemm_bf16_amx_peak_gflops(1, k, n);
  state.counters["GFLOP/s"] = g;
  state.counters["ns/instruction"] = 2.0 * 16.0 * double(k) * double(n) / g;
}
BENCHMARK(BM_amx_shape)
    ->Args({32, 16})
    ->Args({16, 16})
    ->Args({8, 8})
    ->Args({32, 8})
    ->Args({4, 4})
    ->Args({32, 4})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) { return sparselm::bench::benchmark_main("bench_peak", argc, argv); }
