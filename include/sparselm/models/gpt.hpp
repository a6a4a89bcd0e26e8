#pragma once
// GPT-2 style decoder (SPEC §1, S2): token + learned position embedding, pre-LN blocks, final
// norm, LM head tied to the token embedding; causal attention; GELU feed-forward with 4C hidden.
//
// Legend: B batch, T sequence, N = B·T, C channels (n_embd), L layers, V vocab.
// Sizes come from a JSON config (HF GPT-2 config.json keys); dtype, sparsity and activation are
// template parameters.
//
//   gpt<> model(gpt_config::from_json(read_json_file("configs/gpt2-small.json"), "gpt2-small"));
//   model.init(1234);
//   auto st = model.forward_backward(ctx, batch, 1.0f / batch.targets.size());

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
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/models/config.hpp"
#include "sparselm/models/lm_loss.hpp"
#include "sparselm/policies/recompute.hpp"
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

  // Reads HF GPT-2 config.json keys; unknown keys and bad values are errors naming the field.
  static gpt_config from_json(const json& j, const std::string& context = "gpt config") {
    config_reader r(j, context);
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
    c.n_layer = r.get("n_layer", c.n_layer, positive);
    c.n_head = r.get("n_head", c.n_head, positive);
    c.n_embd = r.get("n_embd", c.n_embd, positive);
    c.n_inner = r.get("n_inner", c.n_inner);
    c.embd_pdrop = r.get("embd_pdrop", c.embd_pdrop, prob);
    c.attn_pdrop = r.get("attn_pdrop", c.attn_pdrop, prob);
    c.resid_pdrop = r.get("resid_pdrop", c.resid_pdrop, prob);
    c.layer_norm_epsilon = r.get("layer_norm_epsilon", c.layer_norm_epsilon, in_range(1e-30, 1.0));
    c.initializer_range = r.get("initializer_range", c.initializer_range, in_range(0.0, 10.0));
    c.scale_residual_init = r.get("scale_residual_init", c.scale_residual_init);
    c.activation_function = r.get("activation_function", c.activation_function, one_of({"gelu_new", "gelu"}));
    c.loss = lm_loss_options::from_json(r.object("loss"), context + " loss");
    // HF keys that do not change the model we build.
    r.ignore({"model_type", "architectures", "bos_token_id", "eos_token_id", "torch_dtype", "transformers_version",
              "use_cache", "summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
              "summary_use_proj", "task_specific_params", "scale_attn_weights", "_name_or_path",
              "sparselm"});
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
class gpt {
 public:
  using block_type = pre_ln_block<T, Sparsity, Act>;
  using config_type = gpt_config;
  using batch_type = token_batch;
  using sparsity = Sparsity;

  // plan: block counts of the projections when Sparsity is block_sparse<B> (ignored when dense).
  explicit gpt(const gpt_config& cfg, const sparse_plan& plan = {}) : cfg_(cfg), plan_(plan) {
    constexpr const char* act = Act == kernels::gelu_kind::tanh ? "gelu_new" : "gelu";
    SPARSELM_CHECK(cfg.activation_function == act, "gpt: config asks for activation '", cfg.activation_function,
                   "' but the model type was compiled for '", act, "'");
    SPARSELM_CHECK(cfg.n_embd % cfg.n_head == 0, "gpt: n_embd (", cfg.n_embd, ") is not divisible by n_head (",
                   cfg.n_head, ")");
    auto layout = std::make_shared<arena_layout>();
    emb_ = token_position_embedding(*layout, cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.embd_pdrop, 1);
    block_options o;
    o.channels = cfg.n_embd;
    o.heads = cfg.n_head;
    o.head_dim = cfg.head_dim();
    o.hidden = cfg.hidden();
    o.ln_eps = cfg.layer_norm_epsilon;
    o.attn_dropout = cfg.attn_pdrop;
    o.resid_dropout = cfg.resid_pdrop;
    o.plan = &plan_;
    blocks_.reserve(cfg.n_layer);
    for (std::size_t l = 0; l < cfg.n_layer; ++l)
      blocks_.emplace_back(*layout, "h." + std::to_string(l), o, 16 + l);
    ln_f_ = layer_norm(*layout, "ln_f", cfg.n_embd, cfg.layer_norm_epsilon);
    head_ = tied_lm_head(emb_.wte(), cfg.vocab_size, cfg.n_embd);
    layout_ = layout;
    params_ = arena<float>(layout_);
    grads_ = arena<float>(layout_);
    caches_.resize(cfg.n_layer);
  }

  gpt(const gpt&) = delete;
  gpt& operator=(const gpt&) = delete;
  gpt(gpt&&) = default;
  gpt& operator=(gpt&&) = default;

  const gpt_config& config() const noexcept { return cfg_; }
  const std::shared_ptr<const arena_layout>& layout() const noexcept { return layout_; }
  arena<float>& params() noexcept { return params_; }
  const arena<float>& params() const noexcept { return params_; }
  arena<float>& grads() noexcept { return grads_; }
  std::size_t num_parameters() const noexcept { return layout_->parameters(); }
  const std::vector<block_type>& blocks() const noexcept { return blocks_; }
  tied_lm_head& head() noexcept { return head_; }
  const tied_lm_head& head() const noexcept { return head_; }
  const token_position_embedding& embedding() const noexcept { return emb_; }
  const layer_norm& final_norm() const noexcept { return ln_f_; }

  // GPT-2 initialisation: N(0, σ) for weights and embeddings (σ/sqrt(2L) for c_proj when
  // scale_residual_init), zero biases, unit norms. Deterministic in the seed.
  // The block-sparse projections, for a pattern updater (empty when dense).
  std::vector<sparse::sparse_weight> sparse_weights() {
    std::vector<sparse::sparse_weight> r;
    if constexpr (Sparsity::is_sparse) {
      for (auto& b : blocks_)
        for (auto* l : {&b.attn().qkv(), &b.attn().proj(), &b.ffn().fc(), &b.ffn().proj()})
          r.push_back(l->updater_view(params_));
    }
    return r;
  }
  const sparse_plan& plan() const noexcept { return plan_; }

  void init(std::uint64_t seed) {
    counter_rng rng(seed);
    const float std = cfg_.initializer_range;
    const float proj_std = cfg_.scale_residual_init ? std / std::sqrt(2.0f * float(cfg_.n_layer)) : std;
    emb_.init(params_, rng, std);
    for (auto& b : blocks_) {
      b.ln1().init(params_);
      b.ln2().init(params_);
      b.attn().qkv().init(params_, rng, std);
      b.attn().proj().init(params_, rng, proj_std);
      b.ffn().fc().init(params_, rng, std);
      b.ffn().proj().init(params_, rng, proj_std);
    }
    ln_f_.init(params_);
  }

  // Forward and backward over one batch. Gradients accumulate: grads += grad_scale · ∂(Σ w·CE)/∂θ,
  // the sum over the positions scored by the config's loss options (weights: the batch's, or S1's
  // repeated-token weights).
  // ctx supplies training (dropout), step, micro and the dropout key; the model fills in the rest.
  template <recompute::policy Recompute = recompute::none>
  loss_stats forward_backward(step_context ctx, const token_batch& b, float grad_scale) {
    auto s = bind(ctx, b);
    const std::size_t N = b.batch * b.seq;
    forward_blocks<Recompute>(s, b);
    auto xf = xf_.matrix(N, cfg_.n_embd);
    auto dxf = s.tmp->matrix(slot_head_x, N, cfg_.n_embd);
    const token_batch& lb = loss_targets_.apply(cfg_.loss, b);
    loss_stats st = head_.forward_backward(s, xf, lb.targets, lb.weights, grad_scale, dxf);
    loss_targets_.finish(st);
    auto dres = dres_.matrix(N, cfg_.n_embd);
    ln_f_.backward(s, dxf, dres, lnf_c_);
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      if constexpr (Recompute::keep_all_blocks) {
        blocks_[l].backward(s, dres, dres, caches_[l]);
      } else {
        auto y = s.tmp->matrix(slot_model_a, N, cfg_.n_embd);
        blocks_[l].forward(s, residual(l, N), y, caches_[0]);
        blocks_[l].backward(s, dres, dres, caches_[0]);
      }
    }
    emb_.backward(s, b.ids, dres);
    return st;
  }

  // Loss without gradients (dropout off unless ctx.training).
  loss_stats evaluate(const token_batch& b, step_context ctx = {}) {
    auto s = bind(ctx, b);
    const std::size_t N = b.batch * b.seq;
    forward_blocks<recompute::blocks>(s, b);
    const token_batch& lb = loss_targets_.apply(cfg_.loss, b);
    loss_stats st = head_.forward_backward(s, xf_.matrix(N, cfg_.n_embd), lb.targets, lb.weights, 1.0f, {});
    loss_targets_.finish(st);
    return st;
  }

  // Denominator of the batch's mean loss under the config's loss options (the trainer scales the
  // gradient by its inverse): Σ weights, or the number of scored positions (SPEC §2).
  double loss_normaliser(const token_batch& b) const { return lm_loss_normaliser(cfg_.loss, b); }

  // Full logits (B·T, V) for ids (B·T).
  void logits(std::span<const std::int32_t> ids, std::size_t batch, std::size_t seq, matrix_view<float> out) {
    token_batch b{ids, {}, {}, batch, seq};
    auto s = bind({}, b);
    SPARSELM_CHECK(out.rows == batch * seq && out.cols == cfg_.vocab_size, "gpt::logits: out ", shape_string(out),
                   " should be (", batch * seq, "x", cfg_.vocab_size, ")");
    forward_blocks<recompute::blocks>(s, b);
    head_.logits(s, xf_.matrix(batch * seq, cfg_.n_embd), out);
  }

  // Bytes held by activations and scratch (for memory reports).
  std::size_t activation_bytes() const noexcept {
    return tmp_.bytes() + (res_.capacity() + xf_.capacity() + dres_.capacity()) * sizeof(float);
  }

 private:
  step_context bind(step_context s, const token_batch& b) {
    SPARSELM_CHECK(b.batch > 0 && b.seq > 0, "gpt: empty batch (", b.batch, " x ", b.seq, ")");
    SPARSELM_CHECK(b.seq <= cfg_.n_positions, "gpt: sequence length ", b.seq, " exceeds n_positions ", cfg_.n_positions);
    SPARSELM_CHECK(b.ids.size() == b.batch * b.seq, "gpt: ", b.ids.size(), " token ids for a ", b.batch, " x ", b.seq,
                   " batch");
    s.params = &params_;
    s.grads = &grads_;
    s.tmp = &tmp_;
    s.batch = b.batch;
    s.seq = b.seq;
    return s;
  }

  matrix_view<float> residual(std::size_t l, std::size_t N) {
    return {res_.get((blocks_.size() + 1) * N * cfg_.n_embd).data() + l * N * cfg_.n_embd, N, cfg_.n_embd};
  }

  template <class Recompute>
  void forward_blocks(const step_context& s, const token_batch& b) {
    const std::size_t N = b.batch * b.seq;
    emb_.forward(s, b.ids, residual(0, N));
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      blocks_[l].forward(s, residual(l, N), residual(l + 1, N), caches_[Recompute::keep_all_blocks ? l : 0]);
    ln_f_.forward(s, residual(blocks_.size(), N), xf_.matrix(N, cfg_.n_embd), lnf_c_);
  }

  gpt_config cfg_;
  sparse_plan plan_;
  std::shared_ptr<const arena_layout> layout_;
  arena<float> params_, grads_;
  token_position_embedding emb_;
  std::vector<block_type> blocks_;
  layer_norm ln_f_;
  tied_lm_head head_;
  // activations
  std::vector<typename block_type::cache> caches_;
  layer_norm::cache lnf_c_;
  lm_loss_targets loss_targets_;
  buffer res_, xf_, dres_;
  scratch tmp_;
};

}  // namespace sparselm
