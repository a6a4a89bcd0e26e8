#pragma once
// Options and set-up shared by the fine-tuning programs (bert_classify, bert_squad): the common
// option schema (train/run_settings.hpp) with fine-tuning's defaults — AdamW without bias
// correction (eps 1e-6, weight decay 0.01, not on norms and biases), the linear schedule (10 %
// warm-up), a run in epochs — the model config (examples/bert_model_cli.hpp), the encoder's
// sparsity, and the run directory and checkpoints (train/finetune_job.hpp). Under mpirun
// (examples/replicas.hpp) the trainer is data parallel: --batch-size examples per rank, the global
// batch P times that; with --tensor-parallel T the encoder's blocks split over groups of T
// ranks (the global batch P / T times --batch-size), and every rank of a group joins the
// evaluation after training (trainer::inference_context).
//
// The encoder's sparsity: a block-sparse --init-from checkpoint gives a block-sparse encoder of its
// block size with its patterns; a dense one with --block-size B (sparsity.block_size) is
// magnitude-pruned into B x B blocks (the blocks of largest L2 norm of each projection, --sparsity of
// them dropped); --update-period N (sparsity.update) prunes and regrows the patterns while
// fine-tuning (dynamic sparsity; never at the last step).

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bert_model_cli.hpp"
#include "training_cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/optim/schedules.hpp"
#include "sparselm/sparse/magnitude.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/finetune_job.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_settings.hpp"
#include "sparselm/train/tensor_grid.hpp"
#include "sparselm/train/trainer.hpp"

namespace examples {

class finetune_cli {
 public:
  // task: the task's option table; defaults: the task's, over fine-tuning's.
  finetune_cli(std::string program, std::string description, std::span<const sparselm::option_entry> task,
               nlohmann::json defaults)
      : cli(program, std::move(description), {bert_model_options(), task},
            with_finetune_defaults(std::move(defaults))) {
    job.program = std::move(program);
  }
  static nlohmann::json with_finetune_defaults(nlohmann::json d) {
    sparselm::apply_defaults(
        d, {{"optimizer", {{"type", "adamw"}, {"eps", 1e-6}, {"bias_correction", false}, {"weight_decay", 0.01}}},
            {"schedule", {{"type", "linear"}, {"max_lr", 1e-4}, {"warmup_frac", 0.1}}},
            {"epochs", 2.0},
            {"batch_size", 8}});
    return d;
  }

  std::optional<int> parse(int argc, char** argv) { return cli.parse(argc, argv); }

  // Reads the run config, its flags and the defaults; task_keys: the task's top-level keys besides
  // "model" and "data" (its values: settings.task).
  void read(std::vector<std::string_view> task_keys) {
    task_keys.push_back("model");
    task_keys.push_back("data");
    settings = sparselm::run_settings::from_json(cli.run_json(), cli.context(), task_keys);
    if (settings.threads > 0) sparselm::set_num_threads(int(settings.threads));
    SPARSELM_CHECK(settings.loop.stop_at_loss == 0, cli.context(), ": stop_at_loss needs held-out evaluations during "
                   "training; a fine-tuning program evaluates after it (train for --steps or --epochs instead)");
    job.out = settings.out;
    job.init_from = settings.init_from;
    job.seed = settings.seed;
    job.batch_size = settings.batch_size;
    job.log_every = settings.loop.log_every;
    job.checkpoint_every = settings.loop.checkpoint_every;
    job.checkpoints = settings.loop.checkpoints;
    job.keep_checkpoints = settings.keep_checkpoints;
    job.resume = cli.resume;
    job.overwrite = cli.overwrite;
  }

  // The model config: "model", else the --init-from checkpoint's, else bert-tiny.
  sparselm::bert_config model_config() const { return read_bert_model(settings, cli.base()).config; }

  // Steps (from epochs when given), accumulation (from a global batch) and schedule of a run over
  // train_examples examples on `ranks` data-parallel processes.
  void resolve(std::size_t train_examples, std::size_t ranks = 1) {
    settings.resolve(std::max<std::size_t>(1, ranks / tensor_parallel()), train_examples);
    job.steps = settings.loop.steps;
    job.config = settings.to_json();
  }

