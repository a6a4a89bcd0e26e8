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
//   - locks <out> (io/run_dir.hpp: a second job on it fails at once) and removes the leftovers of a
//     killed save;
//   - fresh run: starts <out>/metrics.jsonl; refuses a non-empty output directory unless
//     `overwrite` (nothing saved is ever overwritten by accident);
//   - resume: loads the newest complete checkpoint of <out>/checkpoints (model, optimiser slots,
//     steps, data position, sparsity patterns and explored maps), checks that the model config
//     is the one it was saved with, and drops metrics lines after the checkpoint's step, so the
//     run continues exactly as if it had not stopped;
//   - a non-finite loss or gradient norm stops the run (trainer_options::on_nonfinite) with an error
//     naming the last good checkpoint; a model with non-finite parameters is never saved, so good
//     checkpoints are never pruned in favour of a bad one;
//   - logs a "run" line (config, sizes, unigram baseline), trains with the progress bar, evaluates,
//     checkpoints every rc.loop.checkpoint_every steps, at the end and on Ctrl-C/SIGTERM;
//   - returns a summary JSON.
// Checkpoint layout: io/checkpoint.hpp (<out>/checkpoints/step-NNNNNN/, latest).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/lm_batches.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/metrics.hpp"
#include "sparselm/train/replica_checks.hpp"
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

// The sentence that names the last good checkpoint of a run (for errors that stop it).
inline std::string last_good_checkpoint(const io::checkpoint_dir& cd, const std::filesystem::path& root) {
  if (auto l = cd.latest())
    return "The last good checkpoint is '" + l->string() + "': resume from it with --resume (and, e.g., a lower "
           "learning rate).";
  return "No checkpoint was saved in '" + root.string() + "'.";
}

// Whether every parameter is finite (a model that is not is never saved).
inline bool all_finite(const arena<float>& a) {
  float s = 0;  // NaN and infinities survive the multiplication by zero; finite values give 0
  for (std::size_t i = 0; i < a.layout().count(); ++i)
    for (float x : a[i]) s += x * 0.0f;
  return s == 0.0f;
}

// Before a job touches its run directory (holding its io::run_lock): stale temporaries of a killed
// save are removed (and reported); a fresh run refuses a directory that holds anything but the
// lock, unless `overwrite`, which deletes what an earlier run wrote (checkpoints, metrics, config).
inline void prepare_run_dir(const std::filesystem::path& out, const std::string& program, bool resume,
                            bool overwrite) {
  namespace fs = std::filesystem;
  SPARSELM_CHECK(!(resume && overwrite), program, ": --resume and --overwrite exclude each other");
  for (const fs::path& dir : {out, out / "checkpoints"})
    for (const auto& p : io::remove_stale_temporaries(dir))
      std::fprintf(stderr, "%s: removed '%s', left by an interrupted save\n", program.c_str(), p.string().c_str());
  if (resume) return;
  if (overwrite) {
    for (const char* name : {"checkpoints", "metrics.jsonl", "config.json"}) fs::remove_all(out / name);
    return;
  }
  std::string found;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename() != io::lock_file) {
      found = e.path().filename().string();
      break;
    }
  const bool has_checkpoints = !io::checkpoint_dir(out / "checkpoints").steps().empty();
  SPARSELM_CHECK(found.empty(), program, ": '", out.string(), "' is not empty (it holds '", found,
                 has_checkpoints ? "' and checkpoints" : "'",
                 "); pass --resume to continue that run, --overwrite to start it again, or choose another --out");
}

// Every job's start in its run directory, a collective over the ranks `g` (one process: g of 1):
// rank 0 locks the directory (held while `lock` lives) and tidies it (prepare_run_dir); the other
// ranks wait for it, since they read their checkpoints from it.
inline void claim_run_dir(parallel::replica_group& g, std::optional<io::run_lock>& lock,
                          const std::filesystem::path& out, const std::string& program, bool resume, bool overwrite) {
  if (g.rank() == 0) {
    lock.emplace(out);
    prepare_run_dir(out, program, resume, overwrite);
  }
  g.barrier();
}

// The files a BERT job (bert_job, finetune_job) writes as it starts, on rank 0 (`writer`):
// config.json, and the metrics log, cut after `step` on resume. Other ranks get a log that
// writes nothing.
inline metrics_log open_run_files(bool writer, const std::filesystem::path& out, const nlohmann::json& config,
                                  bool resume, std::size_t step) {
  if (!writer) return {};
  std::filesystem::create_directories(out);
  io::atomic_write_text(out / "config.json", config.dump(2) + "\n");
  if (resume) truncate_metrics_after(out / "metrics.jsonl", step);
  return metrics_log(out / "metrics.jsonl", /*truncate=*/!resume);
}

