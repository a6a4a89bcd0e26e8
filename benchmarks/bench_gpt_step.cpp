// End-to-end GPT training step (forward, backward, global-norm clip, AdamW): tokens/s, MFU against
// the FMA peak measured in the same process, peak RSS. Prints one JSON line like the PyTorch peer
// (benchmarks/peers/torch_gpt_step.py); benchmarks/compare_gpt_step.py runs both. --precision bf16
// or fp16 trains with that compute type (trainer_options::precision); MFU stays against the fp32
// FMA peak, and the line also gives the bf16 dot-product peak when the build has AVX512-BF16.
// --micro-batches M splits the batch into M micro-batches of B/M rows (gradient accumulation);
// --pipeline-stages S runs them over S pipeline stages (trainer_options::pipeline; 1F1B unless
// --pipeline-schedule gpipe), each on threads/S threads, and the line adds the split, the bubble
// the schedule predicts and the one measured (median step). --fp32-activations keeps the bf16
// step's activations in fp32 (trainer_options::bf16_activations = false), for comparing memory.
// --ffn-fusion off|keep|recompute sets how a block-sparse model's feed-forwards run (ffn_fusion(),
// layers/feed_forward.hpp; keep by default); --fusion-paired alternates the fused (keep) and the
// unfused feed-forward step by step and prints a second line with both medians and the median of
// the per-pair ratios unfused / fused (the first line then reports the fused steps).
//
//   ./build/benchmarks/bench_gpt_step --config configs/gpt2-small.json --batch 8 --seq 128 --steps 5
//
// Model FLOPs per token: 6·(parameters − wpe) for the matmuls with the weights (forward 2, backward
// 4; the tied head counts once through wte) plus 12·L·C·T for attention scores and values over the
// full T×T (the PaLM convention; the tiled causal kernel skips key tiles right of each 64-row query
// block, so at T = 128 it computes 3/4 of those; at T = 64, one block, all of them).
// A block-sparse model counts its active blocks; "flop_ceiling" is the dense model's FLOPs per
// token over this model's: the speed-up over the dense step if every sparse FLOP cost what a dense
// one does (1 for a dense model; for GPT-2 small at s = 0.9 about 2.6, the tied head staying dense).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/peak.hpp"
#include "common/results.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/precompiled.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

