#pragma once
// The one training loop (the run driver's, train/run.hpp; also used bare by examples/sparsity_study):
// draws each step's micro-batches from a task, steps the trainer, logs JSON-lines metrics over
// windows of steps, evaluates every N steps, checkpoints every M steps and on a stop signal, and
// draws a progress bar. What is trained on is the task's (training_task below): language
// modelling (train/lm_training.hpp), BERT pre-training (train/bert_job.hpp), fine-tuning
// (train/finetune_job.hpp).
//
//   sparselm::loop_options o{.steps = 2000, .eval_every = 200};
//   auto r = sparselm::train_loop(trainer, task, o, log, {.checkpoint = save});
//
// Metrics lines: "train" (the task's loss_json of the window, lr, grad_norm, samples_per_s,
// tokens_per_s, epoch, wall_seconds; loss_scale and overflow_steps when the loss is scaled; the hooks' extra
// metrics, e.g. a pattern update's), "eval" (the task's loss_json, seconds, wall_seconds), "overflow" (dynamic
// loss scaling backed off), "skipped" (a non-finite step skipped) and "nonfinite" (the step that
// stopped the run). SIGINT, SIGTERM and SIGHUP finish the current step, checkpoint and return
// (interrupted), on every rank after the same step. The trainer's nonfinite_error propagates to
// the caller, which names the last good checkpoint. wall_seconds: this run's wall-clock seconds of
// training so far (steps, data, pattern updates and logging; evaluations and checkpoints left out),
// the clock of a time-to-quality comparison (benchmarks/time_to_quality.sh).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/progress.hpp"
#include "sparselm/train/trainer.hpp"

