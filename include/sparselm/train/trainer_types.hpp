#pragma once
// The vocabulary of train/trainer.hpp: the default policy bundle, what a trainable model provides
// (trainable_model) and what one optimiser step reports (step_metrics). Include it to name these
// without the trainer itself:
//
//   struct my_policies : sparselm::default_policies { using optimizer = sparselm::optim::sgd<float>; };
//   static_assert(sparselm::trainable_model<sparselm::gpt<>>);
//   void log(const sparselm::step_metrics& m) { std::printf("%.3f\n", m.loss.mean_loss()); }

#include <concepts>
#include <cstddef>
#include <span>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/offload_stats.hpp"
#include "sparselm/core/step_context.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/policies/data_parallel.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/recompute.hpp"

namespace sparselm {

// The default policy bundle: recompute and pipeline stages as the options say (keep all
// activations, one stage unless they say otherwise), one replica, AdamW. Precision is not a
// policy: trainer_options::precision chooses it at run time (policies/precision.hpp).
struct default_policies {
  using recompute = sparselm::recompute::configured;  // trainer_options::recompute (default none)
  using pipeline = sparselm::pipeline::configured;  // trainer_options::pipeline (default one stage)
  using data_parallel = sparselm::data_parallel::none;
  using optimizer = optim::adamw<float>;
};

template <class Model>
concept trainable_model = requires(Model& m, const typename Model::batch_type& b,
                                   std::span<const typename Model::batch_type> micro, std::span<const float> scales,
                                   step_context s) {
  { m.template forward_backward<recompute::none, pipeline::none>(s, micro, scales) } -> std::same_as<loss_stats>;
  { m.evaluate(b) } -> std::same_as<loss_stats>;
  { m.params() } -> std::convertible_to<arena<float>&>;
  { m.grads() } -> std::convertible_to<arena<float>&>;
  m.layout();
};

struct step_metrics {
  std::size_t step = 0;      // optimiser steps completed, including this one
  loss_stats loss;           // summed over the micro-batches
  float lr = 0;
  double grad_norm = 0;      // global norm of the final gradient, before clipping
  double seconds = 0;        // wall time of the step
  std::size_t tokens = 0;    // input positions processed (B·T over the micro-batches)
  std::size_t samples = 0;   // sequences processed (B over the micro-batches)
  bool skipped = false;      // no update: non-finite loss or gradient norm (nonfinite_action::skip),
                             // or gradients that overflowed under dynamic loss scaling
  bool overflow = false;     // skipped because the scaled gradients overflowed (dynamic loss scaling)
  float loss_scale = 1.0f;   // the loss scale this step's gradients were computed with
  double update_seconds = 0; // the optimiser's update (with offloaded state: streamed from and to disk)
  offload_snapshot_t io;     // offloaded state: I/O waits and bytes during the step (core/offload_stats.hpp)
  double tokens_per_second() const noexcept { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};

}  // namespace sparselm
