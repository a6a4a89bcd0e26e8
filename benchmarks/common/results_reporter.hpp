#pragma once
// The results lines (common/results.hpp) of a Google Benchmark program: a console reporter that
// also appends one line per benchmark run, the median aggregate when the run has repetitions.
//
//   sparselm::bench::results out("bench_gemm", argc, argv);  // before benchmark::Initialize
//   benchmark::Initialize(&argc, argv);
//   sparselm::bench::run_benchmarks(out, [](int t) { return sparselm::settled_fma_peak_gflops(t); });
//
// or, for a program that needs nothing else in main, sparselm::bench::benchmark_main("bench_x", argc, argv).
//
// A line's case is {"name": the benchmark's name without its /iterations: or /manual_time parts,
// "repetitions"}; its metrics are the user counters and "real_time_ms"; its threads come from a
// "threads" counter or a "threads:N" part of the name (else 1), and the peak is fma_peak(threads)
// when given.

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "common/results.hpp"

namespace sparselm::bench {

class results_reporter : public benchmark::ConsoleReporter {
 public:
  // Colours only on a terminal, as Google Benchmark's own console reporter by default.
  explicit results_reporter(const results& out, std::function<double(int)> fma_peak = {})
      : benchmark::ConsoleReporter(::isatty(::fileno(stdout)) ? OO_Color : OO_None),
        out_(out),
        fma_peak_(std::move(fma_peak)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const bool aggregate = r.run_type == Run::RT_Aggregate;
      if (aggregate ? r.aggregate_name != "median" : r.repetitions > 1) continue;
      const std::regex noise("/(iterations:[0-9]+|manual_time|real_time)");
      const std::string name = std::regex_replace(r.run_name.str(), noise, "");
      std::smatch m;
      int threads = std::regex_search(name, m, std::regex("threads:([0-9]+)")) ? std::stoi(m[1]) : 1;
      if (const auto c = r.counters.find("threads"); c != r.counters.end()) threads = int(c->second.value);
      nlohmann::json metrics = {{"real_time_ms", r.GetAdjustedRealTime() * to_ms(r.time_unit)}};
      for (const auto& [k, c] : r.counters) metrics[k] = c.value;
      out_.add({{"name", name}, {"repetitions", r.repetitions}}, metrics, threads,
               fma_peak_ ? fma_peak_(threads) : 0.0);
    }
  }

 private:
  static double to_ms(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond: return 1e-6;
      case benchmark::kMicrosecond: return 1e-3;
      case benchmark::kMillisecond: return 1.0;
      default: return 1e3;
    }
  }

  const results& out_;
  std::function<double(int)> fma_peak_;
};

// Runs the benchmarks the flags select, appending results lines when `out` is enabled.
inline void run_benchmarks(const results& out, std::function<double(int)> fma_peak = {}) {
  results_reporter reporter(out, std::move(fma_peak));
  benchmark::RunSpecifiedBenchmarks(out.enabled() ? &reporter : nullptr);
}

// BENCHMARK_MAIN with results lines (`--json FILE`): the whole main of a registered benchmark program.
inline int benchmark_main(const char* name, int argc, char** argv) {
  const results out(name, argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  run_benchmarks(out);
  benchmark::Shutdown();
  return 0;
}

}  // namespace sparselm::bench
