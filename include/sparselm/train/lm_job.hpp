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
// What run() does: opens the train (and validation) token files and checks their vocabulary and
// sizes against the model and the limits; the caller initialises the model (init(seed)) before
// building the trainer and any dynamic-sparsity object, as for a fresh run, and on resume the
// checkpoint then replaces it. The run itself (run directory, resume, checkpoints, non-finite
// guard, signals, metrics, evaluation, the loop) is the run driver's (train/run.hpp) with the
// language-modelling task (train/lm_training.hpp); the job adds the "run" line's sizes and layout
// (optimiser state per rank, pipeline stages, sparsity, unigram baseline) and prints the summary.

#include <cstdio>
#include <filesystem>
#include <functional>
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
#include "sparselm/train/run.hpp"
#include "sparselm/train/run_config.hpp"

namespace sparselm {

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

  // `ds`: the dynamic-sparsity object (nullptr for dense or static-sparse runs; train/dynamic_sparsity.hpp).
  template <class Model, class Trainer, class Sparsity = std::nullptr_t>
  nlohmann::json run(Model& model, Trainer& t, const lm_job_options& o = {}, Sparsity* ds = nullptr) {
    const std::size_t vocab = model_vocab(model);
    check_limit(program_ + " run config", "steps", rc_.loop.steps, limits::steps);
    check_limit(program_ + " run config", "batch_size", rc_.batch_size, limits::batch);
    check_limit(program_ + " run config", "seq_len", rc_.seq_len, limits::positions);
    SPARSELM_CHECK(rc_.threads >= 0 && std::size_t(rc_.threads) <= limits::threads, program_,
                   " run config: field 'threads' is ", rc_.threads, ", outside [0, ", limits::threads, "]");
    check_activation_limit(rc_.batch_size, rc_.seq_len, vocab, program_ + " run config");
    SPARSELM_CHECK(!(o.resume && o.overwrite), program_, ": --resume and --overwrite exclude each other");
    SPARSELM_CHECK(!rc_.train_data.empty(), program_, ": no training data (field data.train or --train)");
    SPARSELM_CHECK(rc_.loop.stop_at_loss == 0 || !rc_.valid_data.empty(), program_,
                   ": stop_at_loss (--stop-at-loss) needs validation data (field data.valid or --valid)");
    data::token_file train_file(rc_.train_data);
    SPARSELM_CHECK(train_file.size() > 0, rc_.train_data, ": empty token file");
    SPARSELM_CHECK(train_file.vocab_size() <= vocab, rc_.train_data, ": vocabulary ", train_file.vocab_size(),
                   " exceeds the model's vocab_size ", vocab);
    // Data parallelism (trainer::replicas()): each of the P ranks trains on batch_size rows of a
    // global batch of P·batch_size drawn identically on every rank; rank 0 alone writes files.
    // A pipeline over ranks (trainer::processes()): every rank reads the whole global batch; with
    // data replicas of the pipeline (train/rank_grid.hpp) every rank of a replica reads its rows.
    const std::size_t global_batch = checked_mul(rc_.batch_size, t.replicas().size(), program_ + ": batch_size x ranks");
    std::optional<data::token_file> valid_file;
    std::optional<data::lm_eval_pass> valid;
    if (!rc_.valid_data.empty()) {
      valid_file.emplace(rc_.valid_data);
      SPARSELM_CHECK(valid_file->vocab_size() <= vocab, rc_.valid_data, ": vocabulary ", valid_file->vocab_size(),
                     " exceeds the model's vocab_size ", vocab);
      // global batches, each rank evaluates its rows (evaluate_lm)
      valid.emplace(*valid_file, global_batch, data::lm_window_options{.seq_len = rc_.seq_len});
    }
    rank0_ = t.processes().rank() == 0;
    data::lm_sampler sampler(train_file, {.batch_size = global_batch,
                                          .windows = {.seq_len = rc_.seq_len},
                                          .order = rc_.order == "sequential" ? data::lm_order::sequential
                                                                             : data::lm_order::shuffled,
                                          .seed = rc_.seed});
    const pipeline::plan& pipe = t.options().pipeline;
    try {  // before any work: at least one block per stage, a given split in range
      pipeline::check_split(pipe.split, pipe.stages, model.stack().size());
    } catch (const error& e) {
      throw error(detail::concat("run config trainer.", e.what()));
    }
    job_task<Model, Trainer> task(*this, model, t, sampler, valid ? &*valid : nullptr, train_file,
                                  valid_file ? &*valid_file : nullptr);
    nlohmann::json summary = run_training(
        model, t, task,
        {.out = out(),
         .program = program_,
         .config = resolved_,
         .loop = rc_.loop,
         .resume = o.resume,
         .overwrite = o.overwrite,
         .verify = o.verify,
         .keep_checkpoints = o.keep_checkpoints,
         .check_model_config = true,
         .inputs = {rc_.train_data, rc_.valid_data},
         .nonfinite_advice = " (trainer.on_nonfinite: \"stop\", or \"skip\" with trainer.max_skipped_steps)"},
        ds);
    if (o.print_summary && rank0_) std::printf("%s\n", summary.dump().c_str());
    return summary;
  }

