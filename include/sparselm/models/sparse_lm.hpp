#pragma once
// The S1 dynamic-sparse autoregressive language model (Graphcore's dynamic-sparsity language
// model): a pre-LN causal transformer whose projections are block-sparse (their patterns evolve
// under train/dynamic_sparsity.hpp), with a factorised embedding and a tied head with a bottleneck.
// A transformer (models/transformer.hpp) of factorised_embedding, pre_ln_block and causal_lm_head.
//
// Legend: B batch, T sequence, N = B·T, V vocab, E embedding width, H hidden, F feed-forward width,
// A attention heads, D per-head width (qkv_length, independent of H), L layers.
//
//   x0 (N,H)  = factorised_embedding(ids)       lut (V,E) → norm → + norm(sinusoidal PE) → dropout
//                                               → norm → sparse up-projection E→H (bias)
//   x_{l+1}   = pre_ln_block(x_l)               x + drop(attn(ln1(x))), x1 + drop(ffn(ln2(x1)))
//                                               attention: fused QKV H→3AD and output AD→H, sparse,
//                                               no bias by default, scores / sqrt(D), causal (or
//                                               static block-sparse causal), no dropout on the
//                                               probabilities; ffn: sparse H→F→H, GELU
//   xf (N,H)  = ln_f(x_L)
//   z  (N,E)  = ln_head(gelu(xf · W_down (H,E) + b_down))      W_down sparse
//   logits    = z · lutᵀ [+ bias (V), initialised to log(1/V)]
// Every layer norm's gamma starts at 0.1 (layer_norm_gamma). Loss: models/lm_loss.hpp (the S1
// weighted repeated-token loss with an autoregression offset by default).
//
// Sizes come from a JSON config (keys below, named after the S1 program options); dtype, sparsity
// (dense or block_sparse<B>) and the GELU form are template parameters.
//
//   sparse_lm<float, block_sparse<16>> m(sparse_lm_config::from_json(read_json_file("configs/s1-tiny.json")));
//   m.init(1234);
//   auto st = m.forward_backward(ctx, batch, float(1.0 / m.loss_normaliser(batch)));

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/factorised_embedding.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/models/causal_lm_head.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/models/transformer.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/sparsity.hpp"
#include "sparselm/sparse/update.hpp"

namespace sparselm {

struct sparse_lm_config {
  // Defaults are the S1 program's (language_modelling/program_options.py).
  std::size_t vocab_size = 16384;      // V (--source-vocab-length)
  std::size_t sequence_length = 64;    // maximum T (--source-sequence-length)
  std::size_t layers = 2;              // L (--encoder-layers)
  std::size_t hidden_length = 512;     // H
  std::size_t ff_length = 512;         // F
  std::size_t attention_heads = 16;    // A
  std::size_t qkv_length = 32;         // D, per head
  std::size_t embedding_length = 128;  // E
  double sparsity = 0.9;               // fraction of zero blocks in every sparse projection
  std::size_t block_size = 8;          // B; 0 = dense model (must match the compiled Sparsity)
  std::string allocation = "uniform";  // "uniform" or "erk" block allocation across the projections
  float dropout = 0.0f;                // embedding and residual-branch dropout (S1: off by default)
  float layer_norm_epsilon = 1e-5f;
  float layer_norm_gamma = 0.1f;       // initial gamma of every layer norm
  bool attention_bias = false;         // biases on the QKV and output projections
  bool projection_bias = false;        // logit bias, initialised to log(1/V)
  bool embedding_gelu = false;         // GELU after the embedding up-projection
  std::string activation = "gelu_new"; // "gelu_new" (tanh approximation) or "gelu" (erf)
  std::string dtype = "float32";       // weight dtype: float32 (compute precision: trainer.precision)
  lm_loss_options loss{true, 16};      // S1: weighted repeated-token loss, autoregression offset 16
  // "block_sparse_attention": {"block", "density", "seed"}: static block-sparse causal attention
  // (kernels/block_sparse_attention.hpp; one pattern, built for sequence_length, in every layer and
  // head); absent or density 1: dense causal attention.
  std::optional<kernels::block_causal_options> block_sparse_attention;