  // The encoder's block sparsity: that of the --init-from checkpoint, or when resuming that of the
  // run's newest checkpoint (block 0: dense). resuming: set when that was the run's newest checkpoint.
  // The checkpoint is read once (plan_gate, then with_encoder_sparsity, take the same result).
  const sparselm::io::checkpoint_sparsity& sparsity(bool& resuming) const {
    if (!read_) {
      read_.emplace();
      if (job.resume)
        if (auto latest = sparselm::io::checkpoint_dir(job.out / "checkpoints").latest()) {
          read_->resuming = true;
          read_->sparsity = sparselm::io::read_checkpoint_sparsity(*latest);
        }
      if (!read_->resuming && !job.init_from.empty())
        read_->sparsity = sparselm::io::read_checkpoint_sparsity(sparselm::io::resolve_checkpoint(job.init_from));
    }
    resuming = read_->resuming;
    return read_->sparsity;
  }

  // Tensor parallelism (trainer.tensor_parallel, --tensor-parallel): the encoder's blocks split over
  // groups of that many ranks (the head whole on each), data parallel over the groups.
  std::size_t tensor_parallel() const { return std::max<std::size_t>(1, settings.trainer.tensor_parallel); }
  // This rank's part of its group; refuses a group size that does not divide the ranks (before any work).
  sparselm::parallel::tensor_split split(const sparselm::parallel::replica_group& world) const {
    return sparselm::tensor_grid::split_of(world, tensor_parallel());
  }
  // A fresh dense group starts from the weights one process initialises with the run's seed (then
  // --init-from, if given, replaces the encoder's, train/bert_job.hpp, load_init_weights). whole: the
  // same model built unsplit.
  template <class Model>
  void start_split(Model& model) const {
    if constexpr (!Model::sparsity::is_sparse)
      if (model.tensor_split().active()) {
        Model whole = sparselm::unsplit_model(model, {});
        whole.init(job.seed);
        sparselm::take_slices(whole, whole.params(), model, model.params());
      }
  }

  // --dry-run: the plan of fine-tuning model m (model_shape_of a bert_config and head) on sequences
  // of seq tokens over `ranks` processes, with the encoder's block sparsity as the run would have it
  // (the checkpoint's, or pruned to the run's).
  std::optional<int> plan_gate(const sparselm::model_shape& m, std::size_t seq, std::size_t ranks,
                               bool first_process) const {
    bool resuming = false;
    const auto& sp = sparsity(resuming);
    sparselm::plan_inputs in = sparselm::plan_inputs_of(settings, seq, ranks);
    const auto& want = settings.sparsity;
    const bool prune = want.block_given && want.block_size != 0 && sp.block == 0 && !resuming;
    in.block = prune ? want.block_size : sp.block;
    in.sparsity = prune ? want.sparsity : sp.sparsity;
    in.allocation = sparselm::sparse::allocation::uniform;
    return cli.plan_gate(m, in, first_process);
  }

