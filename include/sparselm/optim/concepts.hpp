#pragma once
// What every optimiser policy provides (sparselm::optim::optimizer), and the state it exposes
// for checkpoints.
//
// An optimiser owns its slot arenas (Adam m and v, SGD momentum), laid out over the same
// arena_layout as the parameters and gradients, so "slot k of tensor i" is slots[k][i]:
//
//   sparselm::optim::adamw<> opt(config_json);
//   opt.attach(layout);                         // zeroed slots over the parameter layout
//   opt.step(params, grads, schedule(t));       // one update; own step counter (bias correction)
//   opt.reset_slots(tensor, offset, count);     // regrown sparse blocks start with zero moments
//
// Checkpoints: state() returns the slot arenas by name (mutable: a loader may read straight into
// them) and the step counter; restore(state) copies slots from another state (skipped when it
// names the optimiser's own arenas) and sets the step counter.
//
//   auto st = opt.state();                      // save: for (auto& s : st.slots) write(s.name, *s.slots)
//   for (auto& s : st.slots) read(s.name, *s.slots);
//   st.step = saved_step;
//   opt.restore(st);                            // load in place
//
// Sharded optimiser state (optim/shard.hpp, the sharded_optimizer concept): attach(layout, range)
// keeps slots for a contiguous range of tensors only, so P data-parallel replicas each hold 1/P
// of the slots; owned_slot_bytes / owned_elements locate the slice in full-layout arenas,
// restore() takes full-layout slots too, and export_owned() writes the slice into them.

#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/optim/shard.hpp"

namespace sparselm::optim {

// One named slot arena of an optimiser ("m", "v", "momentum").
template <storage_type S>
struct named_slot {
  std::string name;
  arena<S>* slots = nullptr;
};

// Per-tensor sums of squares (‖w‖², ‖u‖², indexed by tensor) made whole in place: what an optimiser
// with per-tensor norms (lamb::set_norm_sum) calls when a process holds slices of tensors.
using norm_sum_fn = std::function<void(std::span<double> w2, std::span<double> u2)>;

// Slot arenas and step counter of an optimiser, for checkpoints.
template <storage_type S>
struct optimizer_state {
  std::vector<named_slot<S>> slots;
  std::size_t step = 0;  // optimiser steps taken so far

  // The slot arena called `name`; throws naming the slot and the ones that exist.
  arena<S>& slot(std::string_view name) const {
    std::string have;
    for (auto& s : slots) {
      if (s.name == name) {
        SPARSELM_CHECK(s.slots != nullptr, "optimizer state: slot '", name, "' has no arena");
        return *s.slots;
      }
      have += (have.empty() ? "" : ", ") + s.name;
    }
    fail("optimizer state: no slot named '", name, "' (slots: ", have.empty() ? "none" : have, ")");
  }
};

// The optimiser policy concept. Sizes come from the attached layout at run time; the slot
// storage type (float, bf16, half) is a template parameter of the optimiser.
template <class O>
concept optimizer = std::constructible_from<O, const typename O::config_type&> &&
    std::constructible_from<typename O::config_type, const nlohmann::json&> && storage_type<typename O::slot_type> &&
    requires(O& o, const O& co, std::shared_ptr<const arena_layout> layout, arena<float>& params,
             const arena<float>& grads, float lr, std::size_t n, const optimizer_state<typename O::slot_type>& st) {
  { O::name } -> std::convertible_to<std::string_view>;
  o.attach(layout);
  o.step(params, grads, lr);
  o.step(params, grads, lr, lr);  // with a gradient scale folded in (loss-scale / clip / average)
  o.reset_slots(n, n, n);
  { o.state() } -> std::same_as<optimizer_state<typename O::slot_type>>;
  o.restore(st);
  { co.step_count() } -> std::same_as<std::size_t>;
  { co.config() } -> std::convertible_to<const typename O::config_type&>;
};

// An optimiser that can keep the slots of a tensor range only (ZeRO stage 1; the built-in
// optimisers all are).
template <class O>
concept sharded_optimizer = optimizer<O> &&
    requires(O& o, const O& co, std::shared_ptr<const arena_layout> layout, tensor_range r, std::size_t k,
             optimizer_state<typename O::slot_type>& full) {
  o.attach(layout, r);
  { co.owned() } -> std::same_as<tensor_range>;
  { co.sharded() } -> std::same_as<bool>;
  { co.owned_elements() } -> std::same_as<element_range>;
  { o.owned_slot_bytes(k) } -> std::same_as<std::span<std::byte>>;
  co.export_owned(full);
};

// An optimiser's name: the chosen one's for a run-time choice (optimizer_choice::type_name()), else
// its static name.
template <class O>
std::string_view name_of(const O& o) noexcept {
  if constexpr (requires { o.type_name(); })
    return o.type_name();
  else
    return O::name;
}

}  // namespace sparselm::optim
