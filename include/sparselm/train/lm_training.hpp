#pragma once
// Language modelling for the training loop (train/training_loop.hpp): model batches viewing data
// batches (a rank's rows of a global batch), evaluation over a held-out pass, the task that
// trains on a token file's windows, and the unigram baseline.
//
//   sparselm::lm_task task(trainer, sampler, &valid_pass);
//   auto r = sparselm::train_loop(trainer, task, {.steps = 2000, .eval_every = 200}, log);

#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/data/lm_batches.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/trainer.hpp"
#include "sparselm/train/training_loop.hpp"

namespace sparselm {

// A model batch viewing a data batch (only its filled rows).
inline token_batch as_token_batch(const data::lm_batch& b) {
  const std::size_t n = b.rows * b.seq_len;
  return {std::span<const std::int32_t>(b.inputs).subspan(0, n), std::span<const std::int32_t>(b.targets).subspan(0, n),
          {}, b.rows, b.seq_len};
}

// Replica r of P's rows of a global batch (data parallelism: rows [r·B/P, (r+1)·B/P)); a batch
// of fewer than P rows (the last validation batch) leaves some ranks with none (batch 0).
inline token_batch shard_rows(const data::lm_batch& b, std::size_t r, std::size_t p) {
  const auto [lo, hi] = parallel::replica_group::slice(b.rows, r, p);
  const std::size_t T = b.seq_len;
  return {std::span<const std::int32_t>(b.inputs).subspan(lo * T, (hi - lo) * T),
          std::span<const std::int32_t>(b.targets).subspan(lo * T, (hi - lo) * T), {}, hi - lo, T};
}

// Mean loss etc. over (up to max_batches of, 0 = all) the evaluation pass, from its start. With
// replicas, the pass's batches are global ones: rank r evaluates its rows of each and the
// statistics are summed over the ranks.
// eval(batch) gives a batch's statistics, finish(stats) completes them before the sum over the
// replicas (a pipeline over ranks: trainer::evaluate and trainer::finish_evaluation).
template <class Eval, class Finish>
loss_stats evaluate_lm_with(Eval&& eval, Finish&& finish, data::lm_eval_pass& pass, std::size_t max_batches,
                            parallel::replica_group* group) {
  pass.rewind();
  loss_stats st;
  data::lm_batch b;
  const std::size_t P = group ? group->size() : 1, r = group ? group->rank() : 0;
  for (std::size_t k = 0; (max_batches == 0 || k < max_batches) && pass.next(b); ++k) {
    const token_batch mine = P == 1 ? as_token_batch(b) : shard_rows(b, r, P);
    if (mine.batch > 0) st += eval(mine);
  }
  pass.rewind();
  finish(st);
  if (group) sum_over_replicas(*group, st);
  return st;
}
template <class Model>
loss_stats evaluate_lm(Model& model, data::lm_eval_pass& pass, std::size_t max_batches = 0,
                       parallel::replica_group* group = nullptr) {
  return evaluate_lm_with([&](const token_batch& b) { return model.evaluate(b); }, [](loss_stats&) {}, pass,
                          max_batches, group);
}

inline nlohmann::json loss_json(const loss_stats& s) {
  // loss: the model's training loss (S1: the weighted loss); xentropy: the unweighted mean CE.
  return {{"loss", s.mean_loss()},         {"xentropy", s.mean_ce()}, {"perplexity", s.perplexity()},
          {"accuracy", s.accuracy()}, {"tokens", s.count}};
}

// Language modelling as a task of the training loop (train/training_loop.hpp): micro-batches of
// token windows from a resumable sampler (data parallelism: every rank draws the same global
// batches and trains on its own rows), evaluation on a held-out pass, the data position as the
// sampler's state. `valid` may be null (no evaluation).
template <class Trainer>
class lm_task {
 public:
  using batch_type = token_batch;

