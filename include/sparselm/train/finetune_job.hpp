#pragma once
// A fine-tuning job: a model (bert_classifier, bert_qa, ...) trained on an in-memory set of
// examples in a seeded shuffled order, with checkpoints (model + training state + data position),
// exact resume, metrics and a progress bar. The task supplies the batches and names the losses;
// evaluation is the program's (it runs after the job, on the trained model).
//
//   struct my_task {                                    // what finetune_job needs of a task
//     using batch_type = bert_classify_batch;
//     std::size_t size() const;                         // training examples
//     batch_type batch(std::span<const std::size_t> examples);  // valid until the next call
//     nlohmann::json loss_json(const loss_stats&) const;        // logged metrics of a window
//     std::string brief(const loss_stats&) const;               // progress-bar text
//     std::uint32_t fingerprint() const;   // optional: a checksum of the examples (checked equal on every rank)
//   };
//   finetune_job job({.out = "runs/squad", .program = "bert_squad", .steps = 500, .batch_size = 16});
//   nlohmann::json summary = job.run(model, trainer, task);      // (dynamic_sparsity* optional)
//
// `init_from` (a fresh run only): our checkpoint (e.g. bert_pretrain's) or a HuggingFace directory;
// tensors of heads the model lacks are reported unused and heads the file lacks keep their
// initialisation (io/huggingface.hpp), and the message says which.
// Metrics (<out>/metrics.jsonl): a "run" line, then "train" lines with the task's losses, lr,
// grad_norm, samples_per_s and epoch. With a dynamic_sparsity (train/dynamic_sparsity.hpp) the
// block-sparse patterns are pruned and regrown on its update steps while fine-tuning; a "train"
// line after an update carries its statistics, and checkpoints keep the updater's explored maps.
//
// Data parallelism (a trainer with data_parallel::mpi and a replica group of P ranks, as
// bert_job): every rank draws the same global batch of P x batch_size examples from the same
// shuffled order and takes its rows [rank·B, (rank+1)·B); the trainer divides by the global count,
// so P ranks train what one process does with the global batch. The resolved config and the
// task's training examples (a CRC-32C of them, Task::fingerprint()) must be equal on every rank; only rank 0 writes the run
// directory and prints; a stop request on any rank stops all after the same step.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/sparse/update.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/progress.hpp"
#include "sparselm/train/replica_checks.hpp"

namespace sparselm {

struct finetune_job_options {
  std::filesystem::path out = "runs/finetune";
  std::filesystem::path init_from;  // weights to start from (fresh run only)
  std::string program = "finetune";  // names the job in messages and metrics
  std::size_t steps = 100, batch_size = 16, log_every = 10;
  std::size_t checkpoint_every = 0, keep_checkpoints = 2;
  std::uint64_t seed = 1234;
  bool resume = false, overwrite = false;
  nlohmann::json config;  // the resolved run config (logged and saved)
};

class finetune_job {
 public:
  explicit finetune_job(finetune_job_options o) : o_(std::move(o)) {}

  template <class Model, class Trainer, class Task, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, Task& task, Sparsity* ds = nullptr) {
    namespace fs = std::filesystem;
    const std::string& prog = o_.program;
    SPARSELM_CHECK(task.size() > 0, prog, ": no training examples");
    SPARSELM_CHECK(o_.batch_size > 0, prog, ": batch size 0");
    parallel::replica_group& group = t.replicas();
    const std::size_t ranks = group.size(), rank = group.rank();
    const bool writer = rank == 0;
    rank0_ = writer;
    check_same_config(group, o_.config, prog);
    if constexpr (requires { task.fingerprint(); })
      check_same_fingerprint(group, std::uint64_t(task.fingerprint()), prog, "training examples");
    const std::size_t B = o_.batch_size, G = checked_mul(B, ranks, prog + ": batch_size x ranks"), N = task.size();
    std::optional<io::run_lock> lock;  // the run directory's, held for the whole job (lm_job.hpp's rules)
    claim_run_dir(group, lock, o_.out, prog, o_.resume, o_.overwrite);
    io::checkpoint_dir cd(o_.out / "checkpoints", o_.keep_checkpoints);
    sparse::pattern_updater* up = nullptr;
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) up = &ds->updater();
    std::size_t epoch = 0, next = 0;  // where the shuffled pass over the examples stands
    if (o_.resume) {
      auto latest = cd.latest();
      SPARSELM_CHECK(latest.has_value(), prog, ": --resume: no checkpoint in '", cd.root().string(), "'");
      io::load_model(*latest, model);
      auto run = io::load_training_state(*latest / io::state_file, t, up);
      SPARSELM_CHECK(run.contains("data") && run["data"].is_object(), latest->string(),
                     ": training state has no data position");
      epoch = run["data"].at("epoch").template get<std::size_t>();
      next = run["data"].at("next").template get<std::size_t>();
      SPARSELM_CHECK(next <= task.size(), latest->string(), ": data position ", next, " is past the ", task.size(),
                     " training examples: the checkpoint belongs to other data");
      SPARSELM_CHECK(io::checkpoint_dir::step_name(t.step()) == latest->filename().string(), latest->string(),
                     ": the training state is at step ", t.step(), ", not the checkpoint's ('",
                     latest->filename().string(), "'): a damaged or mixed-up checkpoint");
      say("resuming from " + latest->string() + " (step " + std::to_string(t.step()) + ")");
    } else if (!o_.init_from.empty()) {
      const auto from = io::resolve_checkpoint(o_.init_from);
      const auto r = io::load_pretrained(from, model, io::hf_bert_map());
      say("model weights from " + from.string() + " (" + r.summary() + ")");
    }
    t.sync_parameters();  // every rank starts from rank 0's weights (checked)
    metrics_log log = open_run_files(writer, o_.out, o_.config, o_.resume, t.step());
    if (ranks > 1)
      say(prog + ": data parallel over " + group.describe() + ", " + std::to_string(B) +
          " examples per rank, global batch " + std::to_string(G));
    log.write({{"kind", "run"},
               {"program", prog},
               {"replicas", ranks},
               {"global_batch", G},
               {"config", o_.config},
               {"parameters", model.num_parameters()},
               {"train_examples", task.size()},
               {"precision", precision::name(t.compute())},
               {"resumed_from", t.step()}});
    if (t.compute() != dtype::f32) say(std::string(prog) + ": precision " + kernels::describe_compute(t.compute()));

