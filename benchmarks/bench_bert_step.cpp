// End-to-end BERT pre-training step (MLM + NSP forward, backward, global-norm clip, AdamW):
// samples/s, MFU against the FMA peak measured in the same process, peak RSS. Prints one JSON line
// like the PyTorch peer (benchmarks/peers/torch_bert_step.py); benchmarks/compare_bert_step.py
// runs both.
//
//   ./build/benchmarks/bench_bert_step --config configs/bert-base.json --batch 8 --seq 128 --steps 3
//
// Every sequence is full length (no padding) with `--masked` (20) MLM positions and an NSP label,
// as in phase-1 pre-training data. Model FLOPs per step: 6·B·T·(encoder weights) + 12·L·C·T·B for
// attention scores and values, + 6·B·M·(C·C + C·V) for the MLM transform and decoder at the M
// masked positions, + 6·B·(C·C + 2C) for pooler and NSP classifier.
//
// `--block B --sparsity s` makes the encoder's projections block-sparse (uniform s, random
// patterns, no updates): the same model FLOPs are reported (so "mfu" is the dense-equivalent rate),
// and "flop_ceiling" is the dense model's FLOPs over the sparse one's (the encoder's projections
// counted at their active blocks), the speed-up over the dense step if every FLOP ran at one rate.
// `--precision bf16|fp16` trains with that compute type (trainer_options::precision, docs/design/precision.md);
// "mfu" stays against the fp32 FMA peak.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/peak.hpp"
#include "common/results.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

