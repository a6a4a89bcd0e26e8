#pragma once
// The one place where run-time choices (strings and numbers from configs and flags) become types.
//
// Every choice is a type list whose members carry their own name (or block size); `choose` finds
// the member a value names and calls f.template operator()<Member>(), or fails with a message
// listing the valid values. Programs and benchmarks never switch on such values themselves:
//
//   registry::with_sparsity(block, [&]<class S>() { ... gpt<float, S> ... });
//   registry::with_recompute("blocks", [&]<class R>() { ... });
//   registry::with_optimizer(cfg["optimizer"], [&]<class Opt>(Opt opt) { ... });   // Opt: any_optimizer
//   registry::with_model(config_json, "ckpt/config.json", [&]<class Model>(const auto& spec) { ... });
//
// Adding a choice is one line: a new optimiser is its header plus one entry in `any_optimizer`, a new
// model family one entry in `model_families` (with its checkpoint reader below).

#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/policies/recompute.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm::registry {

template <class... Ts>
struct type_list {};

// --- the choices ---------------------------------------------------------------------------------

// Weight sparsity, keyed by block size (0: dense): dense, then block_sparse<B> for each B of
// sparselm::block_sizes (sparse/sparsity.hpp).
namespace detail {
template <std::size_t... I>
auto sparsity_list(std::index_sequence<I...>) -> type_list<dense, block_sparse<block_sizes[I]>...>;
}
using sparsities = decltype(detail::sparsity_list(std::make_index_sequence<block_sizes.size()>{}));
using recomputes = type_list<recompute::none, recompute::blocks>;
// The optimiser ("optimizer.type") and its slot storage (float, bf16, half: "optimizer.slots") are
// run-time choices inside one type: a program compiles one trainer for all of them.
using any_optimizer = optim::optimizer_choice<optim::adamw, optim::adam, optim::sgd, optim::lamb>;

template <kernels::gelu_kind K>
struct activation {
  static constexpr kernels::gelu_kind value = K;
  static constexpr std::string_view name = K == kernels::gelu_kind::tanh ? "gelu_new" : "gelu";
};
using all_activations = type_list<activation<kernels::gelu_kind::tanh>, activation<kernels::gelu_kind::erf>>;
// Training programs compile the tanh form only (each activation doubles their instantiations).
using training_activations = type_list<activation<kernels::gelu_kind::tanh>>;

// What a model's config.json says beyond its config struct: the sparsity and the activation.
template <class Config>
struct model_spec {
  Config config;
  std::size_t block = 0;  // 0: dense
  sparse_plan plan;       // sparsity of the block-sparse projections
  std::string activation;
};

// GPT-2 ("model_type": "gpt2", HF keys); a block-sparse checkpoint records
// "sparselm": {"block_size", "sparsity"} (io/checkpoint.hpp).
struct gpt_family {
  static constexpr std::string_view name = "gpt2";
  using config_type = gpt_config;
  template <sparsity_type S, kernels::gelu_kind A>
  using model = gpt<float, S, A>;

  static model_spec<gpt_config> read(json j, const std::string& context) {
    model_spec<gpt_config> s;
    if (j.contains("sparselm")) {
      json_fields r(j["sparselm"], context + " sparselm");
      s.block = r.require<std::size_t>("block_size");
      s.plan.sparsity = r.require<double>("sparsity");
      r.finish();
      j.erase("sparselm");
    }
    s.config = gpt_config::from_json(j, context);
    s.activation = s.config.activation_function;
    return s;
  }
  template <class Model>
  static Model make(const model_spec<gpt_config>& s) {
    return Model(s.config, s.plan);
  }
};

// The S1 sparse LM ("model_type": "sparse_lm"); block size and sparsity are config fields.
struct sparse_lm_family {
  static constexpr std::string_view name = "sparse_lm";
  using config_type = sparse_lm_config;
  template <sparsity_type S, kernels::gelu_kind A>
  using model = sparse_lm<float, S, A>;

