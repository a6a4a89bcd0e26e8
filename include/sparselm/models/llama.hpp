#pragma once
// LLaMA-family causal LM: token embedding, pre-norm blocks of RMSNorm, grouped-query attention
// with rotary positions and a SwiGLU feed-forward (bias-free projections), a final RMSNorm and an
// LM head tied to the embedding or not (tie_word_embeddings).
// A transformer (models/transformer.hpp) of token_embedding, residual_block<pre_ln, rms_norm,
// grouped_query_attention, gated_feed_forward> and causal_lm_head<..., rms_norm>; this header adds
// the config (HF LlamaConfig keys) and LLaMA's initialisation.
//
// Legend: B batch, T sequence, N = B·T, C hidden_size, H num_attention_heads, G num_key_value_heads,
// D head_dim, F intermediate_size, L num_hidden_layers, V vocab_size.
//   x0 = E[ids]                                                          (N,C)
//   x  = x + attn(rms(x)),  x = x + down(silu(gate(rms(x))) ∘ up(rms(x)))  per layer
//   logits = rms(x) · Eᵀ  (or · lm_headᵀ, untied)                          (N,V)
// Tensor names are HF's without the "model." prefix ("embed_tokens.weight",
// "layers.N.self_attn.q_proj.weight", "layers.N.mlp.gate_proj.weight", "layers.N.input_layernorm.weight",
// "norm.weight", "lm_head.weight"); our linear weights are (in, out), HF's (out, in): io::hf_llama_map
// transposes them. Sizes come from the JSON config; dtype, sparsity and the gate are template parameters.
//
//   llama<> m(llama_config::from_json(read_json_file("configs/llama-tiny.json"), "llama-tiny"));
//   m.init(1234);

#include <cstdint>
#include <memory>
#include <string>

#include "sparselm/core/json.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/embedding.hpp"
#include "sparselm/layers/gated_feed_forward.hpp"
#include "sparselm/layers/grouped_attention.hpp"
#include "sparselm/layers/rms_norm.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/causal_lm_head.hpp"
#include "sparselm/models/hf_config.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/models/transformer.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm {

struct llama_config {
  std::size_t vocab_size = 32000;
  std::size_t max_position_embeddings = 2048;
  std::size_t hidden_size = 4096;
  std::size_t intermediate_size = 11008;
  std::size_t num_hidden_layers = 32;
  std::size_t num_attention_heads = 32;
  std::size_t num_key_value_heads = 0;  // 0: num_attention_heads (multi-head attention)
  std::size_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  float initializer_range = 0.02f;
  float attention_dropout = 0.0f;
  bool tie_word_embeddings = false;
  bool attention_bias = false, mlp_bias = false;
  std::string hidden_act = "silu";
  lm_loss_options loss{};

  std::size_t kv_heads() const noexcept { return num_key_value_heads ? num_key_value_heads : num_attention_heads; }
  std::size_t head_width() const noexcept { return head_dim ? head_dim : hidden_size / num_attention_heads; }

