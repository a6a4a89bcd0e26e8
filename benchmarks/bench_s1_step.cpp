// The S1 dynamic-sparse LM's training step at its large shapes (configs/recipes/s1-gpt2-size.json's
// model: hidden 1600, ff 6400, 16 heads x qkv 32, embedding 128, vocab 50257, sequence 256) with fewer layers: the
// block-sparse model (B = 16, s = 0.9) against the same model dense, in one process, alternating
// so that both see the same machine. One JSON line per variant, then the ratios. --precision bf16
// (or fp16) trains both with that compute type (docs/design/precision.md says which products it reaches).
//
//   ./build/benchmarks/bench_s1_step --layers 4 --batch 4 --seq 256 --steps 5 --threads 2 [--precision bf16]
//
// FLOPs per token: 6 x the parameters that take part in matmuls (the sparse model counts its
// active blocks; LayerNorm gains and biases are < 0.1 % and counted too) plus 12·L·(heads·qkv)·T for
// attention scores and values. flop_ceiling = dense FLOPs / sparse FLOPs: the speed-up a sparse
// step could reach if every sparse FLOP cost what a dense one does. Optimiser: Adam as in S1;
// no pattern update inside the timed steps (updates are every 100 steps in S1).
// --fusion-paired adds the sparse model's step with the fused feed-forward (ffn_fusion_mode::keep,
// the default) against the unfused one, alternating step by step on the same model: a last line
// with both medians and the median of the per-pair ratios unfused / fused. --ffn-fusion
// off|keep|recompute sets the mode of the sparse model's ordinary steps.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/peak.hpp"
#include "common/results.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

namespace {

struct result {
  double seconds = 0, flops_per_token = 0;
  std::size_t parameters = 0;
};

template <class Sparsity>
struct variant {
  using model_t = sparse_lm<float, Sparsity>;
  struct policies : default_policies {
    using optimizer = optim::adam<>;
  };
  model_t model;
  std::optional<trainer<model_t, policies>> t;  // built after model.init
  std::vector<std::int32_t> in, tg;
  std::size_t B, T, step = 0;

  variant(const sparse_lm_config& cfg, std::size_t B_, std::size_t T_, dtype compute)
      : model(cfg), in(B_ * T_), tg(B_ * T_), B(B_), T(T_) {
    model.init(1);
    t.emplace(model, trainer_options{.clip = clip_mode::none, .precision = compute},
              optim::adam<>(json{{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-2}}),
              optim::schedule(optim::constant_schedule(1e-4f)));
  }

  double run_step(std::size_t vocab) {
    const counter_rng rng(11);
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = std::int32_t(rng.below(step, 2 * i, vocab));
      tg[i] = std::int32_t(rng.below(step, 2 * i + 1, vocab));
    }
    ++step;
    std::vector<token_batch> micro{{in, tg, {}, B, T}};
    const step_metrics m = t->train_step(micro);
    return m.seconds;
  }
};

