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
//   };
//   finetune_job job({.out = "runs/squad", .program = "bert_squad", .steps = 500, .batch_size = 16});
//   nlohmann::json summary = job.run(model, trainer, task);
//
// `init_from` (a fresh run only): our checkpoint (e.g. bert_pretrain's) or a HuggingFace directory;
// tensors of heads the model lacks are reported unused and heads the file lacks keep their
// initialisation (io/huggingface.hpp), and the message says which.
// Metrics (<out>/metrics.jsonl): a "run" line, then "train" lines with the task's losses, lr,
// grad_norm, samples_per_s and epoch.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/progress.hpp"

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

  template <class Model, class Trainer, class Task>
  nlohmann::json run(Model& model, Trainer& t, Task& task) {
    namespace fs = std::filesystem;
    const std::string& prog = o_.program;
    SPARSELM_CHECK(task.size() > 0, prog, ": no training examples");
    SPARSELM_CHECK(o_.batch_size > 0, prog, ": batch size 0");
    io::run_lock lock(o_.out);
    prepare_run_dir(o_.out, prog, o_.resume, o_.overwrite);
    io::checkpoint_dir cd(o_.out / "checkpoints", o_.keep_checkpoints);
    std::size_t epoch = 0, next = 0;  // where the shuffled pass over the examples stands
    if (o_.resume) {
      auto latest = cd.latest();
      SPARSELM_CHECK(latest.has_value(), prog, ": --resume: no checkpoint in '", cd.root().string(), "'");
      io::load_model(*latest, model);
      auto run = io::load_training_state(*latest / io::state_file, t);
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
    fs::create_directories(o_.out);
    io::atomic_write_text(o_.out / "config.json", o_.config.dump(2) + "\n");
    if (o_.resume) truncate_metrics_after(o_.out / "metrics.jsonl", t.step());
    metrics_log log(o_.out / "metrics.jsonl", /*truncate=*/!o_.resume);
    log.write({{"kind", "run"},
               {"program", prog},
               {"config", o_.config},
               {"parameters", model.num_parameters()},
               {"train_examples", task.size()},
               {"precision", precision::name(t.compute())},
               {"resumed_from", t.step()}});
    if (t.compute() != dtype::f32) say(std::string(prog) + ": precision " + kernels::describe_compute(t.compute()));

    const std::size_t B = o_.batch_size, N = task.size();
    std::vector<std::size_t> order, pick(B);
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
      const nlohmann::json run = {{"data", {{"epoch", epoch}, {"next", next}}}, {"config", o_.config}};
      cd.save(step, [&](const fs::path& dir) {
        io::save_model(dir, model);
        io::save_training_state(dir / io::state_file, t, run);
      });
    };

    detail::stop_signals signals(true);  // SIGINT, SIGTERM, SIGHUP: checkpoint and stop
    progress_bar bar(o_.steps, isatty(STDERR_FILENO) != 0, t.step());
    loss_stats window, total;
    double window_sec = 0, window_norm = 0, train_sec = 0;
    std::size_t window_steps = 0, samples = 0;
    bool interrupted = false;
    while (t.step() < o_.steps) {
      for (std::size_t i = 0; i < B; ++i) {
        if (next == N) shuffle(++epoch), next = 0;
        pick[i] = order[next++];
      }
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
      samples += B;
      if (!m.skipped) {
        window += m.loss;
        total += m.loss;
        window_sec += m.seconds;
        window_norm += m.grad_norm;
        ++window_steps;
      }
      if (m.step % std::max<std::size_t>(o_.log_every, 1) == 0 || m.step == o_.steps) {
        auto j = task.loss_json(window);
        j["kind"] = "train";
        j["step"] = m.step;
        j["lr"] = m.lr;
        j["grad_norm"] = window_steps ? window_norm / double(window_steps) : 0.0;
        j["samples_per_s"] = window_sec > 0 ? double(window_steps * B) / window_sec : 0.0;
        j["epoch"] = epoch;
        log.write(j);
        char buf[64];
        std::snprintf(buf, sizeof buf, " | lr %.2e | %.1f samples/s", double(m.lr),
                      window_sec > 0 ? double(window_steps * B) / window_sec : 0.0);
        bar.update(m.step, task.brief(window) + buf);
        window = {};
        window_sec = window_norm = 0;
        window_steps = 0;
      }
      const bool last = m.step == o_.steps, stop = detail::stop_requested != 0;
      if (last || stop || (o_.checkpoint_every && m.step % o_.checkpoint_every == 0)) checkpoint(m.step);
      if (stop) {
        interrupted = true;
        say("interrupted at step " + std::to_string(m.step) + "; state saved, rerun with --resume to continue");
        break;
      }
    }
    bar.finish();
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
  static void say(const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); }
  finetune_job_options o_;
};

}  // namespace sparselm