namespace sparselm {

struct loop_options {
  std::size_t steps = 1000;        // optimiser steps in total (a resumed run continues up to it)
  std::size_t eval_every = 100;    // evaluate every this many steps (0: only at the end)
  std::size_t eval_batches = 0;    // validation batches per evaluation (0: the whole split)
  std::size_t log_every = 10;      // training metrics every this many steps
  std::size_t checkpoint_every = 0;  // 0: only at the end (and on interrupt)
  bool checkpoints = true;         // false: none at all (a measurement run whose state the disk cannot hold)
  bool stop_on_interrupt = true;   // SIGINT/SIGTERM/SIGHUP: finish the step, checkpoint, return
  double stop_at_loss = 0;         // > 0: stop (and checkpoint) at the first evaluation whose loss is at or below it
};

struct loop_hooks {
  std::function<void(std::size_t step)> checkpoint;              // save everything needed to resume
  std::function<nlohmann::json(std::size_t step)> extra_metrics;  // merged into each training line
  std::function<bool(std::size_t step)> log_now;  // a training line after this step too (e.g. a pattern update)
  std::function<void(const std::string&)> message;                // one-line messages (default: stderr)
};

struct loop_result {
  std::size_t steps_done = 0;
  bool interrupted = false;
  std::optional<std::size_t> reached_loss_at;  // stop_at_loss: the step whose evaluation reached it
  std::optional<loss_stats> last_eval;  // the last evaluation of this run, if any
  loss_stats trained;                   // the losses of this run's steps (skipped ones left out)
  double train_seconds = 0;
  std::size_t tokens = 0, samples = 0, overflows = 0;
};

// What the loop (and the run driver) needs of a task: what is trained on and how it is scored.
// A task holds its trainer (for its rank and replicas) and its data.
//   batch_type                   the trainer's batch (token_batch, bert_batch, ...)
//   next_batches()               the next step's micro-batches (as many as the trainer's
//                                accumulation.steps), advancing the data position; valid until
//                                the next call
//   data_state()                 the data position, a JSON object merged into the checkpoint's
//                                training state (e.g. {"sampler": ...} or {"data": ...})
//   restore_data(state, where)   resume: back to the position saved in the training state `state`
//                                (`where` names the checkpoint in errors)
//   epoch()                      passes over the training data so far (logged with training lines)
//   global_batch()               rows of a micro-batch over all ranks
//   loss_json(stats)             the logged losses of a window of steps or of an evaluation
//   brief(stats)                 progress-bar text of a window ("loss 3.21")
//   evaluate(max_batches)        held-out statistics over at most max_batches batches (0: all),
//                                summed over the ranks; nullopt when there is no held-out data.
//                                A collective: every rank calls it
//   eval_message(step, stats)    the line said after an evaluation
//   run_line(say)                the task's keys of the "run" metrics line; says (through `say`)
//                                what the run trains on (sizes, parallelism)
//   summary(result, summary)     adds the task's keys to the summary JSON of a run
template <class T>
concept training_task = requires(T& task, const T& ct, const loss_stats& st, const nlohmann::json& state,
                                 const loop_result& r, nlohmann::json& out,
                                 const std::function<void(const std::string&)>& say) {
  typename T::batch_type;
  { task.next_batches() } -> std::convertible_to<std::span<const typename T::batch_type>>;
  { ct.data_state() } -> std::convertible_to<nlohmann::json>;
  task.restore_data(state, std::string());
  { ct.epoch() } -> std::convertible_to<std::size_t>;
  { ct.global_batch() } -> std::convertible_to<std::size_t>;
  { ct.loss_json(st) } -> std::convertible_to<nlohmann::json>;
  { ct.brief(st) } -> std::convertible_to<std::string>;
  { task.evaluate(std::size_t()) } -> std::same_as<std::optional<loss_stats>>;
  { ct.eval_message(std::size_t(), st) } -> std::convertible_to<std::string>;
  { task.run_line(say) } -> std::convertible_to<nlohmann::json>;
  task.summary(r, out);
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

// The steps since the last training line (skipped steps' numbers stay out of it).
struct metrics_window {
  loss_stats loss;
  double seconds = 0, norm = 0, update_seconds = 0;
  offload_snapshot_t io;  // offloaded state: summed over the window's steps
  std::size_t tokens = 0, samples = 0, steps = 0;
  void add(const step_metrics& m) {
    loss += m.loss;
    seconds += m.seconds;
    update_seconds += m.update_seconds;
    io.wait_seconds += m.io.wait_seconds;
    io.writeback_seconds += m.io.writeback_seconds;
    io.read_bytes += m.io.read_bytes;
    io.write_bytes += m.io.write_bytes;
    norm += m.grad_norm;
    tokens += m.tokens;
    samples += m.samples;
    ++steps;
  }
  double samples_per_s() const { return seconds > 0 ? double(samples) / seconds : 0.0; }
  double tokens_per_s() const { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};
}  // namespace detail

template <class Trainer, training_task Task>
loop_result train_loop(Trainer& t, Task& task, const loop_options& o, metrics_log& log, const loop_hooks& hooks = {}) {
  // Only rank 0 (of the replicas, or of a pipeline's ranks) talks: log lines, progress, messages.
  parallel::replica_group& procs = t.processes();
  const bool talk = procs.rank() == 0;
  progress_bar bar(o.steps, talk && isatty(STDERR_FILENO) != 0, t.step());
  auto say = [&](const std::string& s) {
    if (!talk) return;
    if (hooks.message)
      hooks.message(s);
    else
      bar.message(s);
  };
  loop_result r;
  using clock = std::chrono::steady_clock;
  const auto started = clock::now();
  double left_out = 0;  // seconds of evaluations and checkpoints
  auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  auto wall_seconds = [&] { return since(started) - left_out; };
  auto evaluate = [&](std::size_t step) {
    const auto t0 = clock::now();
    const double wall = wall_seconds();
    r.last_eval = task.evaluate(o.eval_batches);
    if (r.last_eval) {
      auto j = task.loss_json(*r.last_eval);
      j["kind"] = "eval";
      j["step"] = step;
      j["seconds"] = since(t0);
      j["wall_seconds"] = wall;
      log.write(j);
      say(task.eval_message(step, *r.last_eval));
    }
    left_out += since(t0);
  };
  detail::stop_signals signals(o.stop_on_interrupt);
  if (t.step() == 0 && o.eval_every > 0) evaluate(0);
  const bool scaling = t.scaler().is_dynamic() || t.scaler().scale() != 1.0f;
  detail::metrics_window w;
  while (t.step() < o.steps) {
    step_metrics m;
    try {
      m = t.train_step(task.next_batches());
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
    r.overflows += m.overflow;
    if (!m.skipped) {  // a skipped step's non-finite numbers stay out of the logged means
      w.add(m);
      r.trained += m.loss;
    }
    const std::size_t step = m.step;
    const bool last = step == o.steps;
    if (step % std::max<std::size_t>(o.log_every, 1) == 0 || last || (hooks.log_now && hooks.log_now(step))) {
      auto j = task.loss_json(w.loss);
      j["kind"] = "train";
      j["step"] = step;
      j["lr"] = m.lr;
      j["grad_norm"] = w.steps ? w.norm / double(w.steps) : 0.0;
      j["samples_per_s"] = w.samples_per_s();
      j["tokens_per_s"] = w.tokens_per_s();
      j["epoch"] = task.epoch();
      j["wall_seconds"] = wall_seconds();
      if (scaling) {  // the scale of the window's last step, and the steps the scaler skipped so far
        j["loss_scale"] = m.loss_scale;
        j["overflow_steps"] = t.scaler().skipped_steps();
      }
      if (!t.options().offload.empty() && w.steps) {  // offloaded state: per step, the window's means
        const double n = double(w.steps);
        j["offload"] = {{"step_s", w.seconds / n},
                        {"update_s", w.update_seconds / n},
                        {"io_wait_s", w.io.wait_seconds / n},
                        {"write_behind_s", w.io.writeback_seconds / n},
                        {"read_bytes", w.io.read_bytes / n},
                        {"write_bytes", w.io.write_bytes / n}};
      }
      if (hooks.extra_metrics) j.update(hooks.extra_metrics(step));
      log.write(j);
      char buf[96];
      std::snprintf(buf, sizeof buf, " | lr %.2e | %.1f samples/s, %.0f tok/s", double(m.lr), w.samples_per_s(),
                    w.tokens_per_s());
      bar.update(step, task.brief(w.loss) + buf);
      w = {};
    }
    bool reached = false;
    if (last || (o.eval_every && step % o.eval_every == 0)) {
      evaluate(step);
      // (the same key on every rank: the sum over them only when it is set)
      reached = o.stop_at_loss > 0 && procs.any(r.last_eval && r.last_eval->count &&
                                                r.last_eval->mean_loss() <= o.stop_at_loss);
      if (reached) {
        r.reached_loss_at = step;
        if (!last) say("step " + std::to_string(step) + ": validation loss at or below " +
                       std::to_string(o.stop_at_loss) + " (stop_at_loss); the run stops");
      }
    }
    // A stop request on any rank stops them all after the same step.
    const bool stop = procs.any(o.stop_on_interrupt && detail::stop_requested) || reached;
    if (hooks.checkpoint && o.checkpoints && (last || stop || (o.checkpoint_every && step % o.checkpoint_every == 0))) {
      const auto t0 = clock::now();
      hooks.checkpoint(step);
      left_out += since(t0);
    }
    if (reached) break;
    if (stop) {
      r.interrupted = true;
      say("interrupted at step " + std::to_string(step) +
          (o.checkpoints ? "; state saved, rerun with --resume to continue" : " (checkpoints off: nothing saved)"));
      break;
    }
  }
  bar.finish();
  r.steps_done = t.step();
  return r;
}

}  // namespace sparselm
