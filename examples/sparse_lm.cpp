// Trains the S1 dynamic-sparse language model (models/sparse_lm.hpp; docs/design/models.md) on token files.
//
//   ./build/examples/sparse_lm --config configs/s1-tiny-train.json --train runs/data/train.tok
//       --valid runs/data/valid.tok --steps 200 --out runs/s1-tiny
//
// The run config is train/run_config.hpp's (the common keys of train/run_settings.hpp and the
// language-modelling task's; docs/reference/options.md): "sparsity" {block_size, sparsity,
// allocation} override the model config's, "sparsity.update" is the pattern update
// (sparse/update.hpp; update_period 0: static patterns). Every S1 option also has a flag; flags
// override the config; --set key.path=value overrides anything else. Writes <out>/metrics.jsonl (JSON lines: a "run" line with
// the resolved config and sizes, "train" lines with loss (weighted), xentropy, perplexity, accuracy,
// lr, grad_norm, tokens_per_s, samples_per_s and, after each pattern update, "sparsity_update" statistics; "eval"
// lines) and <out>/config.json.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "replicas.hpp"
#include "training_cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_config.hpp"
#include "sparselm/train/tensor_grid.hpp"

using namespace sparselm;

namespace {

// The S1 model's keys with a flag (S1's own flag names in the help), and the S1 schedule's.
std::span<const option_entry> s1_model_options() {
  using k = option_kind;
  static const option_entry table[] = {
      {"model.layers", "--layers", k::count, "Transformer layers (S1 --encoder-layers)", "", "", "model", 1,
       double(limits::layers)},
      {"model.hidden_length", "--hidden", k::count, "Hidden width H (S1 --hidden-length)", "", "", "model"},
      {"model.ff_length", "--ff", k::count, "Feed-forward width F (S1 --ff-length)", "", "", "model"},
      {"model.attention_heads", "--heads", k::count, "Attention heads (S1 --attention-heads)", "", "", "model"},
      {"model.qkv_length", "--qkv", k::count, "Per-head query/key/value width (S1 --qkv-length)", "", "", "model"},
      {"model.embedding_length", "--embedding", k::count, "Factorised embedding width E (S1 --embedding-length)", "",
       "", "model"},
      {"model.sequence_length", "--sequence", k::count, "Maximum sequence length (S1 --source-sequence-length)", "",
       "", "model"},
      {"model.vocab_size", "--vocab", k::count, "Vocabulary size V (S1 --source-vocab-length)", "", "", "model"},
      {"model.dtype", "--dtype", k::choice, "Weight dtype (16-bit compute: --precision)", "float32", "float32",
       "model"},
      {"model.loss.weight_repeats", "--weight-repeats", k::choice, "Weighted repeated-token loss", "true false", "",
       "model"},
      {"model.loss.autoregression_offset", "--autoregression-offset", k::count,
       "Positions at the start of a sequence not scored", "", "", "model"},
      {"schedule.cooldown_steps", "--cooldown-steps", k::count, "bert_power schedule (S1): decay steps (absent: the run's)",
       "", "", "model"},
      {"schedule.power", "--decay-power", k::number, "bert_power schedule (S1): power of the decay (0.5: square root)",
       "", "0.5", "model"},
  };
  return table;
}

// S1's defaults: Adam with eps 1e-2, per-tensor clipping, the bert_power schedule; a block-sparse
// model updates its patterns every 100 steps unless the run config says otherwise (main()).
json s1_defaults() {
  json d = lm_run_config::defaults();
  d["optimizer"] = {{"type", "adam"}, {"eps", 1e-2}};
  d["schedule"] = {{"type", "bert_power"}, {"max_lr", 2e-4}, {"min_lr", 8e-6}};
  d["trainer"] = {{"clip", "per_tensor"}, {"max_norm", 1.0}};
  d["model"] = json::object();
  return d;
}

struct run_inputs {
  lm_run_config run;
  sparse_lm_config model;
  lm_job_options job;  // --resume, --overwrite, --no-verify
  json resolved;       // the whole resolved config, for the log and <out>/config.json
};

int dispatch(const run_inputs& in, parallel::replica_group& replicas) {
  SPARSELM_CHECK(in.model.activation == "gelu_new", "sparse_lm: this program is built for activation 'gelu_new' only ",
                 "(the library also has 'gelu' as a template parameter), got '", in.model.activation, "'");
  const auto& update = in.run.settings.sparsity.update;
  return registry::with_sparsity(in.model.block_size, [&]<class Sparsity>() {
    using Model = sparse_lm<float, Sparsity>;
    struct policies : default_policies {
      using optimizer = registry::any_optimizer;
      using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
    };
    using trainer_t = trainer<Model, policies>;
    const auto& rc = in.run;
    const kernels::block_pooling pooling = block_pooling_of(update ? update->pooling : sparse::grad_pooling::avg);
    // Tensor parallelism: this rank's slice of every block (train/tensor_grid.hpp).
    const parallel::tensor_split split = tensor_grid::split_of(replicas, rc.trainer.tensor_parallel);
    Model model(in.model, pooling, split);
    model.init(rc.seed);
    if constexpr (!Sparsity::is_sparse) {
      if (split.active()) {  // a dense group starts from the weights one process initialises
        Model whole(in.model, pooling);
        whole.init(rc.seed);
        take_slices(whole, whole.params(), model, model.params());
      }
    }
    if (!rc.settings.init_from.empty() && !in.job.resume) {  // --init-from: our checkpoint of this model
      const auto from = io::resolve_checkpoint(rc.settings.init_from);
      if (split.active()) {  // the whole model's weights, then this rank's slices of them
        Model whole = unsplit_model(model, whole_plan(model, split.size));
        io::load_model(from, whole);
        take_slices(whole, whole.params(), model, model.params());
      } else {
        io::load_model(from, model);
      }
      if (replicas.rank() == 0) std::fprintf(stderr, "sparse_lm: model weights from %s\n", from.string().c_str());
    }
    trainer_t t(model, rc.trainer, registry::any_optimizer(rc.optimizer), optim::make_schedule(rc.schedule_json()));
    t.set_replicas(replicas);
    std::optional<dynamic_sparsity<Model, trainer_t>> ds;
    if constexpr (Sparsity::is_sparse)
      if (update)  // a split model's slices draw their own regrowth, its whole weights the group's
        ds.emplace(model, t, *update, parallel::shard_seed(rc.seed + 7, split), rc.seed + 7);
    lm_job job(rc, in.resolved, "sparse_lm");
    const auto summary = job.run(model, t, in.job, ds ? &*ds : nullptr);
    return summary.value("interrupted", false) ? 130 : 0;
  }, in.run.settings.context + ": field 'model.block_size'");
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // outlives the body: a failed rank of several ends the job
  const int status = run_program("sparse_lm", [&]() -> int {
    replicas.start(argc, argv);
    examples::training_cli cli(
        "sparse_lm",
        "Train the S1 dynamic-sparse language model (block-sparse projections, RigL/random pattern updates,\n"
        "factorised embedding, weighted repeated-token loss) on token files written by encode_dataset.\n"
        "Weights are fp32 (--dtype float32); --precision bf16 or fp16 computes the GEMMs in 16 bits.",
        {s1_model_options(), lm_task_options()}, s1_defaults());
    if (auto status = cli.parse(argc, argv)) return *status;

    json j = cli.run_json();
    const std::string ctx = cli.context();
    {  // S1 is the dynamic-sparse LM: a block-sparse model without an update config updates every 100 steps
      const json sp = j.value("sparsity", json::object());
      const json block = sp.is_object() && sp.contains("block_size") ? sp["block_size"] : j["model"].value("block_size", json(sparse_lm_config{}.block_size));
      if (sp.is_object() && !sp.contains("update") && block != json(0)) j["sparsity"]["update"] = {{"update_period", 100}};
    }
    run_inputs in;
    in.job = {.resume = cli.resume, .overwrite = cli.overwrite, .verify = cli.verify};
    in.run = lm_run_config::from_json(j, ctx, cli.base(), {}, replicas.group().size());
    const run_settings& s = in.run.settings;
    // The run's sparsity keys decide the model's block size, sparsity and allocation.
    json m = in.run.model;
    if (s.sparsity.block_given) m["block_size"] = s.sparsity.block_size;
    if (s.sparsity.sparsity_given) m["sparsity"] = s.sparsity.sparsity;
    if (j.contains("sparsity") && j["sparsity"].contains("allocation")) m["allocation"] = sparse::to_string(s.sparsity.allocation);
    if (s.dropout) m["dropout"] = *s.dropout;
    check_model_limits(m, cli.model_context());
    in.model = sparse_lm_config::from_json(m, cli.model_context());
    in.run.model = in.model.to_json();
    SPARSELM_CHECK(in.run.seq_len <= in.model.sequence_length, ctx, ": seq_len ", in.run.seq_len,
                   " exceeds the model's sequence_length ", in.model.sequence_length);
    SPARSELM_CHECK(in.model.loss.autoregression_offset < in.run.seq_len, ctx, ": autoregression_offset ",
                   in.model.loss.autoregression_offset, " leaves no target in a sequence of ", in.run.seq_len);
    if (in.model.block_size == 0) in.run.settings.sparsity.update.reset();  // a dense S1 model has no patterns
    in.job.keep_checkpoints = s.keep_checkpoints;
    if (in.run.threads > 0) set_num_threads(in.run.threads);
    in.resolved = in.run.resolved();
    in.resolved["sparsity"]["block_size"] = in.model.block_size;
    in.resolved["sparsity"]["sparsity"] = in.model.sparsity;
    plan_inputs pi = plan_inputs_of(in.run.settings, in.run.seq_len, replicas.group().size());
    pi.block = in.model.block_size;  // the model's config decides its sparsity
    pi.sparsity = in.model.sparsity;
    pi.allocation = sparse::parse_allocation(in.model.allocation);
    if (const std::size_t tp = in.run.trainer.tensor_parallel; tp > 1)
      tensor_grid::split_of(replicas.group(), tp);  // the ranks a multiple of the group, before any work
    if (auto rc = cli.plan_gate(model_shape_of(in.model), pi, replicas.group().rank() == 0)) return *rc;
    return dispatch(in, replicas.group());
  });
  return replicas.finish(status);
}
