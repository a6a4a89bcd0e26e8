#pragma once
// The run driver: one training run of a task (train/training_loop.hpp's training_task: language
// modelling, BERT pre-training, fine-tuning) in a run directory, with checkpoints and exact resume.
// The jobs (train/lm_job.hpp, train/bert_job.hpp, train/finetune_job.hpp) are the tasks' set-ups.
//
//   sparselm::run_options o{.out = "runs/x", .program = "gpt_train", .config = resolved, .loop = rc.loop};
//   nlohmann::json summary = sparselm::run_training(model, trainer, task, o);   // (dynamic_sparsity* optional)
//
// What it does, in order (a collective over the trainer's processes: every rank calls it; rank 0
// alone writes files and prints):
//   - checks that every rank runs the same config, reads the same input files and (when given)
//     the same training examples (train/replica_checks.hpp);
//   - claims <out> (train/run_files.hpp: the lock, stale temporaries, a fresh run refuses a used
//     directory unless overwrite);
//   - resume: loads the newest complete checkpoint (model, optimiser slots, steps, loss scale,
//     sparsity patterns and explored maps, the task's data position), checks that its step is its
//     name's (and, when asked, that the model config is the saved one) and cuts metrics.jsonl
//     after it; a fresh run calls `fresh_start` (e.g. weights from --init-from);
//   - every rank starts from rank 0's parameters; writes config.json and the "run" metrics line;
//   - trains (train_loop) with checkpoints every loop.checkpoint_every steps, at the end and on a
//     stop signal; keeps the newest keep_checkpoints; non-finite parameters or optimiser state are
//     never saved (the run stops naming the last good checkpoint, which pruning has kept); a
//     non-finite step stops the run with an error naming the last good checkpoint;
//   - returns the summary JSON (steps, resumed_from, interrupted, train_seconds, samples_per_s,
//     valid, checkpoint, pattern_updates, pipeline (a staged run: stages, split, bubbles), and the
//     task's keys).
// Checkpoint layout: io/checkpoint.hpp (<out>/checkpoints/step-NNNNNN/, latest); the training
// state's run record holds the task's data_state(), "config" and "replicas".

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/memory_usage.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/train/replica_checks.hpp"
#include "sparselm/train/run_files.hpp"
#include "sparselm/train/tensor_checkpoint.hpp"
#include "sparselm/train/training_loop.hpp"

