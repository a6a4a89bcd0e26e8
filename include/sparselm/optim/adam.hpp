#pragma once
// Adam and AdamW.
//
// When to use: AdamW for GPT (S2) and BERT SQuAD (S4) with decoupled weight decay; Adam for the
// dynamic-sparse LM (S1: no weight decay, ε = 1e-2). Both are one implementation, basic_adam,
// with a config type each:
//
//   m = β1·m + (1 − β1)·g,  v = β2·v + (1 − β2)·g²
//   w −= lr·( m̂ / (sqrt(v̂) + ε) + wd·w ),   m̂ = m/(1 − β1^t), v̂ = v/(1 − β2^t)  (t = step count)
//
// With bias_correction off, m̂ = m and v̂ = v (S4). Tensors flagged param_no_decay get wd = 0;
// param_frozen tensors and their slots are never touched. Slots m, v are stored as S (float,
// bf16 or half, rounded to nearest even; half stores sqrt(v) as slot "sqrt_v", see engine.hpp);
// the update itself uses the fp32 moments of the step.
//
//   sparselm::optim::adamw<> opt(nlohmann::json{{"weight_decay", 0.01}, {"eps", 1e-6}});
//   opt.attach(layout);
//   opt.step(params, grads, lr);                 // or step(params, grads, lr, grad_scale)
//
// Data parallel with sharded slots: opt.attach(layout, partition_tensors(*layout, P)[rank])
// keeps m, v for that rank's tensors only and updates only their params (optim/shard.hpp).

#include <atomic>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/engine.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm::optim {

namespace detail {
// The config of Adam, AdamW and LAMB: β1, β2, ε, weight decay and bias correction. Tag gives the
// name and the defaults; without Tag::has_weight_decay (Adam) the field is rejected and unused.
template <class Tag>
struct moment_config {
  static constexpr std::string_view name = Tag::name;
  static constexpr bool has_weight_decay = Tag::has_weight_decay;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = Tag::eps;
  double weight_decay = Tag::weight_decay;
  bool bias_correction = true;

  moment_config() = default;
  // Fields: type (the name), beta1, beta2, eps, weight_decay (not for adam), bias_correction.
  explicit moment_config(const nlohmann::json& j) {
    json_fields f(j, std::string(name) + " config");
    if constexpr (!has_weight_decay)
      SPARSELM_CHECK(!f.has("weight_decay"), name, " config: field 'weight_decay' is not supported: ", name,
                     " has no weight decay (use adamw)");
    f.type_tag(name);
    f.read("beta1", beta1, in_range(0.0, 1.0));
    f.read("beta2", beta2, in_range(0.0, 1.0));
    f.read("eps", eps, greater_than(0));
    if constexpr (has_weight_decay) f.read("weight_decay", weight_decay, at_least(0));
    f.read("bias_correction", bias_correction);
    f.finish();
  }
};

template <class Tag>
void from_json(const nlohmann::json& j, moment_config<Tag>& c) {
  c = moment_config<Tag>(j);
}
template <class Tag>
void to_json(nlohmann::json& j, const moment_config<Tag>& c) {
  j = {
      {"type", c.name}, {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps}, {"bias_correction", c.bias_correction}};
  if (c.has_weight_decay) j["weight_decay"] = c.weight_decay;
}

struct adamw_tag {
  static constexpr std::string_view name = "adamw";
  static constexpr double eps = 1e-6, weight_decay = 0.01;
  static constexpr bool has_weight_decay = true;
};
struct adam_tag {
  static constexpr std::string_view name = "adam";
  static constexpr double eps = 1e-2, weight_decay = 0.0;
  static constexpr bool has_weight_decay = false;
};
}  // namespace detail

// AdamW: decoupled weight decay; ε 1e-6, wd 0.01 (S2/S4).
using adamw_config = detail::moment_config<detail::adamw_tag>;
// Adam without weight decay; ε 1e-2 (S1).
using adam_config = detail::moment_config<detail::adam_tag>;

