#pragma once
// The S1 dynamic-sparse autoregressive language model (SPEC §1, seeds 000/004): a pre-LN causal
// transformer whose projections are block-sparse (their patterns evolve under
// train/dynamic_sparsity.hpp), with a factorised embedding and a tied head.
//
// Legend: B batch, T sequence, N = B·T, V vocab, E embedding width, H hidden, F feed-forward width,
// A attention heads, D per-head width (qkv_length, independent of H), L layers.
//
//   x0 (N,H)  = factorised_embedding(ids)       lut (V,E) → norm → + norm(sinusoidal PE) → dropout
//                                               → norm → sparse up-projection E→H (bias)
//   x_{l+1}   = pre_ln_block(x_l)               x + drop(attn(ln1(x))), x1 + drop(ffn(ln2(x1)))
//                                               attention: fused QKV H→3AD and output AD→H, sparse,
//                                               no bias by default, scores / sqrt(D), causal, no
//                                               dropout on the probabilities; ffn: sparse H→F→H, GELU
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
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/kernels/gelu.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/context.hpp"
#include "sparselm/layers/factorised_embedding.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/models/config.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/policies/recompute.hpp"
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
  std::string dtype = "float32";       // compute dtype; only float32 is implemented
  lm_loss_options loss{true, 16};      // S1: weighted repeated-token loss, autoregression offset 16

  static sparse_lm_config from_json(const json& j, const std::string& context = "sparse_lm config") {
    config_reader r(j, context);
    sparse_lm_config c;
    auto positive = at_least(1);
    c.vocab_size = r.get("vocab_size", c.vocab_size, positive);
    c.sequence_length = r.get("sequence_length", c.sequence_length, positive);
    c.layers = r.get("layers", c.layers, positive);
    c.hidden_length = r.get("hidden_length", c.hidden_length, positive);
    c.ff_length = r.get("ff_length", c.ff_length, positive);
    c.attention_heads = r.get("attention_heads", c.attention_heads, positive);
    c.qkv_length = r.get("qkv_length", c.qkv_length, positive);
    c.embedding_length = r.get("embedding_length", c.embedding_length, positive);
    c.sparsity = r.get("sparsity", c.sparsity, in_range(0.0, 1.0));
    c.block_size = r.get("block_size", c.block_size, [](std::size_t b) {
      return (b == 0 || b == 1 || b == 4 || b == 8 || b == 16) ? std::string()
                                                               : "must be 0 (dense), 1, 4, 8 or 16, got " + std::to_string(b);
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
                            : "must be float32, got '" + d + "': only fp32 compute is implemented for the sparse LM";
    });
    if (r.has("loss")) c.loss = lm_loss_options::from_json(r.object("loss"), context + " loss");
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
    return json{{"model_type", "sparse_lm"},
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
  }
};

template <class T = float, sparsity_type Sparsity = dense, kernels::gelu_kind Act = kernels::gelu_kind::tanh>
class sparse_lm {
  static_assert(std::is_same_v<T, float>, "sparse_lm: only float compute is implemented");

 public:
  using block_type = pre_ln_block<T, Sparsity, Act>;
  using embedding_type = factorised_embedding<T, Sparsity, Act>;
  using linear_type = linear<T, Sparsity>;
  using config_type = sparse_lm_config;
  using batch_type = token_batch;
  using sparsity = Sparsity;

