#pragma once
// A BERT pre-training job: batches from an example file (data/bert_examples.hpp) in a seeded
// shuffled order, training steps with MLM + NSP metrics, evaluation on a validation file,
// checkpoints (model + training state + data position) and exact resume, a progress bar: the
// BERT task (bert_pretrain_task) of the run driver (train/run.hpp), which owns the run directory,
// resume, checkpoints, signals, metrics and the loop. A step is the trainer's accumulation.steps
// micro-batches of batch_size examples (per rank).
//
//   bert_job job({.train = "train-128.bex", .valid = "valid-128.bex", .out = "runs/bert-p1", .loop = {.steps = 1000}});
//   nlohmann::json summary = job.run(model, trainer);      // (dynamic_sparsity* optional)
//
// Phase 2 of BERT pre-training (sequence 384 after 128) is a second job whose model starts from
// phase 1's weights (`init_from`: a checkpoint directory; the optimiser starts afresh). `init_from`
// may also be a HuggingFace BERT directory (io/huggingface.hpp); heads it lacks keep their
// initialisation, and the message says which.
// Data parallelism (a trainer with data_parallel::mpi and a replica group of P ranks): every rank
// draws the same global batch of P x batch_size examples and assembles its own batch_size of them;
// validation batches are global too; only rank 0 writes the run directory and prints
// (docs/design/distribution.md).
// Metrics (<out>/metrics.jsonl): "train" lines with mlm_loss, mlm_accuracy, nsp_loss,
// nsp_accuracy, loss, lr, grad_norm, samples_per_s, tokens_per_s (and loss_scale, overflow_steps
// when the trainer scales the loss); "eval" lines with the same losses on the validation file.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/checked.hpp"
#include "sparselm/data/bert_examples.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert_heads.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/example_order.hpp"
#include "sparselm/train/run.hpp"

namespace sparselm {

struct bert_job_options {
  std::filesystem::path train, valid, out = "runs/bert";
  std::filesystem::path init_from;  // a checkpoint (ours, or an HF BERT directory) whose weights start this job
  std::size_t batch_size = 8, keep_checkpoints = 2;
  loop_options loop{.eval_batches = 8};  // steps, evaluation, logging, checkpoints, stop_at_loss
  std::uint64_t seed = 1234;
  bool resume = false;
  bool overwrite = false;  // fresh run in a used --out: delete its checkpoints, metrics and config first
  nlohmann::json config;  // the resolved run config (logged and saved)
};

inline nlohmann::json bert_loss_json(const loss_stats& s) {
  return {{"loss", s.mean_loss()},
          {"mlm_loss", s.mean_ce()},
          {"mlm_accuracy", s.accuracy()},
          {"nsp_loss", s.aux_mean_loss()},
          {"nsp_accuracy", s.aux_accuracy()},
          {"predictions", s.count}};
}

// Weights for a fresh run from `from` (our checkpoint or a HuggingFace BERT directory; the heads
// it lacks keep their initialisation from `seed`), and the line that says which (on `writer` only).
// A model split over a tensor-parallel group takes its slices of the whole model's weights.
template <class Model>
void load_init_weights(Model& model, const std::filesystem::path& from_dir, bool writer, std::uint64_t seed) {
  const auto from = io::resolve_checkpoint(from_dir);
  io::hf_load_report r;
  bool split = false;
  if constexpr (requires { model.tensor_split(); } && has_unsplit_twin<Model>) {
    if (model.tensor_split().active()) {
      Model whole = unsplit_model(model, whole_plan(model, model.tensor_split().size));
      whole.init(seed);
      r = io::load_pretrained(from, whole, io::hf_bert_map());
      take_slices(whole, whole.params(), model, model.params());
      split = true;
    }
  }
  if (!split) r = io::load_pretrained(from, model, io::hf_bert_map());
  if (writer) std::fprintf(stderr, "model weights from %s (%s)\n", from.string().c_str(), r.summary().c_str());
}

// BERT pre-training as a task of the run driver (train/run.hpp): micro-batches of examples in a
// seeded shuffled order (train/example_order.hpp), MLM + NSP metrics, evaluation on the first
// batches of a validation file.
template <class Trainer>
class bert_pretrain_task {
 public:
  using batch_type = bert_batch;

  bert_pretrain_task(Trainer& t, const data::bert_example_file& train, const data::bert_example_file* valid,
                     const bert_job_options& o)
      : t_(t), train_(train), valid_(valid), o_(o),
        order_(train.size(), o.seed, o.batch_size, t.replicas().rank(), t.replicas().size(), "bert_pretrain"),
        arrays_(t.options().accumulation.steps), views_(arrays_.size()) {}

