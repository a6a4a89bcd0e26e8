#pragma once
// A BERT pre-training job: batches from an example file (data/bert_examples.hpp) in a seeded
// shuffled order, training steps with MLM + NSP metrics, evaluation on a validation file,
// checkpoints (model + training state + data position) and exact resume, a progress bar.
//
//   bert_job job({.train = "train-128.bex", .valid = "valid-128.bex", .out = "runs/bert-p1", .steps = 1000});
//   nlohmann::json summary = job.run(model, trainer);      // (dynamic_sparsity* optional)
//
// Phase 2 of BERT pre-training (sequence 384 after 128) is a second job whose model starts from
// phase 1's weights (`init_from`: a checkpoint directory; the optimiser starts afresh). `init_from`
// may also be a HuggingFace BERT directory (io/huggingface.hpp); heads it lacks keep their
// initialisation, and the message says which.
// Data parallelism (a trainer with data_parallel::mpi and a replica group of P ranks): every rank
// draws the same global batch of P x batch_size examples and assembles its own batch_size of them;
// validation batches are global too; only rank 0 writes the run directory and prints
// (docs/distributed.md).
// Metrics (<out>/metrics.jsonl): "train" lines with mlm_loss, mlm_accuracy, nsp_loss,
// nsp_accuracy, loss, lr, grad_norm, samples_per_s, tokens_per_s (and loss_scale, overflow_steps
// when the trainer scales the loss); "eval" lines with the same losses on the validation file.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/data/bert_examples.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert_heads.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/progress.hpp"
#include "sparselm/train/replica_checks.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

struct bert_job_options {
  std::filesystem::path train, valid, out = "runs/bert";
  std::filesystem::path init_from;  // a checkpoint (ours, or an HF BERT directory) whose weights start this job
  std::size_t batch_size = 8, steps = 1000, eval_every = 100, eval_batches = 8, log_every = 10;
  std::size_t checkpoint_every = 0, keep_checkpoints = 2;
  std::uint64_t seed = 1234;
  bool resume = false;
  bool overwrite = false;  // fresh run in a used --out: delete its checkpoints, metrics and config first
  nlohmann::json config;  // the resolved run config (logged and saved)
};

// Where the shuffled pass over the examples stands.
struct bert_data_position {
  std::size_t epoch = 0, next = 0;
};

inline nlohmann::json bert_loss_json(const loss_stats& s) {
  return {{"loss", s.mean_loss()},
          {"mlm_loss", s.mean_ce()},
          {"mlm_accuracy", s.accuracy()},
          {"nsp_loss", s.aux_mean_loss()},
          {"nsp_accuracy", s.aux_accuracy()},
          {"predictions", s.count}};
}

class bert_job {
 public:
  explicit bert_job(bert_job_options o) : o_(std::move(o)) {}

