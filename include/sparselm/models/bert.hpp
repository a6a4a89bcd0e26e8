#pragma once
// BERT for pre-training: a transformer (models/transformer.hpp) of bert_embedding (word + position
// + token type → LayerNorm → dropout), post-LN encoder blocks with a padding mask, and the
// pre-training head (masked LM at the masked positions + next-sentence prediction,
// models/bert_heads.hpp). The config uses HF BERT config.json keys.
//
//   bert<> model(bert_config::from_json(read_json_file("configs/bert-tiny.json"), "bert-tiny"));
//   model.init(1234);
//   loss_stats st = model.evaluate(batch);     // st.mean_loss() = MLM + NSP, st.accuracy() MLM,
//                                              // st.aux_mean_loss() / aux_accuracy() NSP
//
// Blocks are named "encoder.layer.<l>" with the library's sub-layer names (attn.c_attn, ...; fused
// qkv, weights (in, out)); tests/reference/bert_model.py maps them to HF BERT's separate query /
// key / value tensors. Sparsity applies to the four projections of every block.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "sparselm/core/json.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/layers/bert_embedding.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/hf_config.hpp"
#include "sparselm/models/bert_heads.hpp"
#include "sparselm/models/transformer.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

namespace sparselm {

struct bert_config {
  std::size_t vocab_size = 30522;
  std::size_t hidden_size = 768;
  std::size_t num_hidden_layers = 12;
  std::size_t num_attention_heads = 12;
  std::size_t intermediate_size = 3072;
  std::size_t max_position_embeddings = 512;
  std::size_t type_vocab_size = 2;
  float hidden_dropout_prob = 0.1f;
  float attention_probs_dropout_prob = 0.1f;
  float layer_norm_eps = 1e-12f;
  float initializer_range = 0.02f;
  std::string hidden_act = "gelu";

  std::size_t head_dim() const noexcept { return hidden_size / num_attention_heads; }

  // Reads HF BERT config.json keys (every key transformers' BertConfig writes is accepted); unknown
  // keys, bad values and values that change the model in ways not implemented here
  // (position_embedding_type other than absolute, is_decoder, cross-attention, ...) are errors
  // naming the field.
  static bert_config from_json(const json& j, const std::string& context = "bert config") {
    json_fields r(j, context);
    bert_config c;
    r.read_all<std::size_t>({{"vocab_size", &c.vocab_size},
                             {"hidden_size", &c.hidden_size},
                             {"num_hidden_layers", &c.num_hidden_layers},
                             {"num_attention_heads", &c.num_attention_heads},
                             {"intermediate_size", &c.intermediate_size},
                             {"max_position_embeddings", &c.max_position_embeddings},
                             {"type_vocab_size", &c.type_vocab_size}},
                            at_least(1));
    r.read_all<float>({{"hidden_dropout_prob", &c.hidden_dropout_prob},
                       {"attention_probs_dropout_prob", &c.attention_probs_dropout_prob}},
                      in_range(0.0, 1.0));
    c.layer_norm_eps = r.get("layer_norm_eps", c.layer_norm_eps, in_range(1e-30, 1.0));
    c.initializer_range = r.get("initializer_range", c.initializer_range, in_range(0.0, 10.0));
    c.hidden_act = r.get("hidden_act", c.hidden_act, one_of({"gelu"}));
    r.get("position_embedding_type", std::string("absolute"),
          detail::must_be(std::string("absolute"), "only learned absolute positions are implemented"));
    r.get("is_decoder", false, detail::must_be(false, "BERT here is a bidirectional encoder"));
    r.ignore({"sparselm"});  // a block-sparse checkpoint's record (io::model_config_json), read by its loaders
    read_hf_common(r);       // every other key HF's BertConfig writes (models/hf_config.hpp)
    r.finish();
    SPARSELM_CHECK(c.hidden_size % c.num_attention_heads == 0, context, ": field 'hidden_size' (", c.hidden_size,
                   ") is not divisible by 'num_attention_heads' (", c.num_attention_heads, ")");
    return c;
  }

  json to_json() const {
    return json{{"model_type", "bert"},
                {"architectures", {"BertForPreTraining"}},
                {"vocab_size", vocab_size},
                {"hidden_size", hidden_size},
                {"num_hidden_layers", num_hidden_layers},
                {"num_attention_heads", num_attention_heads},
                {"intermediate_size", intermediate_size},
                {"max_position_embeddings", max_position_embeddings},
                {"type_vocab_size", type_vocab_size},
                {"hidden_dropout_prob", hidden_dropout_prob},
                {"attention_probs_dropout_prob", attention_probs_dropout_prob},
                {"layer_norm_eps", layer_norm_eps},
                {"initializer_range", initializer_range},
                {"hidden_act", hidden_act},
                {"pad_token_id", 0},
                {"position_embedding_type", "absolute"}};
  }
};

// BERT's encoder (embedding + post-LN blocks, bert<>'s tensor names in bert<>'s order) under any
// head: bert<> (pre-training) and the fine-tuning models of models/bert_finetune.hpp share it, so a
// pre-training checkpoint's encoder loads into each. make_head(layout, embedding) builds the head
// last.
template <class T, sparsity_type Sparsity, class Head, class Batch>
class bert_encoder_model : public transformer<bert_embedding, post_ln_block<T, Sparsity>, Head, Batch> {
  using base = transformer<bert_embedding, post_ln_block<T, Sparsity>, Head, Batch>;

