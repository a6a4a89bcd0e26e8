// Does dynamic sparsity learn? Trains four GPTs on the same token files for the same number of steps,
// with the same data order, optimiser and schedule, and reports the held-out loss of each:
//
//   dynamic      projections block_sparse<16> at sparsity s, pattern pruned and regrown (docs/sparsity_algorithm.md)
//   static       the same model and initial pattern, never updated
//   dense-flops  dense, projection width chosen so its projection FLOPs match the sparse models'
//   dense-width  dense, the same width as the sparse models (1/density times the projection FLOPs)
//
//   ./build/examples/sparsity_study --train runs/data/train.tok --valid runs/data/valid.tok
//       --model configs/gpt-mini.json --steps 800 --eval-every 100 --out runs/study
//
// docs/sparsity.md ("Does it learn?") has the results on the bundled corpus and the commands to
// encode other text and rerun.
//
// Writes <out>/<variant>.jsonl (JSON-lines metrics, plottable with scripts/plot_metrics.py) and
// <out>/summary.json; prints a table. The embeddings, the tied head, layer norms and attention
// scores stay dense in every variant; only the four projections per block are sparse.
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/run_config.hpp"

namespace fs = std::filesystem;
using namespace sparselm;

namespace {

constexpr std::size_t block = 16;

struct study_options {
  std::size_t steps = 600, batch = 8, seq = 128, eval_every = 100, eval_batches = 0;
  double sparsity = 0.9, lr = 1.5e-3, prune_ratio = 0.3;
  std::size_t update_period = 50;
  std::string regrow = "rigl";
  std::uint64_t seed = 1234;
};

// Multiply-adds per token in the four projections of one block (fused QKV, attention output,
// the two feed-forward matrices), counting only stored weights.
double projection_macs(const gpt_config& c, double density) {
  const double d = double(c.n_embd), h = double(c.hidden());
  return density * (d * 3 * d + d * d + d * h + h * d) * double(c.n_layer);
}

// Multiply-adds per token of the forward pass outside the projections: the tied head and the
// attention scores/values at sequence length T (averaged over causal positions).
double other_macs(const gpt_config& c, std::size_t T) {
  return double(c.n_embd) * double(c.vocab_size) + double(c.n_layer) * 2.0 * double(c.n_embd) * double(T + 1) / 2.0;
}

struct policies : default_policies {
  using optimizer = optim::adamw<float>;
};

struct variant_result {
  std::string name;
  std::size_t width = 0;
  double density = 1.0;
  double proj_macs = 0, total_macs = 0;
  double valid_loss = 0, valid_ppl = 0, train_seconds = 0;
  std::size_t params = 0;
};

template <class Model>
variant_result train_variant(const std::string& name, Model& model, const gpt_config& mcfg, double density,
                             const study_options& so, bool dynamic, data::token_file& train_file,
                             data::token_file& valid_file, const fs::path& out) {
  data::lm_sampler sampler(train_file, {.batch_size = so.batch,
                                        .windows = {.seq_len = so.seq},
                                        .order = data::lm_order::shuffled,
                                        .seed = so.seed});
  data::lm_eval_pass valid(valid_file, so.batch, data::lm_window_options{.seq_len = so.seq});
  json opt = {{"type", "adamw"}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}};
  json sched = {{"type", "warmup_cosine"}, {"max_lr", so.lr},          {"warmup_steps", so.steps / 20},
                {"min_lr", so.lr / 10},    {"total_steps", so.steps}};
  trainer_options to;
  to.clip = clip_mode::global_norm;
  to.max_norm = 1.0;
  to.dropout_seed = so.seed;
  trainer<Model, policies> t(model, to, optim::adamw<float>(opt), optim::make_schedule(sched));
  metrics_log log(out / (name + ".jsonl"), /*truncate=*/true);
  lm_loop_hooks hooks;
  hooks.message = [&](const std::string& s) { std::fprintf(stderr, "[%s] %s\n", name.c_str(), s.c_str()); };
  std::optional<dynamic_sparsity<Model, trainer<Model, policies>>> ds;
  if (dynamic) {
    sparse::update_config uc;
    uc.schedule.prune_ratio = so.prune_ratio;
    uc.schedule.update_period = so.update_period;
    uc.schedule.total_steps = so.steps;
    uc.regrow = sparse::parse_regrow_method(so.regrow);
    ds.emplace(model, t, uc, so.seed + 7);
    hooks.extra_metrics = [&](std::size_t) { return ds->take_metrics(); };
  }
  lm_loop_options lo{.steps = so.steps, .eval_every = so.eval_every, .eval_batches = so.eval_batches, .log_every = 10};
  auto r = run_lm_training(t, sampler, &valid, lo, log, hooks);
  variant_result v;
  v.name = name;
  v.width = mcfg.n_embd;
  v.density = density;
  v.proj_macs = projection_macs(mcfg, density);
  v.total_macs = v.proj_macs + other_macs(mcfg, so.seq);
  v.valid_loss = r.last_eval.mean_loss();
  v.valid_ppl = r.last_eval.perplexity();
  v.train_seconds = r.train_seconds;
  v.params = model.num_parameters();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("sparsity_study", [&]() -> int {
    CLI::App app{
        "Dynamic sparse vs static sparse vs dense (same FLOPs) vs dense (same width) GPT on the same data.\n"
        "Sparse variants use block_sparse<16> projections; everything else is shared."};
    std::string train_path, valid_path, model_path = SPARSELM_SOURCE_DIR "/configs/gpt-mini.json", out = "runs/study";
    std::vector<std::string> variants{"dynamic", "static", "dense-flops", "dense-width"};
    study_options so;
    int threads = 0;
    app.add_option("--train", train_path, "Training token file (encode_dataset)")->required();
    app.add_option("--valid", valid_path, "Validation token file")->required();
    app.add_option("--model", model_path, "GPT model config JSON (the width of the sparse and dense-width variants)")
        ->capture_default_str();
    app.add_option("--variants", variants, "Which variants to train")
        ->delimiter(',')
        ->check(CLI::IsMember({"dynamic", "static", "dense-flops", "dense-width"}))
        ->capture_default_str();
    app.add_option("--steps", so.steps, "Optimiser steps per variant")
        ->check(examples::at_most(limits::steps))
        ->capture_default_str();
    app.add_option("--batch-size", so.batch, "Sequences per step")
        ->check(examples::at_most(limits::batch))
        ->capture_default_str();
    app.add_option("--seq-len", so.seq, "Tokens per sequence")
        ->check(examples::at_most(limits::positions))
        ->capture_default_str();
    app.add_option("--lr", so.lr, "Peak learning rate (warmup 5 %, cosine to lr/10)")->capture_default_str();
    app.add_option("--sparsity", so.sparsity, "Fraction of zero blocks in each projection")
        ->check(CLI::Range(0.0, 0.999))
        ->capture_default_str();
    app.add_option("--prune-ratio", so.prune_ratio, "Fraction of active blocks pruned at the first update")
        ->capture_default_str();
    app.add_option("--update-period", so.update_period, "Steps between pattern updates")->capture_default_str();
    app.add_option("--regrow", so.regrow, "Regrowth: rigl or random")
        ->check(CLI::IsMember({"rigl", "random"}))
        ->capture_default_str();
    app.add_option("--eval-every", so.eval_every, "Evaluate every N steps")->capture_default_str();
    app.add_option("--eval-batches", so.eval_batches, "Validation batches per evaluation (0: all)")
        ->capture_default_str();
    app.add_option("--seed", so.seed, "Seed of initialisation, pattern and data order")->capture_default_str();
    app.add_option("--threads", threads, "Threads (0: all cores)")
        ->check(CLI::Range(0, int(limits::threads)))
        ->capture_default_str();
    app.add_option("-o,--out", out, "Output directory")->capture_default_str();
    if (auto status = examples::parse(app, argc, argv)) return *status;

    if (threads > 0) set_num_threads(threads);
    const json model_json = read_json_file(model_path);
    check_model_limits(model_json, model_path);
    const auto base = gpt_config::from_json(model_json, model_path);
    SPARSELM_CHECK(so.seq <= base.n_positions, model_path, ": --seq-len ", so.seq, " exceeds n_positions ",
                   base.n_positions);
    SPARSELM_CHECK(base.n_embd % block == 0 && base.hidden() % block == 0, model_path, ": n_embd ", base.n_embd,
                   " and the feed-forward width ", base.hidden(), " must be multiples of the block size ", block);
    data::token_file train_file(train_path), valid_file(valid_path);
    SPARSELM_CHECK(train_file.vocab_size() <= base.vocab_size, train_path, ": vocabulary ", train_file.vocab_size(),
                   " exceeds the model's ", base.vocab_size);
    fs::create_directories(out);

    // Dense of the same projection FLOPs: width scaled by sqrt(density), rounded to a multiple of
    // the head count (every projection is quadratic in the width).
    gpt_config flops_cfg = base;
    {
      const double w = double(base.n_embd) * std::sqrt(1.0 - so.sparsity);
      const std::size_t h = base.n_head;
      flops_cfg.n_embd = std::max<std::size_t>(h, std::size_t(std::llround(w / double(h))) * h);
      if (base.n_inner) flops_cfg.n_inner = base.n_inner * flops_cfg.n_embd / base.n_embd;
    }

    std::vector<variant_result> results;
    const double unigram = unigram_perplexity(train_file, valid_file, base.vocab_size);
    std::fprintf(stderr, "unigram baseline: validation perplexity %.1f (loss %.4f)\n", unigram, std::log(unigram));
    for (const auto& v : variants) {
      std::fprintf(stderr, "== %s\n", v.c_str());
      if (v == "dynamic" || v == "static") {
        sparse_plan plan;
        plan.sparsity = so.sparsity;
        gpt<float, block_sparse<block>> model(base, plan);
        model.init(so.seed);
        double nnz = 0, all = 0;
        for (auto& w : model.sparse_weights()) {
          nnz += double(w.pattern->nnz());
          all += double(w.pattern->rows_b * w.pattern->cols_b);
        }
        results.push_back(train_variant(v, model, base, nnz / all, so, v == "dynamic", train_file, valid_file, out));
      } else {
        const gpt_config& c = v == "dense-flops" ? flops_cfg : base;
        gpt<> model(c);
        model.init(so.seed);
        results.push_back(train_variant(v, model, c, 1.0, so, false, train_file, valid_file, out));
      }
    }

    json summary = {{"steps", so.steps},
                    {"batch_size", so.batch},
                    {"seq_len", so.seq},
                    {"sparsity", so.sparsity},
                    {"block", block},
                    {"regrow", so.regrow},
                    {"prune_ratio", so.prune_ratio},
                    {"update_period", so.update_period},
                    {"unigram_perplexity", unigram},
                    {"variants", json::array()}};
    std::printf("%-12s %6s %8s %10s %14s %14s %10s %10s %8s\n", "variant", "width", "density", "params", "proj MAC/tok",
                "total MAC/tok", "val loss", "val ppl", "train s");
    for (const auto& r : results) {
      std::printf("%-12s %6zu %8.3f %10zu %14.3g %14.3g %10.4f %10.2f %8.0f\n", r.name.c_str(), r.width, r.density,
                  r.params, r.proj_macs, r.total_macs, r.valid_loss, r.valid_ppl, r.train_seconds);
      summary["variants"].push_back({{"name", r.name},
                                     {"width", r.width},
                                     {"density", r.density},
                                     {"parameters", r.params},
                                     {"projection_macs_per_token", r.proj_macs},
                                     {"total_macs_per_token", r.total_macs},
                                     {"valid_loss", r.valid_loss},
                                     {"valid_perplexity", r.valid_ppl},
                                     {"train_seconds", r.train_seconds}});
    }
    std::ofstream(fs::path(out) / "summary.json") << summary.dump(2) << "\n";
    return 0;
  });
}
