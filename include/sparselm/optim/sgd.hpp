#pragma once
// SGD with momentum (heavy ball or Nesterov) and optional L2 weight decay (S1's Momentum
// optimiser; torch.optim.SGD with dampening 0).
//
// When to use: baselines and the S1 "Momentum" option; Adam(W) or LAMB train transformers better.
//
//   d = g + wd·w                     (wd = 0 on param_no_decay tensors)
//   b = μ·b + d                      (slot "momentum"; none when μ = 0)
//   w −= lr·(nesterov ? d + μ·b : b)
//
// param_frozen tensors and their slots are never touched. The slot is stored as S.
// attach(layout, range) keeps the slot of a tensor range only (sharded, optim/shard.hpp).

#include <atomic>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/engine.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm::optim {

struct sgd_config {
  static constexpr std::string_view name = "sgd";
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;  // L2: added to the gradient

  sgd_config() = default;
  // Fields: type ("sgd"), momentum, nesterov, weight_decay; others are errors.
  explicit sgd_config(const nlohmann::json& j) {
    json_fields f(j, "sgd config");
    f.type_tag(name);
    f.read("momentum", momentum, in_range(0.0, 1.0));
    f.read("nesterov", nesterov);
    f.read("weight_decay", weight_decay, at_least(0));
    f.finish();
    validate();
  }
  void validate() const {
    SPARSELM_CHECK(!nesterov || momentum > 0, "sgd config: field 'nesterov' needs 'momentum' > 0");
  }
};

inline void from_json(const nlohmann::json& j, sgd_config& c) { c = sgd_config(j); }
inline void to_json(nlohmann::json& j, const sgd_config& c) {
  j = {
      {"type", sgd_config::name}, {"momentum", c.momentum}, {"nesterov", c.nesterov}, {"weight_decay", c.weight_decay}};
}

template <storage_type S = float>
class sgd : public detail::slot_optimizer<S, 1> {
  using base = detail::slot_optimizer<S, 1>;

 public:
  using config_type = sgd_config;
  static constexpr std::string_view name = sgd_config::name;

  explicit sgd(const sgd_config& c = sgd_config{}) : base(name, {"momentum"}), cfg_(c) {
    cfg_.validate();
    this->set_active_slots(cfg_.momentum > 0 ? 1 : 0);
  }
  explicit sgd(const nlohmann::json& j) : sgd(sgd_config(j)) {}

  const sgd_config& config() const noexcept { return cfg_; }

  // One update; gradients are multiplied by `grad_scale` first.
  template <class Arch = native_arch>
  void step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale = 1.0f);

 private:
  sgd_config cfg_;
};

// Defined out of line so that sparselm::kernels can hold its native-ISA instances (the end of
// this header): a target linking the library calls those instead of compiling its own.
template <storage_type S>
template <class Arch>
void sgd<S>::step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale) {
  this->check_step(params, grads, lr, grad_scale);
  ++this->step_;
  const float mu = float(cfg_.momentum);
  const bool nesterov = cfg_.nesterov;
  // the limits of the values written: params (float), momentum (as S stores it)
  const float lw = detail::storable_limit<float>(), lb = detail::storable_limit<S>();
  std::atomic<bool> nonfinite{false};
  float* w = params.all().data();
  const float* g = grads.all().data();
  const auto& segs = this->segments_;
  this->update_segments(params, grads, [&](std::size_t k) {
    const detail::segment& sg = segs[k];
    detail::finite_watch<Arch> watch;
    auto report = [&] {
      if (!watch.ok()) nonfinite.store(true, std::memory_order_relaxed);
    };
    const float decay = (sg.flags & param_no_decay) ? 0.0f : float(cfg_.weight_decay);
    float* ws = w + sg.begin;
    const float* gs = g + sg.begin;
    auto grad = [&](auto& wv, auto& gv) {
      using V = std::remove_cvref_t<decltype(wv)>;
      return gv * V(grad_scale) + V(decay) * wv;
    };
    if (mu == 0.0f) {
      detail::lanes<Arch>(
          sg.size(),
          [&](auto& wv, auto& gv) {
            using V = std::remove_cvref_t<decltype(wv)>;
            wv = wv - V(lr) * grad(wv, gv);
            watch.check(wv, lw);
          },
          ws, gs);
      report();
      return;
    }
    detail::with_slots<S, 1>(sg.size(), this->slot_ptrs(sg.begin), [&](std::size_t off, std::size_t len, auto s) {
      detail::lanes<Arch>(
          len,
          [&](auto& wv, auto& gv, auto& b) {
            using V = std::remove_cvref_t<decltype(wv)>;
            V d = grad(wv, gv);
            b = V(mu) * b + d;
            wv = wv - V(lr) * (nesterov ? d + V(mu) * b : b);
            watch.check(wv, lw);
            watch.check(b, lb);
          },
          ws + off, gs + off, s[0]);
    });
    report();
  });
  this->wrote_nonfinite_ = nonfinite.load();
}

static_assert(sharded_optimizer<sgd<>> && sharded_optimizer<sgd<half>>);

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
SPARSELM_INSTANCE void sgd<float>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void sgd<bf16>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
SPARSELM_INSTANCE void sgd<half>::step<native_arch>(arena<float>&, const arena<float>&, float, float);
}  // namespace sparselm::optim
#undef SPARSELM_INSTANCE
#endif