  template <class Model, class Trainer, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, Sparsity* ds = nullptr) {
    namespace fs = std::filesystem;
    SPARSELM_CHECK(!o_.train.empty(), "bert_job: no training examples (--train)");
    parallel::replica_group& group = t.replicas();
    const std::size_t ranks = group.size(), rank = group.rank();
    const bool writer = rank == 0;
    rank0_ = writer;
    check_same_config(group, o_.config, "bert_pretrain");
    check_same_files(group, {o_.train, o_.valid}, "bert_pretrain");
    global_ = checked_mul(o_.batch_size, ranks, "bert_pretrain: batch_size x ranks");
    data::bert_example_file train(o_.train);
    check_file(train, model);
    std::optional<data::bert_example_file> valid;
    if (!o_.valid.empty()) {
      valid.emplace(o_.valid);
      check_file(*valid, model);
    }
    std::optional<io::run_lock> lock;  // the run directory's, held for the whole job (lm_job.hpp's rules)
    claim_run_dir(group, lock, o_.out, "bert_pretrain", o_.resume, o_.overwrite);
    io::checkpoint_dir cd(o_.out / "checkpoints", o_.keep_checkpoints);
    sparse::pattern_updater* up = nullptr;
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) up = &ds->updater();
    bert_data_position pos;
    if (o_.resume) {
      auto latest = cd.latest();
      SPARSELM_CHECK(latest.has_value(), "bert_job: --resume: no checkpoint in '", cd.root().string(), "'");
      io::load_model(*latest, model);
      auto run = io::load_training_state(*latest / io::state_file, t, up);
      SPARSELM_CHECK(run.contains("data"), latest->string(), ": training state has no data position");
      pos.epoch = run["data"].at("epoch").template get<std::size_t>();
      pos.next = run["data"].at("next").template get<std::size_t>();
      SPARSELM_CHECK(io::checkpoint_dir::step_name(t.step()) == latest->filename().string(), latest->string(),
                     ": the training state is at step ", t.step(), ", not the checkpoint's ('",
                     latest->filename().string(), "'): a damaged or mixed-up checkpoint");
      say("resuming from " + latest->string() + " (step " + std::to_string(t.step()) + ")");
    } else {
      if (!o_.init_from.empty()) {
        const auto from = io::resolve_checkpoint(o_.init_from);
        const auto r = io::load_pretrained(from, model, io::hf_bert_map());
        say("model weights from " + from.string() + " (" + r.summary() + ")");
      }
    }
    t.sync_parameters();  // every rank starts from rank 0's weights (checked)
    metrics_log log = open_run_files(writer, o_.out, o_.config, o_.resume, t.step());
    if (ranks > 1)
      say("bert_pretrain: data parallel over " + group.describe() + ", " + std::to_string(o_.batch_size) +
          " sequences per rank, global batch " + std::to_string(global_));
    log.write({{"kind", "run"},
               {"replicas", ranks},
               {"global_batch", global_},
               {"program", "bert_pretrain"},
               {"config", o_.config},
               {"parameters", model.num_parameters()},
               {"train_examples", train.size()},
               {"seq_len", train.info().seq_len},
               {"precision", precision::name(t.compute())},
               {"resumed_from", t.step()}});
    if (t.compute() != dtype::f32) say(std::string("bert_pretrain") + ": precision " + kernels::describe_compute(t.compute()));

    // G examples per step (the global batch), of which this rank assembles B: [rank·B, (rank+1)·B)
    const std::size_t B = o_.batch_size, G = global_, T = train.info().seq_len;
    std::vector<std::size_t> order, global_pick(G), pick(B);
    auto shuffle = [&](std::size_t epoch) {
      order.resize(train.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      const counter_rng rng(o_.seed);
      for (std::size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[rng.below(epoch, i, i)]);
    };
    shuffle(pos.epoch);
    data::bert_batch_arrays arrays;
    auto view = [&] {
      return bert_batch{arrays.ids, arrays.token_types, arrays.lengths, arrays.masked_positions, arrays.masked_labels,
                        arrays.nsp_labels, arrays.batch, arrays.seq};
    };
    auto evaluate = [&](std::size_t step) {
      if (!valid) return loss_stats{};
      loss_stats st;
      const std::size_t n = std::min(valid->size() / G, o_.eval_batches ? o_.eval_batches : SIZE_MAX);
      for (std::size_t k = 0; k < n; ++k) {
        for (std::size_t i = 0; i < B; ++i) pick[i] = k * G + rank * B + i;
        arrays.assemble(*valid, pick);
        st += t.evaluate(view());
      }
      t.finish_evaluation(st);  // a pipeline over ranks: each rank evaluated its stage
      sum_over_replicas(group, st);
      // the validation loss pools the whole evaluated set: MLM mean over its predictions plus NSP
      // mean over its sequences (the same on any number of ranks)
      st.loss_sum = st.mean_ce() + st.aux_mean_loss();
      st.weight_sum = 1;
      auto j = bert_loss_json(st);
      j["kind"] = "eval";
      j["step"] = step;
      log.write(j);
      char buf[200];
      std::snprintf(buf, sizeof buf, "step %zu: validation MLM loss %.4f (accuracy %.3f), NSP loss %.4f (accuracy %.3f)",
                    step, st.mean_ce(), st.accuracy(), st.aux_mean_loss(), st.aux_accuracy());
      say(buf);
      return st;
    };
    auto checkpoint = [&](std::size_t step) {
      // A non-finite model is never saved (it would become `latest` and push good ones out).
      SPARSELM_CHECK(all_finite(model.params()), "bert_pretrain: step ", step,
                     ": the model has non-finite parameters and is not saved; ",
                     last_good_checkpoint(cd, cd.root()));
      t.check_replicas_agree("at the checkpoint of step " + std::to_string(step));
      t.stream_optimizer_state();  // sharded optimiser state: sent to rank 0 as it writes (collective)
      if (!writer) return;
      const nlohmann::json run = {
          {"data", {{"epoch", pos.epoch}, {"next", pos.next}}}, {"config", o_.config}, {"replicas", ranks}};
      cd.save(step, [&](const fs::path& dir) {
        io::save_model(dir, model);
        io::save_training_state(dir / io::state_file, t, run, up);
      });
      t.release_gathered_state();
    };

    detail::stop_signals signals(true);  // SIGINT, SIGTERM, SIGHUP: checkpoint and stop
    progress_bar bar(o_.steps, writer && isatty(STDERR_FILENO) != 0, t.step());
    if (t.step() == 0 && o_.eval_every) evaluate(0);
    loss_stats window, last_eval;
    double window_sec = 0, window_norm = 0, train_sec = 0;
    std::size_t window_steps = 0, samples = 0, overflows = 0;
    const bool scaling = t.scaler().is_dynamic() || t.scaler().scale() != 1.0f;
    bool interrupted = false;
    while (t.step() < o_.steps) {
      for (std::size_t i = 0; i < G; ++i) {
        if (pos.next == order.size()) shuffle(++pos.epoch), pos.next = 0;
        global_pick[i] = order[pos.next++];
      }
      std::copy_n(global_pick.begin() + std::ptrdiff_t(rank * B), B, pick.begin());
      arrays.assemble(train, pick);
      const bert_batch b = view();
      step_metrics m;
      try {
        m = t.train_step(std::span<const bert_batch>(&b, 1));
      } catch (const nonfinite_error& e) {
        bar.finish();
        log.write({{"kind", "nonfinite"}, {"step", e.step}, {"loss", e.loss}, {"grad_norm", e.grad_norm}});
        fail("bert_pretrain: ", e.what(), "; the run stops. ", last_good_checkpoint(cd, cd.root()));
      }
      train_sec += m.seconds;
      samples += m.samples;
      overflows += m.overflow;
      if (m.skipped && !m.overflow)
        log.write({{"kind", "skipped"}, {"step", m.step}, {"loss", m.loss.mean_loss()}, {"grad_norm", m.grad_norm}});
      if (!m.skipped) {  // a skipped step's numbers stay out of the logged means
        window += m.loss;
        window_sec += m.seconds;
        window_norm += m.grad_norm;
        ++window_steps;
      }
      bool update = false;  // a training line at every pattern update too, whatever the logging period
      if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>) update = ds && ds->has_pending();
      if (m.step % std::max<std::size_t>(o_.log_every, 1) == 0 || m.step == o_.steps || update) {
        auto j = bert_loss_json(window);
        j["kind"] = "train";
        j["step"] = m.step;
        j["lr"] = m.lr;
        j["grad_norm"] = window_steps ? window_norm / double(window_steps) : 0.0;
        j["samples_per_s"] = window_sec > 0 ? double(window_steps * G) / window_sec : 0.0;
        j["tokens_per_s"] = window_sec > 0 ? double(window_steps * G * T) / window_sec : 0.0;
        j["epoch"] = pos.epoch;
        if (scaling) {  // the scale of the window's last step, and the steps the scaler skipped so far
          j["loss_scale"] = m.loss_scale;
          j["overflow_steps"] = t.scaler().skipped_steps();
        }
        if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
          if (ds) j.update(ds->take_metrics());
        log.write(j);
        char buf[160];
        std::snprintf(buf, sizeof buf, "mlm %.3f nsp %.3f | lr %.2e | %.1f samples/s", window.mean_ce(),
                      window.aux_mean_loss(), double(m.lr), window_sec > 0 ? double(window_steps * G) / window_sec : 0.0);
        bar.update(m.step, buf);
        window = {};
        window_sec = window_norm = 0;
        window_steps = 0;
      }
      // a stop request on any rank stops them all after the same step
      const bool last = m.step == o_.steps, stop = group.any(detail::stop_requested != 0);
      if (last || (o_.eval_every && m.step % o_.eval_every == 0)) last_eval = evaluate(m.step);
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
                              {"train_seconds", train_sec},
                              {"samples_per_s", train_sec > 0 ? double(samples) / train_sec : 0.0}};
    if (scaling) summary["loss_scaling"] = {{"scale", t.scaler().scale()}, {"overflow_steps_this_run", overflows},
                                            {"overflow_steps", t.scaler().skipped_steps()}};
    if (valid && last_eval.count) summary["valid"] = bert_loss_json(last_eval);
    if (auto l = cd.latest()) summary["checkpoint"] = l->string();
    return summary;
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
  void say(const std::string& s) const {
    if (rank0_) std::fprintf(stderr, "%s\n", s.c_str());
  }

  bert_job_options o_;
  std::size_t global_ = 0;  // examples per step over all ranks
  bool rank0_ = true;       // only rank 0 of a data-parallel run prints
};

}  // namespace sparselm