 private:
  // The LM task with what the job adds: the "run" line's sizes and layout (optimiser state per
  // rank, pipeline stages, sparsity, unigram baseline), said on stderr, and the baseline in the summary.
  template <class Model, class Trainer>
  class job_task : public lm_task<Trainer> {
   public:
    job_task(const lm_job& job, Model& model, Trainer& t, data::lm_sampler& sampler, data::lm_eval_pass* valid,
             const data::token_file& train_file, const data::token_file* valid_file)
        : lm_task<Trainer>(t, sampler, valid), job_(job), model_(model), sampler_(sampler), train_file_(train_file),
          valid_file_(valid_file) {}

    nlohmann::json run_line(const std::function<void(const std::string&)>& say) {
      return job_.describe(model_, this->t_, sampler_, train_file_, valid_file_, unigram_, say);
    }
    void summary(const loop_result& r, nlohmann::json& s) const {
      lm_task<Trainer>::summary(r, s);
      if (valid_file_ && r.last_eval && r.last_eval->count) s["unigram_perplexity"] = unigram_;
    }

   private:
    const lm_job& job_;
    Model& model_;
    data::lm_sampler& sampler_;
    const data::token_file& train_file_;
    const data::token_file* valid_file_;
    double unigram_ = 0;
  };

  // The job's keys of the "run" line, and the lines that say them.
  template <class Model, class Trainer>
  nlohmann::json describe(Model& model, Trainer& t, const data::lm_sampler& sampler, const data::token_file& train_file,
                          const data::token_file* valid_file, double& unigram,
                          const std::function<void(const std::string&)>& say) const {
    const std::size_t vocab = model_vocab(model);
    parallel::replica_group& group = t.replicas();
    parallel::replica_group& procs = t.processes();
    const std::size_t ranks = group.size(), global_batch = sampler.options().batch_size;
    if (valid_file) unigram = unigram_perplexity(train_file, *valid_file, vocab);
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
    nlohmann::json run_line = {{"train_tokens", train_file.size()},
                               {"train_windows", sampler.windows_per_epoch()},
                               {"threads", num_threads()},
                               {"optimizer_state_mib", state_mib}};
    if (valid_file) run_line["unigram_perplexity"] = unigram;
    if (!stage_mib.empty()) run_line["stage_weights_and_gradients_mib"] = stage_mib;
    const pipeline::plan& pipe = t.options().pipeline;
    if (pipe.stages > 1)
      run_line["pipeline"] = {{"stages", pipe.stages},
                              {"schedule", pipeline::name(pipe.schedule)},
                              {"placement", &procs != &group ? "ranks" : "threads"},
                              {"micro_batches", t.options().accumulation.steps},
                              {"predicted_bubble", pipeline::predicted_bubble(pipe.stages, t.options().accumulation.steps)}};
    add_sparsity_totals(model, run_line);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: %zu parameters, %llu training tokens (%llu windows of %zu)", program_.c_str(),
                  model.num_parameters(), (unsigned long long)train_file.size(),
                  (unsigned long long)sampler.windows_per_epoch(), rc_.seq_len);
    say(buf);
    if (const auto& tg = t.tensor_ranks(); tg.active()) {
      run_line["tensor_parallel"] = {{"ranks", tg.split().size}, {"replicas", tg.replicas()}};
      say(program_ + ": tensor parallel: every block split over " + std::to_string(tg.split().size) + " ranks (" +
          tg.tensor().describe() + "), " + std::to_string(tg.replicas()) +
          " data replica(s) of the split model; the parameters above are one rank's (its slices and the "
          "replicated tensors)");
    }
    if (ranks > 1) {
      say(program_ + ": data parallel over " + group.describe() + ", " + std::to_string(rc_.batch_size) +
          " rows per rank, global batch " + std::to_string(global_batch));
      say(program_ + ": optimiser state per rank (MiB): " + state_mib.dump() +
          (t.sharded() ? (&procs != &group ? " (each rank its stage's)" : " (sharded over the ranks)") : ""));
    }
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
    return run_line;
  }

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
  lm_run_config rc_;
  nlohmann::json resolved_;
  std::string program_;
  bool rank0_ = true;  // only rank 0 prints the summary
};

}  // namespace sparselm
