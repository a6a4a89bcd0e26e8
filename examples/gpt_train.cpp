// Trains a GPT (models/gpt.hpp) on token files written by encode_dataset: progress bar, validation
// perplexity against the unigram baseline, JSON-lines metrics, checkpoints that HF-style tools read,
// exact resume.
//
//   ./build/examples/encode_dataset -i data/corpus/train -o runs/data/train.tok
//       --validation-input data/corpus/valid --validation-output runs/data/valid.tok
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json --resume     # after Ctrl-C or a crash
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json --init-from path/to/hf-gpt2  # fine-tune
//
// The run config is train/run_config.hpp's; every flag overrides its field and --set key.path=value
// overrides anything. Outputs in --out: config.json (resolved), metrics.jsonl, checkpoints/.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "replicas.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_config.hpp"

namespace fs = std::filesystem;
using namespace sparselm;

namespace {

// The data-parallel replicas (examples/replicas.hpp): MPI ranks under mpirun, else this process.
sparselm::parallel::replica_group* replica_group = nullptr;

lm_job_options job_options;  // --resume, --overwrite, --no-verify

struct cli_values {
  std::optional<std::string> train, valid, out, optimizer, slots, clip, precision, recompute, order, allocation, regrow, init_from;
  std::optional<std::size_t> steps, batch_size, seq_len, accumulation, warmup_steps, eval_every, eval_batches, log_every,
      checkpoint_every, layers, heads, embd, vocab, positions, block_size, update_period;
  std::optional<double> max_lr, min_lr, weight_decay, max_norm, dropout, sparsity;
  std::optional<std::uint64_t> seed;
  std::optional<int> threads;
  std::optional<bool> shard_optimizer;
  examples::pipeline_flags pipeline;
  std::vector<std::string> sets;
};

template <class V>
void put(json& j, const char* key, const std::optional<V>& v) {
  if (v) j[key] = *v;
}

void apply_flags(json& j, const cli_values& c) {
  json& m = j["model"];
  put(m, "n_layer", c.layers);
  put(m, "n_head", c.heads);
  put(m, "n_embd", c.embd);
  put(m, "vocab_size", c.vocab);
  put(m, "n_positions", c.positions);
  if (c.dropout) m["embd_pdrop"] = m["attn_pdrop"] = m["resid_pdrop"] = *c.dropout;
  put(j, "steps", c.steps);
  put(j, "batch_size", c.batch_size);
  put(j, "seq_len", c.seq_len);
  put(j, "seed", c.seed);
  put(j, "threads", c.threads);
  put(j, "out", c.out);
  put(j, "order", c.order);
  put(j, "eval_every", c.eval_every);
  put(j, "eval_batches", c.eval_batches);
  put(j, "log_every", c.log_every);
  put(j, "checkpoint_every", c.checkpoint_every);
  if (c.train) j["data"]["train"] = *c.train;
  if (c.valid) j["data"]["valid"] = *c.valid;
  if (c.optimizer) {
    if (!j.contains("optimizer") || j["optimizer"].value("type", "") != *c.optimizer) j["optimizer"] = json::object();
    j["optimizer"]["type"] = *c.optimizer;
  }
  if (c.slots) j["optimizer"]["slots"] = *c.slots;
  if (c.weight_decay) j["optimizer"]["weight_decay"] = *c.weight_decay;
  if (c.clip) j["trainer"]["clip"] = *c.clip;
  if (c.max_norm) j["trainer"]["max_norm"] = *c.max_norm;
  if (c.precision) j["trainer"]["precision"] = *c.precision;
  if (c.shard_optimizer) j["trainer"]["shard_optimizer"] = *c.shard_optimizer;
  c.pipeline.put(j["trainer"]);
  if (c.accumulation) j["trainer"]["accumulation"]["steps"] = *c.accumulation;
  if (c.max_lr || c.min_lr || c.warmup_steps) {
    json& s = j["schedule"];
    if (s.is_null()) s = json{{"type", "warmup_cosine"}};
    put(s, "max_lr", c.max_lr);
    put(s, "min_lr", c.min_lr);
    put(s, "warmup_steps", c.warmup_steps);
  }
  json& sp = j["sparsity"];
  put(sp, "block_size", c.block_size);
  put(sp, "sparsity", c.sparsity);
  put(sp, "allocation", c.allocation);
  if (c.update_period || c.regrow) {
    json& u = sp["update"];
    if (u.is_null()) u = json::object();
    put(u, "update_period", c.update_period);
    put(u, "regrow", c.regrow);
  }
  if (sp.empty()) j.erase("sparsity");
  put(j, "recompute", c.recompute);
  for (const auto& s : c.sets) apply_override(j, s);
}

// Run config fields this program adds to lm_run_config's: "sparsity" {block_size, sparsity,
// allocation ("uniform" | "erk"), update (sparse/update.hpp's pattern update; absent: static)} for
// block-sparse projections, "recompute" ("none" | "blocks").
struct gpt_job {
  std::string context;  // the config file, for errors
  lm_run_config run;
  gpt_config model;
  std::size_t block = 0;
  double sparsity = 0.9;
  sparse::allocation allocation = sparse::allocation::uniform;
  std::optional<sparse::update_config> update;  // dynamic sparsity
  std::string recompute = "none";
  std::filesystem::path init_from;  // a checkpoint (ours or HF GPT-2) whose weights start the run
  json resolved;
};

// The model, recompute policy and optimiser types the job names (train/registry.hpp), then the run.
int dispatch(const gpt_job& job) {
  return registry::with_sparsity(job.block, [&]<class Sparsity>() {
    return registry::with_recompute(job.recompute, [&]<class Recompute>() {
      return registry::with_optimizer(job.run.optimizer, [&]<class Optimizer>(Optimizer opt) {
        using Model = gpt<float, Sparsity>;
        struct policies : default_policies {
          using recompute = Recompute;
          using optimizer = Optimizer;
          using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
        };
        using trainer_t = trainer<Model, policies>;
        sparse_plan plan{.sparsity = job.sparsity};
        if (job.update) plan.pooling = block_pooling_of(job.update->pooling);
        if constexpr (Sparsity::is_sparse)
          plan = allocate_plan(plan, Sparsity::block, job.allocation,
                               [&](const sparse_plan& p) { Model probe(job.model, p); });
        Model model(job.model, plan);
        model.init(job.run.seed);
        if (!job.init_from.empty() && !job_options.resume) {  // a resume takes its own checkpoint's weights
          const auto r = io::load_pretrained(job.init_from, model, io::hf_gpt2_map());
          std::fprintf(stderr, "gpt_train: model weights from %s\n", r.summary().c_str());
        }
        trainer_t t(model, job.run.trainer, std::move(opt), optim::make_schedule(job.run.schedule_json()));
        t.set_replicas(*replica_group);
        std::optional<dynamic_sparsity<Model, trainer_t>> ds;
        if constexpr (Sparsity::is_sparse)
          if (job.update) ds.emplace(model, t, *job.update, job.run.seed + 7);
        lm_job runner(job.run, job.resolved, "gpt_train");
        return runner.run(model, t, job_options, ds ? &*ds : nullptr).value("interrupted", false) ? 130 : 0;
      }, job.context + ": field 'optimizer.type'");
    }, job.context + ": field 'recompute'");
  }, job.context + ": field 'sparsity.block_size'");
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // outlives the body: a failed rank of several ends the job
  const int status = run_program("gpt_train", [&]() -> int {
    replicas.start(argc, argv);
    replica_group = &replicas.group();
    CLI::App app{
        "Train a GPT (pre-LN decoder, tied LM head; dense or with block-sparse projections) on token files written\n"
        "by encode_dataset. Writes <out>/config.json, <out>/metrics.jsonl (JSON lines) and <out>/checkpoints/\n"
        "(step-NNNNNN/{config.json, model.safetensors, training_state.safetensors}, latest). Flags override the\n"
        "run config's fields; --set overrides any field."};
    std::string config_path;
    cli_values c;
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
    app.add_option("-c,--config", config_path, "Run config JSON (e.g. configs/gpt-mini-train.json)");
    app.add_option("--train", c.train, "Training token file (data.train)");
    app.add_option("--valid", c.valid, "Validation token file (data.valid)");
    app.add_option("-o,--out", c.out, "Output directory (out)");
    app.add_option("--init-from", c.init_from,
                   "Start from this checkpoint's weights and model config: a checkpoint or run directory of ours, "
                   "or a HuggingFace GPT-2 directory (config.json + model.safetensors); model flags still apply");
    app.add_flag("--resume", job_options.resume, "Continue the run in --out from its newest checkpoint (exact resume)");
    app.add_flag("--overwrite", job_options.overwrite,
                 "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app.add_flag("--no-verify", [](std::int64_t) { job_options.verify = false; },
                 "Resume without checking the checkpoint's CRC-32C checksums");
    auto* g = app.add_option_group("model");
    g->add_option("--layers", c.layers, "Transformer blocks (model.n_layer)")->check(examples::at_most(limits::layers));
    g->add_option("--heads", c.heads, "Attention heads (model.n_head)")->check(examples::at_most(limits::heads));
    g->add_option("--embd", c.embd, "Width C (model.n_embd)")->check(examples::at_most(limits::width));
    g->add_option("--vocab", c.vocab, "Vocabulary size (model.vocab_size; token ids must be below it)")
        ->check(examples::at_most(limits::vocab));
    g->add_option("--positions", c.positions, "Maximum sequence length (model.n_positions)")
        ->check(examples::at_most(limits::positions));
    g->add_option("--dropout", c.dropout, "Embedding, attention and residual dropout (model.*_pdrop)");
    g->add_option("--block-size", c.block_size, "Block-sparse projections with this block: 1, 4, 8, 16 (0: dense)");
    g->add_option("--sparsity", c.sparsity, "Fraction of zero blocks in the sparse projections (sparsity.sparsity)");
    g->add_option("--allocation", c.allocation, "Blocks per projection: uniform or erk (sparsity.allocation)")
        ->check(CLI::IsMember({"uniform", "erk"}));
    g->add_option("--update-period", c.update_period,
                  "Prune and regrow the patterns every N steps (sparsity.update.update_period; absent: static)")
        ->check(examples::at_most(limits::steps));
    g->add_option("--regrow", c.regrow, "Regrowth of the pattern updates: rigl or random (sparsity.update.regrow)")
        ->check(CLI::IsMember({"rigl", "random"}));
    auto* o = app.add_option_group("optimisation");
    o->add_option("--steps", c.steps, "Optimiser steps in total (a resumed run continues up to it)")
        ->check(examples::at_most(limits::steps));
    o->add_option("--batch-size", c.batch_size, "Sequences per micro-batch")->check(examples::at_most(limits::batch));
    o->add_option("--seq-len", c.seq_len, "Input positions per sequence")->check(examples::at_most(limits::positions));
    o->add_option("--accumulation", c.accumulation, "Micro-batches per optimiser step (trainer.accumulation.steps)")
        ->check(examples::at_most(limits::accumulation));
    o->add_option("--optimizer", c.optimizer, "adamw, adam, sgd or lamb");
    o->add_option("--slots", c.slots,
                  "Storage type of the optimiser's slots (Adam m and v, momentum): float, bf16 or half "
                  "(optimizer.slots; updates compute in fp32)")
        ->check(CLI::IsMember({"float", "bf16", "half"}));
    o->add_option("--weight-decay", c.weight_decay, "Weight decay (optimizer.weight_decay)");
    o->add_option("--lr", c.max_lr, "Peak learning rate (schedule.max_lr)");
    o->add_option("--min-lr", c.min_lr, "Final learning rate of the cosine (schedule.min_lr)");
    o->add_option("--warmup-steps", c.warmup_steps, "Linear warm-up steps (schedule.warmup_steps)");
    o->add_option("--clip", c.clip, "Gradient clipping: global_norm, per_tensor or none");
    o->add_option("--max-norm", c.max_norm, "Clipping norm");
    examples::add_precision_option(*o, c.precision);
    examples::add_shard_option(*o, c.shard_optimizer);
    c.pipeline.add(*o);
    o->add_option("--recompute", c.recompute,
                  "Activation memory policy: none or blocks (recompute each block in backward)");
    auto* l = app.add_option_group("loop");
    l->add_option("--eval-every", c.eval_every, "Evaluate on the validation split every N steps (0: only at the end)");
    l->add_option("--eval-batches", c.eval_batches, "Validation batches per evaluation (0: all)");
    l->add_option("--log-every", c.log_every, "Training metrics line every N steps");
    l->add_option("--checkpoint-every", c.checkpoint_every,
                  "Checkpoint every N steps (0: only at the end and on Ctrl-C)");
    l->add_option("--order", c.order, "Training windows: shuffled or sequential");
    app.add_option("--seed", c.seed, "Seed of initialisation, data order and dropout");
    app.add_option("--threads", c.threads, "Threads (0: all cores)")->check(CLI::Range(0, int(limits::threads)));
    app.add_option("--set", c.sets, "Override any run-config field: key.path=value (repeatable)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    if (auto status = examples::parse(app, argc, argv)) return *status;

    auto [j, base] = read_run_json(config_path);
    fs::path init_from;
    if (c.init_from) {  // the model is the checkpoint's
      init_from = io::resolve_checkpoint(*c.init_from);
      j["model"] = io::read_model_config(init_from);
      j["model"].erase("sparselm");  // a block-sparse source: the sparsity comes from this run's flags
    }
    if (!j.contains("model")) j["model"] = read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-mini.json");
    apply_flags(j, c);
    const std::string ctx = config_path.empty() ? std::string("run config") : config_path;
    gpt_job job;
    job.context = ctx;
    json sp = j.value("sparsity", json::object());
    SPARSELM_CHECK(sp.is_object(), ctx, ": field 'sparsity' must be an object {block_size, sparsity}");
    {
      json_fields r(sp, ctx + " sparsity");
      job.block = r.get("block_size", job.block);
      job.sparsity = r.get("sparsity", job.sparsity, in_range(0.0, 0.999999));
      r.read_enum("allocation", job.allocation, sparse::parse_allocation);
      if (r.has("update")) {
        job.update = sparse::update_config::from_json(r.object("update"), ctx + " sparsity.update");
        SPARSELM_CHECK(job.block > 0, ctx, ": field 'sparsity.update' needs block-sparse projections (sparsity.block_size)");
      }
      r.ignore({"update"});
      r.finish();
    }
    job.recompute = j.value("recompute", std::string("none"));
    json run = j;
    run.erase("sparsity");
    run.erase("recompute");
    check_model_limits(run["model"], ctx + " model");
    job.model = gpt_config::from_json(run["model"], ctx + " model");
    job.run = lm_run_config::from_json(run, ctx, base);
    if (job.update && job.update->schedule.total_steps == 0) job.update->schedule.total_steps = job.run.loop.steps;
    SPARSELM_CHECK(job.run.seq_len <= job.model.n_positions, ctx, ": seq_len ", job.run.seq_len,
                   " exceeds the model's n_positions ", job.model.n_positions);
    if (job.run.threads > 0) set_num_threads(job.run.threads);
    job.init_from = init_from;
    job.resolved = j;
    job.resolved["model"] = job.model.to_json();
    if (c.init_from) job.resolved["init_from"] = init_from.string();
    job.resolved["schedule"] = job.run.schedule_json();
    if (job.update) job.resolved["sparsity"]["update"] = *job.update;
    return dispatch(job);
  });
  return replicas.finish(status);
}
