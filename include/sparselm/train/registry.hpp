#pragma once
// The one place where run-time choices (strings and numbers from configs and flags) become types.
//
// Every choice is a type list whose members carry their own name (or block size); `choose` finds
// the member a value names and calls f.template operator()<Member>(), or fails with a message
// listing the valid values. Programs and benchmarks never switch on such values themselves:
//
//   registry::with_sparsity(block, [&]<class S>() { ... gpt<float, S>(cfg, {.sparsity = 0.9, .block = block}) ... });
//   registry::with_recompute("blocks", [&]<class R>() { ... });
//   registry::with_optimizer(cfg["optimizer"], [&]<class Opt>(Opt opt) { ... });   // Opt: any_optimizer
//   registry::with_model(config_json, "ckpt/config.json", [&]<class Model, class Family>(const auto& spec) { ... });
//   registry::with_checkpoint<A, Families>(dir, [&]<class Model, class Family>(const auto& spec) { ... });
//
// Adding a choice is one line: a new optimiser is its header plus one entry in `any_optimizer`, a new
// model family one entry in `model_families` (with its config reader below). A program names the
// families it can run (with_model's Families; causal_lm_families by default), so it instantiates
// only those models.

#include <cstddef>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/llama.hpp"
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

// Weight sparsity, keyed by block size (0: dense): dense, or block_sparse<runtime_block> for every B
// of sparselm::block_sizes (sparse/sparsity.hpp). The block size stays a value: a program compiles
// one block-sparse model per family (not one per block size), whose layers take B from the
// sparse_plan -- callers set plan.block to the key (dense layers ignore it) -- and call the same
// kernel instances as block_sparse<B>.
using sparsities = type_list<dense, block_sparse<runtime_block>>;
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

// A family whose config.json has HF keys (Config::from_json) and, for a block-sparse checkpoint,
// the record "sparselm": {"block_size", "sparsity"} (io::model_config_json), which is read here and
// removed before the config is; Activation: the config's member naming the activation. Its models
// are built as Model(config, plan).
template <class Config, std::string Config::*Activation>
struct hf_config_family {
  using config_type = Config;

  static model_spec<Config> read(json j, const std::string& context) {
    model_spec<Config> s;
    if (j.contains("sparselm")) {
      json_fields r(j["sparselm"], context + " sparselm");
      s.block = r.require<std::size_t>("block_size");
      s.plan.sparsity = r.require<double>("sparsity");
      s.plan.block = s.block;
      r.finish();
      j.erase("sparselm");
    }
    s.config = Config::from_json(j, context);
    s.activation = s.config.*Activation;
    return s;
  }
  template <class Model>
  static Model make(const model_spec<Config>& s) {
    return Model(s.config, s.plan);
  }
};

// GPT-2 ("model_type": "gpt2", HF keys).
struct gpt_family : hf_config_family<gpt_config, &gpt_config::activation_function> {
  static constexpr std::string_view name = "gpt2";
  template <sparsity_type S, kernels::gelu_kind A>
  using model = gpt<float, S, A>;
  static io::hf_name_map hf_map(const gpt_config&) { return io::hf_gpt2_map(); }
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
    s.plan.block = s.block;
    s.activation = s.config.activation;
    return s;
  }
  template <class Model>
  static Model make(const model_spec<sparse_lm_config>& s) {
    return Model(s.config);
  }
  static io::hf_name_map hf_map(const sparse_lm_config&) { return io::hf_gpt2_map(); }
};

// The LLaMA family, llama<> ("model_type": "llama", HF LlamaConfig keys). Its gate (SiLU) is its
// config's hidden_act, fixed by the model type; the GELU form A of with_model does not change the
// model, so the spec names the tanh form, which every Activations list holds.
struct llama_family : hf_config_family<llama_config, &llama_config::hidden_act> {
  static constexpr std::string_view name = "llama";
  template <sparsity_type S, kernels::gelu_kind A>
  using model = llama<float, S>;
  static model_spec<llama_config> read(json j, const std::string& context) {
    auto s = hf_config_family::read(std::move(j), context);
    s.activation = activation<kernels::gelu_kind::tanh>::name;
    return s;
  }
  static io::hf_name_map hf_map(const llama_config& c) { return io::hf_llama_map(c.tie_word_embeddings); }
};