int main(int argc, char** argv) {
  const bench::results out("bench_bert_step", argc, argv);
  std::string config = SPARSELM_SOURCE_DIR "/configs/bert-base.json";
  std::size_t B = 8, T = 128, M = 20, steps = 3, warmup = 1;
  int threads = 2;
  std::size_t block = 0;
  double sparsity = 0.9;
  std::string precision_name = "fp32";
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--config"))
      config = argv[++i];
    else if (arg("--batch"))
      B = std::stoul(argv[++i]);
    else if (arg("--seq"))
      T = std::stoul(argv[++i]);
    else if (arg("--masked"))
      M = std::stoul(argv[++i]);
    else if (arg("--steps"))
      steps = std::stoul(argv[++i]);
    else if (arg("--warmup"))
      warmup = std::stoul(argv[++i]);
    else if (arg("--threads"))
      threads = std::stoi(argv[++i]);
    else if (arg("--block"))
      block = std::stoul(argv[++i]);
    else if (arg("--sparsity"))
      sparsity = std::stod(argv[++i]);
    else if (arg("--precision"))
      precision_name = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--config bert.json] [--batch 8] [--seq 128] [--masked 20] [--steps 3] "
                   "[--warmup 1] [--threads 2] [--block 16 --sparsity 0.9] [--precision fp32|bf16|fp16]\n"
                   "       [--json results.jsonl]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    auto cfg = bert_config::from_json(read_json_file(config), config);
    SPARSELM_CHECK(M <= T && T >= 2, "bench_bert_step: --masked ", M, " must be at most --seq ", T);
    const dtype compute = precision::parse(precision_name, "bench_bert_step: --precision");
    SPARSELM_CHECK(sparsity >= 0.0 && sparsity < 1.0, "bench_bert_step: --sparsity ", sparsity, " is not in [0, 1)");
    return registry::with_sparsity(
        block,
        [&]<class S>() -> int {
          bert<float, S> model(cfg, sparse_plan{.sparsity = sparsity, .block = block});
          model.init(1);
          trainer_options o;
          o.max_norm = 1.0f;
          o.dropout_seed = 7;
          o.precision = compute;
          trainer<bert<float, S>> t(model, o, optim::adamw<>(json{{"weight_decay", 0.01}, {"eps", 1e-6}}),
                                    optim::schedule(optim::constant_schedule(1e-4f)));
          std::vector<std::int32_t> ids(B * T), types(B * T), lengths(B, std::int32_t(T)), pos(B * M), labels(B * M),
              nsp(B);
          counter_rng rng(1);
          std::vector<double> times;
          double loss = 0;
          for (std::size_t s = 0; s < warmup + steps; ++s) {
            for (std::size_t i = 0; i < ids.size(); ++i) {
              ids[i] = std::int32_t(rng.below(4 * s, i, cfg.vocab_size));
              types[i] = (i % T) >= T / 2 ? 1 : 0;
            }
            for (std::size_t b = 0; b < B; ++b) {
              for (std::size_t k = 0; k < M; ++k) {  // M distinct positions after [CLS]: a stride through the sequence
                pos[b * M + k] = std::int32_t(1 + (k * (T - 1)) / M);
                labels[b * M + k] = std::int32_t(rng.below(4 * s + 1, b * M + k, cfg.vocab_size));
              }
              nsp[b] = std::int32_t(rng.below(4 * s + 2, b, 2));
            }
            const bert_batch batch{ids, types, lengths, pos, labels, nsp, B, T};
            const step_metrics m = t.train_step(std::span<const bert_batch>(&batch, 1));
            loss = m.loss.mean_loss();
            if (s >= warmup) times.push_back(m.seconds);
          }
          std::sort(times.begin(), times.end());
          const double med = times[times.size() / 2];
          const double C = double(cfg.hidden_size), V = double(cfg.vocab_size), L = double(cfg.num_hidden_layers),
                       F = double(cfg.intermediate_size);
          const double encoder_weights = L * (4 * C * C + 2 * C * F);
          const double flops = 6.0 * double(B * T) * encoder_weights + 12.0 * L * C * double(T) * double(B * T) +
                               6.0 * double(B * M) * (C * C + C * V) + 6.0 * double(B) * (C * C + 2 * C);
          double sparse_flops = flops;  // the encoder's projections at their active blocks
          if constexpr (S::is_sparse) {
            double active = 0;
            for (const auto& w : model.sparse_weights()) active += double(w.values.size());
            sparse_flops = flops - 6.0 * double(B * T) * (encoder_weights - active);
          }
          const double peak = bench::measure_fma_peak_gflops(threads);
          rusage ru{};
          getrusage(RUSAGE_SELF, &ru);
          std::printf(
              "{\"impl\": \"sparselm\", \"precision\": \"%s\", \"block\": %zu, \"sparsity\": %.3f, "
              "\"flop_ceiling\": %.3f, "
              "\"batch\": %zu, \"seq\": %zu, \"masked\": %zu, \"threads\": %d, "
              "\"step_seconds\": %.4f, \"samples_per_second\": %.3f, \"model_gflops_per_s\": %.1f, "
              "\"fma_peak_gflops\": %.1f, \"mfu\": %.4f, \"peak_rss_mb\": %.1f, \"loss\": %.4f}\n",
              std::string(precision::name(compute)).c_str(), block, S::is_sparse ? sparsity : 0.0, flops / sparse_flops,
              B, T, M, threads, med, double(B) / med, flops / med / 1e9, peak, flops / med / 1e9 / peak,
              double(ru.ru_maxrss) / 1024.0, loss);
          out.add({{"config", config.substr(config.find_last_of('/') + 1)}, {"batch", B}, {"seq", T}, {"masked", M},
                   {"precision", std::string(precision::name(compute))}, {"block", block},
                   {"sparsity", S::is_sparse ? sparsity : 0.0}},
                  {{"samples_per_second", double(B) / med}, {"step_seconds", med}, {"mfu", flops / med / 1e9 / peak},
                   {"model_gflops_per_s", flops / med / 1e9}, {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
                   {"flop_ceiling", flops / sparse_flops}, {"loss", loss}},
                  threads, peak);
          return 0;
        },
        "--block");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bert_step: %s\n", e.what());
    return 1;
  }
}
