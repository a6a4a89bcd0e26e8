// Trains the S1 dynamic-sparse language model (models/sparse_lm.hpp; docs/sparse_lm.md) on token files.
//
//   ./build/examples/sparse_lm --config configs/s1-tiny-train.json --train runs/data/train.tok
//       --valid runs/data/valid.tok --steps 200 --out runs/s1-tiny
//
// The run config is train/run_config.hpp's (model, data, batch, steps, optimizer, schedule, trainer,
// loop, seed, out) plus "sparsity_update" (the pattern update of sparse/update.hpp, and "enabled":
// false for static sparsity). Every S1 option also has a flag; flags override the config; --set
// key.path=value overrides anything else. Writes <out>/metrics.jsonl (JSON lines: a "run" line with
// the resolved config and sizes, "train" lines with loss (weighted), xentropy, perplexity, accuracy,
// lr, grad_norm, tokens_per_s, samples_per_s and, after each pattern update, "sparsity_update" statistics; "eval"
// lines) and <out>/config.json.
#include <CLI/CLI.hpp>

#include "cli.hpp"
#include "replicas.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_config.hpp"

namespace fs = std::filesystem;
using namespace sparselm;

namespace {

// The data-parallel replicas (examples/replicas.hpp): MPI ranks under mpirun, else this process.
sparselm::parallel::replica_group* replica_group = nullptr;

struct cli_values {
  std::optional<double> sparsity, prune_ratio, phase_delay, period, peak_lr, min_lr, decay_power, max_norm, dropout;
  std::optional<std::size_t> block_size, update_period, zero_steps, layers, hidden, ff, heads, qkv, embedding, sequence,
      vocab, steps, batch_size, seq_len, accumulation, warmup_steps, cooldown_steps, autoregression_offset;
  std::optional<std::string> regrow, pooling, prune_metric, optimizer, slots, clip, dtype, precision, allocation, train, valid, out;
  std::optional<bool> static_sparsity, weight_repeats, shard_optimizer;
  examples::pipeline_flags pipeline;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> sets;
};

template <class V>
void put(json& j, const char* key, const std::optional<V>& v) {
  if (v) j[key] = *v;
}

// Applies the flags to the raw run-config JSON (model already inlined as an object).
void apply_flags(json& j, const cli_values& c) {
  json& m = j["model"];
  put(m, "sparsity", c.sparsity);
  put(m, "block_size", c.block_size);
  put(m, "allocation", c.allocation);
  put(m, "layers", c.layers);
  put(m, "hidden_length", c.hidden);
  put(m, "ff_length", c.ff);
  put(m, "attention_heads", c.heads);
  put(m, "qkv_length", c.qkv);
  put(m, "embedding_length", c.embedding);
  put(m, "sequence_length", c.sequence);
  put(m, "vocab_size", c.vocab);
  put(m, "dtype", c.dtype);
  put(m, "dropout", c.dropout);
  if (c.weight_repeats) m["loss"]["weight_repeats"] = *c.weight_repeats;
  if (c.autoregression_offset) m["loss"]["autoregression_offset"] = *c.autoregression_offset;
  json& u = j["sparsity_update"];
  if (u.is_null()) u = json::object();
  put(u, "prune_ratio", c.prune_ratio);
  put(u, "update_period", c.update_period);
  put(u, "zero_steps", c.zero_steps);
  put(u, "phase_delay", c.phase_delay);
  put(u, "period", c.period);
  put(u, "regrow", c.regrow);
  put(u, "pooling", c.pooling);
  put(u, "prune_metric", c.prune_metric);
  if (c.static_sparsity) u["enabled"] = !*c.static_sparsity;
  put(j, "steps", c.steps);
  put(j, "batch_size", c.batch_size);
  put(j, "seq_len", c.seq_len);
  put(j, "seed", c.seed);
  put(j, "out", c.out);
  if (c.train) j["data"]["train"] = *c.train;
  if (c.valid) j["data"]["valid"] = *c.valid;
  if (c.optimizer) {
    if (!j.contains("optimizer") || j["optimizer"].value("type", "") != *c.optimizer) j["optimizer"] = json::object();
    j["optimizer"]["type"] = *c.optimizer;
  }
  if (c.slots) j["optimizer"]["slots"] = *c.slots;
  if (c.clip) j["trainer"]["clip"] = *c.clip;
  put(j["trainer"], "max_norm", c.max_norm);
  put(j["trainer"], "precision", c.precision);
  put(j["trainer"], "shard_optimizer", c.shard_optimizer);
  c.pipeline.put(j["trainer"]);
  if (c.accumulation) j["trainer"]["accumulation"]["steps"] = *c.accumulation;
  if (j["trainer"].empty()) j.erase("trainer");
  if (c.peak_lr || c.min_lr || c.decay_power || c.warmup_steps || c.cooldown_steps) {
    json& s = j["schedule"];
    if (s.is_null() || s.value("type", "") != "bert_power") s = json{{"type", "bert_power"}};
    put(s, "peak_lr", c.peak_lr);
    put(s, "min_lr", c.min_lr);
    put(s, "power", c.decay_power);
    put(s, "warmup_steps", c.warmup_steps);
    put(s, "cooldown_steps", c.cooldown_steps);
  }
  for (const auto& s : c.sets) apply_override(j, s);
}

struct run_inputs {
  lm_run_config run;
  sparse_lm_config model;
  sparse::update_config update;
  bool dynamic = true;
  lm_job_options job;  // --resume, --overwrite, --no-verify
  json resolved;  // the whole resolved config, for the log and <out>/config.json
};

template <class Model, class Optimizer>
int train(const run_inputs& in, Optimizer opt) {
  struct policies : default_policies {
    using optimizer = Optimizer;
    using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
  };
  using trainer_t = trainer<Model, policies>;
  const auto& rc = in.run;
  SPARSELM_CHECK(rc.seq_len <= in.model.sequence_length, "sparse_lm: seq_len ", rc.seq_len,
                 " exceeds the model's sequence_length ", in.model.sequence_length);
  SPARSELM_CHECK(in.model.loss.autoregression_offset < rc.seq_len, "sparse_lm: autoregression_offset ",
                 in.model.loss.autoregression_offset, " leaves no target in a sequence of ", rc.seq_len);
  Model model(in.model, block_pooling_of(in.update.pooling));
  model.init(rc.seed);
  trainer_t t(model, rc.trainer, std::move(opt), optim::make_schedule(rc.schedule_json()));
  t.set_replicas(*replica_group);
  std::optional<dynamic_sparsity<Model, trainer_t>> ds;
  if (in.dynamic && Model::sparsity::is_sparse) ds.emplace(model, t, in.update, rc.seed + 7);
  lm_job job(rc, in.resolved, "sparse_lm");
  const auto summary = job.run(model, t, in.job, ds ? &*ds : nullptr);
  return summary.value("interrupted", false) ? 130 : 0;
}

int dispatch(const run_inputs& in) {
  SPARSELM_CHECK(in.model.activation == "gelu_new", "sparse_lm: this program is built for activation 'gelu_new' only ",
                 "(the library also has 'gelu' as a template parameter), got '", in.model.activation, "'");
  return registry::with_sparsity(in.model.block_size, [&]<class Sparsity>() {
    return registry::with_optimizer(in.run.optimizer, [&]<class Opt>(Opt opt) {
      return train<sparse_lm<float, Sparsity>>(in, std::move(opt));
    }, "run config: field 'optimizer.type'");
  }, "run config: field 'model.block_size'");
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // outlives the body: a failed rank of several ends the job
  const int status = run_program("sparse_lm", [&]() -> int {
    replicas.start(argc, argv);
    replica_group = &replicas.group();
    CLI::App app{
        "Train the S1 dynamic-sparse language model (block-sparse projections, RigL/random pattern updates,\n"
        "factorised embedding, weighted repeated-token loss) on token files written by encode_dataset.\n"
        "Weights are fp32 (--dtype float32); --precision bf16 or fp16 computes the dense GEMMs in 16 bits."};
    std::string config_path;
    cli_values c;
    int threads = 0;
    lm_job_options job_options;
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
    app.add_option("-c,--config", config_path, "Run config JSON (e.g. configs/s1-tiny-train.json)");
    app.add_option("--train", c.train, "Training token file");
    app.add_option("--valid", c.valid, "Validation token file");
    app.add_option("-o,--out", c.out, "Output directory (metrics.jsonl, config.json, checkpoints/)");
    app.add_flag("--resume", job_options.resume,
                 "Continue the run in --out from its newest checkpoint (exact, patterns included)");
    app.add_flag("--overwrite", job_options.overwrite,
                 "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app.add_flag("--no-verify", [&](std::int64_t) { job_options.verify = false; },
                 "Resume without checking the checkpoint's CRC-32C checksums");
    auto* g = app.add_option_group("model");
    g->add_option("--layers", c.layers, "Transformer layers (S1 --encoder-layers)")
        ->check(examples::at_most(limits::layers));
    g->add_option("--hidden", c.hidden, "Hidden width H (--hidden-length)");
    g->add_option("--ff", c.ff, "Feed-forward width F (--ff-length)");
    g->add_option("--heads", c.heads, "Attention heads (--attention-heads)")->check(examples::at_most(limits::heads));
    g->add_option("--qkv", c.qkv, "Per-head query/key/value width (--qkv-length)");
    g->add_option("--embedding", c.embedding, "Factorised embedding width E (--embedding-length)");
    g->add_option("--sequence", c.sequence, "Maximum sequence length of the model (--source-sequence-length)")
        ->check(examples::at_most(limits::positions));
    g->add_option("--vocab", c.vocab, "Vocabulary size V (--source-vocab-length)")
        ->check(examples::at_most(limits::vocab));
    g->add_option("--dtype", c.dtype, "Weight dtype: float32 (16-bit compute: --precision)");
    g->add_option("--dropout", c.dropout, "Embedding and residual dropout rate");
    g->add_option("--weight-repeats", c.weight_repeats, "Weighted repeated-token loss (true/false)");
    g->add_option("--autoregression-offset", c.autoregression_offset,
                  "Positions at the start of a sequence not scored");
    auto* sp = app.add_option_group("sparsity");
    sp->add_option("--sparsity", c.sparsity, "Fraction of zero blocks in each sparse projection");
    sp->add_option("--block-size", c.block_size, "Block size B: 1, 4, 8, 16, or 0 for a dense model");
    sp->add_option("--allocation", c.allocation, "Block allocation across projections: uniform or erk");
    sp->add_option("--prune-ratio", c.prune_ratio,
                   "Fraction of active blocks pruned at an update (before the cosine decay)");
    sp->add_option("--update-period", c.update_period, "Optimiser steps between pattern updates");
    sp->add_option("--regrow-type", c.regrow, "Regrowth: rigl or random");
    sp->add_option("--pooling-type", c.pooling, "RigL gradient pooling per block: sum, avg or max");
    sp->add_option("--prune-metric", c.prune_metric, "Block magnitude for pruning: l1, l2 or max");
    sp->add_option("--prune-zero-steps", c.zero_steps, "Cosine prune schedule: no update before this step");
    sp->add_option("--prune-phase-delay", c.phase_delay, "Cosine prune schedule: phase delay (radians)");
    sp->add_option("--prune-period", c.period, "Cosine prune schedule: periods over the run (0.5 = half a cosine)");
    sp->add_flag("--static-sparsity", c.static_sparsity, "Keep the initial patterns (no updates)");
    auto* o = app.add_option_group("optimisation");
    o->add_option("--steps", c.steps, "Optimiser steps")->check(examples::at_most(limits::steps));
    o->add_option("--batch-size", c.batch_size, "Sequences per micro-batch")->check(examples::at_most(limits::batch));
    o->add_option("--seq-len", c.seq_len, "Input positions per sequence (a window has seq-len + 1 tokens)");
    o->add_option("--accumulation", c.accumulation, "Micro-batches per optimiser step")
        ->check(examples::at_most(limits::accumulation));
    o->add_option("--optimizer", c.optimizer, "adam (S1; eps 1e-2), adamw, sgd or lamb");
    o->add_option("--slots", c.slots,
                  "Storage type of the optimiser's slots (Adam m and v, momentum): float, bf16 or half "
                  "(optimizer.slots; updates compute in fp32)")
        ->check(CLI::IsMember({"float", "bf16", "half"}));
    o->add_option("--clip", c.clip, "Gradient clipping: per_tensor (S1), global_norm or none");
    o->add_option("--max-norm", c.max_norm, "Clipping norm");
    examples::add_precision_option(*o, c.precision);
    examples::add_shard_option(*o, c.shard_optimizer);
    c.pipeline.add(*o);
    o->add_option("--peak-lr", c.peak_lr, "S1 schedule (bert_power): peak learning rate");
    o->add_option("--min-lr", c.min_lr, "S1 schedule: minimum learning rate");
    o->add_option("--warmup-steps", c.warmup_steps, "S1 schedule: linear warm-up steps");
    o->add_option("--cooldown-steps", c.cooldown_steps, "S1 schedule: decay steps");
    o->add_option("--decay-power", c.decay_power, "S1 schedule: power of the decay (0.5 = square root)");
    app.add_option("--seed", c.seed, "Seed of initialisation, patterns, data order and dropout");
    app.add_option("--threads", threads, "Threads (0: all cores)")->check(CLI::Range(0, int(limits::threads)));
    app.add_option("--set", c.sets, "Override any config field: key.path=value (repeatable)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    if (auto status = examples::parse(app, argc, argv)) return *status;

    if (threads > 0) set_num_threads(threads);
    auto [j, base] = read_run_json(config_path);
    if (!j.contains("model")) j["model"] = json::object();
    if (!j.contains("optimizer")) j["optimizer"] = {{"type", "adam"}};  // S1: Adam, eps 1e-2
    if (!j.contains("trainer")) j["trainer"] = {{"clip", "per_tensor"}, {"max_norm", 1.0}};
    apply_flags(j, c);
    const std::string ctx = config_path.empty() ? std::string("run config") : config_path;
    run_inputs in;
    in.job = job_options;
    json upd = j.value("sparsity_update", json::object());
    j.erase("sparsity_update");
    SPARSELM_CHECK(upd.is_object(), ctx, ": field 'sparsity_update' must be an object");
    if (upd.contains("enabled")) {
      SPARSELM_CHECK(upd["enabled"].is_boolean(), ctx, ": field 'sparsity_update.enabled' must be true or false");
      in.dynamic = upd["enabled"].get<bool>();
      upd.erase("enabled");
    }
    check_model_limits(j["model"], ctx + " model");
    in.model = sparse_lm_config::from_json(j["model"], ctx + " model");
    in.run = lm_run_config::from_json(j, ctx, base);
    in.update = sparse::update_config::from_json(upd, ctx + " sparsity_update");
    if (in.update.schedule.total_steps == 0) in.update.schedule.total_steps = in.run.loop.steps;
    in.resolved = j;
    in.resolved["model"] = in.model.to_json();
    in.resolved["sparsity_update"] = in.update;
    in.resolved["sparsity_update"]["enabled"] = in.dynamic;
    in.resolved["schedule"] = in.run.schedule_json();
    return dispatch(in);
  });
  return replicas.finish(status);
}