// The trainer is the default one (trainer<Model>: AdamW, recompute chosen at run time), so the dense
// GPT's comes precompiled from sparselm::models (train/precompiled.hpp) like a downstream user's.
template <class Model>
void run(const std::string& config, std::size_t block, std::size_t B, std::size_t T, std::size_t steps, std::size_t warmup, int threads,
         double sparsity, dtype compute, bool bf16_activations, std::size_t M, const pipeline::plan& pipe,
         const bench::results& out, bool fusion_paired, bool recompute_blocks) {
  set_num_threads(threads);
  auto cfg = gpt_config::from_json(read_json_file(config), config);
  Model model(cfg, sparse_plan{.sparsity = sparsity, .block = block});
  model.init(1);
  trainer_options o;
  o.max_norm = 1.0f;
  o.dropout_seed = 7;
  o.precision = compute;
  o.bf16_activations = bf16_activations;
  o.accumulation = optim::grad_accumulation(json{{"steps", M}});
  o.pipeline = pipe;
  o.recompute = recompute_blocks ? recompute::blocks::name : recompute::none::name;
  SPARSELM_CHECK(M >= 1 && B % M == 0, "bench_gpt_step: --batch ", B, " is not a multiple of --micro-batches ", M);
  const std::size_t rows = B / M;
  trainer<Model> t(model, o, optim::adamw<>(json{{"weight_decay", 0.01}, {"eps", 1e-8}}),
                   optim::schedule(optim::constant_schedule(1e-4f)));
  std::vector<std::int32_t> ids(B * (T + 1));
  counter_rng rng(1);
  std::vector<double> times, bubbles, unfused_times, ratios;
  double loss = 0;
  const ffn_fusion_mode fusion = ffn_fusion().load();
  for (std::size_t s = 0; s < (fusion_paired ? 2 : 1) * (warmup + steps); ++s) {
    // --fusion-paired: even steps fused (keep), odd ones unfused.
    const bool unfused_step = fusion_paired && s % 2 == 1;
    if (fusion_paired) ffn_fusion() = unfused_step ? ffn_fusion_mode::off : ffn_fusion_mode::keep;
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(rng.below(s, i, cfg.vocab_size));
    std::vector<std::int32_t> in(B * T), tg(B * T);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t k = 0; k < T; ++k) {
        in[b * T + k] = ids[b * (T + 1) + k];
        tg[b * T + k] = ids[b * (T + 1) + k + 1];
      }
    std::vector<token_batch> micro;
    for (std::size_t k = 0; k < M; ++k)
      micro.push_back({std::span<const std::int32_t>(in).subspan(k * rows * T, rows * T),
                       std::span<const std::int32_t>(tg).subspan(k * rows * T, rows * T), {}, rows, T});
    const step_metrics m = t.train_step(micro);
    loss = m.loss.mean_loss();
    if (fusion_paired) {
      if (s / 2 < warmup) continue;
      if (unfused_step) {
        unfused_times.push_back(m.seconds);
        ratios.push_back(m.seconds / times.back());
        continue;
      }
    }
    if ((fusion_paired ? s / 2 : s) >= warmup) {
      times.push_back(m.seconds);
      bubbles.push_back(model.last_pipeline().measured_bubble);
    }
  }
  ffn_fusion() = fusion;
  std::sort(times.begin(), times.end());
  std::sort(bubbles.begin(), bubbles.end());
  const double med = times[times.size() / 2];
  const auto& rep = model.last_pipeline();
  std::string split = "[";
  for (std::size_t k = 0; k < rep.split.size(); ++k) split += (k ? ", " : "") + std::to_string(rep.split[k]);
  split += "]";
  const double wpe = double(cfg.n_positions * cfg.n_embd);
  const double flops_per_token = 6.0 * (double(model.num_parameters()) - wpe) +
                                 12.0 * double(cfg.n_layer) * double(cfg.n_embd) * double(T);
  // The dense model's parameters, from the config (checked against the model when it is dense).
  const double C = double(cfg.n_embd), H = double(cfg.hidden());
  const double dense_parameters = double(cfg.vocab_size) * C + wpe +
                                  double(cfg.n_layer) * (4.0 * C * C + 2.0 * C * H + 9.0 * C + H) + 2.0 * C;
  SPARSELM_CHECK(Model::sparsity::is_sparse || dense_parameters == double(model.num_parameters()),
                 "bench_gpt_step: the dense parameter count ", dense_parameters, " differs from the model's ",
                 model.num_parameters());
  const double dense_flops_per_token = 6.0 * (dense_parameters - wpe) +
                                       12.0 * double(cfg.n_layer) * double(cfg.n_embd) * double(T);
  const double tps = double(B * T) / med;
  const double peak = bench::measure_fma_peak_gflops(threads);
  const double bf16_peak = bench::measure_bf16_dot_peak_gflops(threads);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf(
      "{\"impl\": \"sparselm\", \"precision\": \"%s\", \"sparsity\": %.3f, \"block\": %zu, \"batch\": %zu, \"seq\": %zu, \"threads\": %d, \"recompute\": %s, "
      "\"step_seconds\": %.4f, \"tokens_per_second\": %.1f, \"model_gflops_per_s\": %.1f, \"fma_peak_gflops\": %.1f, "
      "\"mfu\": %.4f, \"bf16_peak_gflops\": %.1f, \"peak_rss_mb\": %.1f, \"loss\": %.4f, \"micro_batches\": %zu, "
      "\"pipeline_stages\": %zu, \"pipeline_schedule\": \"%s\", \"split\": %s, \"predicted_bubble\": %.4f, "
      "\"measured_bubble\": %.4f, \"bf16_activations\": %s, \"flop_ceiling\": %.3f}\n",
      std::string(precision::name(compute)).c_str(), Model::sparsity::is_sparse ? sparsity : 0.0, block, B, T, threads,
      recompute_blocks ? "true" : "false", med, tps, tps * flops_per_token / 1e9, peak,
      tps * flops_per_token / 1e9 / peak, bf16_peak, double(ru.ru_maxrss) / 1024.0, loss, M, pipe.stages,
      pipeline::name(pipe.schedule), split.c_str(), pipe.stages > 1 ? pipeline::predicted_bubble(pipe.stages, M) : 0.0,
      pipe.stages > 1 ? bubbles[bubbles.size() / 2] : 0.0, bf16_activations ? "true" : "false",
      dense_flops_per_token / flops_per_token);
  out.add({{"config", config.substr(config.find_last_of('/') + 1)}, {"batch", B}, {"seq", T},
           {"precision", std::string(precision::name(compute))}, {"block", block},
           {"sparsity", Model::sparsity::is_sparse ? sparsity : 0.0}, {"recompute", o.recompute},
           {"micro_batches", M}, {"pipeline_stages", pipe.stages}, {"bf16_activations", bf16_activations}},
          {{"tokens_per_second", tps}, {"step_seconds", med}, {"mfu", tps * flops_per_token / 1e9 / peak},
           {"model_gflops_per_s", tps * flops_per_token / 1e9}, {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
           {"flop_ceiling", dense_flops_per_token / flops_per_token}, {"bf16_peak_gflops", bf16_peak}, {"loss", loss}},
          threads, peak);
  if (fusion_paired) {
    std::sort(unfused_times.begin(), unfused_times.end());
    std::sort(ratios.begin(), ratios.end());
    std::printf("{\"fusion_paired\": true, \"fused_step_seconds\": %.4f, \"unfused_step_seconds\": %.4f, "
                "\"unfused_over_fused\": %.3f}\n",
                med, unfused_times[unfused_times.size() / 2], ratios[ratios.size() / 2]);
  }
}

