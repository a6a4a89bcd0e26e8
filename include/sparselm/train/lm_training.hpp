#pragma once
// The language-model training loop shared by the examples: draw micro-batches from a resumable
// sampler, step the trainer, log JSON-lines metrics, evaluate on held-out data every N steps,
// checkpoint every M steps and on Ctrl-C, and draw a progress bar.
//
//   sparselm::lm_loop_options o{.steps = 2000, .eval_every = 200};
//   sparselm::run_lm_training(trainer, sampler, &valid_pass, o, log, {.checkpoint = save});
//
// SIGINT, SIGTERM and SIGHUP finish the current step, checkpoint and return (interrupted). A step
// whose loss or gradient norm is not finite is logged ("kind": "skipped" or "nonfinite"); the
// trainer's nonfinite_error propagates to the caller, which names the last good checkpoint.

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/data/lm_batches.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/progress.hpp"
#include "sparselm/train/trainer.hpp"

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

struct lm_loop_options {
  std::size_t steps = 1000;        // optimiser steps in total (a resumed run continues up to it)
  std::size_t eval_every = 100;    // evaluate every this many steps (0: only at the end)
  std::size_t eval_batches = 0;    // validation batches per evaluation (0: the whole split)
  std::size_t log_every = 10;      // training metrics every this many steps
  std::size_t checkpoint_every = 0;  // 0: only at the end (and on interrupt)
  bool stop_on_interrupt = true;   // SIGINT/SIGTERM: finish the step, checkpoint, return
};

struct lm_loop_hooks {
  std::function<void(std::size_t step)> checkpoint;              // save everything needed to resume
  std::function<nlohmann::json(std::size_t step)> extra_metrics;  // merged into each training line
  std::function<bool(std::size_t step)> log_now;  // a training line after this step too (e.g. a pattern update)
  std::function<void(const std::string&)> message;                // one-line messages (default: stderr)
};

struct lm_loop_result {
  std::size_t steps_done = 0;
  bool interrupted = false;
  loss_stats last_eval;
  double train_seconds = 0;
  std::size_t tokens = 0, samples = 0;
};

namespace detail {
inline volatile std::sig_atomic_t stop_requested = 0;
inline void request_stop(int) { stop_requested = 1; }

// SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh connection) request a stop while alive;
// the default actions come back when it goes, also when an exception unwinds the loop.
class stop_signals {
 public:
  explicit stop_signals(bool on) : on_(on) {
    if (!on_) return;
    stop_requested = 0;
    for (int s : signals) std::signal(s, request_stop);
  }
  ~stop_signals() {
    if (on_)
      for (int s : signals) std::signal(s, SIG_DFL);
  }
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;
  static constexpr int signals[] = {SIGINT, SIGTERM, SIGHUP};

 private:
  bool on_;
};
}  // namespace detail

