// Trains a GPT (models/gpt.hpp), or a LLaMA-family model (models/llama.hpp: "model_type": "llama" in
// the model config), on token files written by encode_dataset: progress bar, validation
// perplexity against the unigram baseline, JSON-lines metrics, checkpoints that HF-style tools read,
// exact resume.
//
//   ./build/examples/encode_dataset -i data/corpus/train -o runs/data/train.tok
//       --validation-input data/corpus/valid --validation-output runs/data/valid.tok
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json --resume     # after Ctrl-C or a crash
//   ./build/examples/gpt_train --config configs/gpt-mini-train.json --init-from path/to/hf-gpt2  # fine-tune
//
// The run config is train/run_config.hpp's (the common keys of train/run_settings.hpp and the
// language-modelling task's; docs/reference/options.md); every flag overrides its key and --set
// key.path=value overrides anything. Outputs in --out: config.json (resolved), metrics.jsonl,
// checkpoints/.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "replicas.hpp"
#include "training_cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_config.hpp"
#include "sparselm/train/tensor_grid.hpp"

using namespace sparselm;

namespace {

// The model's keys with a flag (the rest of gpt_config's keys: --set model.KEY=VALUE): whole numbers.
const option_entry gpt_model_table[] = {
    {"model.n_layer", "--layers", option_kind::count, "Transformer blocks", "", "", "model", 1,
     double(limits::layers)},
    {"model.n_head", "--heads", option_kind::count, "Attention heads", "", "", "model"},
    {"model.n_embd", "--embd", option_kind::count, "Width C", "", "", "model"},
    {"model.vocab_size", "--vocab", option_kind::count, "Vocabulary size (token ids must be below it)", "", "",
     "model"},
    {"model.n_positions", "--positions", option_kind::count, "Maximum sequence length", "", "", "model"},
};
std::span<const option_entry> gpt_model_options() { return gpt_model_table; }

struct gpt_job {
  lm_run_config run;
  gpt_config model;                  // "model_type": "gpt2" (or absent)
  std::optional<llama_config> llama;  // "model_type": "llama"
  std::filesystem::path init_from;  // a checkpoint (ours or HF GPT-2) whose weights start the run
  json resolved;
  lm_job_options options;
};

// The model the job names (family and block size: train/registry.hpp), its trainer, then the run.
// Recompute, pipeline stages, precision and the optimiser are run-time choices of one trainer type.
template <class Family>
int dispatch(const gpt_job& job, const typename Family::config_type& cfg, parallel::replica_group& replicas) {
  const auto& sp = job.run.settings.sparsity;
  return registry::with_sparsity(sp.block_size, [&]<class Sparsity>() {
    using Model = typename Family::template model<Sparsity, kernels::gelu_kind::tanh>;
    struct policies : default_policies {
      using optimizer = registry::any_optimizer;
      using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
    };
    using trainer_t = trainer<Model, policies>;
    sparse_plan plan{.sparsity = sp.sparsity, .block = sp.block_size};
    if (sp.update) plan.pooling = block_pooling_of(sp.update->pooling);
    // Tensor parallelism: this rank's slice of every block.
    const std::size_t tp = job.run.trainer.tensor_parallel;
    auto make = [&](const sparse_plan& p) {
      if constexpr (std::is_constructible_v<Model, const typename Family::config_type&, const sparse_plan&,
                                            parallel::tensor_split>)
        return Model(cfg, p, tensor_grid::split_of(replicas, tp));
      else
        return Model(cfg, p);
    };
    if constexpr (Sparsity::is_sparse)
      plan = allocate_plan(plan, sp.block_size, sp.allocation, [&](const sparse_plan& p) { make(p); });
    Model model = make(plan);
    // offloaded weights and gradients: to their files before init, which then never holds them all
    if (!job.run.trainer.offload.empty()) model.offload_to(job.run.trainer.offload);
    model.init(job.run.seed);
    if constexpr (!Sparsity::is_sparse && requires { model.tensor_split(); }) {
      if (tp > 1) {  // a dense group starts from the weights one process initialises with this seed
        Model whole(cfg, plan);
        whole.init(job.run.seed);
        take_slices(whole, whole.params(), model, model.params());
      }
    }
    if (!job.init_from.empty() && !job.options.resume) {  // a resume takes its own checkpoint's weights
      bool split = false;
      if constexpr (requires { model.tensor_split(); }) {
        if (tp > 1) {  // the whole model's weights, then this rank's slices of them
          Model whole(cfg, whole_plan(model, tp));
          const auto r = io::load_pretrained(job.init_from, whole, Family::hf_map(cfg));
          take_slices(whole, whole.params(), model, model.params());
          if (replicas.rank() == 0) std::fprintf(stderr, "gpt_train: model weights from %s\n", r.summary().c_str());
          split = true;
        }
      }
      if (!split) {
        const auto r = io::load_pretrained(job.init_from, model, Family::hf_map(cfg));
        std::fprintf(stderr, "gpt_train: model weights from %s\n", r.summary().c_str());
      }
    }
    registry::any_optimizer opt(job.run.optimizer);
    trainer_t t(model, job.run.trainer, std::move(opt), optim::make_schedule(job.run.schedule_json()));
    t.set_replicas(replicas);
    std::optional<dynamic_sparsity<Model, trainer_t>> ds;
    if constexpr (Sparsity::is_sparse)
      if (sp.update)  // a tensor-parallel rank's slices draw their own regrowth
        ds.emplace(model, t, *sp.update, parallel::shard_seed(job.run.seed + 7, tensor_grid::split_of(replicas, tp)));
    lm_job runner(job.run, job.resolved, "gpt_train");
    return runner.run(model, t, job.options, ds ? &*ds : nullptr).value("interrupted", false) ? 130 : 0;
  }, job.run.settings.context + ": field 'sparsity.block_size'");
}

constexpr const char* description =
    "Train a GPT (pre-LN decoder, tied LM head; dense or with block-sparse projections) on token files written\n"
    "by encode_dataset. Writes <out>/config.json, <out>/metrics.jsonl (JSON lines) and <out>/checkpoints/\n"
    "(step-NNNNNN/{config.json, model.safetensors, training_state.safetensors}, latest). Flags override the\n"
    "run config's keys; --set overrides any key.";

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // outlives the body: a failed rank of several ends the job
  const int status = run_program("gpt_train", [&]() -> int {
    replicas.start(argc, argv);
    examples::training_cli cli("gpt_train", description, {gpt_model_options(), lm_task_options()},
                               lm_run_config::defaults());
    if (auto status = cli.parse(argc, argv)) return *status;

    json j = cli.run_json();
    const std::string ctx = cli.context();
    std::string model_ctx = cli.model_context();
    gpt_job job;
    job.options = {.resume = cli.resume, .overwrite = cli.overwrite, .verify = cli.verify};
    if (j.contains("init_from") && j["init_from"].is_string()) {  // the model is the checkpoint's, then the flags'
      job.init_from = io::resolve_checkpoint(j["init_from"].get<std::string>());
      json m = io::read_model_config(job.init_from);
      model_ctx = (job.init_from / io::config_file).string();
      m.erase("sparselm");  // a block-sparse source: the sparsity comes from this run's settings
      const json over = cli.overlay();
      if (over.contains("model") && over["model"].is_object()) m.update(over["model"]);
      j["model"] = m;
    }
    if (!j.contains("model")) j["model"] = read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-mini.json");
    job.run = lm_run_config::from_json(j, ctx, cli.base(), {}, replicas.group().size());
    json m = job.run.model;
    const bool is_llama = m.is_object() && m.contains("model_type") && m["model_type"] == "llama";
    if (job.run.settings.dropout) {
      if (is_llama) m["attention_dropout"] = *job.run.settings.dropout;  // LLaMA has no other dropout
      else m["embd_pdrop"] = m["attn_pdrop"] = m["resid_pdrop"] = *job.run.settings.dropout;
    }
    check_model_limits(m, model_ctx);
    if (is_llama) {
      job.llama = llama_config::from_json(m, model_ctx);
      job.run.model = job.llama->to_json();
    } else {
      job.model = gpt_config::from_json(m, model_ctx);
      job.run.model = job.model.to_json();
    }
    const std::size_t positions = is_llama ? job.llama->max_position_embeddings : job.model.n_positions;
    SPARSELM_CHECK(job.run.seq_len <= positions, ctx, ": seq_len ", job.run.seq_len, " exceeds the model's ",
                   is_llama ? "max_position_embeddings " : "n_positions ", positions);
    SPARSELM_CHECK(!job.run.settings.sparsity.update || job.run.settings.sparsity.block_size > 0, ctx,
                   ": field 'sparsity.update' (dynamic sparsity) needs block-sparse projections (sparsity.block_size)");
    if (const std::size_t tp = job.run.trainer.tensor_parallel; tp > 1)
      tensor_grid::split_of(replicas.group(), tp);  // ranks a multiple of the group, before any work
    job.options.keep_checkpoints = job.run.settings.keep_checkpoints;
    if (job.run.threads > 0) set_num_threads(job.run.threads);
    job.resolved = job.run.resolved();
    if (!job.init_from.empty()) job.resolved["init_from"] = job.init_from.string();
    if (auto rc = cli.plan_gate(is_llama ? model_shape_of(*job.llama) : model_shape_of(job.model),
                                plan_inputs_of(job.run.settings, job.run.seq_len, replicas.group().size()),
                                replicas.group().rank() == 0))
      return *rc;
    if (is_llama) return dispatch<registry::llama_family>(job, *job.llama, replicas.group());
    return dispatch<registry::gpt_family>(job, job.model, replicas.group());
  });
  return replicas.finish(status);
}
