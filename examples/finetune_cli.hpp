#pragma once
// Options and set-up shared by the fine-tuning programs (bert_classify, bert_squad): the model
// config (--config, or the --init-from checkpoint's), AdamW without bias correction (ε 1e-6,
// weight decay not on norms and biases) and the linear schedule (warm-up, then linear decay),
// the run directory and its checkpoints (train/finetune_job.hpp). Under mpirun (examples/replicas.hpp)
// the trainer is data parallel: --batch-size examples per rank, the global batch P times that.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/schedules.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/sparse/magnitude.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/finetune_job.hpp"
#include "sparselm/train/trainer.hpp"

namespace examples {

struct finetune_cli {
  std::string config;  // empty: the --init-from checkpoint's
  std::string precision = "fp32";  // --precision: compute type of the dense GEMMs
  std::string slots = "float";     // --slots: storage type of AdamW's m and v
  sparselm::finetune_job_options job;
  double lr = 5e-5, warmup_frac = 0.1, weight_decay = 0.01, max_norm = 1.0, epochs = 2.0;
  std::optional<double> dropout;
  int threads = 0;
  std::size_t accumulation = 1;  // --accumulation: micro-batches per step
  bool shard_optimizer = false;
  std::size_t prune_block = 0;  // --prune-block: magnitude-prune the dense checkpoint into this block size
  double prune_sparsity = 0.9;
  std::size_t update_period = 0;  // --update-period: prune and regrow the encoder's patterns (0: fixed)
  double prune_ratio = 0.3;       // --prune-ratio: fraction of the active blocks an update replaces at first
  std::string regrow = "rigl";    // --regrow: rigl (largest dense gradient) or random
  bool pruning = false;  // set by with_encoder_sparsity: a fresh run pruning --init-from (start_pruned)

  void add(CLI::App& app) {
    app.add_option("-c,--config", config,
                   "BERT config (HF config.json keys; default: the --init-from checkpoint's, else bert-tiny)");
    app.add_option("--init-from", job.init_from,
                   "Start from this checkpoint's weights: ours (e.g. a bert_pretrain run) or a HuggingFace BERT "
                   "directory (config.json + model.safetensors)");
    app.add_option("--out", job.out, "Run directory")->capture_default_str();
    app.add_flag("--resume", job.resume, "Continue the run in --out from its newest checkpoint");
    app.add_flag("--overwrite", job.overwrite,
                 "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app.add_option("--epochs", epochs, "Passes over the training examples (the steps follow from it)")
        ->check(CLI::Range(0.0, 1000.0))
        ->capture_default_str();
    app.add_option("--steps", job.steps, "Optimiser steps in total (overrides --epochs)")
        ->check(CLI::Range(1ul, 1ul << 40));
    app.add_option("--batch-size", job.batch_size, "Sequences per micro-batch (per rank under mpirun)")
        ->check(CLI::Range(1ul, 1ul << 16))
        ->capture_default_str();
    app.add_option("--accumulation", accumulation, "Micro-batches per optimiser step (gradient accumulation)")
        ->check(CLI::Range(1ul, sparselm::limits::accumulation))
        ->capture_default_str();
    app.add_option("--lr", lr, "Peak learning rate of the linear schedule")
        ->check(CLI::Range(0.0, 10.0))
        ->capture_default_str();
    app.add_option("--warmup-frac", warmup_frac, "Warm-up fraction of the steps")
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "AdamW weight decay (not on norms and biases)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--slots", slots, "Storage type of AdamW's m and v: float, bf16 or half (updates compute in fp32)")
        ->check(CLI::IsMember({"float", "bf16", "half"}))
        ->capture_default_str();
    app.add_option("--max-norm", max_norm, "Global-norm gradient clipping")
        ->check(CLI::Range(1e-6, 1e6))
        ->capture_default_str();
    app.add_option("--dropout", dropout, "Hidden and attention dropout (default: the config's)")
        ->check(CLI::Range(0.0, 0.99));
    app.add_option("--log-every", job.log_every, "Training metrics every this many steps")
        ->check(CLI::Range(1ul, 1ul << 40))
        ->capture_default_str();
    app.add_option("--checkpoint-every", job.checkpoint_every, "Checkpoint every this many steps (0: at the end)")
        ->capture_default_str();
    add_precision_option(app, precision)->capture_default_str();
    app.add_option("--seed", job.seed, "Initialisation, data order and dropout")->capture_default_str();
    app.add_option("--threads", threads, "Threads (0: OpenMP default)")->check(CLI::Range(0, 1024));
    add_shard_option(app, shard_optimizer);
    app.add_option("--prune-block", prune_block,
                   "Start a block-sparse encoder of this block size from the dense --init-from checkpoint: one-shot "
                   "magnitude pruning keeps the blocks of largest L2 norm of each projection, the patterns then "
                   "stay fixed (0: no pruning)")
        ->check(CLI::IsMember({0ul, 1ul, 4ul, 8ul, 16ul}))
        ->capture_default_str();
    app.add_option("--prune-sparsity", prune_sparsity, "Fraction of each projection's blocks --prune-block drops")
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    app.add_option("--update-period", update_period,
                   "Prune and regrow the block-sparse encoder's patterns every this many steps while fine-tuning "
                   "(dynamic sparsity; never at the last step; 0: the patterns stay fixed)")
        ->check(CLI::Range(0ul, 1ul << 40))
        ->capture_default_str();
    app.add_option("--prune-ratio", prune_ratio,
                   "Fraction of each projection's active blocks an update prunes and regrows; it decays to 0 at "
                   "the last step (cosine)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--regrow", regrow, "Where an update regrows blocks: rigl (largest dense gradient) or random")
        ->check(CLI::IsMember({"rigl", "random"}))
        ->capture_default_str();
  }