template <class Trainer>
lm_loop_result run_lm_training(Trainer& t, data::lm_sampler& train, data::lm_eval_pass* valid,
                               const lm_loop_options& o, metrics_log& log, lm_loop_hooks hooks = {}) {
  const std::size_t micro = t.options().accumulation.steps;
  std::vector<data::lm_batch> batches(micro);
  std::vector<token_batch> views(micro);
  // Data parallelism: every rank draws the same global batches and trains on its own rows; only
  // rank 0 talks (log lines, progress, messages).
  parallel::replica_group& group = t.replicas();
  parallel::replica_group& procs = t.processes();  // the replicas, or a pipeline's ranks
  const std::size_t rank = group.rank(), ranks = group.size();
  const bool talk = procs.rank() == 0;
  progress_bar bar(o.steps, talk && isatty(STDERR_FILENO) != 0, t.step());
  auto say = [&](const std::string& s) {
    if (!talk) return;
    if (hooks.message)
      hooks.message(s);
    else
      bar.message(s);
  };
  lm_loop_result r;
  auto evaluate = [&](std::size_t step) {
    if (!valid) return;
    const auto t0 = std::chrono::steady_clock::now();
    r.last_eval = evaluate_lm_with([&](const token_batch& b) { return t.evaluate(b); },
                                   [&](loss_stats& st) { t.finish_evaluation(st); }, *valid, o.eval_batches, &group);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto j = loss_json(r.last_eval);
    j["kind"] = "eval";
    j["step"] = step;
    j["seconds"] = sec;
    log.write(j);
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %zu: validation loss %.4f, perplexity %.2f, accuracy %.3f", step,
                  r.last_eval.mean_loss(), r.last_eval.perplexity(), r.last_eval.accuracy());
    say(buf);
  };
  detail::stop_signals signals(o.stop_on_interrupt);
  if (t.step() == 0 && o.eval_every > 0) evaluate(0);
  loss_stats window;
  double window_sec = 0, window_norm = 0;
  std::size_t window_tokens = 0, window_samples = 0, window_steps = 0;
  while (t.step() < o.steps) {
    for (std::size_t k = 0; k < micro; ++k) {
      train.next(batches[k]);
      views[k] = ranks == 1 ? as_token_batch(batches[k]) : shard_rows(batches[k], rank, ranks);
      SPARSELM_CHECK(views[k].batch > 0, "data parallel: a training batch of ", batches[k].rows, " rows for ", ranks,
                     " ranks leaves rank ", rank, " without rows");
    }
    step_metrics m;
    try {
      m = t.train_step(views);
    } catch (const nonfinite_error& e) {
      bar.finish();
      log.write({{"kind", "nonfinite"}, {"step", e.step}, {"loss", e.loss}, {"grad_norm", e.grad_norm}});
      throw;
    }
    if (m.overflow) {  // dynamic loss scaling: the scale backs off, nothing else to say
      log.write({{"kind", "overflow"}, {"step", m.step}, {"loss_scale", m.loss_scale}});
    } else if (m.skipped) {
      const double loss = m.loss.mean_loss();
      log.write({{"kind", "skipped"}, {"step", m.step}, {"loss", loss}, {"grad_norm", m.grad_norm}});
      say("step " + std::to_string(m.step) + ": the loss is " + std::to_string(loss) + " and the gradient norm " +
          std::to_string(m.grad_norm) + "; update skipped (trainer.on_nonfinite = skip)");
    }
    r.train_seconds += m.seconds;
    r.tokens += m.tokens;
    r.samples += m.samples;
    if (!m.skipped) {  // a skipped step's non-finite numbers stay out of the logged means
      window += m.loss;
      window_sec += m.seconds;
      window_norm += m.grad_norm;
      window_tokens += m.tokens;
      window_samples += m.samples;
      ++window_steps;
    }
    const std::size_t step = m.step;
    if (step % std::max<std::size_t>(o.log_every, 1) == 0 || step == o.steps ||
        (hooks.log_now && hooks.log_now(step))) {
      auto j = loss_json(window);
      j["kind"] = "train";
      j["step"] = step;
      j["lr"] = m.lr;
      j["grad_norm"] = window_steps ? window_norm / double(window_steps) : 0.0;
      j["tokens_per_s"] = window_sec > 0 ? double(window_tokens) / window_sec : 0.0;
      j["samples_per_s"] = window_sec > 0 ? double(window_samples) / window_sec : 0.0;
      j["epoch"] = train.epoch();
      if (t.scaler().is_dynamic() || t.scaler().scale() != 1.0f) j["loss_scale"] = m.loss_scale;
      if (hooks.extra_metrics) j.update(hooks.extra_metrics(step));
      log.write(j);
      char buf[160];
      std::snprintf(buf, sizeof buf, "loss %.3f | lr %.2e | %.0f tok/s", window.mean_loss(), double(m.lr),
                    window_sec > 0 ? double(window_tokens) / window_sec : 0.0);
      bar.update(step, buf);
      window = {};
      window_sec = window_norm = 0;
      window_tokens = window_samples = window_steps = 0;
    }
    const bool last = step == o.steps;
    if ((o.eval_every && step % o.eval_every == 0) || (last && o.eval_every == 0)) evaluate(step);
    else if (last) evaluate(step);
    // A stop request on any rank stops them all after the same step.
    const bool stop = procs.any(o.stop_on_interrupt && detail::stop_requested);
    if (hooks.checkpoint && (last || stop || (o.checkpoint_every && step % o.checkpoint_every == 0)))
      hooks.checkpoint(step);
    if (stop) {
      r.interrupted = true;
      say("interrupted at step " + std::to_string(step) + "; state saved, rerun with --resume to continue");
      break;
    }
  }
  bar.finish();
  r.steps_done = t.step();
  return r;
}

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