// Adam(W) over the parameter arena with slots "m" and "v" of storage type S.
template <storage_type S, class Config>
class basic_adam : public detail::slot_optimizer<S, 2> {
  using base = detail::slot_optimizer<S, 2>;

 public:
  using config_type = Config;
  static constexpr std::string_view name = Config::name;

  explicit basic_adam(const Config& c = Config{})
      : base(Config::name, {"m", detail::store_sqrt_v<S> ? "sqrt_v" : "v"}), cfg_(c) {}
  explicit basic_adam(const nlohmann::json& j) : basic_adam(Config(j)) {}

  const Config& config() const noexcept { return cfg_; }

  // One update with learning rate `lr`; gradients are multiplied by `grad_scale` first (fold
  // loss-scale removal, gradient averaging and the global-norm clip factor in here).
  template <class Arch = native_arch>
  void step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale = 1.0f);

 private:
  static constexpr std::size_t sqrt_mask = detail::store_sqrt_v<S> ? 2 : 0;  // slot 1 (v) as sqrt(v)
  Config cfg_;
};

// Defined out of line so that sparselm::kernels can hold its native-ISA instances (the end of
// this header): a target linking the library calls those instead of compiling its own.
template <storage_type S, class Config>
template <class Arch>
void basic_adam<S, Config>::step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale) {
  this->check_step(params, grads, lr, grad_scale);
  const std::size_t t = ++this->step_;
  const detail::bias_correction bc(cfg_.bias_correction, cfg_.beta1, cfg_.beta2, t);
  const detail::adam_math am(cfg_.beta1, cfg_.beta2, cfg_.eps, bc, grad_scale);
  const float wd = Config::has_weight_decay ? float(cfg_.weight_decay) : 0.0f;

  // the limits of the values written: params (float), m, v (as S stores them)
  const float lw = detail::storable_limit<float>(), lm = detail::storable_limit<S>(),
              lv = detail::storable_limit<S, detail::store_sqrt_v<S>>();
  std::atomic<bool> nonfinite{false};
  float* w = params.all().data();
  const float* g = grads.all().data();
  const auto& segs = this->segments_;
  this->update_segments(params, grads, [&](std::size_t k) {
    const detail::segment& sg = segs[k];
    const float decay = (sg.flags & param_no_decay) ? 0.0f : wd;
    float* ws = w + sg.begin;
    const float* gs = g + sg.begin;
    detail::finite_watch<Arch> watch;
    detail::with_slots<S, 2, true, sqrt_mask>(sg.size(), this->slot_ptrs(sg.begin),
                                              [&](std::size_t off, std::size_t len, auto s) {
                                                detail::lanes<Arch>(
                                                    len,
                                                    [&](auto& wv, auto& gv, auto& m, auto& v) {
                                                      am.moments(gv, m, v);
                                                      using V = std::remove_cvref_t<decltype(wv)>;
                                                      wv = wv - V(lr) * am.direction(wv, m, v, decay);
                                                      watch.check(wv, lw);
                                                      watch.check(m, lm);
                                                      watch.check(v, lv);
                                                    },
                                                    ws + off, gs + off, s[0], s[1]);
                                              });
    if (!watch.ok()) nonfinite.store(true, std::memory_order_relaxed);
  });
  this->wrote_nonfinite_ = nonfinite.load();
}

template <storage_type S = float>
using adamw = basic_adam<S, adamw_config>;
template <storage_type S = float>
using adam = basic_adam<S, adam_config>;

static_assert(sharded_optimizer<adamw<>> && sharded_optimizer<adam<bf16>>);

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
SPARSELM_INSTANCE void basic_adam<float, adamw_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void basic_adam<bf16, adamw_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void basic_adam<half, adamw_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void basic_adam<float, adam_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void basic_adam<bf16, adam_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void basic_adam<half, adam_config>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
}  // namespace sparselm::optim
#undef SPARSELM_INSTANCE
#endif
