// Text generation speed with and without the KV cache (models/generation.hpp): random-init GPT
// models, a fixed random prompt, greedy decoding (the model's cost, not the sampler's), no stop
// token. Prints a markdown table of medians over --runs runs (after one warm-up run).
//
//   flock /tmp/sparselm-cpu.lock ./build/benchmarks/bench_generate --threads 2 --prompt 32 --new 64
//
// tokens/s = new tokens / wall time of generate() (prefill included). "prefill ms" is one
// decoder::forward over the prompt; "decode ms/token" is (generate time − prefill) / (new − 1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/models/generation.hpp"
#include "sparselm/models/gpt.hpp"

using namespace sparselm;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct row {
  std::string model, path;
  double tokens_per_s = 0, prefill_ms = 0, decode_ms = 0;
};

void run(const std::string& name, const std::string& config, std::size_t prompt_len, std::size_t new_tokens,
         std::size_t runs, std::vector<row>& rows) {
  auto cfg = gpt_config::from_json(read_json_file(config), config);
  gpt<> model(cfg);
  model.init(1);
  std::vector<std::int32_t> prompt(prompt_len);
  counter_rng rng(3);
  for (std::size_t i = 0; i < prompt_len; ++i) prompt[i] = std::int32_t(rng.below(0, i, cfg.vocab_size));
  generation_options o;
  o.sampling.temperature = 0.0f;
  o.max_new_tokens = new_tokens;
  o.stop_token = -1;

  // Prefill alone (cached path).
  std::vector<double> prefill;
  {
    decoder<gpt<>> dec(model, 1);
    std::vector<float> logits(cfg.vocab_size);
    for (std::size_t r = 0; r <= runs; ++r) {
      dec.reset();
      const auto t0 = std::chrono::steady_clock::now();
      dec.forward(prompt, prompt_len, {logits.data(), 1, cfg.vocab_size});
      if (r) prefill.push_back(seconds_since(t0));
    }
  }
  std::vector<std::int32_t> reference;
  for (bool cache : {true, false}) {
    o.use_cache = cache;
    std::vector<double> t;
    for (std::size_t r = 0; r <= runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = generate(model, prompt, o);
      const double s = seconds_since(t0);
      if (r) t.push_back(s);
      if (reference.empty()) reference = out;
      if (out != reference) std::fprintf(stderr, "warning: %s: cached and uncached greedy tokens differ\n", name.c_str());
    }
    const double total = median(t), pf = median(prefill);
    row w{name, cache ? "KV cache" : "no cache", double(new_tokens) / total, 0, 0};
    if (cache) {
      w.prefill_ms = pf * 1e3;
      w.decode_ms = (total - pf) / double(new_tokens - 1) * 1e3;
    } else {
      w.decode_ms = total / double(new_tokens) * 1e3;
    }
    rows.push_back(w);
    std::fprintf(stderr, "%s %s: %.2f tokens/s (median of %zu)\n", name.c_str(), w.path.c_str(), w.tokens_per_s, runs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::size_t prompt_len = 32, new_tokens = 64, runs = 3;
  std::vector<std::pair<std::string, std::string>> models{
      {"gpt2-small", std::string(SPARSELM_SOURCE_DIR) + "/configs/gpt2-small.json"},
      {"gpt-mini", std::string(SPARSELM_SOURCE_DIR) + "/configs/gpt-mini.json"}};
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(next("--threads"));
    else if (!std::strcmp(argv[i], "--prompt")) prompt_len = std::stoul(next("--prompt"));
    else if (!std::strcmp(argv[i], "--new")) new_tokens = std::stoul(next("--new"));
    else if (!std::strcmp(argv[i], "--runs")) runs = std::stoul(next("--runs"));
    else if (!std::strcmp(argv[i], "--config")) {  // replaces the default pair of models
      static bool first = true;
      if (first) models.clear(), first = false;
      const std::string path = next("--config");
      std::string name = path.substr(path.find_last_of('/') + 1);
      if (name.size() > 5 && name.ends_with(".json")) name.resize(name.size() - 5);
      models.emplace_back(name, path);
    } else {
      std::fprintf(stderr,
                   "usage: bench_generate [--threads N] [--prompt T] [--new N] [--runs R] [--config file.json]...\n");
      return 2;
    }
  }
  if (prompt_len == 0 || new_tokens < 2 || runs == 0) {
    std::fprintf(stderr, "bench_generate: need --prompt >= 1, --new >= 2, --runs >= 1\n");
    return 2;
  }
  set_num_threads(threads);
  std::vector<row> rows;
  try {
    for (auto& [name, path] : models) run(name, path, prompt_len, new_tokens, runs, rows);
  } catch (const sparselm::error& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  std::printf("prompt %zu tokens, %zu new tokens (greedy), %d threads, median of %zu runs\n\n", prompt_len, new_tokens,
              threads, runs);
  std::printf("| model | path | tokens/s | prefill ms | decode ms/token | speed-up |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double base = (i % 2 == 0 && i + 1 < rows.size()) ? rows[i + 1].tokens_per_s : r.tokens_per_s;
    if (r.path == "KV cache")
      std::printf("| %s | %s | %.2f | %.1f | %.1f | %.1fx |\n", r.model.c_str(), r.path.c_str(), r.tokens_per_s,
                  r.prefill_ms, r.decode_ms, r.tokens_per_s / base);
    else
      std::printf("| %s | %s | %.2f | – | %.1f | 1.0x |\n", r.model.c_str(), r.path.c_str(), r.tokens_per_s,
                  r.decode_ms);
  }
  return 0;
}
