#pragma once
// LAMB (S3, BERT pre-training): Adam moments with a per-tensor trust ratio.
//
// When to use: large-batch pre-training (BERT phase 1/2 with batch 65k).
//
//   m = β1·m + (1 − β1)·g,  v = β2·v + (1 − β2)·g²      (debiased m̂, v̂ unless bias_correction off)
//   u = m̂ / (sqrt(v̂) + ε) + wd·w                        (wd = 0 on param_no_decay tensors)
//   r = ‖w‖ / ‖u‖ per tensor, 1 if either norm is 0      (r = 1 on param_no_trust tensors)
//   w −= lr·r·u
//
// Two passes: the first updates m, v and sums ‖w‖², ‖u‖² per segment (in double, added in
// segment order, so r does not depend on the thread count) and already finishes param_no_trust
// tensors; the second recomputes u from the stored moments and applies r. u is computed from
// the moments as stored (rounded to S) in both passes, so they agree exactly.
//
// Sharded (attach(layout, range), optim/shard.hpp): ranges are whole tensors, so each tensor's
// norms and trust ratio are computed by the one replica that owns it, exactly as unsharded.
// Under tensor parallelism a rank holds slices of some tensors: set_norm_sum gives a function that
// turns the per-tensor ‖w‖², ‖u‖² of the rank's part into the whole tensors' (a sum over the group,
// train/trainer.hpp), called between the two passes.

#include <atomic>
#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/engine.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm::optim {

namespace detail {
struct lamb_tag : adamw_tag {  // AdamW's defaults (ε 1e-6, wd 0.01)
  static constexpr std::string_view name = "lamb";
};
}  // namespace detail

// LAMB: β 0.9/0.999, ε 1e-6, wd 0.01, bias correction on (S3).
using lamb_config = detail::moment_config<detail::lamb_tag>;

template <storage_type S = float>
class lamb : public detail::slot_optimizer<S, 2> {
  using base = detail::slot_optimizer<S, 2>;

 public:
  using config_type = lamb_config;
  static constexpr std::string_view name = lamb_config::name;

  explicit lamb(const lamb_config& c = lamb_config{})
      : base(name, {"m", detail::store_sqrt_v<S> ? "sqrt_v" : "v"}), cfg_(c) {}
  explicit lamb(const nlohmann::json& j) : lamb(lamb_config(j)) {}

  const lamb_config& config() const noexcept { return cfg_; }

  // Trust ratio of every tensor at the last step (1 for frozen / no-trust tensors and, when
  // sharded, for tensors outside the owned range), for logging.
  const std::vector<float>& trust_ratios() const noexcept { return ratio_; }

  // The whole tensors' sums of squares from this process's (see above); empty: its own are whole.
  void set_norm_sum(norm_sum_fn f) { norm_sum_ = std::move(f); }

  // One update; gradients are multiplied by `grad_scale` first.
  template <class Arch = native_arch>
  void step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale = 1.0f);

 private:
  static constexpr std::size_t sqrt_mask = detail::store_sqrt_v<S> ? 2 : 0;  // slot 1 (v) as sqrt(v)
  lamb_config cfg_;
  std::vector<double> w2_, u2_;
  std::vector<float> ratio_;
  norm_sum_fn norm_sum_;
};