  lm_task(Trainer& t, data::lm_sampler& train, data::lm_eval_pass* valid)
      : t_(t), train_(train), valid_(valid), batches_(t.options().accumulation.steps),
        views_(t.options().accumulation.steps) {}

  std::span<const token_batch> next_batches() {
    parallel::replica_group& group = t_.replicas();
    const std::size_t rank = group.rank(), ranks = group.size();
    for (std::size_t k = 0; k < batches_.size(); ++k) {
      train_.next(batches_[k]);
      views_[k] = ranks == 1 ? as_token_batch(batches_[k]) : shard_rows(batches_[k], rank, ranks);
      SPARSELM_CHECK(views_[k].batch > 0, "data parallel: a training batch of ", batches_[k].rows, " rows for ", ranks,
                     " ranks leaves rank ", rank, " without rows");
    }
    return views_;
  }
  nlohmann::json data_state() const { return {{"sampler", train_.state()}}; }
  void restore_data(const nlohmann::json& run, const std::string& where) {
    SPARSELM_CHECK(run.contains("sampler"), where, ": training state has no data position");
    try {
      train_.restore(run["sampler"].template get<data::lm_sampler_state>());
    } catch (const nlohmann::json::exception& e) {
      fail(where, ": training state: bad data position (", e.what(), ")");
    }
  }
  std::size_t epoch() const { return train_.epoch(); }
  std::size_t global_batch() const { return train_.options().batch_size; }
  nlohmann::json loss_json(const loss_stats& s) const { return sparselm::loss_json(s); }
  std::string brief(const loss_stats& s) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "loss %.3f", s.mean_loss());
    return buf;
  }
  std::optional<loss_stats> evaluate(std::size_t max_batches) {
    if (!valid_) return std::nullopt;
    return evaluate_lm_with([&](const token_batch& b) { return t_.evaluate(b); },
                            [&](loss_stats& st) { t_.finish_evaluation(st); }, *valid_, max_batches, &t_.replicas());
  }
  std::string eval_message(std::size_t step, const loss_stats& st) const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %zu: validation loss %.4f, perplexity %.2f, accuracy %.3f", step,
                  st.mean_loss(), st.perplexity(), st.accuracy());
    return buf;
  }
  nlohmann::json run_line(const std::function<void(const std::string&)>&) { return nlohmann::json::object(); }
  void summary(const loop_result& r, nlohmann::json& s) const {
    s["tokens"] = r.tokens;
    s["tokens_per_s"] = r.train_seconds > 0 ? double(r.tokens) / r.train_seconds : 0.0;
    s["precision"] = precision::name(t_.compute());
    if (t_.scaler().is_dynamic())
      s["loss_scale"] = {{"scale", t_.scaler().scale()}, {"skipped_steps", t_.scaler().skipped_steps()}};
  }

 protected:
  Trainer& t_;

 private:
  data::lm_sampler& train_;
  data::lm_eval_pass* valid_;
  std::vector<data::lm_batch> batches_;
  std::vector<token_batch> views_;
};

// Unigram baseline: perplexity on `eval` of add-one-smoothed token frequencies counted on `train`.
inline double unigram_perplexity(const data::token_file& train, const data::token_file& eval, std::size_t vocab) {
  std::vector<double> count(vocab, 1.0);
  double total = double(vocab);
  for (std::uint64_t i = 0; i < train.size(); ++i) {
    const std::uint32_t id = train[i];
    SPARSELM_CHECK(id < vocab, train.path().string(), ": token ", id, " at ", i, " >= vocab ", vocab);
    count[id] += 1.0;
    total += 1.0;
  }
  double nll = 0;
  for (std::uint64_t i = 0; i < eval.size(); ++i) {
    const std::uint32_t id = eval[i];
    SPARSELM_CHECK(id < vocab, eval.path().string(), ": token ", id, " at ", i, " >= vocab ", vocab);
    nll -= std::log(count[id] / total);
  }
  return eval.size() ? std::exp(nll / double(eval.size())) : 0.0;
}

}  // namespace sparselm
