#pragma once
// A fine-tuning job: a model (bert_classifier, bert_qa, ...) trained on an in-memory set of
// examples in a seeded shuffled order, with checkpoints (model + training state + data position),
// exact resume, metrics and a progress bar: the run driver's (train/run.hpp) with finetune_task
// below. The fine-tuning task supplies the batches and names the losses; evaluation is the
// program's (it runs after the job, on the trained model).
//
//   struct my_task {                                    // what finetune_job needs of a task
//     using batch_type = bert_classify_batch;
//     std::size_t size() const;                         // training examples
//     // micro-batch k of a step (k < the trainer's accumulation.steps), valid until the next call
//     // with that k; a task with batch(examples) alone (one buffer) trains without accumulation
//     batch_type batch(std::span<const std::size_t> examples, std::size_t k);
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
// A step is the trainer's accumulation.steps micro-batches of batch_size examples (per rank).
// Metrics (<out>/metrics.jsonl): a "run" line, then "train" lines with the task's losses, lr,
// grad_norm, samples_per_s, tokens_per_s and epoch. With a dynamic_sparsity (train/dynamic_sparsity.hpp) the
// block-sparse patterns are pruned and regrown on its update steps while fine-tuning; a "train"
// line after an update carries its statistics, and checkpoints keep the updater's explored maps.
//
// Data parallelism (a trainer with data_parallel::mpi and a replica group of P ranks, as
// bert_job): every rank draws the same global batch of P x batch_size examples from the same
// shuffled order and takes its rows [rank·B, (rank+1)·B); the trainer divides by the global count,
// so P ranks train what one process does with the global batch. The resolved config and the
// task's training examples (a CRC-32C of them, Task::fingerprint()) must be equal on every
// rank; only rank 0 writes the run directory and prints; a stop request on any rank stops all
// after the same step.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/bert_job.hpp"
#include "sparselm/train/example_order.hpp"
#include "sparselm/train/run.hpp"

namespace sparselm {

struct finetune_job_options {
  std::filesystem::path out = "runs/finetune";
  std::filesystem::path init_from;  // weights to start from (fresh run only)
  std::string program = "finetune";  // names the job in messages and metrics
  std::size_t steps = 100, batch_size = 16, log_every = 10;
  std::size_t checkpoint_every = 0, keep_checkpoints = 2;
  bool checkpoints = true;  // false: none at all, not even at the end (run config "checkpoints")
  std::uint64_t seed = 1234;
  bool resume = false, overwrite = false;
  nlohmann::json config;  // the resolved run config (logged and saved)
};

// Fine-tuning as a task of the run driver (train/run.hpp): a fine-tuning task (above) drawn in a
// seeded shuffled order (train/example_order.hpp); no held-out evaluation (the program's, after the
// job).
template <class Trainer, class Task>
class finetune_task {
 public:
  using batch_type = typename Task::batch_type;

  finetune_task(Trainer& t, Task& task, const finetune_job_options& o)
      : t_(t), task_(task), o_(o),
        order_(task.size(), o.seed, o.batch_size, t.replicas().rank(), t.replicas().size(), o.program),
        batches_(t.options().accumulation.steps) {
    if constexpr (!requires { task.batch(std::span<const std::size_t>(), std::size_t(1)); })
      SPARSELM_CHECK(batches_.size() == 1, o.program, ": gradient accumulation needs a task whose batch(examples, ",
                     "micro_batch) keeps a micro-batch per index");
  }

  std::span<const batch_type> next_batches() {
    for (std::size_t k = 0; k < batches_.size(); ++k) {
      if constexpr (requires { task_.batch(std::span<const std::size_t>(), k); })
        batches_[k] = task_.batch(order_.draw(), k);
      else
        batches_[k] = task_.batch(order_.draw());
    }
    return batches_;
  }
  nlohmann::json data_state() const { return order_.state(); }
  void restore_data(const nlohmann::json& run, const std::string& where) { order_.restore(run, where); }
  std::size_t epoch() const { return order_.epoch(); }
  std::size_t global_batch() const { return order_.global_batch(); }
  nlohmann::json loss_json(const loss_stats& s) const { return task_.loss_json(s); }
  std::string brief(const loss_stats& s) const { return task_.brief(s); }
  std::optional<loss_stats> evaluate(std::size_t) { return std::nullopt; }
  std::string eval_message(std::size_t, const loss_stats&) const { return {}; }
  nlohmann::json run_line(const std::function<void(const std::string&)>& say) {
    parallel::replica_group& group = t_.replicas();
    if (group.size() > 1)
      say(o_.program + ": data parallel over " + group.describe() + ", " + std::to_string(o_.batch_size) +
          " examples per rank, global batch " + std::to_string(global_batch()));
    return {{"train_examples", task_.size()}};
  }
  void summary(const loop_result& r, nlohmann::json& s) const {
    s["epochs"] = double(order_.epoch()) + double(order_.next()) / double(task_.size());
    if (r.trained.weight_sum > 0) s["train_this_run"] = task_.loss_json(r.trained);
  }

 private:
  Trainer& t_;
  Task& task_;
  const finetune_job_options& o_;
  example_order order_;
  std::vector<batch_type> batches_;  // the step's micro-batches
};

class finetune_job {
 public:
  explicit finetune_job(finetune_job_options o) : o_(std::move(o)) {}

  template <class Model, class Trainer, class Task, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, Task& task, Sparsity* ds = nullptr) {
    SPARSELM_CHECK(task.size() > 0, o_.program, ": no training examples");
    SPARSELM_CHECK(o_.batch_size > 0, o_.program, ": batch size 0");
    std::optional<std::uint64_t> examples;
    if constexpr (requires { task.fingerprint(); }) examples = std::uint64_t(task.fingerprint());
    finetune_task<Trainer, Task> ft(t, task, o_);
    const bool writer = t.processes().rank() == 0;
    return run_training(model, t, ft,
                        {.out = o_.out,
                         .program = o_.program,
                         .config = o_.config,
                         .loop = {.steps = o_.steps,
                                  .eval_every = 0,
                                  .log_every = o_.log_every,
                                  .checkpoint_every = o_.checkpoint_every,
                                  .checkpoints = o_.checkpoints},
                         .resume = o_.resume,
                         .overwrite = o_.overwrite,
                         .keep_checkpoints = o_.keep_checkpoints,
                         .examples = examples,
                         .fresh_start = [&] {
                           if (!o_.init_from.empty()) load_init_weights(model, o_.init_from, writer, o_.seed);
                         }},
                        ds);
  }

 private:
  finetune_job_options o_;
};

}  // namespace sparselm
