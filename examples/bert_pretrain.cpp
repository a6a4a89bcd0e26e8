// BERT pre-training (masked LM + next-sentence prediction) with LAMB and the up_down schedule on
// example files written by bert_data. Phase 1 (sequence 128), then phase 2 (sequence 384) from
// phase 1's weights:
//
//   bert_pretrain --config configs/bert-tiny.json --train runs/bert/train-128.bex --valid runs/bert/valid-128.bex
//                 --out runs/bert/phase1 --steps 2000 --batch-size 32 --lr 2e-3
//   bert_pretrain --config configs/bert-tiny.json --train runs/bert/train-384.bex --valid runs/bert/valid-384.bex
//                 --out runs/bert/phase2 --init-from runs/bert/phase1/checkpoints --steps 500 --batch-size 8 --lr 1e-3
//
// --init-from also takes a HuggingFace BERT directory (e.g. a downloaded bert-base-uncased); without
// --config the model config is then the checkpoint's.
// --block B --sparsity s makes the encoder's projections block-sparse; --update-period N (> 0)
// prunes and regrows them every N steps (RigL), as the S1 model does. Rerun with --resume to
// continue a run (exactly: same data order, same dropout masks). The run directory is locked while
// a job uses it; a fresh run refuses a used one unless --overwrite; SIGINT, SIGTERM and SIGHUP save
// a checkpoint and stop; a non-finite loss or gradient stops the run, naming the last good checkpoint.

#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "replicas.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "sparselm/core/threads.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/train/bert_job.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