  // The model config: --config, else the --init-from checkpoint's, else bert-tiny.
  sparselm::bert_config model_config() {
    if (threads > 0) sparselm::set_num_threads(threads);
    std::string path = config;
    if (path.empty())
      path = job.init_from.empty()
                 ? std::string(SPARSELM_SOURCE_DIR) + "/configs/bert-tiny.json"
                 : (sparselm::io::resolve_checkpoint(job.init_from) / sparselm::io::config_file).string();
    nlohmann::json j = sparselm::read_json_file(path);
    sparselm::check_model_limits(j, path);
    if (dropout) j["hidden_dropout_prob"] = j["attention_probs_dropout_prob"] = *dropout;
    return sparselm::bert_config::from_json(j, path);
  }

  // The encoder's block sparsity: that of the --init-from checkpoint, or when resuming that of the
  // run's newest checkpoint (block 0: dense). A block-sparse encoder is built with the file's block
  // size and per-weight block counts and loads its patterns; fine-tuning trains the active blocks
  // and, with --update-period, prunes and regrows them (run()).
  // resuming: set when that was the run's newest checkpoint.
  sparselm::io::checkpoint_sparsity sparsity(bool& resuming) const {
    resuming = false;
    if (job.resume)
      if (auto latest = sparselm::io::checkpoint_dir(job.out / "checkpoints").latest()) {
        resuming = true;
        return sparselm::io::read_checkpoint_sparsity(*latest);
      }
    if (job.init_from.empty()) return {};
    return sparselm::io::read_checkpoint_sparsity(sparselm::io::resolve_checkpoint(job.init_from));
  }
  // Its entry in the run config, and the line that says it.
  nlohmann::json sparsity_json(const sparselm::io::checkpoint_sparsity& sp) const {
    if (sp.block == 0) return {{"block", 0}};
    return {{"block", sp.block},
            {"weights", sp.blocks.size()},
            {"active_blocks", sp.active_blocks()},
            {"sparsity", sp.sparsity},
            {"patterns", patterns_json()}};
  }
  // "static", or the pattern updates' settings (--update-period > 0).
  nlohmann::json patterns_json() const {
    if (update_period == 0) return "static";
    nlohmann::json j;
    to_json(j, update_config());
    j["kind"] = "dynamic";
    return j;
  }
  // The pattern updates of a run of job.steps steps (resolve_steps first).
  sparselm::sparse::update_config update_config() const {
    return sparselm::sparse::update_config::from_json({{"update_period", std::max<std::size_t>(update_period, 1)},
                                                       {"total_steps", job.steps},
                                                       {"prune_ratio", prune_ratio},
                                                       {"regrow", regrow}},
                                                      "--update-period");
  }
  // f.template operator()<S>(plan) for the encoder's sparsity S (sparselm::dense or block_sparse<B>)
  // and a plan with the checkpoint's block counts, after recording it in the run config (job.config,
  // set before) and, when `say`, saying it. With --prune-block on a fresh run the encoder is
  // block-sparse of that size with uniform --prune-sparsity, and start_pruned starts the model.
  template <class F>
  int with_encoder_sparsity(bool say, F&& f) {
    bool resuming = false;
    const auto sp = sparsity(resuming);
    pruning = prune_block != 0 && !resuming;
    SPARSELM_CHECK(
        update_period == 0 || pruning || sp.block != 0, job.program,
        ": --update-period needs a block-sparse encoder: a block-sparse --init-from checkpoint (bert_pretrain "
        "--block B) or --prune-block B",
        sp.file.empty() ? std::string() : "; " + sp.file.string() + " is dense");
    if (update_period > 0) update_config().schedule.validate("--update-period");
    if (pruning) {
      SPARSELM_CHECK(!job.init_from.empty(), job.program,
                     ": --prune-block needs --init-from (the dense checkpoint to prune)");
      SPARSELM_CHECK(sp.block == 0, job.program, ": --prune-block: ", sp.file.string(),
                     " is block-sparse already (blocks of ", sp.block, "); it fine-tunes block-sparse as it is");
      job.config["sparsity"] = {{"block", prune_block},
                                {"sparsity", prune_sparsity},
                                {"patterns", patterns_json()},
                                {"from", "magnitude pruning (L2 norm per block) of " + job.init_from.string()}};
    } else {
      job.config["sparsity"] = sparsity_json(sp);
      if (say && sp.block != 0) std::fprintf(stderr, "%s: %s\n", job.program.c_str(), describe(sp).c_str());
    }
    return sparselm::registry::with_sparsity(
        pruning ? prune_block : sp.block,
        [&]<class S>() -> int {
          if (!S::is_sparse) return f.template operator()<S>(sparselm::sparse_plan{});
          return f.template operator()<S>(pruning ? sparselm::sparse_plan{prune_sparsity} : sp.plan());
        },
        "block size of the checkpoint");
  }
  // When pruning (above): loads --init-from into a dense twin (Dense built from args, initialised
  // with the run's seed: heads the file lacks start as a dense run's do), prunes it into `model`
  // (sparse::prune_model) and clears job.init_from, which the job would load otherwise.
  template <class Dense, class Model, class... Args>
  void start_pruned(Model& model, bool say, Args&&... args) {
    if constexpr (Model::sparsity::is_sparse) {
      if (!pruning) return;
      Dense dense(std::forward<Args>(args)...);
      dense.init(job.seed);
      const auto from = sparselm::io::resolve_checkpoint(job.init_from);
      const auto r = sparselm::io::load_pretrained(from, dense, sparselm::io::hf_bert_map());
      sparselm::sparse::prune_model(dense, model);
      std::size_t kept = 0, grid = 0;
      for (const auto& w : model.sparse_weights()) {
        kept += w.pattern->nnz();
        grid += w.pattern->rows_b * w.pattern->cols_b;
      }
      if (say)
        std::fprintf(stderr,
                     "%s: block-sparse encoder (B = %zu) pruned from %s (%s): the %zu blocks of largest L2 norm of "
                     "%zu kept, %s\n",
                     job.program.c_str(), prune_block, from.string().c_str(), r.summary().c_str(), kept, grid,
                     patterns_said().c_str());
      job.init_from.clear();
    }
  }
  std::string describe(const sparselm::io::checkpoint_sparsity& sp) const {
    return "block-sparse encoder (B = " + std::to_string(sp.block) + ", " + std::to_string(sp.blocks.size()) +
           " weights, " + std::to_string(sp.active_blocks()) + " active blocks, sparsity " +
           std::to_string(sp.sparsity).substr(0, 4) + ") with the patterns of " + sp.file.string() + ", " +
           patterns_said();
  }
  std::string patterns_said() const {
    if (update_period == 0) return "patterns fixed while fine-tuning";
    char buf[160];
    std::snprintf(buf, sizeof buf, "patterns pruned and regrown (%s) every %zu steps, prune ratio %.2f decaying to 0",
                  regrow.c_str(), update_period, prune_ratio);
    return buf;
  }