  static sparse_lm_config from_json(const json& j, const std::string& context = "sparse_lm config") {
    json_fields r(j, context);
    sparse_lm_config c;
    auto positive = at_least(1);
    r.read_all<std::size_t>({{"vocab_size", &c.vocab_size},
                             {"sequence_length", &c.sequence_length},
                             {"layers", &c.layers},
                             {"hidden_length", &c.hidden_length},
                             {"ff_length", &c.ff_length},
                             {"attention_heads", &c.attention_heads},
                             {"qkv_length", &c.qkv_length},
                             {"embedding_length", &c.embedding_length}},
                            positive);
    c.sparsity = r.get("sparsity", c.sparsity, in_range(0.0, 1.0));
    c.block_size = r.get("block_size", c.block_size, [](std::size_t b) {
      if (b == 0 || is_block_size(b)) return std::string();
      std::string all = "0 (dense)";
      for (std::size_t s : block_sizes) all += ", " + std::to_string(s);
      return "must be one of " + all + ", got " + std::to_string(b);
    });
    c.allocation = r.get("allocation", c.allocation, one_of({"uniform", "erk"}));
    c.dropout = r.get("dropout", c.dropout, in_range(0.0, 1.0));
    c.layer_norm_epsilon = r.get("layer_norm_epsilon", c.layer_norm_epsilon, in_range(1e-30, 1.0));
    c.layer_norm_gamma = r.get("layer_norm_gamma", c.layer_norm_gamma);
    c.attention_bias = r.get("attention_bias", c.attention_bias);
    c.projection_bias = r.get("projection_bias", c.projection_bias);
    c.embedding_gelu = r.get("embedding_gelu", c.embedding_gelu);
    c.activation = r.get("activation", c.activation, one_of({"gelu_new", "gelu"}));
    c.dtype = r.get("dtype", c.dtype, [](const std::string& d) {
      return d == "float32" ? std::string()
                            : "must be float32 (the stored weights), got '" + d +
                                  "': bf16 or fp16 compute is the trainer's precision (trainer.precision, --precision)";
    });
    if (r.has("loss")) c.loss = lm_loss_options::from_json(r.object("loss"), context + " loss");
    if (r.has("block_sparse_attention"))
      c.block_sparse_attention =
          block_sparse_attention_from_json(r.object("block_sparse_attention"), context + " block_sparse_attention");
    r.ignore({"loss", "model_type"});
    r.finish();
    c.validate(context);
    return c;
  }

  void validate(const std::string& context = "sparse_lm config") const {
    SPARSELM_CHECK(embedding_length % 2 == 0, context, ": field 'embedding_length' (", embedding_length,
                   ") must be even (sinusoidal positions come in sin/cos pairs)");
    SPARSELM_CHECK(loss.autoregression_offset < sequence_length, context, ": field 'loss.autoregression_offset' (",
                   loss.autoregression_offset, ") must be < sequence_length (", sequence_length, ")");
    if (block_size > 0) {
      const std::size_t B = block_size;
      auto check = [&](const char* field, std::size_t v) {
        SPARSELM_CHECK(v % B == 0, context, ": field '", field, "' (", v, ") is not a multiple of block_size (", B, ")");
      };
      check("hidden_length", hidden_length);
      check("ff_length", ff_length);
      check("embedding_length", embedding_length);
      SPARSELM_CHECK((attention_heads * qkv_length) % B == 0, context, ": attention_heads · qkv_length (",
                     attention_heads * qkv_length, ") is not a multiple of block_size (", B, ")");
    }
  }