namespace sparselm {

struct run_options {
  std::filesystem::path out = "runs/run";  // the run directory
  std::string program = "train";           // names the program in messages and the "run" line
  nlohmann::json config;                   // the resolved run config (config.json, "run" line, checkpoints)
  loop_options loop{};
  bool resume = false;     // continue from the newest checkpoint in <out>/checkpoints
  bool overwrite = false;  // fresh run: delete the run's checkpoints, metrics and config first
  bool verify = true;      // resume: check the checkpoint's CRC-32C checksums
  std::size_t keep_checkpoints = 2;
  bool check_model_config = false;  // resume: refuse a model config other than the checkpoint's
  std::vector<std::filesystem::path> inputs;  // data files every rank must read alike
  std::optional<std::uint64_t> examples;      // a fingerprint of the training examples, equal on every rank
  std::string nonfinite_advice;               // said when a non-finite step stops the run
  std::function<void()> fresh_start;          // a fresh run, once <out> is claimed (e.g. --init-from)
};

// The loop hooks of a dynamic-sparsity object (train/dynamic_sparsity.hpp): its update's statistics
// in the training lines, and a line at every update whatever the logging period.
template <class Sparsity>
void add_sparsity_hooks(loop_hooks& hooks, Sparsity* ds) {
  if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
    if (ds) {
      hooks.extra_metrics = [ds](std::size_t) { return ds->take_metrics(); };
      hooks.log_now = [ds](std::size_t) { return ds->has_pending(); };
    }
}

// Reads checkpoint `dir` into the trainer's model and optimiser (a tensor-parallel trainer: its
// slices of the whole checkpoint, train/tensor_checkpoint.hpp); returns the training state's run JSON.
template <class Trainer>
nlohmann::json load_checkpoint(const std::filesystem::path& dir, Trainer& t, sparse::pattern_updater* up, bool verify) {
  if constexpr (tensor_checkpointable<Trainer>) {
    if (t.tensor_ranks().active()) return load_tensor_parallel_checkpoint(dir, t, up, verify);
  }
  io::load_model(dir, t.model(), {.verify = verify});
  return io::load_training_state(dir / io::state_file, t, up, verify);
}

template <class Model, class Trainer, training_task Task, class Sparsity = std::nullptr_t>
nlohmann::json run_training(Model& model, Trainer& t, Task& task, const run_options& o, Sparsity* ds = nullptr) {
  namespace fs = std::filesystem;
  const std::string& prog = o.program;
  // Data parallelism (trainer::replicas()) or a pipeline over ranks (trainer::processes()): the
  // processes agree on the config and data; rank 0 alone writes files and prints.
  parallel::replica_group& procs = t.processes();
  const std::size_t ranks = t.replicas().size();
  const bool writer = procs.rank() == 0;
  auto say = [&](const std::string& s) {
    if (writer) std::fprintf(stderr, "%s\n", s.c_str());
  };
  check_same_config(procs, o.config, prog);
  if (!o.inputs.empty()) check_same_files(procs, o.inputs, prog);
  if (o.examples) check_same_fingerprint(procs, *o.examples, prog, "training examples");
  std::optional<io::run_lock> lock;  // the run directory's, held for the whole run
  claim_run_dir(procs, lock, o.out, prog, o.resume, o.overwrite);
  io::checkpoint_dir cd(o.out / "checkpoints", o.keep_checkpoints);
  auto last_good = [&] { return last_good_checkpoint(cd, cd.root()); };
  sparse::pattern_updater* up = nullptr;
  if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
    if (ds) up = &ds->updater();

  if constexpr (requires { t.tensor_ranks().active(); } && !tensor_checkpointable<Trainer>)
    SPARSELM_CHECK(!t.tensor_ranks().active() || (!o.resume && !o.loop.checkpoints), prog,
                   ": this model splits over a tensor-parallel group but cannot be checkpointed whole (its type is "
                   "not built unsplit, models/tensor_shards.hpp, has_unsplit_twin); run with checkpoints=false");
  if (o.resume) {
    auto latest = cd.latest();
    SPARSELM_CHECK(latest.has_value(), prog, ": --resume: no checkpoint in '", cd.root().string(), "'");
    if (o.check_model_config) {
      const auto saved = io::read_model_config(*latest);
      const auto now = io::model_config_json(model);
      SPARSELM_CHECK(saved == now, prog, ": --resume: the model config differs from the one in '", latest->string(),
                     "/config.json' (saved ", saved.dump(), ", now ", now.dump(), ")");
    }
    const auto run = load_checkpoint(*latest, t, up, o.verify);
    SPARSELM_CHECK(run.is_object(), latest->string(), ": training state has no data position");
    task.restore_data(run, latest->string());
    SPARSELM_CHECK(io::checkpoint_dir::step_name(t.step()) == latest->filename().string(), latest->string(),
                   ": the training state is at step ", t.step(), ", not the checkpoint's ('",
                   latest->filename().string(), "'): a damaged or mixed-up checkpoint");
    say("resuming from " + latest->string() + " (step " + std::to_string(t.step()) + ")");
    const std::size_t saved_ranks = run.value("replicas", std::size_t(1));
    if (saved_ranks != ranks)
      say(prog + ": the run was saved with " + std::to_string(saved_ranks) + " replica(s) and continues with " +
          std::to_string(ranks) + ": the global batch is now " + std::to_string(task.global_batch()) + " rows");
    if (t.step() >= o.loop.steps)
      say("the run is already complete (" + std::to_string(o.loop.steps) + " steps); raise --steps to train on");
  } else if (o.fresh_start) {
    o.fresh_start();
  }
  const std::size_t resumed_from = t.step();
  // Every rank starts from rank 0's parameters (identical already when all initialised from one
  // seed or read one checkpoint; the broadcast makes it so and the CRC check proves it).
  t.sync_parameters();
  metrics_log log = open_run_files(writer, o.out, o.config, o.resume, resumed_from);
  nlohmann::json run_line = task.run_line(say);
  run_line.update({{"kind", "run"},
                   {"program", prog},
                   {"config", o.config},
                   {"parameters", model.num_parameters()},
                   {"replicas", ranks},
                   {"global_batch", task.global_batch()},
                   {"precision", precision::name(t.compute())},
                   {"resumed_from", resumed_from}});
  log.write(run_line);
  if (t.compute() != dtype::f32) say(prog + ": precision " + kernels::describe_compute(t.compute()));

  auto data_state = [&] {  // what a checkpoint's training state records of the run
    nlohmann::json run = task.data_state();
    run["config"] = o.config;
    run["replicas"] = ranks;
    return run;
  };
  loop_hooks hooks;
  hooks.checkpoint = [&](std::size_t step) {
    // A non-finite model or optimiser state is never saved (it would become `latest` and push good
    // checkpoints out): the optimiser checked what its last update wrote (trainer::state_finite).
    SPARSELM_CHECK(t.state_finite(), prog, ": step ", step,
                   ": the parameters or the optimiser state are not finite and are not saved; the run stops. ",
                   last_good());
    t.check_replicas_agree("at the checkpoint of step " + std::to_string(step));
    t.stream_optimizer_state();  // sharded optimiser state: sent to rank 0 as it writes (collective)
    if constexpr (tensor_checkpointable<Trainer>) {
      if (t.tensor_ranks().active()) {  // the whole model, assembled on rank 0 (collective)
        auto whole = gather_tensor_parallel_state(t, up);
        if (!writer) return;
        cd.save(step, [&](const fs::path& dir) {
          io::save_model(dir, whole->model());
          io::save_training_state(dir / io::state_file, *whole, data_state(), whole->updater());
        });
        return;
      }
    }
    if (!writer) return;
    cd.save(step, [&](const fs::path& dir) {
      io::save_model(dir, model);
      io::save_training_state(dir / io::state_file, t, data_state(), up);
    });
    t.release_gathered_state();
  };
  add_sparsity_hooks(hooks, ds);
  loop_result r;
  try {
    r = train_loop(t, task, o.loop, log, hooks);
  } catch (const nonfinite_error& e) {
    fail(prog, ": ", e.what(), "; the run stops", o.nonfinite_advice, ". ", last_good());
  }

  t.gather_parameters();  // ranks that kept only their pipeline stages: rank 0 holds the trained model
  nlohmann::json summary = {{"steps", r.steps_done},
                            {"resumed_from", resumed_from},
                            {"interrupted", r.interrupted},
                            {"train_seconds", r.train_seconds},
                            {"samples_per_s", r.train_seconds > 0 ? double(r.samples) / r.train_seconds : 0.0},
                            {"peak_rss_bytes", peak_rss_bytes()}};
  if (r.last_eval && r.last_eval->count) summary["valid"] = task.loss_json(*r.last_eval);
  if (r.reached_loss_at) summary["reached_loss_at"] = *r.reached_loss_at;
  if (auto l = cd.latest()) summary["checkpoint"] = l->string();
  if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
    if (ds) summary["pattern_updates"] = ds->updates();
  if constexpr (requires { model.last_pipeline(); })  // what the last staged step did
    if (const auto& rep = model.last_pipeline(); rep.stages > 1)
      summary["pipeline"] = {{"stages", rep.stages},
                             {"split", rep.split},
                             {"balanced", rep.balanced},
                             {"predicted_bubble", rep.predicted_bubble},
                             {"measured_bubble", rep.measured_bubble}};
  task.summary(r, summary);
  return summary;
}

}  // namespace sparselm