  // pooling: how RigL scores pool the dense gradient per block (only used with regrow "rigl").
  explicit sparse_lm(const sparse_lm_config& cfg, kernels::block_pooling pooling = kernels::block_pooling::avg)
      : cfg_(cfg) {
    cfg.validate("sparse_lm");
    constexpr const char* act = Act == kernels::gelu_kind::tanh ? "gelu_new" : "gelu";
    SPARSELM_CHECK(cfg.activation == act, "sparse_lm: config asks for activation '", cfg.activation,
                   "' but the model type was compiled for '", act, "'");
    SPARSELM_CHECK(cfg.block_size == Sparsity::block, "sparse_lm: config has block_size ", cfg.block_size,
                   " but the model type was compiled for ",
                   Sparsity::is_sparse ? "block size " + std::to_string(Sparsity::block) : std::string("dense (0)"));
    plan_.sparsity = cfg.sparsity;
    plan_.pooling = pooling;
    if (Sparsity::is_sparse && cfg.allocation == "erk") {
      auto shapes = sparse_shapes(cfg);
      auto counts = sparse::allocate_blocks(shapes, Sparsity::block ? Sparsity::block : 1, cfg.sparsity,
                                            sparse::allocation::erk);
      auto table = std::make_shared<std::map<std::string, std::size_t>>();
      for (std::size_t i = 0; i < shapes.size(); ++i) (*table)[shapes[i].name] = counts[i];
      plan_.count = [table](const std::string& name, std::size_t, std::size_t) { return table->at(name); };
    }
    auto layout = std::make_shared<arena_layout>();
    factorised_embedding_options eo;
    eo.vocab = cfg.vocab_size;
    eo.positions = cfg.sequence_length;
    eo.width = cfg.embedding_length;
    eo.hidden = cfg.hidden_length;
    eo.ln_eps = cfg.layer_norm_epsilon;
    eo.ln_gamma = cfg.layer_norm_gamma;
    eo.dropout = cfg.dropout;
    eo.up_gelu = cfg.embedding_gelu;
    eo.plan = &plan_;
    emb_ = embedding_type(*layout, "embedding", eo, 1);
    block_options o;
    o.channels = cfg.hidden_length;
    o.heads = cfg.attention_heads;
    o.head_dim = cfg.qkv_length;
    o.hidden = cfg.ff_length;
    o.ln_eps = cfg.layer_norm_epsilon;
    o.ln_gamma = cfg.layer_norm_gamma;
    o.attn_dropout = 0.0f;  // S1: no dropout on the attention probabilities
    o.resid_dropout = cfg.dropout;
    o.qkv_bias = o.proj_bias = cfg.attention_bias;
    o.plan = &plan_;
    blocks_.reserve(cfg.layers);
    for (std::size_t l = 0; l < cfg.layers; ++l) blocks_.emplace_back(*layout, "h." + std::to_string(l), o, 16 + l);
    ln_f_ = layer_norm(*layout, "ln_f", cfg.hidden_length, cfg.layer_norm_epsilon, cfg.layer_norm_gamma);
    down_ = linear_type(*layout, "head.down", cfg.hidden_length, cfg.embedding_length, true, &plan_);
    ln_head_ = layer_norm(*layout, "head.ln", cfg.embedding_length, cfg.layer_norm_epsilon, cfg.layer_norm_gamma);
    std::optional<param_ref> bias;
    if (cfg.projection_bias)
      bias = param_ref{"head.bias", layout->add("head.bias", {cfg.vocab_size}, param_no_decay | param_no_trust)};
    bias_ = bias;
    head_ = tied_lm_head(emb_.lut(), cfg.vocab_size, cfg.embedding_length, bias);
    layout_ = layout;
    params_ = arena<float>(layout_);
    grads_ = arena<float>(layout_);
    caches_.resize(cfg.layers);
  }

  sparse_lm(const sparse_lm&) = delete;
  sparse_lm& operator=(const sparse_lm&) = delete;
  // Movable (layers read plan_ only while being constructed); not copyable (sparse patterns are shared).
  sparse_lm(sparse_lm&&) = default;
  sparse_lm& operator=(sparse_lm&&) = default;

  const sparse_lm_config& config() const noexcept { return cfg_; }
  const std::shared_ptr<const arena_layout>& layout() const noexcept { return layout_; }
  arena<float>& params() noexcept { return params_; }
  const arena<float>& params() const noexcept { return params_; }
  arena<float>& grads() noexcept { return grads_; }
  std::size_t num_parameters() const noexcept { return layout_->parameters(); }
  const embedding_type& embedding() const noexcept { return emb_; }
  const std::vector<block_type>& blocks() const noexcept { return blocks_; }
  const layer_norm& final_norm() const noexcept { return ln_f_; }
  const linear_type& down_projection() const noexcept { return down_; }
  const layer_norm& head_norm() const noexcept { return ln_head_; }
  tied_lm_head& head() noexcept { return head_; }
  const sparse_plan& plan() const noexcept { return plan_; }

  // Every projection that is block-sparse (empty when dense), in model order: embedding up, then
  // per block fused QKV, attention output, FFN in, FFN out, then the head's down-projection.
  std::vector<const linear_type*> projections() const {
    std::vector<const linear_type*> r{&emb_.up()};
    for (auto& b : blocks_)
      for (auto* l : {&b.attn().qkv(), &b.attn().proj(), &b.ffn().fc(), &b.ffn().proj()}) r.push_back(l);
    r.push_back(&down_);
    return r;
  }
  std::vector<sparse::sparse_weight> sparse_weights() {
    std::vector<sparse::sparse_weight> r;
    if constexpr (Sparsity::is_sparse)
      for (auto* l : projections()) r.push_back(l->updater_view(params_));
    return r;
  }