  std::span<const bert_batch> next_batches() {
    for (std::size_t k = 0; k < arrays_.size(); ++k) views_[k] = assemble(train_, order_.draw(), k);
    return views_;
  }
  nlohmann::json data_state() const { return order_.state(); }
  void restore_data(const nlohmann::json& run, const std::string& where) { order_.restore(run, where); }
  std::size_t epoch() const { return order_.epoch(); }
  std::size_t global_batch() const { return order_.global_batch(); }
  nlohmann::json loss_json(const loss_stats& s) const { return bert_loss_json(s); }
  std::string brief(const loss_stats& s) const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "mlm %.3f nsp %.3f", s.mean_ce(), s.aux_mean_loss());
    return buf;
  }
  // The first global batches of the validation file, each rank its rows.
  std::optional<loss_stats> evaluate(std::size_t max_batches) {
    if (!valid_) return std::nullopt;
    parallel::replica_group& group = t_.replicas();
    const std::size_t B = o_.batch_size, G = global_batch(), rank = group.rank();
    std::vector<std::size_t> pick(B);
    loss_stats st;
    const std::size_t n = std::min(valid_->size() / G, max_batches ? max_batches : SIZE_MAX);
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t i = 0; i < B; ++i) pick[i] = k * G + rank * B + i;
      st += t_.evaluate(assemble(*valid_, pick, 0));
    }
    t_.finish_evaluation(st);  // a pipeline over ranks: each rank evaluated its stage
    sum_over_replicas(group, st);
    // the validation loss pools the whole evaluated set: MLM mean over its predictions plus NSP
    // mean over its sequences (the same on any number of ranks)
    st.loss_sum = st.mean_ce() + st.aux_mean_loss();
    st.weight_sum = 1;
    return st;
  }
  std::string eval_message(std::size_t step, const loss_stats& st) const {
    char buf[200];
    std::snprintf(buf, sizeof buf, "step %zu: validation MLM loss %.4f (accuracy %.3f), NSP loss %.4f (accuracy %.3f)",
                  step, st.mean_ce(), st.accuracy(), st.aux_mean_loss(), st.aux_accuracy());
    return buf;
  }
  nlohmann::json run_line(const std::function<void(const std::string&)>& say) {
    parallel::replica_group& group = t_.replicas();
    if (group.size() > 1)
      say("bert_pretrain: data parallel over " + group.describe() + ", " + std::to_string(o_.batch_size) +
          " sequences per rank, global batch " + std::to_string(global_batch()));
    return {{"train_examples", train_.size()}, {"seq_len", train_.info().seq_len}};
  }
  void summary(const loop_result& r, nlohmann::json& s) const {
    if (t_.scaler().is_dynamic() || t_.scaler().scale() != 1.0f)
      s["loss_scaling"] = {{"scale", t_.scaler().scale()},
                           {"overflow_steps_this_run", r.overflows},
                           {"overflow_steps", t_.scaler().skipped_steps()}};
  }

 private:
  // Examples of f into micro-batch k's arrays, and the batch viewing them.
  bert_batch assemble(const data::bert_example_file& f, std::span<const std::size_t> examples, std::size_t k) {
    data::bert_batch_arrays& a = arrays_[k];
    a.assemble(f, examples);
    return {a.ids, a.token_types, a.lengths, a.masked_positions, a.masked_labels, a.nsp_labels, a.batch, a.seq};
  }

  Trainer& t_;
  const data::bert_example_file& train_;
  const data::bert_example_file* valid_;
  const bert_job_options& o_;
  example_order order_;
  std::vector<data::bert_batch_arrays> arrays_;  // one per micro-batch of a step
  std::vector<bert_batch> views_;
};

class bert_job {
 public:
  explicit bert_job(bert_job_options o) : o_(std::move(o)) {}

  template <class Model, class Trainer, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, Sparsity* ds = nullptr) {
    SPARSELM_CHECK(!o_.train.empty(), "bert_job: no training examples (--train)");
    SPARSELM_CHECK(o_.loop.stop_at_loss == 0 || !o_.valid.empty(),
                   "bert_pretrain: stop_at_loss (--stop-at-loss) needs validation examples (--valid)");
    global_ = checked_mul(o_.batch_size, t.replicas().size(), "bert_pretrain: batch_size x ranks");
    data::bert_example_file train(o_.train);
    check_file(train, model);
    std::optional<data::bert_example_file> valid;
    if (!o_.valid.empty()) {
      valid.emplace(o_.valid);
      check_file(*valid, model);
    }
    bert_pretrain_task<Trainer> task(t, train, valid ? &*valid : nullptr, o_);
    const bool writer = t.processes().rank() == 0;
    return run_training(model, t, task,
                        {.out = o_.out,
                         .program = "bert_pretrain",
                         .config = o_.config,
                         .loop = o_.loop,
                         .resume = o_.resume,
                         .overwrite = o_.overwrite,
                         .keep_checkpoints = o_.keep_checkpoints,
                         .inputs = {o_.train, o_.valid},
                         .fresh_start = [&] {
                           if (!o_.init_from.empty()) load_init_weights(model, o_.init_from, writer, o_.seed);
                         }},
                        ds);
  }

 private:
  template <class Model>
  void check_file(const data::bert_example_file& f, const Model& model) const {
    SPARSELM_CHECK(f.info().vocab_size <= model.vocab_size(), f.name(), ": vocabulary ", f.info().vocab_size,
                   " exceeds the model's vocab_size ", model.vocab_size());
    SPARSELM_CHECK(f.info().seq_len <= model.max_positions(), f.name(), ": sequences of ", f.info().seq_len,
                   " tokens exceed the model's max_position_embeddings ", model.max_positions());
    SPARSELM_CHECK(f.size() >= global_, f.name(), ": ", f.size(), " examples, fewer than one batch of ", global_,
                   global_ == o_.batch_size ? "" : " (the global batch of the ranks)");
  }

  bert_job_options o_;
  std::size_t global_ = 0;  // examples per micro-batch over all ranks
};

}  // namespace sparselm
