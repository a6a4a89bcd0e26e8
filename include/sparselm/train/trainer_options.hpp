#pragma once
// What a trainer step does beyond the model's passes, as options (train/trainer.hpp): gradient
// accumulation, clipping, the non-finite guard, loss scaling, precision, sharded optimiser state
// and stage pipelining; read from a run config's "trainer" object by trainer_options::from_json.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/optim/accumulation.hpp"
#include "sparselm/optim/loss_scaling.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/policies/recompute.hpp"

namespace sparselm {

enum class clip_mode { none, global_norm, per_tensor };

// Thrown when dynamic loss scaling meets overflowing gradients at its minimum scale: the scale
// cannot back off further, and going on would mean training on nothing.
class loss_scale_underflow : public error {
 public:
  loss_scale_underflow(std::size_t step, float scale, std::size_t skipped)
      : error(detail::concat("step ", step, ": the gradients overflow even at the minimum loss scale ", scale,
                             " (loss_scaling.min_scale; ", skipped,
                             " steps skipped by the scaler so far); the update was not applied")) {}
};

// What a step does when its loss or gradient norm is not finite (NaN or infinite). The update is
// never applied; `stop` throws nonfinite_error at once, `skip` counts the step as done without
// updating anything (the data it drew is consumed) and throws once more than max_skipped steps in
// a row were skipped.
enum class nonfinite_action { stop, skip };

// Thrown by trainer::train_step for a non-finite loss or gradient norm (see nonfinite_action). The
// model's parameters and the optimiser state are those before the step: still finite.
class nonfinite_error : public error {
 public:
  nonfinite_error(std::size_t step, double loss, double grad_norm, std::size_t skipped_in_row)
      : error(detail::concat("step ", step, ": the loss is ", loss, " and the gradient norm ", grad_norm,
                             skipped_in_row ? detail::concat(" (", skipped_in_row, " steps skipped in a row before it)")
                                            : std::string(),
                             "; the update was not applied")),
        step(step),
        loss(loss),
        grad_norm(grad_norm) {}
  std::size_t step;  // the step that failed (1 for the first)
  double loss, grad_norm;
};

struct trainer_options {
  optim::grad_accumulation accumulation{};  // micro-batches per step; sum or avg
  clip_mode clip = clip_mode::global_norm;
  float max_norm = 1.0f;
  std::uint64_t dropout_seed = 0;  // key of the dropout streams
  nonfinite_action on_nonfinite = nonfinite_action::stop;
  std::size_t max_skipped = 10;  // with nonfinite_action::skip: steps skipped in a row before stopping
  // Loss scaling (optim/loss_scaling.hpp): the loss gradient is multiplied by the scale before
  // backward and the gradients divided by it in the update. Static (default scale 1: off) or
  // dynamic: a step whose gradients overflow is skipped and the scale backs off; an overflow at
  // min_scale is an error (loss_scale_underflow).
  optim::loss_scale_config loss_scaling{};
  // Compute type of the dense GEMMs (policies/precision.hpp: "fp32", "bf16", "fp16"); unset
  // means fp32.
  std::optional<dtype> precision;
  // Under bf16: keep the activations that only feed bf16 products in bf16 (step_context::
  // bf16_activations; less memory, gelu' at the bf16 pre-activation); false: fp32 activations.
  bool bf16_activations = true;
  // Data parallelism (data_parallel::mpi, P > 1 replicas): each replica keeps and updates the
  // optimiser slots of 1/P of the tensors and the replicas then exchange the updated parameters
  // (ZeRO stage 1; optim/shard.hpp). A pipeline over ranks: each rank keeps and updates those of its
  // stage's tensors (the embedding, with a tied head tensor, on stage 0). Checkpoints hold the whole
  // state either way.
  bool shard_optimizer = false;
  // Tensor parallelism (parallel/tensor_parallel.hpp): groups of this many ranks each split every
  // block of the model (heads and hidden units); with a multiple of it, data replicas of the split
  // model (train/tensor_grid.hpp). The model must be built with the rank's slice. 1: no split.
  // Checkpoints hold the whole model (train/tensor_checkpoint.hpp).
  std::size_t tensor_parallel = 1;
  // Stage pipelining under pipeline::configured (policies/pipeline.hpp): the blocks split into
  // `stages` stages on their own thread groups, the micro-batches (accumulation steps) in 1F1B or
  // GPipe order; the split is given or balanced by measured cost.
  pipeline::plan pipeline{};
  // What a step keeps for backward under recompute::configured (policies/recompute.hpp): "none"
  // (every block's activations) or "blocks" (each block's input; the block re-runs in backward).
  std::string recompute = "none";
  // Offloaded state: a directory on local disk where the optimiser keeps its slots and the model its
  // fp32 weights and gradients, in unnamed files (optim/engine.hpp and models/transformer.hpp,
  // offload_to), streamed a block at a time through the passes and a window of segments at a time
  // through the update; empty: in memory. The checkpoints and the numbers are the same either way.
  std::string offload;

