#pragma once
// Optimisers chosen at run time. optimizer_choice<Opts...> holds one of Opts (the run config's
// "optimizer": {"type": "lamb", ...}) with its slots in float, bf16 or half ("slots", S1's slots
// type); slot_choice<Opt> = optimizer_choice<Opt> chooses the storage type only. One trainer type
// serves every choice (the programs would otherwise compile a trainer per optimiser and storage
// type); inside is Opt<float>, Opt<bf16> or Opt<half>, which does the work.
//
//   optim::slot_choice<optim::adam> opt(nlohmann::json{{"type", "adam"}, {"slots", "bf16"}});
//   optim::optimizer_choice<optim::adamw, optim::lamb> any(nlohmann::json{{"type", "lamb"}});
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

#include <array>
#include <cstddef>
#include <optional>
#include <filesystem>
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

// The config of an optimizer_choice: which of its optimisers ("type"; the first when there is one
// only or the field is absent), the slot storage type ("slots", default float) and that optimiser's
// own config (the JSON without "slots").
template <template <class> class... Opts>
struct optimizer_choice_config {
  static constexpr std::size_t families = sizeof...(Opts);
  std::size_t family = 0;  // index into Opts
  dtype slots = dtype::f32;
  std::variant<typename Opts<float>::config_type...> inner;

  optimizer_choice_config() = default;
  explicit optimizer_choice_config(const nlohmann::json& j) {
    nlohmann::json rest = j;
    if constexpr (families > 1) {
      const std::string type = j.is_object() && j.contains("type") && j["type"].is_string()
                                   ? j["type"].get<std::string>()
                                   : std::string(names()[0]);
      family = families;
      for (std::size_t i = 0; i < families; ++i)
        if (names()[i] == type) family = i;
      if (family == families) {
        std::string all;
        for (auto n : names()) all += (all.empty() ? "" : ", ") + std::string(n);
        fail("optimizer type '", type, "' is not one of: ", all);
      }
    }
    if (j.is_object() && j.contains("slots")) {
      slots = parse_slot_dtype(j["slots"], std::string(names()[family]) + " config");
      rest.erase("slots");
    }
    make_inner(rest, std::make_index_sequence<families>{});
  }
  static constexpr std::array<std::string_view, families> names() { return {Opts<float>::name...}; }

 private:
  template <std::size_t... I>
  void make_inner(const nlohmann::json& rest, std::index_sequence<I...>) {
    ((family == I ? (void)inner.template emplace<I>(rest) : (void)0), ...);
  }
};

// An optimiser chosen at run time among Opts, each with its slots in float, bf16 or half: one
// trainer type serves them all (a program compiles one trainer instead of one per optimiser and
// storage type). slot_choice<Opt> is the choice of storage type for one optimiser.
template <template <class> class... Opts>
class optimizer_choice {
 public:
  using config_type = optimizer_choice_config<Opts...>;
  using slot_type = float;  // what state() and restore() exchange
  // The static name: the optimiser's when there is one, else "optimizer_choice" (type_name() says
  // which was chosen).
  static constexpr std::string_view name = sizeof...(Opts) == 1 ? config_type::names()[0] : "optimizer_choice";

  explicit optimizer_choice(const config_type& c = config_type{}) : cfg_(c), opt_(make(c)) {}
  explicit optimizer_choice(const nlohmann::json& j) : optimizer_choice(config_type(j)) {}

  const config_type& config() const noexcept { return cfg_; }
  // The chosen optimiser's name ("adamw", "lamb", ...).
  std::string_view type_name() const noexcept { return config_type::names()[cfg_.family]; }
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
  bool state_finite() const noexcept {
    return visit([](const auto& o) { return o.state_finite(); });
  }
  bool attached() const noexcept {
    return visit([](const auto& o) { return o.attached(); });
  }
  const arena_layout& layout() const {
    return visit([](const auto& o) -> const arena_layout& { return o.layout(); });
  }
  // An optimiser that takes a norm_sum_fn (lamb::set_norm_sum) gets f; the others ignore it.
  template <class F>
  void set_norm_sum(const F& f) {
    visit([&](auto& o) {
      if constexpr (requires { o.set_norm_sum(f); }) o.set_norm_sum(f);
    });
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
  // Offloaded slots (optim/engine.hpp, slot_optimizer::offload_to): for the next attach().
  void offload_to(const std::filesystem::path& dir) {
    visit([&](auto& o) { o.offload_to(dir); });
  }
  bool offloaded() const {
    return visit([](const auto& o) { return o.offloaded(); });
  }
  void page_out_slots() const {
    visit([](const auto& o) { o.page_out_slots(); });
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
          SPARSELM_CHECK(n.slots != nullptr, type_name(), ": restore: slot '", n.name, "' has no arena");
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
          SPARSELM_CHECK(known, type_name(), ": export_owned: unexpected slot '", f.name, "'");
        }
        const std::size_t first = o.owned_elements().first;
        for (const auto& s : own.slots) {
          arena<float>* dst = nullptr;
          for (const auto& f : full.slots)
            if (f.name == s.name) dst = f.slots;
          SPARSELM_CHECK(dst != nullptr, type_name(), ": export_owned: the state has no slot '", s.name, "'");
          SPARSELM_CHECK(dst->layout_ptr() != nullptr && dst->layout().same_as(o.layout()), type_name(),
                         ": export_owned: slot '", s.name, "' does not follow the attached parameter layout");
          const auto src = std::as_const(*s.slots).all();
          detail::slots_to_float<S>(src.data(), dst->all().data() + first, src.size());
        }
        full.step = o.step_count();
      }
    });
  }

 private:
  using variant_type = std::variant<Opts<float>..., Opts<bf16>..., Opts<half>...>;
  static constexpr std::size_t N = sizeof...(Opts);
  // Alternative (slots, family): float ones first, then bf16, then half.
  static variant_type make(const config_type& c) {
    const std::size_t row = c.slots == dtype::bf16 ? 1 : c.slots == dtype::f16 ? 2 : 0;
    return make_at(row * N + c.family, c, std::make_index_sequence<3 * N>{});
  }
  template <std::size_t... I>
  static variant_type make_at(std::size_t index, const config_type& c, std::index_sequence<I...>) {
    std::optional<variant_type> v;
    ((index == I ? (void)v.emplace(std::in_place_index<I>, std::get<I % N>(c.inner)) : (void)0), ...);
    return std::move(*v);
  }

  config_type cfg_;
  variant_type opt_;
  std::vector<arena<float>> views_;  // float copies of 16-bit slots handed out by state()
};

template <template <class> class Opt>
using slot_choice = optimizer_choice<Opt>;

}  // namespace sparselm::optim