  // f.template operator()<S>(plan) for the encoder's sparsity S (sparselm::dense or block_sparse<B>)
  // and a plan with the checkpoint's block counts, after recording it in the run config (job.config,
  // set by resolve) and, when `say`, saying it. Pruning a dense checkpoint (block_size given on a
  // fresh run): block-sparse of that size with uniform sparsity, and start_pruned starts the model.
  template <class F>
  int with_encoder_sparsity(bool say, F&& f) {
    bool resuming = false;
    const auto& sp = sparsity(resuming);
    const auto& want = settings.sparsity;
    const std::string& ctx = settings.context;
    pruning = want.block_given && want.block_size != 0 && sp.block == 0 && !resuming;
    SPARSELM_CHECK(!pruning || !job.init_from.empty(), job.program, ": ", ctx,
                   ": field 'sparsity.block_size' on a fresh fine-tuning run prunes the --init-from checkpoint, and "
                   "there is none");
    SPARSELM_CHECK(!want.block_given || sp.block == 0 || want.block_size == sp.block, job.program, ": ", ctx,
                   ": field 'sparsity.block_size' ", want.block_size, " contradicts ", sp.file.string(),
                   ", which is block-sparse already (blocks of ", sp.block, "); it fine-tunes block-sparse as it is");
    SPARSELM_CHECK(tensor_parallel() == 1 || !pruning, job.program, ": ", ctx,
                   ": trainer.tensor_parallel (--tensor-parallel) ", tensor_parallel(),
                   ": fine-tuning splits a dense or block-sparse encoder over ranks, but does not prune one ",
                   "(--block-size on a dense --init-from); prune it in one process, or pre-train it block-sparse");
    if (sp.block != 0) encoder = sp;
    SPARSELM_CHECK(!want.update || pruning || sp.block != 0, job.program,
                   ": --update-period needs a block-sparse encoder: a block-sparse --init-from checkpoint "
                   "(bert_pretrain --block-size B) or --block-size B to prune a dense one (sparsity.update)",
                   sp.file.empty() ? std::string() : "; " + sp.file.string() + " is dense");
    nlohmann::json& rec = job.config["sparsity"];
    if (pruning) {
      rec["block_size"] = want.block_size;
      rec["sparsity"] = want.sparsity;
      rec["from"] = "magnitude pruning (L2 norm per block) of " + job.init_from.string();
    } else if (sp.block != 0) {
      rec["block_size"] = sp.block;
      rec["sparsity"] = sp.sparsity;
      rec["weights"] = sp.blocks.size();
      rec["active_blocks"] = sp.active_blocks();
      rec["from"] = sp.file.string();
      if (say) std::fprintf(stderr, "%s: %s\n", job.program.c_str(), describe(sp).c_str());
    } else {
      rec["block_size"] = 0;
      rec.erase("sparsity");
    }
    return sparselm::registry::with_sparsity(
        pruning ? want.block_size : sp.block,
        [&]<class S>() -> int {
          if (!S::is_sparse) return f.template operator()<S>(sparselm::sparse_plan{});
          sparselm::sparse_plan plan = pruning ? sparselm::sparse_plan{want.sparsity} : sp.plan();
          plan.block = pruning ? want.block_size : sp.block;
          return f.template operator()<S>(plan);
        },
        "block size of the checkpoint");
  }
  // This rank's model, Model(args..., plan, split): under tensor parallelism with a block-sparse
  // encoder, with its slices' share of the checkpoint's patterns, which must divide evenly over the
  // group (models/tensor_shards.hpp, even_slice_plan, which reads the shapes of a probe built first
  // with one block per weight; a checkpoint of a group of that size divides evenly).
  template <class Model, class... Args>
  Model make_model(const sparselm::sparse_plan& plan, const sparselm::parallel::tensor_split& split,
                   const Args&... args) const {
    if (!split.active() || encoder.block == 0) return Model(args..., plan, split);
    sparselm::sparse_plan probe = plan;
    probe.count = [](const std::string&, std::size_t, std::size_t) { return std::size_t(1); };
    return Model(args...,
                 sparselm::even_slice_plan(Model(args..., probe, split), encoder.patterns, plan, encoder.file.string()),
                 split);
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
                     job.program.c_str(), settings.sparsity.block_size, from.string().c_str(), r.summary().c_str(),
                     kept, grid, patterns_said().c_str());
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
    const auto& u = settings.sparsity.update;
    if (!u) return "patterns fixed while fine-tuning";
    char buf[160];
    std::snprintf(buf, sizeof buf, "patterns pruned and regrown (%s) every %zu steps, prune ratio %.2f decaying to 0",
                  sparselm::sparse::to_string(u->regrow), u->schedule.update_period, u->schedule.prune_ratio);
    return buf;
  }

  // Runs the fine-tuning job: with pattern updates (sparsity.update) on a block-sparse encoder
  // (train/dynamic_sparsity.hpp; the regrowth stream seeded from the run's seed).
  template <class Model, class Trainer, class Task>
  nlohmann::json run(Model& model, Trainer& t, Task& task) const {
    if constexpr (Model::sparsity::is_sparse)
      if (settings.sparsity.update) {
        // a tensor-parallel rank's slices draw their own regrowth
        sparselm::dynamic_sparsity<Model, Trainer> ds(
            model, t, *settings.sparsity.update, sparselm::parallel::shard_seed(job.seed + 2, model.tensor_split()));
        return sparselm::finetune_job(job).run(model, t, task, &ds);
      }
    return sparselm::finetune_job(job).run(model, t, task);
  }

  // Data parallel over MPI ranks when started by mpirun, else one process (set_replicas next); the
  // optimiser, recompute, pipeline and precision as the run config says.
  struct policies : sparselm::default_policies {
    using data_parallel = sparselm::data_parallel::mpi;
    using optimizer = sparselm::registry::any_optimizer;
  };
  template <class Model>
  auto make_trainer(Model& model) const {
    sparselm::trainer_options to = settings.trainer;
    to.dropout_seed = job.seed + 1;
    return sparselm::trainer<Model, policies>(model, to, policies::optimizer(settings.optimizer),
                                              sparselm::optim::make_schedule(settings.schedule));
  }

  training_cli cli;
  sparselm::run_settings settings;
  sparselm::finetune_job_options job;
  bool pruning = false;  // set by with_encoder_sparsity: a fresh run pruning --init-from (start_pruned)
  sparselm::io::checkpoint_sparsity encoder;  // set there too: a block-sparse checkpoint whose patterns it takes
  struct checkpoint_read {
    sparselm::io::checkpoint_sparsity sparsity;
    bool resuming = false;
  };
  mutable std::optional<checkpoint_read> read_;  // sparsity()'s one reading of the checkpoint
};

}  // namespace examples