int main(int argc, char** argv) {
  const bench::results out("bench_gpt_step", argc, argv);
  std::string config = SPARSELM_SOURCE_DIR "/configs/gpt2-small.json";
  std::size_t B = 8, T = 128, steps = 5, warmup = 1;
  int threads = 2;
  bool recompute_blocks = false;
  bool bf16_activations = true;
  std::size_t block = 0;
  double sparsity = 0.9;
  std::string precision_name = "fp32";
  std::size_t micro = 1;
  pipeline::plan pipe;
  std::string schedule = "1f1b";
  bool fusion_paired = false;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--config")) config = argv[++i];
    else if (arg("--batch")) B = std::stoul(argv[++i]);
    else if (arg("--seq")) T = std::stoul(argv[++i]);
    else if (arg("--steps")) steps = std::stoul(argv[++i]);
    else if (arg("--warmup")) warmup = std::stoul(argv[++i]);
    else if (arg("--threads")) threads = std::stoi(argv[++i]);
    else if (arg("--block")) block = std::stoul(argv[++i]);
    else if (arg("--sparsity")) sparsity = std::stod(argv[++i]);
    else if (arg("--precision")) precision_name = argv[++i];
    else if (arg("--micro-batches")) micro = std::stoul(argv[++i]);
    else if (arg("--pipeline-stages")) pipe.stages = std::stoul(argv[++i]);
    else if (arg("--pipeline-schedule")) schedule = argv[++i];
    else if (std::strcmp(argv[i], "--recompute") == 0) recompute_blocks = true;
    else if (std::strcmp(argv[i], "--fp32-activations") == 0) bf16_activations = false;
    else if (arg("--ffn-fusion")) {
      const std::string m = argv[++i];
      if (m != "off" && m != "keep" && m != "recompute") {
        std::fprintf(stderr, "bench_gpt_step: --ffn-fusion must be off, keep or recompute, not '%s'\n", m.c_str());
        return 2;
      }
      ffn_fusion() = m == "off" ? ffn_fusion_mode::off : m == "keep" ? ffn_fusion_mode::keep : ffn_fusion_mode::recompute;
    } else if (std::strcmp(argv[i], "--fusion-paired") == 0) fusion_paired = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--config gpt.json] [--batch 8] [--seq 128] [--steps 5] [--warmup 1] [--threads 2] "
                   "[--recompute] [--block 0|1|4|8|16] [--sparsity 0.9] [--precision fp32|bf16|fp16] [--micro-batches 1] "
                   "[--pipeline-stages 1] [--pipeline-schedule 1f1b|gpipe] [--fp32-activations] "
                   "[--ffn-fusion off|keep|recompute] [--fusion-paired] [--json results.jsonl]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const dtype compute = precision::parse(precision_name, "bench_gpt_step: --precision");
    pipe.schedule = pipeline::parse_order(schedule, "bench_gpt_step: --pipeline-schedule");
    registry::with_sparsity(block, [&]<class Sparsity>() {
      run<gpt<float, Sparsity>>(config, block, B, T, steps, warmup, threads, sparsity, compute, bf16_activations, micro,
                                pipe, out, fusion_paired, recompute_blocks);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt_step: %s\n", e.what());
    return 1;
  }
}
