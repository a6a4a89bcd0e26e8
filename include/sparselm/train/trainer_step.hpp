#pragma once
// The step of trainer<Model, Policies> (train/trainer.hpp), defined outside the class:
// train_step (zero the gradients, forward+backward over the micro-batches, the sums over replicas
// and pipeline stages, loss scaling, the non-finite guard, clipping, the update) and evaluate.
// Included by train/trainer.hpp, after the class; not meant to be included on its own.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <span>

#include "sparselm/train/trainer.hpp"

namespace sparselm {

template <class Model, class Policies>
step_metrics trainer<Model, Policies>::train_step(std::span<const batch_type> micro) {
  SPARSELM_CHECK(micro.size() == o_.accumulation.steps, "trainer: ", micro.size(),
                 " micro-batches given, gradient accumulation expects ", o_.accumulation.steps);
  const auto t0 = std::chrono::steady_clock::now();
  const bool offloaded = !o_.offload.empty();
  const offload_snapshot_t io0 = offloaded ? offload_snapshot() : offload_snapshot_t{};
  step_metrics m;
  if (stage_local())
    stage_.zero(model_.grads());
  else
    model_.grads().zero();
  pipeline::pass_context ctx;
  ctx.training = true;
  ctx.step = step_;
  ctx.rng = counter_rng(o_.dropout_seed);
  ctx.need_dense_grad = hooks_.needs_dense_grad && hooks_.needs_dense_grad(step_ + 1);
  ctx.compute = compute();
  ctx.bf16_activations = o_.bf16_activations;
  ctx.pipeline = &o_.pipeline;
  ctx.recompute_blocks = o_.recompute == recompute::blocks::name;
  if (stage_group()) ctx.stage_link = &link_;
  if (o_.tensor_parallel > 1) {
    SPARSELM_CHECK(tgrid_.active(), "trainer: tensor_parallel ", o_.tensor_parallel, ": set_replicas first");
    ctx.tensor_sum = &tsum_;
  }
  scales_.resize(micro.size());
  m.loss_scale = scaler_.scale();
  // The micro-batches' normalisers, tokens, samples and objective counts over the replicas,
  // whose rows together form the global micro-batches.
  auto& g = replicas();
  sums_.compute(model_, micro, g);
  if constexpr (step_sums_type::objectives > 0) {
    ctx.objective_counts = sums_.objective_counts();
    ctx.objectives = step_sums_type::objectives;
  }
  for (std::size_t k = 0; k < micro.size(); ++k) {
    const double w = sums_.normaliser(k);
    SPARSELM_CHECK(w > 0, "trainer: micro-batch ", k, " of step ", step_, " has no targets to learn from");
    // gradient of the micro-batch's mean loss, times the accumulation's per-micro factor
    scales_[k] = float(o_.accumulation.micro_batch_scale() / w * double(m.loss_scale));
  }
  m.tokens = sums_.tokens();
  m.samples = sums_.samples();
  std::function<void(std::size_t, std::size_t)> ready;
  std::size_t started = 0;  // gradient elements whose sum over the replicas has begun
  if (g.size() > 1) {
    // Each part's gradient range is summed over the replicas as soon as backward has finished it.
    ready = [&](std::size_t begin, std::size_t end) {
      sum_gradients(g, begin, end);
      started += end - begin;
      g.progress();
    };
    ctx.grads_ready = &ready;
  }
  m.loss = model_.template forward_backward<recompute_policy, pipeline_policy>(ctx, micro, scales_);
  if (g.size() > 1) reduce_over_replicas(g, started, ctx.need_dense_grad, m.loss);
  // A pipeline over ranks: each rank holds its stage's gradients (and the loss on the last one);
  // their sum is the whole gradient on every rank, which then applies the same update.
  // Sharded by stage, a rank's own tensors' gradients are complete once the tied ones are added
  // (the whole arena counts as summed).
  if (sharded_by_stage()) tied_.add(*stage_group(), model_.grads());
  if (auto* stages = stage_group())
    reduce_over_replicas(*stages, sharded_by_stage() ? model_.grads().all().size() : 0, ctx.need_dense_grad, m.loss);
  // The gradients hold loss_scale × the true ones; final_scale folds the un-scaling in.
  const float final_scale = float(o_.accumulation.final_scale()) / m.loss_scale;
  float grad_scale = final_scale;
  m.grad_norm = gradient_norm() * double(final_scale);
  // Dynamic loss scaling: overflowing gradients with a finite loss skip the step and back off.
  if (scaler_.is_dynamic() && std::isfinite(m.loss.loss_sum)) {
    const bool finite = std::isfinite(m.grad_norm);
    if (!finite && m.loss_scale <= scaler_.config().min_scale) [[unlikely]]
      throw loss_scale_underflow(step_ + 1, m.loss_scale, scaler_.skipped_steps());
    if (!scaler_.update(finite)) {
      m.skipped = m.overflow = true;
      m.lr = sched_(step_);
      m.step = ++step_;
      m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return m;
    }
  }
  // The guard: the norm above is the one reduction it needs (clipping and the log read it too).
  if (!std::isfinite(m.grad_norm) || !std::isfinite(m.loss.loss_sum)) [[unlikely]] {
    if (o_.on_nonfinite == nonfinite_action::stop || skipped_in_row_ >= o_.max_skipped)
      throw nonfinite_error(step_ + 1, m.loss.mean_loss(), m.grad_norm, skipped_in_row_);
    ++skipped_in_row_;
    m.skipped = true;
    m.lr = sched_(step_);
    m.step = ++step_;
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return m;
  }
  skipped_in_row_ = 0;
  if (o_.clip == clip_mode::global_norm) {
    grad_scale *= optim::clip_factor(m.grad_norm, o_.max_norm);
  } else if (o_.clip == clip_mode::per_tensor) {  // stage-local: its own tensors (the others' are zero)
    const auto [lo, hi] = stage_.own_elements();
    if (final_scale != 1.0f) optim::scale_grads(model_.grads(), final_scale, lo, hi);
    // tensor-parallel: each tensor clipped by its whole norm (the slices' squares summed over the group)
    std::function<void(std::span<double>)> whole;
    if (tgrid_.active()) whole = [this](std::span<double> sq) { sum_sliced_squares(sq); };
    optim::clip_tensor_norms(model_.grads(), o_.max_norm, lo, hi, whole);
    grad_scale = 1.0f;
  }
  m.lr = sched_(step_);
  const auto u0 = std::chrono::steady_clock::now();
  opt_.step(model_.params(), model_.grads(), m.lr, grad_scale);
  m.update_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count();
  if (stage_local())  // the last stage's head reads the tied tensors stage 0 updated
    tied_.share_params(*stage_group(), model_.params());
  else if (sharded())  // each process updated its own tensors
    shards_.share_params(shard_group(), model_.params());
  ++step_;
  if (hooks_.after_update) hooks_.after_update(step_);
  m.step = step_;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (offloaded) m.io = offload_snapshot() - io0;
  return m;
}

template <class Model, class Policies>
loss_stats trainer<Model, Policies>::evaluate(const batch_type& b) {
  pipeline::pass_context ctx;
  if constexpr (requires { model_.evaluate(b, ctx); }) {
    if (stage_group()) ctx.pipeline = &o_.pipeline, ctx.stage_link = &link_;
    if (tgrid_.active()) ctx.tensor_sum = &tsum_;
    return model_.evaluate(b, ctx);
  }
  return model_.evaluate(b);
}

}  // namespace sparselm
