#pragma once
// GPT-2 style decoder: token + learned position embedding, pre-LN blocks, final norm, LM head tied
// to the token embedding; causal attention; GELU feed-forward with 4C hidden.
// A transformer (models/transformer.hpp) of token_position_embedding, pre_ln_block and
// causal_lm_head; this header adds the config (HF GPT-2 config.json keys) and GPT-2's init.
//
// Legend: B batch, T sequence, N = B·T, C channels (n_embd), L layers, V vocab.
// Sizes come from a JSON config (HF GPT-2 config.json keys); dtype, sparsity and activation are
// template parameters.
//
//   gpt<> model(gpt_config::from_json(read_json_file("configs/gpt2-small.json"), "gpt2-small"));
//   model.init(1234);
//   auto st = model.forward_backward(ctx, batch, float(1.0 / model.loss_normaliser(batch)));

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/embedding.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/causal_lm_head.hpp"
#include "sparselm/models/hf_config.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/models/transformer.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/sparsity.hpp"

namespace sparselm {

struct gpt_config {
  std::size_t vocab_size = 50257;
  std::size_t n_positions = 1024;
  std::size_t n_layer = 12;
  std::size_t n_head = 12;
  std::size_t n_embd = 768;
  std::size_t n_inner = 0;  // 0 means 4 · n_embd
  float embd_pdrop = 0.1f, attn_pdrop = 0.1f, resid_pdrop = 0.1f;
  float layer_norm_epsilon = 1e-5f;
  float initializer_range = 0.02f;
  bool scale_residual_init = true;               // c_proj weights get std / sqrt(2 · n_layer), as GPT-2
  std::string activation_function = "gelu_new";  // "gelu_new" (tanh approximation) or "gelu" (erf)
  lm_loss_options loss{};                        // "loss": S1 repeated-token weights, autoregression offset

  std::size_t hidden() const noexcept { return n_inner ? n_inner : 4 * n_embd; }
  std::size_t head_dim() const noexcept { return n_embd / n_head; }

  // Reads HF GPT-2 config.json keys (every key transformers' GPT2Config writes is accepted); unknown
  // keys, bad values and values that change the model in ways not implemented here
  // (scale_attn_by_inverse_layer_idx, unscaled attention, cross-attention, ...) are errors naming
  // the field.
  static gpt_config from_json(const json& j, const std::string& context = "gpt config") {
    json_fields r(j, context);
    gpt_config c;
    auto positive = at_least(1);
    auto prob = in_range(0.0, 1.0);
    c.vocab_size = r.get("vocab_size", c.vocab_size, positive);
    c.n_positions = r.get("n_positions", c.n_positions, positive);
    if (r.has("n_ctx")) {  // older HF configs carry both; they must agree
      auto n_ctx = r.get("n_ctx", c.n_positions, positive);
      SPARSELM_CHECK(n_ctx == c.n_positions, context, ": field 'n_ctx' (", n_ctx, ") differs from 'n_positions' (",
                     c.n_positions, ")");
    }
    r.read_all<std::size_t>({{"n_layer", &c.n_layer}, {"n_head", &c.n_head}, {"n_embd", &c.n_embd}}, positive);
    r.nullable({"n_inner"});  // HF writes null for "4 · n_embd"
    c.n_inner = r.get("n_inner", c.n_inner);
    c.embd_pdrop = r.get("embd_pdrop", c.embd_pdrop, prob);
    c.attn_pdrop = r.get("attn_pdrop", c.attn_pdrop, prob);
    c.resid_pdrop = r.get("resid_pdrop", c.resid_pdrop, prob);
    c.layer_norm_epsilon = r.get("layer_norm_epsilon", c.layer_norm_epsilon, in_range(1e-30, 1.0));
    c.initializer_range = r.get("initializer_range", c.initializer_range, in_range(0.0, 10.0));
    c.scale_residual_init = r.get("scale_residual_init", c.scale_residual_init);
    c.activation_function =
        r.get("activation_function", c.activation_function, one_of({"gelu_new", "gelu_pytorch_tanh", "gelu"}));
    if (c.activation_function == "gelu_pytorch_tanh") c.activation_function = "gelu_new";  // the same function
    c.loss = lm_loss_options::from_json(r.object("loss"), context + " loss");
    // HF GPT2Config keys that would change the attention we compute.
    r.get("scale_attn_weights", true, detail::must_be(true, "attention scores are always scaled by 1/sqrt(head_dim)"));
    r.get("scale_attn_by_inverse_layer_idx", false,
          detail::must_be(false, "scaling attention by 1/(layer+1) is not implemented"));
    // reorder_and_upcast_attn only changes where the scale is applied and the precision of
    // mixed-precision attention; attention here is computed in fp32, so either value is the same model.
    r.get("reorder_and_upcast_attn", false);
    // HF GPT2Config keys of the sequence-summary heads we do not build, and our own record.
    r.ignore({"summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
              "summary_use_proj", "is_decoder", "sparselm"});
    read_hf_common(r);  // every other key HF's PretrainedConfig writes (models/hf_config.hpp)
    r.finish();
    SPARSELM_CHECK(c.n_embd % c.n_head == 0, context, ": field 'n_embd' (", c.n_embd, ") is not divisible by 'n_head' (",
                   c.n_head, ")");
    SPARSELM_CHECK(c.loss.autoregression_offset < c.n_positions, context, ": field 'loss.autoregression_offset' (",
                   c.loss.autoregression_offset, ") must be < n_positions (", c.n_positions, ")");
    return c;
  }

