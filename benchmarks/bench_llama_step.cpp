// End-to-end LLaMA-family training step (forward, backward, global-norm clip, AdamW) beside
// bench_gpt_step: tokens/s, model GFLOP/s and MFU against the FMA peak measured in the same
// process, peak RSS; one JSON line. Dense, or block-sparse projections (--block B --sparsity s);
// --precision bf16 trains with bf16 compute. --layers overrides num_hidden_layers, so the shapes
// of a 1B-class model (configs/llama-1b.json) can be timed on a small machine.
//
//   ./build/benchmarks/bench_llama_step --config configs/llama-1b.json --layers 2 --batch 2 --seq 128 --steps 3
//
// Model FLOPs per token: 6·(parameters that take part in matmuls: every weight, the untied head's
// table; the embedding lookup of an untied model is free, a tied table counts once through the head)
// plus 12·L·(H·D)·T for attention scores and values over the full T×T (the PaLM convention).
// A block-sparse model counts its active blocks.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/peak.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

namespace {

struct options {
  std::string config = SPARSELM_SOURCE_DIR "/configs/llama-1b.json";
  std::size_t layers = 2, batch = 2, seq = 128, steps = 3, warmup = 1, block = 0;
  int threads = 2;
  double sparsity = 0.9;
  std::string precision = "fp32";
};

template <class Sparsity>
void run(const options& op, const llama_config& cfg, dtype compute) {
  using Model = llama<float, Sparsity>;
  Model model(cfg, sparse_plan{.sparsity = op.sparsity, .block = op.block});
  model.init(1);
  trainer_options o;
  o.max_norm = 1.0f;
  o.precision = compute;
  trainer<Model> t(model, o, optim::adamw<>(json{{"weight_decay", 0.01}, {"eps", 1e-8}}),
                   optim::schedule(optim::constant_schedule(1e-4f)));
  const std::size_t B = op.batch, T = op.seq;
  std::vector<std::int32_t> in(B * T), tg(B * T);
  const counter_rng rng(3);
  std::vector<double> times;
  double loss = 0;
  for (std::size_t s = 0; s < op.warmup + op.steps; ++s) {
    for (std::size_t i = 0; i < B * T; ++i) {
      in[i] = std::int32_t(rng.below(s, 2 * i, cfg.vocab_size));
      tg[i] = std::int32_t(rng.below(s, 2 * i + 1, cfg.vocab_size));
    }
    const token_batch b{in, tg, {}, B, T};
    const step_metrics m = t.train_step(std::span<const token_batch>(&b, 1));
    loss = m.loss.mean_loss();
    if (s >= op.warmup) times.push_back(m.seconds);
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const double lookup = cfg.tie_word_embeddings ? 0.0 : double(cfg.vocab_size * cfg.hidden_size);
  const double hd = double(cfg.num_attention_heads * cfg.head_width());
  const double flops_per_token =
      6.0 * (double(model.num_parameters()) - lookup) + 12.0 * double(cfg.num_hidden_layers) * hd * double(T);
  const double tps = double(B * T) / med;
  const double peak = bench::measure_fma_peak_gflops(op.threads);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"impl\": \"sparselm\", \"model\": \"llama\", \"precision\": \"%s\", \"layers\": %zu, \"hidden\": %zu, "
      "\"heads\": %zu, \"kv_heads\": %zu, \"block\": %zu, \"sparsity\": %.3f, \"batch\": %zu, \"seq\": %zu, "
      "\"threads\": %d, \"parameters\": %zu, \"step_seconds\": %.4f, \"tokens_per_second\": %.1f, "
      "\"model_gflops_per_s\": %.1f, \"fma_peak_gflops\": %.1f, \"mfu\": %.4f, \"peak_rss_mb\": %.1f, \"loss\": %.4f}\n",
      op.precision.c_str(), cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.kv_heads(),
      op.block, Model::sparsity::is_sparse ? op.sparsity : 0.0, B, T, op.threads, model.num_parameters(),
      med, tps, tps * flops_per_token / 1e9, peak, tps * flops_per_token / 1e9 / peak, double(ru.ru_maxrss) / 1024.0,
      loss);
}

}  // namespace

int main(int argc, char** argv) {
  options op;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--config")) op.config = argv[++i];
    else if (arg("--layers")) op.layers = std::stoul(argv[++i]);
    else if (arg("--batch")) op.batch = std::stoul(argv[++i]);
    else if (arg("--seq")) op.seq = std::stoul(argv[++i]);
    else if (arg("--steps")) op.steps = std::stoul(argv[++i]);
    else if (arg("--warmup")) op.warmup = std::stoul(argv[++i]);
    else if (arg("--threads")) op.threads = std::stoi(argv[++i]);
    else if (arg("--block")) op.block = std::stoul(argv[++i]);
    else if (arg("--sparsity")) op.sparsity = std::stod(argv[++i]);
    else if (arg("--precision")) op.precision = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--config llama.json] [--layers 2] [--batch 2] [--seq 128] [--steps 3] [--warmup 1] "
                   "[--threads 2] [--block 0|1|4|8|16] [--sparsity 0.9] [--precision fp32|bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    set_num_threads(op.threads);
    const dtype compute = precision::parse(op.precision, "bench_llama_step: --precision");
    json j = read_json_file(op.config);
    if (op.layers) j["num_hidden_layers"] = op.layers;
    const auto cfg = llama_config::from_json(j, op.config);
    SPARSELM_CHECK(op.seq <= cfg.max_position_embeddings, "bench_llama_step: --seq ", op.seq,
                   " exceeds max_position_embeddings ", cfg.max_position_embeddings);
    registry::with_sparsity(op.block, [&]<class Sparsity>() { run<Sparsity>(op, cfg, compute); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_llama_step: %s\n", e.what());
    return 1;
  }
}
