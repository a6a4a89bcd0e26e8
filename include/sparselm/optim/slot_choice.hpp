#pragma once
// An optimiser whose slot storage type (float, bf16 or half) is chosen at run time: the run
// config's "optimizer": {"type": "adam", "slots": "bf16"} (S1's slots type). One trainer type
// serves the three storage types (the programs would otherwise compile three trainers per
// optimiser); inside is Opt<float>, Opt<bf16> or Opt<half>, which does the work.
//
//   optim::slot_choice<optim::adam> opt(nlohmann::json{{"type", "adam"}, {"slots", "bf16"}});
//   opt.attach(layout);
//   opt.step(params, grads, lr);          // Opt<bf16>::step
//
// The exchange type of state() and restore() is float (slot_type = float): state() returns float
// copies of 16-bit slots (made on demand, freed at the next update), and restore() rounds float
// slots to the storage type (nearest even). A bf16 or half value survives the float copy and the
// rounding back unchanged, so a run resumes exactly. Checkpoints (io/checkpoint.hpp) write an
// unsharded choice's 16-bit slots in their own type straight from the optimiser inside (visit),
// without the float copies (a sharded trainer gathers them in their own type, visit_gathered16),
// and are read straight into the arenas inside (visit; only the owned tensors when sharded); a
// run may resume one saved under another storage type (its float slots are rounded to bf16, bf16
// ones widened), except between half and the others: half slots hold sqrt(v) under the name
// "sqrt_v" (optim/lanes.hpp), and io/checkpoint.hpp refuses that resume naming both types.

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/optim/lanes.hpp"

namespace sparselm::optim {

// The names of slot storage types in configs: "float", "bf16", "half".
constexpr std::string_view slot_dtype_name(dtype d) noexcept {
  return d == dtype::f32 ? "float" : d == dtype::bf16 ? "bf16" : "half";
}

// Reads a slots type ("float", "bf16" or "half"; also "fp32", "bfloat16", "fp16", "float16").
inline dtype parse_slot_dtype(const nlohmann::json& v, std::string_view context) {
  SPARSELM_CHECK(v.is_string(), context, ": field 'slots' must be a string (float, bf16 or half), got ", v.dump());
  const std::string s = v.get<std::string>();
  if (s == "float" || s == "fp32" || s == "float32") return dtype::f32;
  if (s == "bf16" || s == "bfloat16") return dtype::bf16;
  if (s == "half" || s == "fp16" || s == "float16") return dtype::f16;
  fail(context, ": field 'slots' is '", s, "'; expected float, bf16 or half");
}

// The slot storage type of any optimiser (slot_choice's run-time one, else its slot_type).
template <class O>
dtype slot_storage_of(const O& o) noexcept {
  if constexpr (requires { o.slot_dtype(); })
    return o.slot_dtype();
  else
    return dtype_of<typename O::slot_type>();
}

template <template <class> class Opt>
struct slot_choice_config {
  using inner_type = typename Opt<float>::config_type;
  static constexpr std::string_view name = Opt<float>::name;
  dtype slots = dtype::f32;
  inner_type inner;

  slot_choice_config() = default;
  slot_choice_config(dtype s, inner_type c) : slots(s), inner(std::move(c)) {}
  // The optimiser's own fields, plus "slots" (default float).
  explicit slot_choice_config(const nlohmann::json& j) {
    nlohmann::json rest = j;
    if (j.is_object() && j.contains("slots")) {
      slots = parse_slot_dtype(j["slots"], std::string(name) + " config");
      rest.erase("slots");
    }
    inner = inner_type(rest);
  }
};

template <template <class> class Opt>
class slot_choice {
 public:
  using config_type = slot_choice_config<Opt>;
  using slot_type = float;  // what state() and restore() exchange
  static constexpr std::string_view name = Opt<float>::name;

  explicit slot_choice(const config_type& c = config_type{}) : cfg_(c), opt_(make(c)) {}
  explicit slot_choice(const nlohmann::json& j) : slot_choice(config_type(j)) {}

  const config_type& config() const noexcept { return cfg_; }
  // The storage type of the slots.
  dtype slot_dtype() const noexcept { return cfg_.slots; }