void print(const char* name, const result& r, std::size_t B, std::size_t T, int threads, double peak, double sparsity,
           dtype compute) {
  const double tps = double(B * T) / r.seconds;
  std::printf(
      "{\"impl\": \"sparselm\", \"model\": \"s1\", \"variant\": \"%s\", \"precision\": \"%s\", \"sparsity\": %.3f, "
      "\"batch\": %zu, \"seq\": %zu, "
      "\"threads\": %d, \"parameters\": %zu, \"step_seconds\": %.4f, \"tokens_per_second\": %.1f, "
      "\"model_gflops_per_s\": %.1f, \"fma_peak_gflops\": %.1f, \"mfu\": %.4f}\n",
      name, std::string(precision::name(compute)).c_str(), sparsity, B, T, threads, r.parameters, r.seconds, tps, tps * r.flops_per_token / 1e9, peak,
      tps * r.flops_per_token / 1e9 / peak);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::results out("bench_s1_step", argc, argv);
  std::string config = SPARSELM_SOURCE_DIR "/configs/recipes/s1-gpt2-size.json";
  std::size_t B = 4, T = 256, steps = 5, warmup = 1, layers = 4;
  int threads = 2;
  double sparsity = 0.9;
  std::string precision_name = "fp32";
  bool fusion_paired = false;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--config")) config = argv[++i];
    else if (arg("--layers")) layers = std::stoul(argv[++i]);
    else if (arg("--batch")) B = std::stoul(argv[++i]);
    else if (arg("--seq")) T = std::stoul(argv[++i]);
    else if (arg("--steps")) steps = std::stoul(argv[++i]);
    else if (arg("--warmup")) warmup = std::stoul(argv[++i]);
    else if (arg("--threads")) threads = std::stoi(argv[++i]);
    else if (arg("--sparsity")) sparsity = std::stod(argv[++i]);
    else if (arg("--precision")) precision_name = argv[++i];
    else if (arg("--ffn-fusion")) {
      const std::string m = argv[++i];
      SPARSELM_CHECK(m == "off" || m == "keep" || m == "recompute", "bench_s1_step: --ffn-fusion must be off, keep or recompute, not '", m, "'");
      ffn_fusion() = m == "off" ? ffn_fusion_mode::off : m == "keep" ? ffn_fusion_mode::keep : ffn_fusion_mode::recompute;
    } else if (std::strcmp(argv[i], "--fusion-paired") == 0) fusion_paired = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--config s1.json] [--layers 4] [--batch 4] [--seq 256] [--steps 5] [--warmup 1] "
                   "[--threads 2] [--sparsity 0.9] [--precision fp32|bf16|fp16] [--ffn-fusion off|keep|recompute] "
                   "[--fusion-paired] [--json results.jsonl]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    const dtype compute = precision::parse(precision_name, "bench_s1_step: --precision");
    json j = read_json_file(config);
    json m = j.contains("model") ? j["model"] : j;
    m["layers"] = layers;
    m["sparsity"] = sparsity;
    m["dropout"] = 0.0;
    m["block_size"] = 0;
    const auto dense_cfg = sparse_lm_config::from_json(m, config);
    m["block_size"] = 16;
    const auto sparse_cfg = sparse_lm_config::from_json(m, config);
    SPARSELM_CHECK(T <= dense_cfg.sequence_length, "bench_s1_step: --seq ", T, " exceeds sequence_length ",
                   dense_cfg.sequence_length);
    variant<dense> d(dense_cfg, B, T, compute);
    variant<block_sparse<16>> s(sparse_cfg, B, T, compute);
    const double attention = 12.0 * double(layers) * double(dense_cfg.attention_heads * dense_cfg.qkv_length) * double(T);
    result rd, rs;
    rd.parameters = d.model.num_parameters();
    rs.parameters = s.model.num_parameters();
    rd.flops_per_token = 6.0 * double(rd.parameters) + attention;
    rs.flops_per_token = 6.0 * double(rs.parameters) + attention;
    std::vector<double> td, ts;
    for (std::size_t k = 0; k < warmup + steps; ++k) {  // alternate: both see the same machine
      const double a = d.run_step(dense_cfg.vocab_size), b = s.run_step(dense_cfg.vocab_size);
      if (k >= warmup) td.push_back(a), ts.push_back(b);
    }
    // Fused against unfused feed-forward on the sparse model, step after step.
    std::vector<double> tf, tu, ratio;
    if (fusion_paired) {
      const ffn_fusion_mode mode = ffn_fusion().load();
      for (std::size_t k = 0; k < warmup + steps; ++k) {
        ffn_fusion() = ffn_fusion_mode::keep;
        const double a = s.run_step(dense_cfg.vocab_size);
        ffn_fusion() = ffn_fusion_mode::off;
        const double b = s.run_step(dense_cfg.vocab_size);
        if (k >= warmup) tf.push_back(a), tu.push_back(b), ratio.push_back(b / a);
      }
      ffn_fusion() = mode;
      std::sort(tf.begin(), tf.end());
      std::sort(tu.begin(), tu.end());
      std::sort(ratio.begin(), ratio.end());
    }
    std::sort(td.begin(), td.end());
    std::sort(ts.begin(), ts.end());
    rd.seconds = td[td.size() / 2];
    rs.seconds = ts[ts.size() / 2];
    const double peak = bench::measure_fma_peak_gflops(threads);
    print("dense", rd, B, T, threads, peak, 0.0, compute);
    print("block_sparse_16", rs, B, T, threads, peak, sparsity, compute);
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("{\"speedup\": %.2f, \"flop_ceiling\": %.2f, \"layers\": %zu, \"peak_rss_mb\": %.1f}\n",
                rd.seconds / rs.seconds, rd.flops_per_token / rs.flops_per_token, layers,
                double(ru.ru_maxrss) / 1024.0);
    out.add({{"config", config.substr(config.find_last_of('/') + 1)}, {"layers", layers}, {"batch", B}, {"seq", T},
             {"precision", std::string(precision::name(compute))}, {"block", 16}, {"sparsity", sparsity}},
            {{"speedup_vs_dense", rd.seconds / rs.seconds}, {"flop_ceiling", rd.flops_per_token / rs.flops_per_token},
             {"dense_step_seconds", rd.seconds}, {"sparse_step_seconds", rs.seconds},
             {"sparse_tokens_per_second", double(B * T) / rs.seconds}, {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0}},
            threads, peak);
    if (fusion_paired)
      std::printf("{\"fusion_paired\": true, \"fused_step_seconds\": %.4f, \"unfused_step_seconds\": %.4f, "
                  "\"unfused_over_fused\": %.3f}\n",
                  tf[tf.size() / 2], tu[tu.size() / 2], ratio[ratio.size() / 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_s1_step: %s\n", e.what());
    return 1;
  }
}
