#pragma once
// Results kept as data: a benchmark appends one JSON line per measured case to a results file
// (the project's are benchmarks/results/data/*.jsonl), from which scripts/render_performance.py
// renders docs/performance.md's current tables.
//
//   int main(int argc, char** argv) {
//     sparselm::bench::results out("bench_x", argc, argv);  // takes `--json FILE` out of argv;
//     ...                                                   // without it $SPARSELM_RESULTS; else off
//     out.add({{"M", 4096}, {"op", "NN"}}, {{"gflops", 370.1}, {"vs_openblas", 2.1}}, threads, fma_peak);
//   }
//
// One line per add():
//   {"benchmark", "case": {...}, "metrics": {...}, "threads", "fma_peak_gflops" (only when the
//    benchmark measured it), "host": {"vendor", "family", "model", "cpu", "isa": [...], "cpus"},
//    "commit" (git, at build time: benchmarks/CMakeLists.txt), "compiler", "date" (UTC, ISO 8601),
//    "run" (the same for every line of one invocation), "command" (argv without --json, quoted),
//    "load" (the 1-minute load average when the benchmark started: other work on the machine)}
// Lines are appended whole, so several runs may share one file. The Python peers write the same
// lines (benchmarks/common/results.py).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

// Defined by the sparselm_bench_info library (generated at build time: benchmarks/CMakeLists.txt).
extern "C" const char* sparselm_bench_commit();

namespace sparselm::bench {

// What the renderer needs to tell hosts apart: the CPU's name, family and model, and the ISA
// extensions our kernels choose between.
inline nlohmann::json host_probe() {
  static const std::set<std::string> relevant = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"};
  nlohmann::json h = {{"vendor", ""}, {"family", 0}, {"model", 0}, {"cpu", ""}, {"isa", nlohmann::json::array()},
                      {"cpus", std::thread::hardware_concurrency()}};
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  auto value = [&] { return line.substr(line.find(':') + 1 + (line.find(": ") != std::string::npos)); };
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    const std::string key = line.substr(0, line.find_first_of("\t:"));
    if (key == "vendor_id") h["vendor"] = value();
    else if (key == "cpu family") h["family"] = std::atoi(value().c_str());
    else if (key == "model") h["model"] = std::atoi(value().c_str());
    else if (key == "model name") h["cpu"] = value();
    else if (key == "flags") {
      std::istringstream flags(value());
      std::set<std::string> have;
      for (std::string f; flags >> f;)
        if (relevant.count(f)) have.insert(f);
      for (const auto& f : have) h["isa"].push_back(f);
    }
  }
  return h;
}

inline std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class results {
 public:
  // Takes `--json FILE` (or `--json=FILE`) out of argv, so that the benchmark's own parser never
  // sees it; without it the file is $SPARSELM_RESULTS; with neither, add() does nothing.
  results(std::string benchmark, int& argc, char** argv) : benchmark_(std::move(benchmark)) {
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--json" && i + 1 < argc) path_ = argv[++i];
      else if (a.rfind("--json=", 0) == 0) path_ = a.substr(7);
      else {
        command_ += (command_.empty() ? "" : " ") + shell_quote(a);
        argv[kept++] = argv[i];
      }
    }
    command_ = shell_quote(argc > 0 ? argv[0] : benchmark_) + (command_.empty() ? "" : " " + command_);
    argc = kept;
    argv[argc] = nullptr;
    if (path_.empty())
      if (const char* env = std::getenv("SPARSELM_RESULTS")) path_ = env;
    date_ = utc_now();
    if (std::ifstream la("/proc/loadavg"); !(la >> load_)) load_ = -1;
    run_ = date_ + "-" + std::to_string(::getpid());
  }

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Appends one line; fma_peak_gflops <= 0 means "not measured by this benchmark".
  void add(const nlohmann::json& case_, const nlohmann::json& metrics, int threads, double fma_peak_gflops = 0) const {
    if (!enabled()) return;
    nlohmann::json j = {{"benchmark", benchmark_}, {"case", case_}, {"metrics", metrics}, {"threads", threads}};
    if (fma_peak_gflops > 0) j["fma_peak_gflops"] = fma_peak_gflops;
    static const nlohmann::json host = host_probe();
    j["host"] = host;
    j["commit"] = sparselm_bench_commit();
    j["compiler"] = __VERSION__;
    j["date"] = date_;
    j["run"] = run_;
    j["command"] = command_;
    if (load_ >= 0) j["load"] = load_;
    const std::string line = j.dump() + "\n";
    std::FILE* f = std::fopen(path_.c_str(), "a");
    if (!f || std::fwrite(line.data(), 1, line.size(), f) != line.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "%s: cannot append to the results file %s\n", benchmark_.c_str(), path_.c_str());
      std::exit(1);
    }
  }

 private:
  static std::string utc_now() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
  }

  std::string benchmark_, path_, command_, date_, run_;
  double load_ = -1;
};

}  // namespace sparselm::bench