  // Fields: accumulation {steps, mode, scale_before}, clip ("none" | "global_norm" | "per_tensor"),
  // max_norm, dropout_seed, on_nonfinite ("stop" | "skip"), max_skipped_steps, loss_scaling
  // ({"type": "static", "scale": S} | {"type": "dynamic", ...} | a number), precision ("fp32" |
  // "bf16" | "fp16"), shard_optimizer (bool), tensor_parallel (ranks per group), pipeline ({"stages": N, "schedule": "1f1b" | "gpipe",
  // "placement": "threads" | "ranks", "split": [first block of each stage after the first]}),
  // recompute ("none" | "blocks"), bf16_activations (bool), offload (a directory).
  static trainer_options from_json(const json& j, const std::string& context = "trainer config") {
    json_fields r(j, context);
    trainer_options o;
    if (r.has("accumulation")) o.accumulation = optim::grad_accumulation(j.at("accumulation"));
    r.ignore({"accumulation"});
    const std::string clip = r.get("clip", std::string("global_norm"), one_of({"none", "global_norm", "per_tensor"}));
    o.clip = clip == "none" ? clip_mode::none : clip == "per_tensor" ? clip_mode::per_tensor : clip_mode::global_norm;
    o.max_norm = r.get("max_norm", o.max_norm, in_range(1e-12, 1e12));
    o.dropout_seed = r.get("dropout_seed", o.dropout_seed);
    o.on_nonfinite = r.get("on_nonfinite", std::string("stop"), one_of({"stop", "skip"})) == "skip"
                         ? nonfinite_action::skip
                         : nonfinite_action::stop;
    o.max_skipped = r.get("max_skipped_steps", o.max_skipped, in_closed(0, 1e6));
    if (r.has("loss_scaling")) o.loss_scaling = optim::loss_scale_config(j.at("loss_scaling"));
    r.ignore({"loss_scaling"});
    o.shard_optimizer = r.get("shard_optimizer", o.shard_optimizer);
    o.tensor_parallel = r.get("tensor_parallel", o.tensor_parallel, in_closed(1, 4096));
    if (r.has("pipeline")) o.pipeline = parse_pipeline(j.at("pipeline"), context + ": field 'pipeline'");
    r.ignore({"pipeline"});
    if (r.has("precision"))
      o.precision = sparselm::precision::parse(r.get("precision", std::string("fp32"), one_of({"fp32", "bf16", "fp16"})),
                                     context + ": field 'precision'");
    o.bf16_activations = r.get("bf16_activations", o.bf16_activations);
    o.recompute = r.get("recompute", o.recompute, one_of({recompute::none::name, recompute::blocks::name}));
    o.offload = r.get("offload", o.offload);
    SPARSELM_CHECK(!r.has("offload") || !o.offload.empty(), context, ": field 'offload' is empty (a directory, or leave it out)");
    r.finish();
    return o;
  }

  static pipeline::plan parse_pipeline(const json& j, const std::string& context) {
    json_fields r(j, context);
    pipeline::plan p;
    p.stages = r.get("stages", p.stages, in_closed(1, 1024));
    p.schedule = pipeline::parse_order(r.get("schedule", std::string("1f1b"), one_of({"1f1b", "gpipe"})), context);
    p.where = r.get("placement", std::string("threads"), one_of({"threads", "ranks"})) == "ranks"
                  ? pipeline::placement::ranks
                  : pipeline::placement::threads;
    if (r.has("split")) {
      const json& a = j.at("split");
      SPARSELM_CHECK(a.is_array(), context, ": 'split' must be an array of block indices");
      for (const auto& v : a) {
        SPARSELM_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0, context, ": 'split' entry ", v.dump(), " is not a block index");
        p.split.push_back(v.get<std::size_t>());
      }
    }
    r.ignore({"split"});
    r.finish();
    SPARSELM_CHECK(p.split.empty() || p.split.size() + 1 == p.stages, context, ": 'split' has ", p.split.size(),
                   " entries for ", p.stages, " stages (the first block of each stage after the first: ",
                   p.stages - 1, " entries)");
    return p;
  }
};

// The options a trainer with the policy bundle Policies runs with: fixes the compute type (fp32
// when the options name none), refuses options a fixed policy contradicts, and gives fp16 dynamic loss
// scaling (initial scale 2^16) when the options leave loss scaling off (static, scale 1); a
// configured static scale or dynamic scaler is kept.
template <class Policies>
trainer_options resolve_options(trainer_options o) {
  if (!o.precision) o.precision = dtype::f32;
  if constexpr (!std::is_same_v<typename Policies::pipeline, pipeline::configured>)
    SPARSELM_CHECK(o.pipeline.stages <= 1, "trainer: the options ask for ", o.pipeline.stages,
                   " pipeline stages but the policy is pipeline::", Policies::pipeline::name,
                   " (pipeline::configured follows the options)");
  if constexpr (!std::is_same_v<typename Policies::recompute, recompute::configured>)
    SPARSELM_CHECK(o.recompute == "none" || o.recompute == Policies::recompute::name, "trainer: the options ask for recompute '",
                   o.recompute, "' but the policy is recompute::", Policies::recompute::name,
                   " (recompute::configured follows the options)");
  if (*o.precision == dtype::f16 && !o.loss_scaling.dynamic && o.loss_scaling.scale == 1.0f) {
    o.loss_scaling = optim::loss_scale_config{};
    o.loss_scaling.dynamic = true;
    o.loss_scaling.scale = 65536.0f;
  }
  return o;
}

}  // namespace sparselm