  static model_spec<sparse_lm_config> read(const json& j, const std::string& context) {
    model_spec<sparse_lm_config> s;
    s.config = sparse_lm_config::from_json(j, context);
    s.block = s.config.block_size;
    s.plan.sparsity = s.config.sparsity;
    s.activation = s.config.activation;
    return s;
  }
  template <class Model>
  static Model make(const model_spec<sparse_lm_config>& s) {
    return Model(s.config);
  }
};

using model_families = type_list<gpt_family, sparse_lm_family>;

// --- choosing ------------------------------------------------------------------------------------

namespace detail {
template <class T>
auto key_of() {
  if constexpr (sparsity_type<T>)
    return T::block;
  else
    return std::string_view(T::name);
}
template <class... Ts>
std::string keys(type_list<Ts...>) {
  std::ostringstream o;
  std::size_t i = 0;
  ((o << (i++ ? ", " : "") << key_of<Ts>()), ...);
  return o.str();
}
template <class F, class Key, class T, class... Ts>
decltype(auto) choose_in(const std::string& what, const Key& key, F& f, type_list<T, Ts...>) {
  if (key_of<T>() == key) return f.template operator()<T>();
  if constexpr (sizeof...(Ts) > 0)
    return choose_in(what, key, f, type_list<Ts...>{});
  else
    fail(what, " '", key, "' is not one of: ", keys(type_list<T>{}));
}
}  // namespace detail

// f.template operator()<T>() for the member T of List whose key (name, or block size for
// sparsities) equals key; otherwise an error "<what> '<key>' is not one of: <keys>".
template <class List, class Key, class F>
decltype(auto) choose(const std::string& what, const Key& key, F&& f) {
  bool found = false;
  [&]<class... Ts>(type_list<Ts...>) { found = ((detail::key_of<Ts>() == key) || ...); }(List{});
  SPARSELM_CHECK(found, what, " '", key, "' is not one of: ", detail::keys(List{}));
  return detail::choose_in(what, key, f, List{});
}

// what: how an error names the value's origin, e.g. "configs/run.json: field 'recompute'".
template <class F>
decltype(auto) with_sparsity(std::size_t block, F&& f, const std::string& what = "block size") {
  return choose<sparsities>(what, block, f);
}
template <class F>
decltype(auto) with_recompute(std::string_view name, F&& f, const std::string& what = "recompute policy") {
  return choose<recomputes>(what, name, f);
}
// f.template operator()<any_optimizer>(the optimiser cfg describes: cfg["type"], default adamw);
// an unknown type is an error "<what> '<type>' is not one of: adamw, adam, sgd, lamb".
template <class F>
decltype(auto) with_optimizer(const json& cfg, F&& f, const std::string& what = "optimizer type") {
  const std::string type = cfg.is_object() ? cfg.value("type", "adamw") : "adamw";
  bool known = false;
  for (auto n : any_optimizer::config_type::names()) known = known || n == type;
  if (!known) {
    std::string all;
    for (auto n : any_optimizer::config_type::names()) all += (all.empty() ? "" : ", ") + std::string(n);
    fail(what, " '", type, "' is not one of: ", all);
  }
  return f.template operator()<any_optimizer>(any_optimizer(cfg));
}

// The model a config.json describes ("model_type": gpt2 when absent): f.template operator()<Model>(spec)
// with spec its model_spec (config, block size, sparsity, activation); Family::make<Model>(spec)
// constructs it.
template <class Activations = all_activations, class F>
decltype(auto) with_model(const json& config, const std::string& context, F&& f) {
  SPARSELM_CHECK(config.is_object(), context, ": expected a JSON object");
  const std::string type = config.contains("model_type") && config["model_type"].is_string()
                               ? config["model_type"].get<std::string>()
                               : std::string(gpt_family::name);
  return choose<model_families>(context + ": model_type", std::string_view(type), [&]<class Family>() {
    const auto spec = Family::read(config, context);
    return with_sparsity(spec.block, [&]<class S>() {
      return choose<Activations>(context + ": activation", std::string_view(spec.activation), [&]<class A>() {
        using Model = typename Family::template model<S, A::value>;
        return f.template operator()<Model, Family>(spec);
      });
    }, context + ": block size");
  });
}

}  // namespace sparselm::registry