  // Runs the fine-tuning job: with --update-period on a block-sparse encoder, with pattern updates
  // (train/dynamic_sparsity.hpp; the regrowth stream seeded from --seed).
  template <class Model, class Trainer, class Task>
  nlohmann::json run(Model& model, Trainer& t, Task& task) const {
    if constexpr (Model::sparsity::is_sparse)
      if (update_period > 0) {
        sparselm::dynamic_sparsity<Model, Trainer> ds(model, t, update_config(), job.seed + 2);
        return sparselm::finetune_job(job).run(model, t, task, &ds);
      }
    return sparselm::finetune_job(job).run(model, t, task);
  }

  // Steps from --epochs unless --steps was given (ranks: the data-parallel replicas; a step trains
  // on ranks x --accumulation x --batch-size examples).
  void resolve_steps(const CLI::App& app, std::size_t train_examples, std::size_t ranks = 1) {
    if (app.count("--steps") == 0) {
      const double s =
          epochs * double(train_examples) / (double(job.batch_size) * double(accumulation) * double(ranks));
      job.steps = std::max<std::size_t>(1, std::size_t(s + 0.999999));
    }
  }

  nlohmann::json run_config() const {
    return {{"steps", job.steps},
            {"batch_size", job.batch_size},
            {"accumulation", accumulation},
            {"lr", lr},
            {"warmup_frac", warmup_frac},
            {"weight_decay", weight_decay},
            {"max_norm", max_norm},
            {"seed", job.seed},
            {"init_from", job.init_from.string()},
            {"optimizer", {{"type", "adamw"}, {"eps", 1e-6}, {"bias_correction", false}, {"slots", slots}}},
            {"schedule", "linear"},
            {"precision", precision},
            {"shard_optimizer", shard_optimizer}};
  }

  // Data parallel over MPI ranks when started by mpirun, else one process (set_replicas next).
  struct policies : sparselm::default_policies {
    using data_parallel = sparselm::data_parallel::mpi;
    using optimizer = sparselm::optim::slot_choice<sparselm::optim::adamw>;
  };
  template <class Model>
  auto make_trainer(Model& model) const {
    sparselm::trainer_options to;
    to.shard_optimizer = shard_optimizer;
    to.max_norm = float(max_norm);
    to.accumulation.steps = accumulation;
    to.dropout_seed = job.seed + 1;
    to.precision = sparselm::precision::parse(precision, "--precision");
    return sparselm::trainer<Model, policies>(
        model, to,
        policies::optimizer(nlohmann::json{
            {"weight_decay", weight_decay}, {"eps", 1e-6}, {"bias_correction", false}, {"slots", slots}}),
        sparselm::optim::make_schedule(
            {{"type", "linear"}, {"max_lr", lr}, {"total_steps", job.steps}, {"warmup_proportion", warmup_frac}}));
  }
};

}  // namespace examples
