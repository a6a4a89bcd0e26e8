#pragma once
// A whole language-model training job, shared by examples/gpt_train and examples/sparse_lm: token
// files in, checkpoints and JSON-lines metrics out, exact resume.
//
//   auto rc = sparselm::lm_run_config::from_json(j, "run.json");
//   Model model(cfg);
//   model.init(rc.seed);                      // before the trainer and any dynamic-sparsity object
//   trainer<Model, P> t(model, rc.trainer, opt, optim::make_schedule(rc.schedule_json()));
//   sparselm::lm_job job(rc, resolved_json, "gpt_train");
//   json summary = job.run(model, t, {.resume = true});
//
// What run() does:
//   - opens the train (and validation) token files and checks their vocabulary against the model;
//   - the caller initialises the model (init(seed)) before building the trainer and any
//     dynamic-sparsity object, as for a fresh run; on resume the checkpoint then replaces it;
//   - fresh run: starts <out>/metrics.jsonl; refuses to start over
//     an output directory that already holds checkpoints (nothing saved is ever overwritten);
//   - resume: loads the newest complete checkpoint of <out>/checkpoints (model, optimiser slots,
//     steps, data position, sparsity patterns and explored maps), checks that the model config
//     is the one it was saved with, and drops metrics lines after the checkpoint's step, so the
//     run continues exactly as if it had not stopped;
//   - logs a "run" line (config, sizes, unigram baseline), trains with the progress bar, evaluates,
//     checkpoints every rc.loop.checkpoint_every steps, at the end and on Ctrl-C/SIGTERM;
//   - returns a summary JSON.
// Checkpoint layout: io/checkpoint.hpp (<out>/checkpoints/step-NNNNNN/, latest).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/core/threads.hpp"
#include "sparselm/data/lm_batches.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/run_config.hpp"

namespace sparselm {

// Keeps the lines of a JSON-lines metrics file whose "step" is at most `step` (and lines without a
// step), rewriting it atomically. A missing file is left missing.
inline void truncate_metrics_after(const std::filesystem::path& path, std::size_t step) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a line cut by a crash
    if (j.is_object() && j.contains("step") && j["step"].is_number_unsigned() && j["step"].get<std::size_t>() > step)
      continue;
    kept += line + "\n";
  }
  io::atomic_write_text(path, kept);
}

struct lm_job_options {
  bool resume = false;          // continue from the newest checkpoint in <out>/checkpoints
  std::size_t keep_checkpoints = 2;
  bool print_summary = true;    // the final summary JSON on stdout
};

class lm_job {
 public:
  // rc: the parsed run config; resolved: the whole resolved config (logged, saved beside the
  // checkpoints, compared on resume); program: names the program in messages.
  lm_job(lm_run_config rc, nlohmann::json resolved, std::string program)
      : rc_(std::move(rc)), resolved_(std::move(resolved)), program_(std::move(program)) {}

  const std::filesystem::path out() const { return rc_.out; }
  std::filesystem::path checkpoints() const { return out() / "checkpoints"; }