struct lm_job_options {
  bool resume = false;          // continue from the newest checkpoint in <out>/checkpoints
  bool overwrite = false;       // fresh run: delete the run's checkpoints, metrics and config first
  bool verify = true;           // resume: check the checkpoint's CRC-32C checksums
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
    check_limit(program_ + " run config", "steps", rc_.loop.steps, limits::steps);
    check_limit(program_ + " run config", "batch_size", rc_.batch_size, limits::batch);
    check_limit(program_ + " run config", "seq_len", rc_.seq_len, limits::positions);
    SPARSELM_CHECK(rc_.threads >= 0 && std::size_t(rc_.threads) <= limits::threads, program_,
                   " run config: field 'threads' is ", rc_.threads, ", outside [0, ", limits::threads, "]");
    check_activation_limit(rc_.batch_size, rc_.seq_len, vocab, program_ + " run config");
    SPARSELM_CHECK(!(o.resume && o.overwrite), program_, ": --resume and --overwrite exclude each other");
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
      // global batches, each rank evaluates its rows (evaluate_lm)
      valid.emplace(*valid_file, checked_mul(rc_.batch_size, t.replicas().size(), program_ + ": batch_size x ranks"),
                    data::lm_window_options{.seq_len = rc_.seq_len});
    }
    // Data parallelism (trainer::replicas()): each of the P ranks trains on batch_size rows of a
    // global batch of P·batch_size drawn identically on every rank; rank 0 alone writes files.
    // A pipeline over ranks (trainer::processes()): every rank reads the whole global batch; with
    // data replicas of the pipeline (train/rank_grid.hpp) every rank of a replica reads its rows.
    parallel::replica_group& group = t.replicas();
    parallel::replica_group& procs = t.processes();
    const std::size_t ranks = group.size();
    const bool writer = procs.rank() == 0;
    rank0_ = writer;
    check_same_config(procs, resolved_, program_);
    check_same_files(procs, {rc_.train_data, rc_.valid_data}, program_);
    const std::size_t global_batch = checked_mul(rc_.batch_size, ranks, program_ + ": batch_size x ranks");
    data::lm_sampler sampler(train_file, {.batch_size = global_batch,
                                          .windows = {.seq_len = rc_.seq_len},
                                          .order = rc_.order == "sequential" ? data::lm_order::sequential
                                                                             : data::lm_order::shuffled,
                                          .seed = rc_.seed});
    std::optional<io::run_lock> lock;  // the run directory's, held for the whole job
    claim_run_dir(procs, lock, out(), program_, o.resume, o.overwrite);
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
      io::load_model(*latest, model, {.verify = o.verify});
      auto run = io::load_training_state(*latest / io::state_file, t, up, o.verify);
      SPARSELM_CHECK(run.is_object() && run.contains("sampler"), latest->string(),
                     ": training state has no data position");
      try {
        sampler.restore(run["sampler"].template get<data::lm_sampler_state>());
      } catch (const nlohmann::json::exception& e) {
        fail(latest->string(), ": training state: bad data position (", e.what(), ")");
      }
      resumed_from = t.step();
      SPARSELM_CHECK(io::checkpoint_dir::step_name(resumed_from) == latest->filename().string(), latest->string(),
                     ": the training state is at step ", resumed_from, ", not the checkpoint's ('",
                     latest->filename().string(), "'): a damaged or mixed-up checkpoint");
      if (writer) truncate_metrics_after(metrics_path, resumed_from);
      say("resuming from " + latest->string() + " (step " + std::to_string(resumed_from) + ")");
      const std::size_t saved_ranks = run.value("replicas", std::size_t(1));
      if (saved_ranks != ranks)
        say(program_ + ": the run was saved with " + std::to_string(saved_ranks) + " replica(s) and continues with " +
            std::to_string(ranks) + ": the global batch is now " + std::to_string(global_batch) + " rows");
      if (resumed_from >= rc_.loop.steps)
        say("the run is already complete (" + std::to_string(rc_.loop.steps) + " steps); raise --steps to train on");
    }
    // Every rank starts from rank 0's parameters (identical already when all initialised from one
    // seed or read one checkpoint; the broadcast makes it so and the CRC check proves it).
    t.sync_parameters();
    metrics_log log;
    if (writer) {
      fs::create_directories(out());
      io::atomic_write_text(out() / "config.json", resolved_.dump(2) + "\n");
      log = metrics_log(metrics_path, /*truncate=*/!o.resume);
    }

    const double unigram = valid_file ? unigram_perplexity(train_file, *valid_file, vocab) : 0.0;
    // each process's optimiser state (MiB; one value per rank: data replicas or pipeline stages)
    std::vector<std::uint64_t> state_bytes(procs.size());
    procs.all_gather(t.optimizer_state_bytes(), state_bytes);
    nlohmann::json state_mib = nlohmann::json::array();
    for (auto b : state_bytes) state_mib.push_back(double(b) / (1 << 20));
    // ranks that keep only their pipeline stage: the weights and gradients each holds (MiB)
    nlohmann::json stage_mib = nlohmann::json::array();
    if (t.stage_local()) {
      procs.all_gather(2 * sizeof(float) * t.stage_memory().kept_elements(), state_bytes);
      for (auto b : state_bytes) stage_mib.push_back(double(b) / (1 << 20));
    }
    nlohmann::json run_line = {{"kind", "run"},
                               {"program", program_},
                               {"config", resolved_},
                               {"parameters", model.num_parameters()},
                               {"train_tokens", train_file.size()},
                               {"train_windows", sampler.windows_per_epoch()},
                               {"threads", num_threads()},
                               {"replicas", ranks},
                               {"global_batch", global_batch},
                               {"optimizer_state_mib", state_mib},
                               {"precision", precision::name(t.compute())},
                               {"resumed_from", resumed_from}};
    if (valid_file) run_line["unigram_perplexity"] = unigram;
    if (!stage_mib.empty()) run_line["stage_weights_and_gradients_mib"] = stage_mib;
    const pipeline::plan& pipe = t.options().pipeline;
    try {  // before any work: at least one block per stage, a given split in range
      pipeline::check_split(pipe.split, pipe.stages, model.stack().size());
    } catch (const error& e) {
      throw error(detail::concat("run config trainer.", e.what()));
    }
    if (pipe.stages > 1)
      run_line["pipeline"] = {{"stages", pipe.stages},
                              {"schedule", pipeline::name(pipe.schedule)},
                              {"placement", &procs != &group ? "ranks" : "threads"},
                              {"micro_batches", t.options().accumulation.steps},
                              {"predicted_bubble", pipeline::predicted_bubble(pipe.stages, t.options().accumulation.steps)}};
    add_sparsity_totals(model, run_line);
    log.write(run_line);
    {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s: %zu parameters, %llu training tokens (%llu windows of %zu)", program_.c_str(),
                    model.num_parameters(), (unsigned long long)train_file.size(),
                    (unsigned long long)sampler.windows_per_epoch(), rc_.seq_len);
      say(buf);
      if (ranks > 1) {
        say(program_ + ": data parallel over " + group.describe() + ", " + std::to_string(rc_.batch_size) +
            " rows per rank, global batch " + std::to_string(global_batch));
        say(program_ + ": optimiser state per rank (MiB): " + state_mib.dump() +
            (t.sharded() ? (&procs != &group ? " (each rank its stage's)" : " (sharded over the ranks)") : ""));
      }
      if (t.compute() != dtype::f32) say(program_ + ": precision " + kernels::describe_compute(t.compute()));
      if (pipe.stages > 1 && &procs != &group) {
        say(program_ + ": pipeline of " + std::to_string(pipe.stages) + " stages (" + pipeline::name(pipe.schedule) +
            ") over " + procs.describe() + ", one stage per rank" +
            (ranks > 1 ? ", " + std::to_string(ranks) + " data replicas of the pipeline" : std::string()) + ", " +
            std::to_string(t.options().accumulation.steps) + " micro-batches per step; " +
            (ranks > 1 ? "each replica's ranks read its rows and every rank " : "every rank reads the whole batch and ") +
            (t.sharded() ? "updates its stage's tensors" : "applies the summed gradient"));
        if (ranks == 1)  // with data replicas, said above
          say(program_ + ": optimiser state per rank (MiB): " + state_mib.dump() +
              (t.sharded() ? " (each rank its stage's)" : ""));
        if (!stage_mib.empty())
          say(program_ + ": each rank keeps only its stage's weights and gradients, MiB per rank: " + stage_mib.dump() +
              " (the whole model's: " +
              nlohmann::json(double(2 * sizeof(float) * model.params().all().size()) / (1 << 20)).dump() + ")");
      } else if (pipe.stages > 1) {
        if (pipe.where == pipeline::placement::ranks)
          say(program_ + ": trainer.pipeline.placement is ranks but this is one process: the stages run as threads");
        const std::size_t M = t.options().accumulation.steps;
        std::snprintf(buf, sizeof buf,
                      "%s: pipeline of %zu stages (%s) over %zu micro-batches per step, threads per stage: %zu; the schedule "
                      "leaves %.1f %% of each stage idle",
                      program_.c_str(), pipe.stages, pipeline::name(pipe.schedule), M,
                      std::max<std::size_t>(1, std::size_t(num_threads()) / pipe.stages),
                      100.0 * pipeline::predicted_bubble(pipe.stages, M));
        say(buf);
      }
      if (valid_file) {
        std::snprintf(buf, sizeof buf, "%s: unigram baseline perplexity on the validation split: %.1f", program_.c_str(),
                      unigram);
        say(buf);
      }
    }

    lm_loop_hooks hooks;
    hooks.checkpoint = [&](std::size_t step) {
      // A non-finite model is never saved (it would become `latest` and push good ones out).
      SPARSELM_CHECK(all_finite(model.params()), program_, ": step ", step,
                     ": the model has non-finite parameters and is not saved; ", last_good(cd));
      t.check_replicas_agree("at the checkpoint of step " + std::to_string(step));
      t.stream_optimizer_state();  // sharded optimiser state: sent to rank 0 as it writes (collective)
      if (!writer) return;
      const nlohmann::json run = {{"sampler", sampler.state()}, {"config", resolved_}, {"replicas", ranks}};
      cd.save(step, [&](const fs::path& dir) {
        io::save_model(dir, model);
        io::save_training_state(dir / io::state_file, t, run, up);
      });
      t.release_gathered_state();
    };
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) {
        hooks.extra_metrics = [ds](std::size_t) { return ds->take_metrics(); };
        hooks.log_now = [ds](std::size_t) { return ds->has_pending(); };
      }
    lm_loop_result r;
    try {
      r = run_lm_training(t, sampler, valid ? &*valid : nullptr, rc_.loop, log, hooks);
    } catch (const nonfinite_error& e) {
      fail(program_, ": ", e.what(), "; the run stops (trainer.on_nonfinite: \"stop\", or \"skip\" with ",
           "trainer.max_skipped_steps). ", last_good(cd));
    }

    t.gather_parameters();  // ranks that kept only their pipeline stages: rank 0 holds the trained model
    nlohmann::json summary = {{"steps", r.steps_done},
                              {"resumed_from", resumed_from},
                              {"interrupted", r.interrupted},
                              {"train_seconds", r.train_seconds},
                              {"tokens", r.tokens},
                              {"tokens_per_s", r.train_seconds > 0 ? double(r.tokens) / r.train_seconds : 0.0},
                              {"samples_per_s", r.train_seconds > 0 ? double(r.samples) / r.train_seconds : 0.0},
                              {"precision", precision::name(t.compute())}};
    if (t.scaler().is_dynamic()) summary["loss_scale"] = {{"scale", t.scaler().scale()}, {"skipped_steps", t.scaler().skipped_steps()}};
    if (valid && r.last_eval.count) {
      summary["valid"] = loss_json(r.last_eval);
      summary["unigram_perplexity"] = unigram;
    }
    if (auto l = cd.latest()) summary["checkpoint"] = l->string();
    if constexpr (!std::is_same_v<Sparsity, std::nullptr_t>)
      if (ds) summary["pattern_updates"] = ds->updates();
    if (const auto& rep = model.last_pipeline(); rep.stages > 1)
      summary["pipeline"] = {{"stages", rep.stages},
                             {"split", rep.split},
                             {"balanced", rep.balanced},
                             {"predicted_bubble", rep.predicted_bubble},
                             {"measured_bubble", rep.measured_bubble}};
    if (o.print_summary && writer) std::printf("%s\n", summary.dump().c_str());
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
  void say(const std::string& s) const {
    if (rank0_) std::fprintf(stderr, "%s\n", s.c_str());
  }

  std::string last_good(const io::checkpoint_dir& cd) const { return last_good_checkpoint(cd, checkpoints()); }

  lm_run_config rc_;
  nlohmann::json resolved_;
  std::string program_;
  bool rank0_ = true;  // only rank 0 of a data-parallel run prints
};

}  // namespace sparselm