  // Reads HF LlamaConfig keys; keys that would change the model in ways not implemented here
  // (rope_scaling, pretraining_tp > 1, another activation) and unknown keys are errors naming the field.
  static llama_config from_json(const json& j, const std::string& context = "llama config") {
    json_fields r(j, context);
    llama_config c;
    auto positive = at_least(1);
    r.read_all<std::size_t>({{"vocab_size", &c.vocab_size},
                             {"max_position_embeddings", &c.max_position_embeddings},
                             {"hidden_size", &c.hidden_size},
                             {"intermediate_size", &c.intermediate_size},
                             {"num_hidden_layers", &c.num_hidden_layers},
                             {"num_attention_heads", &c.num_attention_heads}},
                            positive);
    r.nullable({"num_key_value_heads", "head_dim", "rope_scaling"});
    c.num_key_value_heads = r.get("num_key_value_heads", c.num_key_value_heads);
    c.head_dim = r.get("head_dim", c.head_dim);
    c.rms_norm_eps = r.get("rms_norm_eps", c.rms_norm_eps, in_range(1e-30, 1.0));
    c.rope_theta = r.get("rope_theta", c.rope_theta, in_range(1.000001, 1e12));
    c.initializer_range = r.get("initializer_range", c.initializer_range, in_range(0.0, 10.0));
    c.attention_dropout = r.get("attention_dropout", c.attention_dropout, in_range(0.0, 1.0));
    c.tie_word_embeddings = r.get("tie_word_embeddings", c.tie_word_embeddings);
    c.attention_bias = r.get("attention_bias", c.attention_bias);
    c.mlp_bias = r.get("mlp_bias", c.mlp_bias);
    c.hidden_act = r.get("hidden_act", c.hidden_act, one_of({"silu"}));
    c.loss = lm_loss_options::from_json(r.object("loss"), context + " loss");
    const json scaling = r.get("rope_scaling", json(nullptr));
    SPARSELM_CHECK(scaling.is_null(), context, ": field 'rope_scaling' must be null (scaled rotary positions are not "
                   "implemented), got ", scaling.dump());
    r.get("pretraining_tp", std::size_t(1), [](std::size_t v) {
      return v == 1 ? std::string() : "must be 1 (it only splits HF's matmuls), got " + std::to_string(v);
    });
    r.ignore({"sparselm"});
    read_hf_common(r, /*untied_allowed=*/true);
    r.finish();
    SPARSELM_CHECK(c.kv_heads() <= c.num_attention_heads && c.num_attention_heads % c.kv_heads() == 0, context,
                   ": field 'num_attention_heads' (", c.num_attention_heads, ") is not divisible by 'num_key_value_heads' (",
                   c.kv_heads(), ")");
    SPARSELM_CHECK(c.head_dim || c.hidden_size % c.num_attention_heads == 0, context, ": field 'hidden_size' (",
                   c.hidden_size, ") is not divisible by 'num_attention_heads' (", c.num_attention_heads, ")");
    SPARSELM_CHECK(c.head_width() % 2 == 0, context, ": field 'head_dim' (", c.head_width(),
                   ", hidden_size / num_attention_heads) must be even for rotary position embedding");
    SPARSELM_CHECK(c.loss.autoregression_offset < c.max_position_embeddings, context,
                   ": field 'loss.autoregression_offset' (", c.loss.autoregression_offset,
                   ") must be < max_position_embeddings (", c.max_position_embeddings, ")");
    return c;
  }

  json to_json() const {
    json j{{"model_type", "llama"},
           {"architectures", {"LlamaForCausalLM"}},
           {"vocab_size", vocab_size},
           {"max_position_embeddings", max_position_embeddings},
           {"hidden_size", hidden_size},
           {"intermediate_size", intermediate_size},
           {"num_hidden_layers", num_hidden_layers},
           {"num_attention_heads", num_attention_heads},
           {"num_key_value_heads", kv_heads()},
           {"head_dim", head_width()},
           {"hidden_act", hidden_act},
           {"rms_norm_eps", rms_norm_eps},
           {"rope_theta", rope_theta},
           {"rope_scaling", nullptr},
           {"initializer_range", initializer_range},
           {"attention_dropout", attention_dropout},
           {"attention_bias", attention_bias},
           {"mlp_bias", mlp_bias},
           {"tie_word_embeddings", tie_word_embeddings},
           {"pretraining_tp", 1}};
    if (loss.active()) j["loss"] = loss.to_json();
    return j;
  }
};

// LLaMA's decoder block.
template <class T = float, sparsity_type Sparsity = dense, gate_activation Gate = gate_activation::silu>
using llama_block = residual_block<pre_ln, rms_norm, grouped_query_attention<T, Sparsity>, gated_feed_forward<T, Sparsity, Gate>>;