  json to_json() const {
    json j{{"model_type", "sparse_lm"},
                {"vocab_size", vocab_size},
                {"sequence_length", sequence_length},
                {"layers", layers},
                {"hidden_length", hidden_length},
                {"ff_length", ff_length},
                {"attention_heads", attention_heads},
                {"qkv_length", qkv_length},
                {"embedding_length", embedding_length},
                {"sparsity", sparsity},
                {"block_size", block_size},
                {"allocation", allocation},
                {"dropout", dropout},
                {"layer_norm_epsilon", layer_norm_epsilon},
                {"layer_norm_gamma", layer_norm_gamma},
                {"attention_bias", attention_bias},
                {"projection_bias", projection_bias},
                {"embedding_gelu", embedding_gelu},
                {"activation", activation},
                {"dtype", dtype},
                {"loss", loss.to_json()}};
    if (block_sparse_attention) j["block_sparse_attention"] = sparselm::block_sparse_attention_to_json(*block_sparse_attention);
    return j;
  }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class sparse_lm : public transformer<factorised_embedding<T, Sparsity, Act>, pre_ln_block<T, Sparsity, Act>,
                                     causal_lm_head<T, Sparsity, Act>, token_batch> {
  static_assert(std::is_same_v<T, float>, "sparse_lm: only float compute is implemented");
  using base = transformer<factorised_embedding<T, Sparsity, Act>, pre_ln_block<T, Sparsity, Act>,
                           causal_lm_head<T, Sparsity, Act>, token_batch>;

 public:
  using linear_type = linear<T, Sparsity>;
  using config_type = sparse_lm_config;
  using sparsity = Sparsity;
  static constexpr kernels::gelu_kind activation = Act;

  // pooling: how RigL scores pool the dense gradient per block (only used with regrow "rigl").
  // tp: this rank's part of a tensor-parallel group (parallel/tensor_parallel.hpp): every block's
  // heads and hidden units are split over it (a block-sparse slice allocates and draws its own
  // blocks); the embedding with its up-projection, the norms and the head are whole on every rank.
  explicit sparse_lm(const sparse_lm_config& cfg, kernels::block_pooling pooling = kernels::block_pooling::avg,
                     parallel::tensor_split tp = {})
      : cfg_(cfg), tp_(tp) {
    sparse_plan plan;
    plan.sparsity = cfg.sparsity;
    plan.pooling = pooling;
    plan.block = cfg.block_size;
    construct(plan, true);
  }
  // The model with the block counts of `plan` as given (no allocation of its own): the whole model
  // of a tensor-parallel group (models/tensor_shards.hpp, whole_plan).
  sparse_lm(const sparse_lm_config& cfg, const sparse_plan& plan, parallel::tensor_split tp = {})
      : cfg_(cfg), tp_(tp) {
    construct(plan, false);
  }

  const sparse_lm_config& config() const noexcept { return cfg_; }
  const parallel::tensor_split& tensor_split() const noexcept { return tp_; }

  // Every projection (block-sparse unless dense), in model order: embedding up, then per block fused
  // QKV, attention output, FFN in, FFN out, then the head's down-projection.
  std::vector<const linear_type*> projections() const {
    std::vector<const linear_type*> r;
    visit_tree(*this, [&](const auto& n) {
      if constexpr (std::is_same_v<std::decay_t<decltype(n)>, linear_type>) r.push_back(&n);
    });
    return r;
  }

  // Deterministic in the seed: the table ~ N(0, 2/(V+E)) (Glorot normal), projections Glorot
  // uniform U(−a, a), a = sqrt(6/((in+out)·density)) on a uniformly random block pattern, biases 0,
  // layer norms gamma = layer_norm_gamma, beta 0, logit bias log(1/V).
  // Under tensor parallelism a rank's slices draw from parallel::shard_seed(seed, rank), at the
  // whole weights' scale.
  void init(std::uint64_t seed) {
    counter_rng rng(seed);
    const counter_rng shard_rng(parallel::shard_seed(seed, tp_));
    auto& p = this->params();
    const auto& lut = this->embedding().lut();
    rng.fill_normal(p[lut.index], lut.index, 0.0f,
                    float(std::sqrt(2.0 / double(cfg_.vocab_size + cfg_.embedding_length))));
    visit_tree(*this, [&](const auto& n) {
      using N = std::decay_t<decltype(n)>;
      if constexpr (std::is_same_v<N, layer_norm>) n.init(p);
      if constexpr (std::is_same_v<N, linear_type>) init_projection(n, n.split().active() ? shard_rng : rng);
    });
    if (const auto& bias = this->head().bias())
      std::fill(p[bias->index].begin(), p[bias->index].end(), float(std::log(1.0 / double(cfg_.vocab_size))));
  }

 private:
  void construct(const sparse_plan& plan, bool allocate) {
    const sparse_lm_config& cfg = cfg_;
    cfg.validate("sparse_lm");
    constexpr const char* act = Act == kernels::gelu_kind::tanh ? "gelu_new" : "gelu";
    SPARSELM_CHECK(cfg.activation == act, "sparse_lm: config asks for activation '", cfg.activation,
                   "' but the model type was compiled for '", act, "'");
    if constexpr (Sparsity::is_sparse && Sparsity::block == runtime_block)
      SPARSELM_CHECK(is_block_size(cfg.block_size), "sparse_lm: config has block_size ", cfg.block_size,
                     " but the model type is block-sparse (block size one of 1, 4, 8, 16)");
    else
      SPARSELM_CHECK(cfg.block_size == Sparsity::block, "sparse_lm: config has block_size ", cfg.block_size,
                     " but the model type was compiled for ",
                     Sparsity::is_sparse ? "block size " + std::to_string(Sparsity::block) : std::string("dense (0)"));
    // density 1 keeps every block: ordinary causal attention, run by the dense kernel (its 64-row
    // query tiles are faster than 16-row blocks; the results agree to rounding).
    if (cfg.block_sparse_attention && cfg.block_sparse_attention->density < 1.0)
      attn_pattern_ = std::make_shared<const kernels::block_causal_pattern>(*cfg.block_sparse_attention,
                                                                           cfg.sequence_length);
    this->plan_ = plan;
    if (Sparsity::is_sparse && allocate)
      this->plan_ = allocate_plan(this->plan_, cfg.block_size, sparse::parse_allocation(cfg.allocation),
                                  [&](const sparse_plan& p) {
                                    arena_layout scratch_layout;
                                    build(scratch_layout, p);
                                  });
    auto layout = std::make_shared<arena_layout>();
    auto [emb, blocks, head] = build(*layout, this->plan_);
    this->assemble(std::move(layout), std::move(emb), std::move(blocks), std::move(head));
    this->set_limits("sparse_lm", cfg.vocab_size, cfg.sequence_length, "sequence_length");
  }

  // The parts on a layout, in registration order: embedding, blocks, head.
  std::tuple<typename base::embedding_type, std::vector<typename base::block_type>, typename base::head_type> build(
      arena_layout& layout, const sparse_plan& plan) const {
    const auto& c = cfg_;
    const norm_options norm{c.layer_norm_epsilon, c.layer_norm_gamma};
    typename base::embedding_type emb(layout, "embedding",
                                      {.vocab = c.vocab_size,
                                       .positions = c.sequence_length,
                                       .width = c.embedding_length,
                                       .hidden = c.hidden_length,
                                       .norm = norm,
                                       .dropout = c.dropout,
                                       .up_gelu = c.embedding_gelu,
                                       .plan = &plan},
                                      1);
    auto blocks = base::make_blocks(layout, c.layers,
                                    {.channels = c.hidden_length,
                                     .heads = c.attention_heads,
                                     .head_dim = c.qkv_length,
                                     .hidden = c.ff_length,
                                     .norm = norm,
                                     .attn_dropout = 0.0f,  // S1: no dropout on the attention probabilities
                                     .resid_dropout = c.dropout,
                                     .qkv_bias = c.attention_bias,
                                     .proj_bias = c.attention_bias,
                                     .plan = &plan,
                                     .attn_pattern = attn_pattern_,
                                     .tensor = tp_});
    typename base::head_type head(layout, emb.lut(),
                                  {.channels = c.hidden_length,
                                   .vocab = c.vocab_size,
                                   .bottleneck = c.embedding_length,
                                   .norm = norm,
                                   .logit_bias = c.projection_bias,
                                   .loss = c.loss,
                                   .plan = &plan});
    return {std::move(emb), std::move(blocks), std::move(head)};
  }

  void init_projection(const linear_type& l, const counter_rng& rng) {
    auto& p = this->params();
    if constexpr (Sparsity::is_sparse) {
      l.init_glorot(p, rng);
    } else {
      auto w = p[l.weight().index];
      rng.fill_uniform(w, l.weight().index);
      const auto [fan_in, fan_out] = l.whole_fans(l.in(), l.out());
      const float a = float(std::sqrt(6.0 / double(fan_in + fan_out)));
      for (auto& v : w) v = a * (2.0f * v - 1.0f);
      if (l.has_bias()) std::fill(p[l.bias().index].begin(), p[l.bias().index].end(), 0.0f);
    }
  }

  sparse_lm_config cfg_;
  parallel::tensor_split tp_;
  std::shared_ptr<const kernels::block_causal_pattern> attn_pattern_;  // null: dense attention
};

}  // namespace sparselm