    // G examples per step (the global batch), of which this rank assembles B: [rank·B, (rank+1)·B)
    std::vector<std::size_t> order, global_pick(G), pick(B);
    auto shuffle = [&](std::size_t e) {
      order.resize(N);
      for (std::size_t i = 0; i < N; ++i) order[i] = i;
      const counter_rng rng(o_.seed);
      for (std::size_t i = N; i > 1; --i) std::swap(order[i - 1], order[rng.below(e, i, i)]);
    };
    shuffle(epoch);
    auto checkpoint = [&](std::size_t step) {
      SPARSELM_CHECK(all_finite(model.params()), prog, ": step ", step,
                     ": the model has non-finite parameters and is not saved; ", last_good_checkpoint(cd, cd.root()));
      t.check_replicas_agree("at the checkpoint of step " + std::to_string(step));
      t.stream_optimizer_state();  // sharded optimiser state: sent to rank 0 as it writes (collective)
      if (!writer) return;
      const nlohmann::json run = {
          {"data", {{"epoch", epoch}, {"next", next}}}, {"config", o_.config}, {"replicas", ranks}};
      cd.save(step, [&](const fs::path& dir) {
        io::save_model(dir, model);
        io::save_training_state(dir / io::state_file, t, run, up);
      });
      t.release_gathered_state();
    };

    detail::stop_signals signals(true);  // SIGINT, SIGTERM, SIGHUP: checkpoint and stop
    progress_bar bar(o_.steps, writer && isatty(STDERR_FILENO) != 0, t.step());
    loss_stats window, total;
    double window_sec = 0, window_norm = 0, train_sec = 0;
    std::size_t window_steps = 0, samples = 0;
    bool interrupted = false;
    while (t.step() < o_.steps) {
      for (std::size_t i = 0; i < G; ++i) {
        if (next == N) shuffle(++epoch), next = 0;
        global_pick[i] = order[next++];
      }
      std::copy_n(global_pick.begin() + std::ptrdiff_t(rank * B), B, pick.begin());
      const auto b = task.batch(pick);
      step_metrics m;
      try {
        m = t.train_step(std::span(&b, 1));
      } catch (const nonfinite_error& e) {
        bar.finish();
        log.write({{"kind", "nonfinite"}, {"step", e.step}, {"loss", e.loss}, {"grad_norm", e.grad_norm}});
        fail(prog, ": ", e.what(), "; the run stops. ", last_good_checkpoint(cd, cd.root()));
      }
      train_sec += m.seconds;
      samples += m.samples;
      if (!m.skipped) {
        window += m.loss;
        total += m.loss;
        window_sec += m.seconds;
        window_norm += m.grad_norm;
        ++window_steps;
      }
      bool update = false;  // a training line at every pattern update too, whatever the logging period
      if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>) update = ds && ds->has_pending();
      if (m.step % std::max<std::size_t>(o_.log_every, 1) == 0 || m.step == o_.steps || update) {
        auto j = task.loss_json(window);
        j["kind"] = "train";
        j["step"] = m.step;
        j["lr"] = m.lr;
        j["grad_norm"] = window_steps ? window_norm / double(window_steps) : 0.0;
        j["samples_per_s"] = window_sec > 0 ? double(window_steps * G) / window_sec : 0.0;
        j["epoch"] = epoch;
        if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
          if (ds) j.update(ds->take_metrics());
        log.write(j);
        char buf[64];
        std::snprintf(buf, sizeof buf, " | lr %.2e | %.1f samples/s", double(m.lr),
                      window_sec > 0 ? double(window_steps * G) / window_sec : 0.0);
        bar.update(m.step, task.brief(window) + buf);
        window = {};
        window_sec = window_norm = 0;
        window_steps = 0;
      }
      // a stop request on any rank stops them all after the same step
      const bool last = m.step == o_.steps, stop = group.any(detail::stop_requested != 0);
      if (last || stop || (o_.checkpoint_every && m.step % o_.checkpoint_every == 0)) checkpoint(m.step);
      if (stop) {
        interrupted = true;
        say("interrupted at step " + std::to_string(m.step) + "; state saved, rerun with --resume to continue");
        break;
      }
    }
    bar.finish();
    t.gather_parameters();  // ranks that kept only their pipeline stages: rank 0 holds the trained model
    nlohmann::json summary = {{"steps", t.step()},
                              {"interrupted", interrupted},
                              {"epochs", double(epoch) + double(next) / double(N)},
                              {"train_seconds", train_sec},
                              {"samples_per_s", train_sec > 0 ? double(samples) / train_sec : 0.0}};
    if (total.weight_sum > 0) summary["train_this_run"] = task.loss_json(total);
    if (auto l = cd.latest()) summary["checkpoint"] = l->string();
    return summary;
  }

 private:
  void say(const std::string& s) const {
    if (rank0_) std::fprintf(stderr, "%s\n", s.c_str());
  }
  finetune_job_options o_;
  bool rank0_ = true;  // only rank 0 of a data-parallel run prints
};

}  // namespace sparselm