  // f(the optimiser inside), e.g. to reach lamb's trust_ratios().
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), opt_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), opt_);
  }

  void attach(std::shared_ptr<const arena_layout> layout) {
    views_.clear();
    visit([&](auto& o) { o.attach(std::move(layout)); });
  }
  void attach(std::shared_ptr<const arena_layout> layout, tensor_range owned) {
    views_.clear();
    visit([&](auto& o) { o.attach(std::move(layout), owned); });
  }
  template <class Arch = native_arch>
  void step(arena<float>& params, const arena<float>& grads, float lr, float grad_scale = 1.0f) {
    views_.clear();
    visit([&](auto& o) { o.template step<Arch>(params, grads, lr, grad_scale); });
  }
  void reset_slots(std::size_t tensor, std::size_t offset, std::size_t count) {
    views_.clear();
    visit([&](auto& o) { o.reset_slots(tensor, offset, count); });
  }

  std::size_t step_count() const noexcept {
    return visit([](const auto& o) { return o.step_count(); });
  }
  bool attached() const noexcept {
    return visit([](const auto& o) { return o.attached(); });
  }
  const arena_layout& layout() const {
    return visit([](const auto& o) -> const arena_layout& { return o.layout(); });
  }
  tensor_range owned() const noexcept {
    return visit([](const auto& o) { return o.owned(); });
  }
  bool sharded() const noexcept {
    return visit([](const auto& o) { return o.sharded(); });
  }
  element_range owned_elements() const {
    return visit([](const auto& o) { return o.owned_elements(); });
  }
  // Bytes of slot storage held (2 per value for bf16 and half).
  std::size_t slot_bytes() const {
    return visit([](const auto& o) { return o.slot_bytes(); });
  }

  // The slots as float arenas over the slot layout (16-bit slots: copies, valid until the next
  // call of state(), owned_slot_bytes(), restore(), attach(), step() or reset_slots()).
  optimizer_state<float> state() {
    return visit([&]<class O>(O& o) -> optimizer_state<float> {
      using S = typename O::slot_type;
      if constexpr (std::is_same_v<S, float>) {
        return o.state();
      } else {
        const auto own = o.state();
        views_.clear();
        views_.reserve(own.slots.size());  // the state points into views_
        optimizer_state<float> st;
        st.step = own.step;
        for (const auto& s : own.slots) {
          views_.emplace_back(s.slots->layout_ptr());
          const auto src = s.slots->all();
          detail::slots_to_float<S>(src.data(), views_.back().all().data(), src.size());
          st.slots.push_back({s.name, &views_.back()});
        }
        return st;
      }
    });
  }

  // Takes slots (float; rounded to the storage type) and the step counter, as Opt::restore.
  void restore(const optimizer_state<float>& st) {
    visit([&]<class O>(O& o) {
      using S = typename O::slot_type;
      if constexpr (std::is_same_v<S, float>) {
        o.restore(st);
      } else {
        std::vector<arena<S>> rounded;
        rounded.reserve(st.slots.size());
        optimizer_state<S> s;
        s.step = st.step;
        for (const auto& n : st.slots) {
          SPARSELM_CHECK(n.slots != nullptr, name, ": restore: slot '", n.name, "' has no arena");
          rounded.emplace_back(n.slots->layout_ptr());
          const auto src = n.slots->all();
          detail::float_to_slots<S>(src.data(), rounded.back().all().data(), src.size());
          s.slots.push_back({n.name, &rounded.back()});
        }
        o.restore(s);
      }
    });
    views_.clear();
  }

  // Slot k's owned values as float bytes (see state() for how long they stay valid).
  std::span<std::byte> owned_slot_bytes(std::size_t k) {
    const bool wide = cfg_.slots == dtype::f32;
    if (wide) return visit([&](auto& o) { return o.owned_slot_bytes(k); });
    visit([&](auto& o) { (void)o.owned_slot_bytes(k); });  // checks k (and attachment)
    state();
    return std::as_writable_bytes(views_[k].all());
  }

  // Writes the owned slice of every slot, as float, into the same-named full-layout arenas of
  // `full`, as Opt::export_owned.
  void export_owned(optimizer_state<float>& full) const {
    visit([&]<class O>(const O& o) {
      using S = typename O::slot_type;
      if constexpr (std::is_same_v<S, float>) {
        o.export_owned(full);
      } else {
        auto& self = const_cast<O&>(o);  // state() hands out mutable arenas; nothing is changed
        const auto own = self.state();
        for (const auto& f : full.slots) {
          bool known = false;
          for (const auto& s : own.slots) known = known || s.name == f.name;
          SPARSELM_CHECK(known, name, ": export_owned: unexpected slot '", f.name, "'");
        }
        const std::size_t first = o.owned_elements().first;
        for (const auto& s : own.slots) {
          arena<float>* dst = nullptr;
          for (const auto& f : full.slots)
            if (f.name == s.name) dst = f.slots;
          SPARSELM_CHECK(dst != nullptr, name, ": export_owned: the state has no slot '", s.name, "'");
          SPARSELM_CHECK(dst->layout_ptr() != nullptr && dst->layout().same_as(o.layout()), name,
                         ": export_owned: slot '", s.name, "' does not follow the attached parameter layout");
          const auto src = std::as_const(*s.slots).all();
          detail::slots_to_float<S>(src.data(), dst->all().data() + first, src.size());
        }
        full.step = o.step_count();
      }
    });
  }

 private:
  using variant_type = std::variant<Opt<float>, Opt<bf16>, Opt<half>>;
  static variant_type make(const config_type& c) {
    switch (c.slots) {
      case dtype::bf16:
        return variant_type(std::in_place_index<1>, c.inner);
      case dtype::f16:
        return variant_type(std::in_place_index<2>, c.inner);
      default:
        return variant_type(std::in_place_index<0>, c.inner);
    }
  }

  config_type cfg_;
  variant_type opt_;
  std::vector<arena<float>> views_;  // float copies of 16-bit slots handed out by state()
};

}  // namespace sparselm::optim