 public:
  using config_type = bert_config;
  using sparsity = Sparsity;

  // plan: block counts of the projections when Sparsity is block_sparse<B> (ignored when dense).
  // tp: this rank's part of a tensor-parallel group (parallel/tensor_parallel.hpp): every block's
  // heads and hidden units are split over it; the embedding, norms and heads are whole on every rank.
  template <class MakeHead>
  bert_encoder_model(const bert_config& cfg, const sparse_plan& plan, MakeHead&& make_head,
                     parallel::tensor_split tp = {})
      : cfg_(cfg), tp_(tp) {
    this->plan_ = plan;
    SPARSELM_CHECK(cfg.hidden_size % cfg.num_attention_heads == 0, "bert: hidden_size (", cfg.hidden_size,
                   ") is not divisible by num_attention_heads (", cfg.num_attention_heads, ")");
    const norm_options norm{.eps = cfg.layer_norm_eps};
    auto layout = std::make_shared<arena_layout>();
    bert_embedding emb(*layout, {.vocab = cfg.vocab_size,
                                 .positions = cfg.max_position_embeddings,
                                 .types = cfg.type_vocab_size,
                                 .channels = cfg.hidden_size,
                                 .norm = norm,
                                 .dropout = cfg.hidden_dropout_prob,
                                 .site = 1});
    auto blocks = base::make_blocks(*layout, cfg.num_hidden_layers,
                                    {.channels = cfg.hidden_size,
                                     .heads = cfg.num_attention_heads,
                                     .head_dim = cfg.head_dim(),
                                     .hidden = cfg.intermediate_size,
                                     .norm = norm,
                                     .attn_dropout = cfg.attention_probs_dropout_prob,
                                     .resid_dropout = cfg.hidden_dropout_prob,
                                     .plan = &this->plan_,
                                     .tensor = tp},
                                    "encoder.layer.");
    Head head = make_head(*layout, emb);
    this->assemble(std::move(layout), std::move(emb), std::move(blocks), std::move(head));
    this->set_limits("bert", cfg.vocab_size, cfg.max_position_embeddings, "max_position_embeddings");
  }

  const bert_config& config() const noexcept { return cfg_; }
  const parallel::tensor_split& tensor_split() const noexcept { return tp_; }

  // BERT's initialisation: N(0, initializer_range) for weights and embedding tables, zero biases,
  // unit norms. Deterministic in the seed (each tensor's stream is keyed by its index; under tensor
  // parallelism a rank's slices draw from parallel::shard_seed(seed, rank)).
  void init(std::uint64_t seed) {
    counter_rng rng(seed);
    const counter_rng shard_rng(parallel::shard_seed(seed, tp_));
    const float std = cfg_.initializer_range;
    auto& p = this->params();
    visit_tree(*this, [&](const auto& n) {
      using N = std::decay_t<decltype(n)>;
      if constexpr (std::is_same_v<N, param_ref>) {
        rng.fill_normal(p[n.index], n.index, 0.0f, std);  // embedding tables
      } else if constexpr (std::is_same_v<N, layer_norm>) {
        n.init(p);
      } else if constexpr (is_linear_v<N>) {
        n.init(p, n.split().active() ? shard_rng : rng, std);
      }
    });
  }

 private:
  bert_config cfg_;
  parallel::tensor_split tp_;
};

template <class T = float, sparsity_type Sparsity = dense>
class bert : public bert_encoder_model<T, Sparsity, bert_pretraining_head<T>, bert_batch> {
  using base = bert_encoder_model<T, Sparsity, bert_pretraining_head<T>, bert_batch>;

 public:
  explicit bert(const bert_config& cfg, const sparse_plan& plan = {}, parallel::tensor_split tp = {})
      : base(
            cfg, plan,
            [&](arena_layout& layout, const bert_embedding& emb) {
              return bert_pretraining_head<T>(layout, emb.word(),
                                              {.channels = cfg.hidden_size,
                                               .vocab = cfg.vocab_size,
                                               .norm = norm_options{.eps = cfg.layer_norm_eps}});
            },
            tp) {}

  // As bert_encoder_model::init, and the MLM decoder's bias (a directly owned tensor) is zero.
  void init(std::uint64_t seed) {
    base::init(seed);
    auto b = this->params()[this->head().decoder_bias().index];
    std::fill(b.begin(), b.end(), 0.0f);
  }
};

}  // namespace sparselm