  json to_json() const {
    json j{{"model_type", "gpt2"},
                {"architectures", {"GPT2LMHeadModel"}},
                {"vocab_size", vocab_size},
                {"n_positions", n_positions},
                {"n_ctx", n_positions},
                {"n_layer", n_layer},
                {"n_head", n_head},
                {"n_embd", n_embd},
                {"n_inner", n_inner ? json(n_inner) : json(nullptr)},
                {"embd_pdrop", embd_pdrop},
                {"attn_pdrop", attn_pdrop},
                {"resid_pdrop", resid_pdrop},
                {"layer_norm_epsilon", layer_norm_epsilon},
                {"initializer_range", initializer_range},
                {"scale_residual_init", scale_residual_init},
                {"activation_function", activation_function},
                {"bos_token_id", 50256},
                {"eos_token_id", 50256}};
    if (loss.active()) j["loss"] = loss.to_json();
    return j;
  }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class gpt : public transformer<token_position_embedding, pre_ln_block<T, Sparsity, Act>, causal_lm_head<T, Sparsity, Act>,
                               token_batch> {
  using base = transformer<token_position_embedding, pre_ln_block<T, Sparsity, Act>, causal_lm_head<T, Sparsity, Act>,
                           token_batch>;

 public:
  using config_type = gpt_config;
  using sparsity = Sparsity;
  static constexpr kernels::gelu_kind activation = Act;

  // plan: block counts of the projections when Sparsity is block_sparse<B> (ignored when dense).
  // tp: this rank's part of a tensor-parallel group (parallel/tensor_parallel.hpp): every block's
  // heads and hidden units are split over it, the embedding, norms and head are whole on every rank.
  // (The constructor and init are defined after the class: not inline, so that a precompiled
  // instance -- train/precompiled.hpp -- spares a translation unit their code.)
  explicit gpt(const gpt_config& cfg, const sparse_plan& plan = {}, parallel::tensor_split tp = {});

  const gpt_config& config() const noexcept { return cfg_; }
  const parallel::tensor_split& tensor_split() const noexcept { return tp_; }

  // GPT-2 initialisation: N(0, σ) for weights and embeddings (σ/sqrt(2L) for the projections that
  // write into the residual stream when scale_residual_init), zero biases, unit norms.
  // Deterministic in the seed (every tensor draws from its own stream; under tensor parallelism the
  // blocks' projections, a rank's slices, from parallel::shard_seed(seed, rank)). Offloaded weights
  // (offload_to before init) go to their file tensor by tensor, so init never holds them all.
  void init(std::uint64_t seed);

 private:
  gpt_config cfg_;
  parallel::tensor_split tp_;
};

template <class T, sparsity_type Sparsity, kernels::gelu_kind Act>
gpt<T, Sparsity, Act>::gpt(const gpt_config& cfg, const sparse_plan& plan, parallel::tensor_split tp)
    : cfg_(cfg), tp_(tp) {
  this->plan_ = plan;
  constexpr const char* act = Act == kernels::gelu_kind::tanh ? "gelu_new" : "gelu";
  SPARSELM_CHECK(cfg.activation_function == act, "gpt: config asks for activation '", cfg.activation_function,
                 "' but the model type was compiled for '", act, "'");
  SPARSELM_CHECK(cfg.n_embd % cfg.n_head == 0, "gpt: n_embd (", cfg.n_embd, ") is not divisible by n_head (",
                 cfg.n_head, ")");
  auto layout = std::make_shared<arena_layout>();
  token_position_embedding emb(*layout, cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.embd_pdrop, 1);
  auto blocks = base::make_blocks(*layout, cfg.n_layer,
                                  {.channels = cfg.n_embd,
                                   .heads = cfg.n_head,
                                   .head_dim = cfg.head_dim(),
                                   .hidden = cfg.hidden(),
                                   .norm = {.eps = cfg.layer_norm_epsilon},
                                   .attn_dropout = cfg.attn_pdrop,
                                   .resid_dropout = cfg.resid_pdrop,
                                   .plan = &this->plan_,
                                   .tensor = tp});
  typename base::head_type head(
      *layout, emb.wte(),
      {.channels = cfg.n_embd, .vocab = cfg.vocab_size, .norm = {.eps = cfg.layer_norm_epsilon}, .loss = cfg.loss});
  this->assemble(std::move(layout), std::move(emb), std::move(blocks), std::move(head));
  this->set_limits("gpt", cfg.vocab_size, cfg.n_positions, "n_positions");
}

template <class T, sparsity_type Sparsity, kernels::gelu_kind Act>
void gpt<T, Sparsity, Act>::init(std::uint64_t seed) {
  counter_rng rng(seed);
  const counter_rng shard_rng(parallel::shard_seed(seed, tp_));  // GPT's only linear layers are the blocks'
  const float std = cfg_.initializer_range;
  const float proj_std = cfg_.scale_residual_init ? std / std::sqrt(2.0f * float(cfg_.n_layer)) : std;
  auto& p = this->params();
  const auto& L = p.layout();
  auto written = [&](const auto& n) {
    if (!p.file_backed()) return;
    if constexpr (std::is_same_v<std::decay_t<decltype(n)>, param_ref>) {
      p.write_behind(L[n.index].offset, L[n.index].offset + L[n.index].size);
    } else {
      for (const auto& t : parameters_of(n)) p.write_behind(L[t.index].offset, L[t.index].offset + L[t.index].size);
    }
  };
  visit_tree(*this, [&](const auto& n) {
    using N = std::decay_t<decltype(n)>;
    if constexpr (std::is_same_v<N, param_ref>) {
      rng.fill_normal(p[n.index], n.index, 0.0f, std);  // wte, wpe
      written(n);
    } else if constexpr (std::is_same_v<N, layer_norm>) {
      n.init(p);
      written(n);
    } else if constexpr (is_linear_v<N>) {
      n.init(p, shard_rng, n.role() == linear_role::residual_output ? proj_std : std);
      written(n);
    }
  });
}

}  // namespace sparselm