  // Deterministic in the seed: the table ~ N(0, 2/(V+E)) (Glorot normal), projections Glorot
  // uniform U(−a, a), a = sqrt(6/((in+out)·density)) on a uniformly random block pattern, biases 0,
  // layer norms gamma = layer_norm_gamma, beta 0, logit bias log(1/V).
  void init(std::uint64_t seed) {
    counter_rng rng(seed);
    const auto& lut = emb_.lut();
    rng.fill_normal(params_[lut.index], lut.index, 0.0f,
                    float(std::sqrt(2.0 / double(cfg_.vocab_size + cfg_.embedding_length))));
    emb_.init_norms(params_);
    for (auto* l : projections()) init_projection(*l, rng);
    for (auto& b : blocks_) {
      b.ln1().init(params_);
      b.ln2().init(params_);
    }
    ln_f_.init(params_);
    ln_head_.init(params_);
    if (bias_) std::fill(params_[bias_->index].begin(), params_[bias_->index].end(), float(std::log(1.0 / double(cfg_.vocab_size))));
  }

  // Forward and backward over one batch. Gradients accumulate: grads += grad_scale · ∂(Σ w·CE)/∂θ
  // over the positions the config's loss scores (weights: S1's repeated-token weights).
  template <recompute::policy Recompute = recompute::none>
  loss_stats forward_backward(step_context ctx, const token_batch& b, float grad_scale) {
    auto s = bind(ctx, b);
    const std::size_t N = b.batch * b.seq, H = cfg_.hidden_length, E = cfg_.embedding_length;
    forward_all<Recompute>(s, b);
    auto dz = dz_.matrix(N, E);
    const token_batch& lb = loss_targets_.apply(cfg_.loss, b);
    loss_stats st = head_.forward_backward(s, z_.matrix(N, E), lb.targets, lb.weights, grad_scale, dz);
    loss_targets_.finish(st);
    auto dhd = dhd_.matrix(N, E);
    ln_head_.backward(s, dz, dhd, ln_head_c_);
    std::span<float> dh(dhd.data, N * E);
    kernels::gelu_backward<Act>(std::span<const float>(hd_.get(N * E).data(), N * E), dh, dh);
    auto dxf = dxf_.matrix(N, H);
    down_.backward(s, dhd, dxf, down_c_);
    auto dres = dres_.matrix(N, H);
    ln_f_.backward(s, dxf, dres, lnf_c_);
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      if constexpr (Recompute::keep_all_blocks) {
        blocks_[l].backward(s, dres, dres, caches_[l]);
      } else {
        auto y = dxf_.matrix(N, H);  // free: dxf was consumed by ln_f's backward
        blocks_[l].forward(s, residual(l, N), y, caches_[0]);
        blocks_[l].backward(s, dres, dres, caches_[0]);
      }
    }
    emb_.backward(s, b.ids, dres, emb_c_);
    return st;
  }

  // Loss without gradients (dropout off unless ctx.training).
  loss_stats evaluate(const token_batch& b, step_context ctx = {}) {
    auto s = bind(ctx, b);
    const std::size_t N = b.batch * b.seq;
    forward_all<recompute::blocks>(s, b);
    const token_batch& lb = loss_targets_.apply(cfg_.loss, b);
    loss_stats st = head_.forward_backward(s, z_.matrix(N, cfg_.embedding_length), lb.targets, lb.weights, 1.0f, {});
    loss_targets_.finish(st);
    return st;
  }

  // Denominator of the batch's mean loss (the trainer scales the gradient by its inverse).
  double loss_normaliser(const token_batch& b) const { return lm_loss_normaliser(cfg_.loss, b); }

  // Full logits (B·T, V) for ids (B·T).
  void logits(std::span<const std::int32_t> ids, std::size_t batch, std::size_t seq, matrix_view<float> out) {
    token_batch b{ids, {}, {}, batch, seq};
    auto s = bind({}, b);
    SPARSELM_CHECK(out.rows == batch * seq && out.cols == cfg_.vocab_size, "sparse_lm::logits: out ",
                   shape_string(out), " should be (", batch * seq, "x", cfg_.vocab_size, ")");
    forward_all<recompute::blocks>(s, b);
    head_.logits(s, z_.matrix(batch * seq, cfg_.embedding_length), out);
  }

  std::size_t activation_bytes() const noexcept {
    std::size_t b = tmp_.bytes();
    for (auto* x : {&res_, &xf_, &hd_, &ha_, &z_, &dz_, &dhd_, &dxf_, &dres_}) b += x->capacity() * sizeof(float);
    return b;
  }

 private:
  // The shapes of the sparse projections in model order (for ERK allocation).
  static std::vector<sparse::weight_shape> sparse_shapes(const sparse_lm_config& c) {
    const std::size_t H = c.hidden_length, E = c.embedding_length, F = c.ff_length, AD = c.attention_heads * c.qkv_length;
    std::vector<sparse::weight_shape> w{{"embedding.up.weight", E, H}};
    for (std::size_t l = 0; l < c.layers; ++l) {
      const std::string p = "h." + std::to_string(l);
      w.push_back({p + ".attn.c_attn.weight", H, 3 * AD});
      w.push_back({p + ".attn.c_proj.weight", AD, H});
      w.push_back({p + ".mlp.c_fc.weight", H, F});
      w.push_back({p + ".mlp.c_proj.weight", F, H});
    }
    w.push_back({"head.down.weight", H, E});
    return w;
  }

  void init_projection(const linear_type& l, const counter_rng& rng) {
    if constexpr (Sparsity::is_sparse) {
      l.init_glorot(params_, rng);
    } else {
      auto w = params_[l.weight().index];
      rng.fill_uniform(w, l.weight().index);
      const float a = float(std::sqrt(6.0 / double(l.in() + l.out())));
      for (auto& v : w) v = a * (2.0f * v - 1.0f);
      if (l.has_bias()) std::fill(params_[l.bias().index].begin(), params_[l.bias().index].end(), 0.0f);
    }
  }

  step_context bind(step_context s, const token_batch& b) {
    SPARSELM_CHECK(b.batch > 0 && b.seq > 0, "sparse_lm: empty batch (", b.batch, " x ", b.seq, ")");
    SPARSELM_CHECK(b.seq <= cfg_.sequence_length, "sparse_lm: sequence length ", b.seq, " exceeds sequence_length ",
                   cfg_.sequence_length);
    SPARSELM_CHECK(b.ids.size() == b.batch * b.seq, "sparse_lm: ", b.ids.size(), " token ids for a ", b.batch, " x ",
                   b.seq, " batch");
    SPARSELM_CHECK(b.targets.empty() || b.targets.size() == b.ids.size(), "sparse_lm: ", b.targets.size(),
                   " targets for ", b.ids.size(), " token ids");
    s.params = &params_;
    s.grads = &grads_;
    s.tmp = &tmp_;
    s.batch = b.batch;
    s.seq = b.seq;
    return s;
  }

  matrix_view<float> residual(std::size_t l, std::size_t N) {
    const std::size_t H = cfg_.hidden_length;
    return {res_.get((blocks_.size() + 1) * N * H).data() + l * N * H, N, H};
  }

  template <class Recompute>
  void forward_all(const step_context& s, const token_batch& b) {
    const std::size_t N = b.batch * b.seq, H = cfg_.hidden_length, E = cfg_.embedding_length;
    emb_.forward(s, b.ids, residual(0, N), emb_c_);
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      blocks_[l].forward(s, residual(l, N), residual(l + 1, N), caches_[Recompute::keep_all_blocks ? l : 0]);
    auto xf = xf_.matrix(N, H);
    ln_f_.forward(s, residual(blocks_.size(), N), xf, lnf_c_);
    auto hd = hd_.matrix(N, E), ha = ha_.matrix(N, E);
    down_.forward(s, xf, hd, down_c_);
    kernels::gelu_forward<Act>(std::span<const float>(hd.data, N * E), std::span<float>(ha.data, N * E));
    ln_head_.forward(s, ha, z_.matrix(N, E), ln_head_c_);
  }

  sparse_lm_config cfg_;
  sparse_plan plan_;
  std::shared_ptr<const arena_layout> layout_;
  arena<float> params_, grads_;
  embedding_type emb_;
  std::vector<block_type> blocks_;
  layer_norm ln_f_;
  linear_type down_;
  layer_norm ln_head_;
  std::optional<param_ref> bias_;
  tied_lm_head head_;
  // activations
  typename embedding_type::cache emb_c_;
  std::vector<typename block_type::cache> caches_;
  layer_norm::cache lnf_c_, ln_head_c_;
  typename linear_type::cache down_c_;
  lm_loss_targets loss_targets_;
  buffer res_, xf_, hd_, ha_, z_, dz_, dhd_, dxf_, dres_;
  scratch tmp_;
};

}  // namespace sparselm