template <class T = float, sparsity_type Sparsity = dense, gate_activation Gate = gate_activation::silu>
class llama : public transformer<token_embedding, llama_block<T, Sparsity, Gate>,
                                 causal_lm_head<T, dense, kernels::gelu_kind::tanh, rms_norm>, token_batch> {
  using base = transformer<token_embedding, llama_block<T, Sparsity, Gate>,
                           causal_lm_head<T, dense, kernels::gelu_kind::tanh, rms_norm>, token_batch>;

 public:
  using config_type = llama_config;
  using sparsity = Sparsity;

  // plan: block counts of the projections when Sparsity is block_sparse<B> (ignored when dense).
  // tp: this rank's part of a tensor-parallel group (parallel/tensor_parallel.hpp): every block's
  // query and key/value heads and hidden units are split over it (it must divide the key/value
  // heads); the embedding, norms and head are whole on every rank.
  explicit llama(const llama_config& cfg, const sparse_plan& plan = {}, parallel::tensor_split tp = {})
      : cfg_(cfg), tp_(tp) {
    this->plan_ = plan;
    SPARSELM_CHECK(cfg.num_attention_heads % cfg.kv_heads() == 0, "llama: field 'num_attention_heads' (",
                   cfg.num_attention_heads, ") is not divisible by 'num_key_value_heads' (", cfg.kv_heads(), ")");
    auto layout = std::make_shared<arena_layout>();
    token_embedding emb(*layout, "embed_tokens.weight", cfg.vocab_size, cfg.hidden_size);
    block_options o{.channels = cfg.hidden_size,
                    .heads = cfg.num_attention_heads,
                    .head_dim = cfg.head_width(),
                    .hidden = cfg.intermediate_size,
                    .norm = {.eps = cfg.rms_norm_eps},
                    .attn_dropout = cfg.attention_dropout,
                    .qkv_bias = cfg.attention_bias,
                    .proj_bias = cfg.attention_bias,
                    .ffn_bias = cfg.mlp_bias,
                    .kv_heads = cfg.kv_heads(),
                    .rope_theta = cfg.rope_theta,
                    .plan = &this->plan_,
                    .tensor = tp};
    o.names = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"};
    auto blocks = base::make_blocks(*layout, cfg.num_hidden_layers, o, "layers.");
    typename base::head_type head(*layout, emb.wte(),
                                  {.channels = cfg.hidden_size,
                                   .vocab = cfg.vocab_size,
                                   .norm = {.eps = cfg.rms_norm_eps},
                                   .loss = cfg.loss,
                                   .norm_name = "norm",
                                   .untied_name = cfg.tie_word_embeddings ? "" : "lm_head.weight"});
    this->assemble(std::move(layout), std::move(emb), std::move(blocks), std::move(head));
    this->set_limits("llama", cfg.vocab_size, cfg.max_position_embeddings, "max_position_embeddings");
  }

  const llama_config& config() const noexcept { return cfg_; }
  const parallel::tensor_split& tensor_split() const noexcept { return tp_; }

  // HF LLaMA's initialisation: N(0, initializer_range) for every weight and the embedding (and an
  // untied head), zero biases, unit norms. Deterministic in the seed (under tensor parallelism the
  // blocks' projections, a rank's slices, draw from parallel::shard_seed(seed, rank)).
  void init(std::uint64_t seed) {
    counter_rng rng(seed);
    const counter_rng shard_rng(parallel::shard_seed(seed, tp_));  // the only linear layers are the blocks'
    const float std = cfg_.initializer_range;
    auto& p = this->params();
    visit_tree(*this, [&](const auto& n) {
      using N = std::decay_t<decltype(n)>;
      if constexpr (std::is_same_v<N, param_ref>) rng.fill_normal(p[n.index], n.index, 0.0f, std);
      else if constexpr (std::is_same_v<N, rms_norm>) n.init(p);
      else if constexpr (is_linear_v<N>) n.init(p, shard_rng, std);
    });
  }

 private:
  llama_config cfg_;
  parallel::tensor_split tp_;
};

}  // namespace sparselm
