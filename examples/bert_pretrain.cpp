// BERT pre-training (masked LM + next-sentence prediction) on example files written by bert_data,
// with LAMB and the up_down schedule unless the run config says otherwise. Phase 1 (sequence 128),
// then phase 2 (sequence 384) from phase 1's weights (configs/recipes/ has both as presets):
//
//   bert_pretrain --model configs/bert-tiny.json --train runs/bert/train-128.bex --valid runs/bert/valid-128.bex
//                 --out runs/bert/phase1 --steps 2000 --batch-size 32 --lr 2e-3
//   bert_pretrain --model configs/bert-tiny.json --train runs/bert/train-384.bex --valid runs/bert/valid-384.bex
//                 --out runs/bert/phase2 --init-from runs/bert/phase1/checkpoints --steps 500 --batch-size 8 --lr 1e-3
//
// Every option of the common schema applies (train/run_settings.hpp; docs/reference/options.md):
// --global-batch or --accumulation, any optimiser and schedule, --recompute, pipeline stages,
// --precision, sharding, --tensor-parallel N (under mpirun: every block split over N ranks);
// --block-size B --sparsity s makes the encoder's projections block-sparse,
// --update-period N (> 0) prunes and regrows them every N steps (--regrow rigl|random, --prune-ratio,
// its cosine decay --prune-period). --init-from also takes a HuggingFace BERT directory; without
// --model the model config is then the checkpoint's. Rerun with --resume to continue a run
// (exactly: same data order, same dropout masks). The run directory is locked while a job uses it;
// a fresh run refuses a used one unless --overwrite; SIGINT, SIGTERM and SIGHUP save a checkpoint
// and stop; a non-finite loss or gradient stops the run, naming the last good checkpoint.

#include <cstdio>
#include <optional>
#include <string>

#include "bert_model_cli.hpp"
#include "replicas.hpp"
#include "training_cli.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/data/bert_examples.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/train/bert_job.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/run_settings.hpp"
#include "sparselm/train/tensor_grid.hpp"
#include "sparselm/train/trainer.hpp"

using namespace sparselm;

namespace {

std::span<const option_entry> pretrain_options() {
  using k = option_kind;
  static const option_entry table[] = {
      {"data.train", "--train", k::input, "Training example file (bert_data)", "", "", "data"},
      {"data.valid", "--valid", k::input, "Validation example file (absent: no evaluation)", "", "", "data"},
  };
  return table;
}

// BERT pre-training's defaults (the seeds' phase 1 in miniature): LAMB, the up_down schedule.
json pretrain_defaults() {
  return {{"optimizer", {{"type", "lamb"}, {"weight_decay", 0.01}}},
          {"schedule", {{"type", "up_down"}, {"max_lr", 1e-3}, {"warmup_frac", 0.1}}},
          {"steps", 1000},
          {"batch_size", 8},
          {"eval_every", 100},
          {"eval_batches", 8},
          {"out", "runs/bert"}};
}

}  // namespace