// Defined out of line so that sparselm::kernels can hold its native-ISA instances (the end of
// this header): a target linking the library calls those instead of compiling its own.
template <storage_type S>
template <class Arch>
void lamb<S>::step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale) {
  this->check_step(params, grads, lr, grad_scale);
  const std::size_t t = ++this->step_;
  const detail::bias_correction bc(cfg_.bias_correction, cfg_.beta1, cfg_.beta2, t);
  const detail::adam_math am(cfg_.beta1, cfg_.beta2, cfg_.eps, bc, grad_scale);
  const auto& segs = this->segments_;
  const auto& layout = *this->layout_;
  float* w = params.all().data();
  const float* g = grads.all().data();
  auto decay_of = [&](const detail::segment& sg) {
    return (sg.flags & param_no_decay) ? 0.0f : float(cfg_.weight_decay);
  };
  auto trusted = [](const detail::segment& sg) { return (sg.flags & param_no_trust) == 0; };
  // the limits of the values written: params (float), m, v (as S stores them)
  const float lw = detail::storable_limit<float>(), lm = detail::storable_limit<S>(),
              lv = detail::storable_limit<S, detail::store_sqrt_v<S>>();
  std::atomic<bool> nonfinite{false};

  // Pass 1: moments, norms; param_no_trust tensors are updated here.
  w2_.assign(segs.size(), 0.0);
  u2_.assign(segs.size(), 0.0);
  this->update_segments(params, grads, [&](std::size_t k) {
    const detail::segment& sg = segs[k];
    const float decay = decay_of(sg);
    float* ws = w + sg.begin;
    const float* gs = g + sg.begin;
    detail::square_sum<Arch> acc_w, acc_u;
    detail::finite_watch<Arch> watch;
    detail::with_slots<S, 2, true, sqrt_mask>(
        sg.size(), this->slot_ptrs(sg.begin), [&](std::size_t off, std::size_t len, auto s) {
          detail::lanes<Arch>(
              len,
              [&](auto& gv, auto& m, auto& v) {
                am.moments(gv, m, v);
                watch.check(m, lm);
                watch.check(v, lv);
              },
              gs + off, s[0], s[1]);
          detail::round_trip<S>(s[0], len);
          detail::round_trip<S, detail::store_sqrt_v<S>>(s[1], len);
          const float* m = s[0];
          const float* v = s[1];
          if (trusted(sg)) {
            detail::lanes<Arch>(
                len,
                [&](auto& wv, auto& mv, auto& vv) {
                  acc_w.add(wv);
                  acc_u.add(am.direction(wv, mv, vv, decay));
                },
                static_cast<const float*>(ws + off), m, v);
            acc_w.flush();
            acc_u.flush();
          } else {
            detail::lanes<Arch>(
                len,
                [&](auto& wv, auto& mv, auto& vv) {
                  using V = std::remove_cvref_t<decltype(wv)>;
                  wv = wv - V(lr) * am.direction(wv, mv, vv, decay);
                  watch.check(wv, lw);
                },
                ws + off, m, v);
          }
        });
    if (!watch.ok()) nonfinite.store(true, std::memory_order_relaxed);
    w2_[k] = acc_w.total;
    u2_[k] = acc_u.total;
  });

  // Per-tensor trust ratios (segment partials added in order).
  std::vector<double> tw(layout.count(), 0.0), tu(layout.count(), 0.0);
  for (std::size_t k = 0; k < segs.size(); ++k) {
    tw[segs[k].tensor] += w2_[k];
    tu[segs[k].tensor] += u2_[k];
  }
  if (norm_sum_) norm_sum_(std::span<double>(tw), std::span<double>(tu));
  ratio_.assign(layout.count(), 1.0f);
  for (const auto& sg : segs) {
    if (!trusted(sg)) continue;
    double nw = std::sqrt(tw[sg.tensor]), nu = std::sqrt(tu[sg.tensor]);
    ratio_[sg.tensor] = (nw > 0 && nu > 0) ? float(nw / nu) : 1.0f;
  }

  // Pass 2: w −= lr·r·u on trusted tensors, u recomputed from the stored moments.
  this->update_segments(params, grads, [&](std::size_t k) {
    const detail::segment& sg = segs[k];
    if (!trusted(sg)) return;
    const float decay = decay_of(sg);
    const float step_size = lr * ratio_[sg.tensor];
    float* ws = w + sg.begin;
    detail::finite_watch<Arch> watch;
    detail::with_slots<S, 2, false, sqrt_mask>(
        sg.size(), this->slot_ptrs(sg.begin), [&](std::size_t off, std::size_t len, auto s) {
          detail::lanes<Arch>(
              len,
              [&](auto& wv, auto& mv, auto& vv) {
                using V = std::remove_cvref_t<decltype(wv)>;
                wv = wv - V(step_size) * am.direction(wv, mv, vv, decay);
                watch.check(wv, lw);
              },
              ws + off, static_cast<const float*>(s[0]), static_cast<const float*>(s[1]));
        });
    if (!watch.ok()) nonfinite.store(true, std::memory_order_relaxed);
  });
  this->wrote_nonfinite_ = nonfinite.load();
}

static_assert(sharded_optimizer<lamb<>> && sharded_optimizer<lamb<bf16>>);

}  // namespace sparselm::optim

// The native-ISA updates (docs/design/architecture.md, "Precompiled kernels"): defined once in
// sparselm::kernels (src/kernels_optim.cpp), declared extern where that library is linked.
#if defined(SPARSELM_INSTANTIATE_OPTIM) || defined(SPARSELM_PRECOMPILED_KERNELS)
#ifdef SPARSELM_INSTANTIATE_OPTIM
#define SPARSELM_INSTANCE template
#else
#define SPARSELM_INSTANCE extern template
#endif
namespace sparselm::optim {
SPARSELM_INSTANCE void lamb<float>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void lamb<bf16>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void lamb<half>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
}  // namespace sparselm::optim
#undef SPARSELM_INSTANCE
#endif