// BERT for pre-training, bert<> (MLM + NSP head; "model_type": "bert", HF BertConfig keys). The
// activation is always "gelu" (erf; bert_config refuses another), so the Activations list of
// with_model must hold it, and A does not change the model.
struct bert_family : hf_config_family<bert_config, &bert_config::hidden_act> {
  static constexpr std::string_view name = "bert";
  template <sparsity_type S, kernels::gelu_kind A>
  using model = bert<float, S>;
  static io::hf_name_map hf_map(const bert_config&) { return io::hf_bert_map(); }
};

// Every family; and the causal LMs, which generation serves (with_model's default).
using model_families = type_list<gpt_family, sparse_lm_family, llama_family, bert_family>;
using causal_lm_families = type_list<gpt_family, sparse_lm_family, llama_family>;

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
// f.template operator()<dense>() for block 0, f.template operator()<block_sparse<runtime_block>>()
// for a B of block_sizes; otherwise an error "<what> '<block>' is not one of: 0, 1, 4, 8, 16".
template <class F>
decltype(auto) with_sparsity(std::size_t block, F&& f, const std::string& what = "block size") {
  if (block != 0 && !is_block_size(block)) {
    std::ostringstream keys;
    keys << 0;
    for (std::size_t b : block_sizes) keys << ", " << b;
    fail(what, " '", block, "' is not one of: ", keys.str());
  }
  if (block == 0) return f.template operator()<dense>();
  return f.template operator()<block_sparse<runtime_block>>();
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

// The model a config.json describes ("model_type": gpt2 when absent), among Families:
// f.template operator()<Model, Family>(spec) with spec its model_spec (config, block size,
// sparsity, activation); Family::make<Model>(spec) constructs it. Each family of the list is
// compiled for every sparsity and every activation of Activations; a model type outside the list
// is an error "<context>: model_type '<type>' is not one of: <names>".
template <class Activations = all_activations, class Families = causal_lm_families, class F>
decltype(auto) with_model(const json& config, const std::string& context, F&& f) {
  SPARSELM_CHECK(config.is_object(), context, ": expected a JSON object");
  check_model_limits(config, context);  // every program that builds a model from a config: the size limits
  const std::string type = config.contains("model_type") && config["model_type"].is_string()
                               ? config["model_type"].get<std::string>()
                               : std::string(gpt_family::name);
  return choose<Families>(context + ": model_type", std::string_view(type), [&]<class Family>() {
    const auto spec = Family::read(config, context);
    return with_sparsity(spec.block, [&]<class S>() {
      return choose<Activations>(context + ": activation", std::string_view(spec.activation), [&]<class A>() {
        using Model = typename Family::template model<S, A::value>;
        return f.template operator()<Model, Family>(spec);
      });
    }, context + ": block size");
  });
}

// The model a checkpoint directory holds (ours, or an HF directory: not a run directory, see
// io::resolve_checkpoint): with_model over its config.json, where spec.plan of a block-sparse model
// gives each weight the block count the file holds for it (io::read_checkpoint_sparsity), so that
// Family::make<Model>(spec) builds a model that loads the file whatever its allocation (uniform,
// ERK, pruned from a dense model). The config's block size (0: dense)
// must be that of the file's block-sparse weights. The S1 model sizes its weights from its config
// (allocation included) and ignores the counts.
template <class Activations = all_activations, class Families = causal_lm_families, class F>
decltype(auto) with_checkpoint(const std::filesystem::path& dir, F&& f) {
  const std::string context = (dir / io::config_file).string();
  const io::checkpoint_sparsity counts = io::read_checkpoint_sparsity(dir);
  return with_model<Activations, Families>(
      io::read_model_config(dir), context, [&]<class Model, class Family>(const auto& config_spec) {
        SPARSELM_CHECK(counts.block == config_spec.block, context, ": the config's block size is ", config_spec.block,
                       " (0: dense) but the checkpoint's block-sparse weights have blocks of ", counts.block,
                       " (0: none)");
        auto spec = config_spec;
        if (counts.block != 0) spec.plan.count = counts.plan().count;
        return f.template operator()<Model, Family>(spec);
      });
}

}  // namespace sparselm::registry