  // `updater`: the dynamic-sparsity object (nullptr for dense or static-sparse runs); it provides
  // updater(), updates() and take_metrics().
  template <class Model, class Trainer, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, const lm_job_options& o = {}, Sparsity* ds = nullptr) {
    namespace fs = std::filesystem;
    const std::size_t vocab = model_vocab(model);
    SPARSELM_CHECK(!rc_.train_data.empty(), program_, ": no training data (field data.train or --train)");
    data::token_file train_file(rc_.train_data);
    SPARSELM_CHECK(train_file.size() > 0, rc_.train_data, ": empty token file");
    SPARSELM_CHECK(train_file.vocab_size() <= vocab, rc_.train_data, ": vocabulary ", train_file.vocab_size(),
                   " exceeds the model's vocab_size ", vocab);
    std::optional<data::token_file> valid_file;
    std::optional<data::lm_eval_pass> valid;
    if (!rc_.valid_data.empty()) {
      valid_file.emplace(rc_.valid_data);
      SPARSELM_CHECK(valid_file->vocab_size() <= vocab, rc_.valid_data, ": vocabulary ", valid_file->vocab_size(),
                     " exceeds the model's vocab_size ", vocab);
      valid.emplace(*valid_file, rc_.batch_size, data::lm_window_options{.seq_len = rc_.seq_len});
    }
    data::lm_sampler sampler(train_file, {.batch_size = rc_.batch_size,
                                          .windows = {.seq_len = rc_.seq_len},
                                          .order = rc_.order == "sequential" ? data::lm_order::sequential
                                                                             : data::lm_order::shuffled,
                                          .seed = rc_.seed});
    io::checkpoint_dir cd(checkpoints(), o.keep_checkpoints);
    const fs::path metrics_path = out() / "metrics.jsonl";
    sparse::pattern_updater* up = nullptr;
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) up = &ds->updater();

    std::size_t resumed_from = 0;
    if (o.resume) {
      auto latest = cd.latest();
      SPARSELM_CHECK(latest.has_value(), program_, ": --resume: no checkpoint in '", checkpoints().string(), "'");
      const auto saved = io::read_model_config(*latest);
      const auto now = io::model_config_json(model);
      SPARSELM_CHECK(saved == now, program_, ": --resume: the model config differs from the one in '", latest->string(),
                     "/config.json' (saved ", saved.dump(), ", now ", now.dump(), ")");
      io::load_model(*latest, model);
      auto run = io::load_training_state(*latest / io::state_file, t, up);
      SPARSELM_CHECK(run.contains("sampler"), latest->string(), ": training state has no data position");
      sampler.restore(run["sampler"].template get<data::lm_sampler_state>());
      resumed_from = t.step();
      truncate_metrics_after(metrics_path, resumed_from);
      say("resuming from " + latest->string() + " (step " + std::to_string(resumed_from) + ")");
      if (resumed_from >= rc_.loop.steps)
        say("the run is already complete (" + std::to_string(rc_.loop.steps) + " steps); raise --steps to train on");
    } else {
      SPARSELM_CHECK(cd.steps().empty(), program_, ": '", out().string(), "' already holds checkpoints (",
                     checkpoints().string(), "); pass --resume to continue that run or choose another --out");
    }
    fs::create_directories(out());
    io::atomic_write_text(out() / "config.json", resolved_.dump(2) + "\n");
    metrics_log log(metrics_path, /*truncate=*/!o.resume);

    const double unigram = valid_file ? unigram_perplexity(train_file, *valid_file, vocab) : 0.0;
    nlohmann::json run_line = {{"kind", "run"},
                               {"program", program_},
                               {"config", resolved_},
                               {"parameters", model.num_parameters()},
                               {"train_tokens", train_file.size()},
                               {"train_windows", sampler.windows_per_epoch()},
                               {"threads", num_threads()},
                               {"resumed_from", resumed_from}};
    if (valid_file) run_line["unigram_perplexity"] = unigram;
    add_sparsity_totals(model, run_line);
    log.write(run_line);
    {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s: %zu parameters, %llu training tokens (%llu windows of %zu)", program_.c_str(),
                    model.num_parameters(), (unsigned long long)train_file.size(),
                    (unsigned long long)sampler.windows_per_epoch(), rc_.seq_len);
      say(buf);
      if (valid_file) {
        std::snprintf(buf, sizeof buf, "%s: unigram baseline perplexity on the validation split: %.1f", program_.c_str(),
                      unigram);
        say(buf);
      }
    }

    lm_loop_hooks hooks;
    hooks.checkpoint = [&](std::size_t step) {
      const nlohmann::json run = {{"sampler", sampler.state()}, {"config", resolved_}};
      cd.save(step, [&](const fs::path& dir) {
        io::save_model(dir, model);
        io::save_training_state(dir / io::state_file, t, run, up);
      });
    };
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) hooks.extra_metrics = [ds](std::size_t) { return ds->take_metrics(); };
    auto r = run_lm_training(t, sampler, valid ? &*valid : nullptr, rc_.loop, log, hooks);

    nlohmann::json summary = {{"steps", r.steps_done},
                              {"resumed_from", resumed_from},
                              {"interrupted", r.interrupted},
                              {"train_seconds", r.train_seconds},
                              {"tokens", r.tokens},
                              {"tokens_per_s", r.train_seconds > 0 ? double(r.tokens) / r.train_seconds : 0.0}};
    if (valid && r.last_eval.count) {
      summary["valid"] = loss_json(r.last_eval);
      summary["unigram_perplexity"] = unigram;
    }
    if (auto l = cd.latest()) summary["checkpoint"] = l->string();
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) summary["pattern_updates"] = ds->updates();
    if (o.print_summary) std::printf("%s\n", summary.dump().c_str());
    return summary;
  }

 private:
  template <class Model>
  static std::size_t model_vocab(const Model& m) {
    return m.config().vocab_size;
  }
  template <class Model>
  static void add_sparsity_totals(Model& model, nlohmann::json& j) {
    std::size_t nnz = 0, grid = 0;
    for (auto& w : io::detail::sparse_weights_of(model)) {
      nnz += w.pattern->nnz();
      grid += w.pattern->rows_b * w.pattern->cols_b;
    }
    if (grid == 0) return;
    j["sparse_blocks"] = nnz;
    j["sparse_grid_blocks"] = grid;
    j["sparse_density"] = double(nnz) / double(grid);
  }
  void say(const std::string& s) const { std::fprintf(stderr, "%s\n", s.c_str()); }

  lm_run_config rc_;
  nlohmann::json resolved_;
  std::string program_;
};

}  // namespace sparselm