int main(int argc, char** argv) {
  examples::replicas replicas;  // MPI ranks under mpirun; outlives the body (a failed rank ends the job)
  const int status = run_program("bert_pretrain", [&]() -> int {
    replicas.start(argc, argv);
    examples::training_cli cli("bert_pretrain", "BERT pre-training (MLM + NSP) on bert_data example files.",
                               {examples::bert_model_options(), pretrain_options()}, pretrain_defaults());
    if (auto status = cli.parse(argc, argv)) return *status;
    json j = cli.run_json();
    run_settings s = run_settings::from_json(j, cli.context(), {"model", "data"});
    const json data = s.task.value("data", json::object());
    json_fields d(data, cli.context() + " data");
    bert_job_options o;
    o.train = d.get("train", std::string());
    o.valid = d.get("valid", std::string());
    d.finish();
    SPARSELM_CHECK(!o.train.empty(), "bert_pretrain: no training examples (data.train or --train)");
    const std::size_t stages =
        s.trainer.pipeline.where == pipeline::placement::ranks ? s.trainer.pipeline.stages : 1;
    std::optional<std::size_t> examples;
    if (s.epochs) examples = data::bert_example_file(o.train).size();
    // tensor-parallel ranks split one model: the data replicas are the groups
    const std::size_t tp = std::max<std::size_t>(1, s.trainer.tensor_parallel);
    s.resolve(std::max<std::size_t>(1, replicas.group().size() / (stages * tp)), examples);
    if (s.threads > 0) set_num_threads(int(s.threads));
    const auto model = examples::read_bert_model(s, cli.base());
    const bert_config& cfg = model.config;
    o.out = s.out;
    o.init_from = s.init_from;
    o.batch_size = s.batch_size;
    o.loop = s.loop;
    o.keep_checkpoints = s.keep_checkpoints;
    o.seed = s.seed;
    o.resume = cli.resume;
    o.overwrite = cli.overwrite;
    o.config = s.to_json();
    o.config["model"] = cfg.to_json();
    o.config["data"] = {{"train", o.train.string()}, {"valid", o.valid.string()}};
    const auto& sp = s.sparsity;
    SPARSELM_CHECK(!sp.update || sp.block_size > 0, cli.context(),
                   ": field 'sparsity.update' (dynamic sparsity) needs block-sparse projections (sparsity.block_size)");
    if (tp > 1) tensor_grid::split_of(replicas.group(), tp);  // the ranks a multiple of the group, before any work
    if (cli.dry_run || s.memory_budget > 0) {
      const auto info = data::bert_example_file(o.train).info();
      if (auto rc = cli.plan_gate(model_shape_of(cfg, head_kind::bert_pretraining, info.max_predictions),
                                  plan_inputs_of(s, info.seq_len, replicas.group().size()), replicas.group().rank() == 0))
        return *rc;
    }
    int rc = 0;
    registry::with_sparsity(sp.block_size, [&]<class S>() {
      using model_t = bert<float, S>;
      struct policies : default_policies {
        using optimizer = registry::any_optimizer;
        using data_parallel = sparselm::data_parallel::mpi;  // one process unless started by mpirun
      };
      using trainer_t = trainer<model_t, policies>;
      sparse_plan plan{.sparsity = sp.sparsity, .block = sp.block_size};
      if (sp.update) plan.pooling = block_pooling_of(sp.update->pooling);
      // tensor parallelism: this rank's slice of every block (train/tensor_grid.hpp)
      const parallel::tensor_split split = tensor_grid::split_of(replicas.group(), tp);
      if constexpr (S::is_sparse)
        plan = allocate_plan(plan, sp.block_size, sp.allocation,
                             [&](const sparse_plan& p) { model_t probe(cfg, p, split); });
      model_t m(cfg, plan, split);
      m.init(s.seed);
      if (!S::is_sparse && tp > 1) {  // a dense group starts from the weights one process initialises
        model_t whole(cfg, plan);
        whole.init(s.seed);
        take_slices(whole, whole.params(), m, m.params());
      }
      s.trainer.dropout_seed = s.seed + 1;
      trainer_t t(m, s.trainer, registry::any_optimizer(s.optimizer), optim::make_schedule(s.schedule));
      t.set_replicas(replicas.group());
      const bool rank0 = replicas.group().rank() == 0;
      std::optional<dynamic_sparsity<model_t, trainer_t>> ds;
      if constexpr (S::is_sparse)
        if (sp.update) ds.emplace(m, t, *sp.update, parallel::shard_seed(s.seed + 7, split));  // (tp: per rank)
      if (rank0)
        std::fprintf(stderr, "bert_pretrain: %zu parameters%s\n", m.num_parameters(),
                     S::is_sparse ? (sp.update ? ", block-sparse projections, dynamic" : ", block-sparse projections, static")
                                  : "");
      const auto summary = bert_job(o).run(m, t, ds ? &*ds : nullptr);
      if (rank0) std::printf("%s\n", summary.dump().c_str());
      rc = summary.value("interrupted", false) ? 130 : 0;
    }, cli.context() + ": field 'sparsity.block_size'");
    return rc;
  });
  return replicas.finish(status);
}