int main(int argc, char** argv) {
  examples::replicas replicas;  // MPI ranks under mpirun; outlives the body (a failed rank ends the job)
  const int status = run_program("bert_pretrain", [&]() -> int {
    replicas.start(argc, argv);
    CLI::App app{"BERT pre-training (MLM + NSP) with LAMB on bert_data example files."};
    std::string config = std::string(SPARSELM_SOURCE_DIR) + "/configs/bert-tiny.json";
    bert_job_options o;
    double lr = 1e-3, warmup_frac = 0.1, weight_decay = 0.01, max_norm = 1.0, sparsity = 0.9;
    std::size_t block = 0, update_period = 0;
    int threads = 0;
    std::optional<double> dropout;
    app.add_option("-c,--config", config, "BERT config (HF config.json keys; default with --init-from: its config)")
        ->capture_default_str();
    app.add_option("--train", o.train, "Training example file (bert_data)")->required();
    app.add_option("--valid", o.valid, "Validation example file");
    app.add_option("--out", o.out, "Run directory")->capture_default_str();
    app.add_option("--init-from", o.init_from,
                   "Start from this checkpoint's model weights (phase 2): ours, or a HuggingFace BERT directory "
                   "(config.json + model.safetensors)");
    app.add_flag("--resume", o.resume, "Continue the run in --out from its newest checkpoint");
    app.add_flag("--overwrite", o.overwrite,
                 "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app.add_option("--steps", o.steps, "Optimiser steps in total")
        ->check(CLI::Range(1ul, 1ul << 40))
        ->capture_default_str();
    app.add_option("--batch-size", o.batch_size, "Sequences per micro-batch (per rank under mpirun)")
        ->check(CLI::Range(1ul, 1ul << 20))
        ->capture_default_str();
    std::size_t accumulation = 1;
    app.add_option("--accumulation", accumulation, "Micro-batches per optimiser step (gradient accumulation)")
        ->check(CLI::Range(1ul, limits::accumulation))
        ->capture_default_str();
    app.add_option("--lr", lr, "Peak learning rate of the up_down schedule")
        ->check(CLI::Range(0.0, 10.0))
        ->capture_default_str();
    app.add_option("--warmup-frac", warmup_frac, "Warm-up fraction of the steps")
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    app.add_option("--weight-decay", weight_decay, "LAMB weight decay (not on norms and biases)")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.add_option("--max-norm", max_norm, "Global-norm gradient clipping")
        ->check(CLI::Range(1e-6, 1e6))
        ->capture_default_str();
    app.add_option("--dropout", dropout, "Hidden and attention dropout (default: the config's)")
        ->check(CLI::Range(0.0, 0.99));
    app.add_option("--eval-every", o.eval_every, "Evaluate every this many steps (0: at the end)")
        ->capture_default_str();
    app.add_option("--eval-batches", o.eval_batches, "Validation batches per evaluation (0: all)")
        ->capture_default_str();
    app.add_option("--log-every", o.log_every, "Training metrics every this many steps")
        ->check(CLI::Range(1ul, 1ul << 40))
        ->capture_default_str();
    app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every this many steps (0: at the end)")
        ->capture_default_str();
    app.add_option("--block", block, "Block-sparse projections with this block size (0: dense)")
        ->check(CLI::IsMember({0, 1, 4, 8, 16}))
        ->capture_default_str();
    app.add_option("--sparsity", sparsity, "Sparsity of the projections with --block")
        ->check(CLI::Range(0.0, 0.99))
        ->capture_default_str();
    app.add_option("--update-period", update_period, "Prune and regrow every this many steps (0: static pattern)")
        ->capture_default_str();
    std::string loss_scaling = "none";
    app.add_option("--loss-scaling", loss_scaling,
                   "Loss scaling: none, dynamic (start 65536, x2 after 2000 good steps, /2 and skip on overflow) "
                   "or a static scale")
        ->check([](const std::string& v) {
          if (v == "none" || v == "dynamic") return std::string();
          char* end = nullptr;
          const double s = std::strtod(v.c_str(), &end);
          return end && *end == 0 && s > 0 && s <= 3.4e38 ? std::string()
                                                           : "must be none, dynamic or a positive number, got '" + v + "'";
        })
        ->capture_default_str();
    std::string precision = "fp32";
    examples::add_precision_option(app, precision)->capture_default_str();
    std::string slots = "float";
    app.add_option("--slots", slots, "Storage type of LAMB's m and v: float, bf16 or half (updates compute in fp32)")
        ->check(CLI::IsMember({"float", "bf16", "half"}))
        ->capture_default_str();
    bool shard_optimizer = false;
    examples::add_shard_option(app, shard_optimizer);
    app.add_option("--seed", o.seed, "Initialisation, data order and dropout")->capture_default_str();
    app.add_option("--threads", threads, "Threads (0: OpenMP default)")->check(CLI::Range(0, 1024));
    if (auto status = examples::parse(app, argc, argv)) return *status;

    if (threads > 0) set_num_threads(threads);
    if (!o.init_from.empty() && app.count("--config") == 0)  // the model is the checkpoint's
      config = (io::resolve_checkpoint(o.init_from) / io::config_file).string();
    json model_json = read_json_file(config);
    check_model_limits(model_json, config);
    if (dropout) model_json["hidden_dropout_prob"] = model_json["attention_probs_dropout_prob"] = *dropout;
    const auto cfg = bert_config::from_json(model_json, config);
    o.config = {{"model", cfg.to_json()},
                {"train", o.train.string()},
                {"valid", o.valid.string()},
                {"steps", o.steps},
                {"batch_size", o.batch_size},
                {"accumulation", accumulation},
                {"lr", lr},
                {"warmup_frac", warmup_frac},
                {"weight_decay", weight_decay},
                {"max_norm", max_norm},
                {"block", block},
                {"sparsity", block ? sparsity : 0.0},
                {"update_period", update_period},
                {"seed", o.seed},
                {"init_from", o.init_from.string()},
                {"loss_scaling", loss_scaling},
                {"precision", precision},
                {"slots", slots},
                {"shard_optimizer", shard_optimizer}};
    int rc = 0;
    registry::with_sparsity(block, [&]<class S>() {
      using model_t = bert<float, S>;
      struct policies : default_policies {
        using optimizer = optim::slot_choice<optim::lamb>;
        using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
      };
      using trainer_t = trainer<model_t, policies>;
      model_t model(cfg, sparse_plan{sparsity});
      model.init(o.seed);
      trainer_options to;
      to.max_norm = float(max_norm);
      to.dropout_seed = o.seed + 1;
      to.precision = sparselm::precision::parse(precision, "--precision");
      to.shard_optimizer = shard_optimizer;
      to.accumulation.steps = accumulation;
      if (loss_scaling == "dynamic")
        to.loss_scaling = optim::loss_scale_config(json{{"type", "dynamic"}});
      else if (loss_scaling != "none")
        to.loss_scaling = optim::loss_scale_config(json(std::stod(loss_scaling)));
      trainer_t t(model, to, typename policies::optimizer(json{{"weight_decay", weight_decay}, {"slots", slots}}),
                  optim::make_schedule(
                      {{"type", "up_down"}, {"max_lr", lr}, {"total_steps", o.steps}, {"warmup_frac", warmup_frac}}));
      t.set_replicas(replicas.group());
      const bool rank0 = replicas.group().rank() == 0;
      std::optional<dynamic_sparsity<model_t, trainer_t>> ds;
      if constexpr (S::is_sparse)
        if (update_period > 0)
          ds.emplace(model, t,
                     sparse::update_config::from_json(
                         json{{"update_period", update_period}, {"total_steps", o.steps}, {"regrow", "rigl"}}),
                     o.seed + 7);
      if (rank0)
        std::fprintf(stderr, "bert_pretrain: %zu parameters%s\n", model.num_parameters(),
                   S::is_sparse
                       ? (update_period ? ", block-sparse projections, dynamic" : ", block-sparse projections, static")
                       : "");
      const auto summary = bert_job(o).run(model, t, ds ? &*ds : nullptr);
      if (rank0) std::printf("%s\n", summary.dump().c_str());
      rc = summary.value("interrupted", false) ? 130 : 0;
    });
    return rc;
  });
  return replicas.finish(status);
}
