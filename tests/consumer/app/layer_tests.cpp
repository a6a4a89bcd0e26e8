// How a downstream project unit-tests its own layer and model templates with doctest and
// sparselm/testing: a toy layer (a learned per-channel gate, y = x ∘ g) is checked by finite
// differences in one call, and a block-sparse GPT through its whole loss in another; the xtensor
// boundary of the README is exercised too. Its own feed-forward (a bilinear gate) goes into the
// library's block (residual_block) beside LLaMA's norm and attention, and that block into a
// model of its own (transformer), without copying library code.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sparselm/sparselm.hpp>
#include <sparselm/testing/layer_check.hpp>

namespace toy {
// y (N,C) = x (N,C) ∘ g (C): a layer in the library's sense (forward, backward, parameters).
class gate {
 public:
  struct cache {
    sparselm::const_matrix_view<float> x;
  };
  gate(sparselm::arena_layout& layout, const std::string& prefix, std::size_t channels)
      : g_{prefix + ".gate", layout.add(prefix + ".gate", {channels})} {}
  std::vector<sparselm::param_ref> parameters() const { return {g_}; }
  void forward(const sparselm::step_context& s, sparselm::const_matrix_view<float> x, sparselm::matrix_view<float> y,
               cache& c) const {
    c.x = x;
    const auto g = s.p(g_.index);
    for (std::size_t i = 0; i < x.rows; ++i)
      for (std::size_t j = 0; j < x.cols; ++j) y(i, j) = x(i, j) * g[j];
  }
  void backward(const sparselm::step_context& s, sparselm::const_matrix_view<float> dy, sparselm::matrix_view<float> dx,
                cache& c) const {
    const auto g = s.p(g_.index);
    auto dg = s.g(g_.index);
    for (std::size_t i = 0; i < dy.rows; ++i)
      for (std::size_t j = 0; j < dy.cols; ++j) {
        dg[j] += dy(i, j) * c.x(i, j);
        dx(i, j) = dy(i, j) * g[j];
      }
  }

 private:
  sparselm::param_ref g_;
};
static_assert(sparselm::layer<gate>);

// A bilinear feed-forward, y = ((x·A) ∘ (x·B))·O, built from the library's linear layers: only what
// a `layer` needs, plus the constructor a block builds its parts with (block_options).
class bilinear_ffn {
 public:
  using linear = sparselm::linear<float, sparselm::dense>;
  struct cache {
    linear::cache a_c, b_c, o_c;
    sparselm::buffer a, b, h, dh;
  };
  bilinear_ffn(sparselm::arena_layout& layout, const std::string& prefix, const sparselm::block_options& o)
      : f_(o.hidden), a_(layout, prefix + ".a", o.channels, o.hidden, false),
        b_(layout, prefix + ".b", o.channels, o.hidden, false),
        o_(layout, prefix + ".o", o.hidden, o.channels, false) {}
  template <class F>
  void visit(F&& f) const {
    f(a_);
    f(b_);
    f(o_);
  }
  void forward(const sparselm::step_context& s, sparselm::const_matrix_view<float> x, sparselm::matrix_view<float> y,
               cache& c) const {
    auto a = c.a.matrix(x.rows, f_), b = c.b.matrix(x.rows, f_), h = c.h.matrix(x.rows, f_);
    a_.forward(s, x, a, c.a_c);
    b_.forward(s, x, b, c.b_c);
    for (std::size_t i = 0; i < x.rows * f_; ++i) h.data[i] = a.data[i] * b.data[i];
    o_.forward(s, h, y, c.o_c);
  }
  void backward(const sparselm::step_context& s, sparselm::const_matrix_view<float> dy, sparselm::matrix_view<float> dx,
                cache& c) const {
    const std::size_t N = dy.rows;
    auto dh = c.dh.matrix(N, f_), a = c.a.matrix(N, f_), b = c.b.matrix(N, f_);
    o_.backward(s, dy, dh, c.o_c);
    for (std::size_t i = 0; i < N * f_; ++i) {  // a and b become their gradients
      const float da = dh.data[i] * b.data[i];
      b.data[i] = dh.data[i] * a.data[i];
      a.data[i] = da;
    }
    a_.backward(s, a, dx, c.a_c);
    b_.backward(s, b, dx, c.b_c, /*accumulate_dx=*/true);
  }

 private:
  std::size_t f_ = 0;
  linear a_, b_, o_;
};

using my_block = sparselm::residual_block<sparselm::pre_ln, sparselm::rms_norm,
                                          sparselm::grouped_query_attention<float, sparselm::dense>, bilinear_ffn>;
using my_head = sparselm::causal_lm_head<float, sparselm::dense, sparselm::kernels::gelu_kind::tanh, sparselm::rms_norm>;

// A causal LM of the library's parts and my_block: a derived transformer builds its parts on one
// layout and hands them over.
class my_lm : public sparselm::transformer<sparselm::token_embedding, my_block, my_head, sparselm::token_batch> {
 public:
  my_lm(std::size_t vocab, std::size_t channels, std::size_t layers, std::size_t positions) {
    auto layout = std::make_shared<sparselm::arena_layout>();
    sparselm::token_embedding emb(*layout, "emb.weight", vocab, channels);
    sparselm::block_options o{.channels = channels, .heads = 4, .head_dim = channels / 4, .hidden = 2 * channels,
                              .qkv_bias = false, .proj_bias = false, .kv_heads = 2};
    auto blocks = make_blocks(*layout, layers, o, "blocks.");
    my_head head(*layout, emb.wte(), {.channels = channels, .vocab = vocab, .norm_name = "norm"});
    assemble(std::move(layout), std::move(emb), std::move(blocks), std::move(head));
    set_limits("my_lm", vocab, positions, "positions");
  }
  void init(std::uint64_t seed) {
    sparselm::counter_rng(seed).fill_normal(params().all(), 1, 0.0f, 0.3f);
    sparselm::visit_tree(*this, [&](const auto& n) {
      if constexpr (std::is_same_v<std::decay_t<decltype(n)>, sparselm::rms_norm>) n.init(params());
    });
  }
};
}  // namespace toy

TEST_CASE("a downstream layer passes the library's gradient check") {
  auto layout = std::make_shared<sparselm::arena_layout>();
  toy::gate l(*layout, "mine", 8);
  auto r = sparselm::testing::check_layer(l, layout, {.batch = 2, .seq = 3, .in = 8, .out = 8});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked == layout->total() + 2 * 3 * 8);  // every parameter (and its arena padding) and input
}

TEST_CASE("a model's whole loss gradient, and the xtensor boundary") {
  using json = nlohmann::json;
  auto cfg = sparselm::gpt_config::from_json(
      json{{"vocab_size", 64}, {"n_positions", 16}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32},
           {"initializer_range", 0.2}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"resid_pdrop", 0.0}});
  sparselm::gpt<float, sparselm::block_sparse<16>> model(cfg, {.sparsity = 0.5});
  model.init(7);
  xt::xtensor<std::int32_t, 2> ids = {{1, 5, 9, 2, 7}, {3, 3, 8, 1, 0}};
  xt::xtensor<std::int32_t, 2> targets = {{5, 9, 2, 7, 4}, {3, 8, 1, 0, 6}};
  auto r = sparselm::testing::check_model(model, sparselm::xt_batch(ids, targets), {.max_checks = 100});
  CHECK_MESSAGE(r.ok, r.message);
  xt::xtensor<float, 3> logits = sparselm::xt_logits(model, ids);  // (2, 5, 64)
  CHECK(logits.shape()[2] == 64);
  xt::xtensor<float, 2> ce = sparselm::xt_token_losses(model, ids, targets);
  CHECK(xt::all(ce > 0.0f));
}

TEST_CASE("a downstream feed-forward in the library's block, and that block in a downstream model") {
  auto layout = std::make_shared<sparselm::arena_layout>();
  toy::my_block blk(*layout, "h.0",
                    {.channels = 8, .heads = 4, .head_dim = 2, .hidden = 12, .qkv_bias = false, .proj_bias = false,
                     .kv_heads = 2},
                    1);
  auto r = sparselm::testing::check_layer(blk, layout,
                                          {.batch = 2, .seq = 3, .in = 8, .out = 8, .init = [&](auto& p) {
                                             sparselm::counter_rng(2).fill_normal(p.all(), 1, 0.0f, 0.3f);
                                             blk.ln1().init(p);
                                             blk.ln2().init(p);
                                           }, .tolerance = {.step = 2e-2}});
  CHECK_MESSAGE(r.ok, r.message);

  toy::my_lm model(32, 16, 2, 8);
  model.init(5);
  CHECK(model.layout()->find("blocks.1.mlp.o.weight").has_value());
  std::vector<std::int32_t> ids{1, 5, 9, 2, 7, 3, 3, 8}, tg{5, 9, 2, 7, 4, 3, 8, 1};
  auto m = sparselm::testing::check_model(model, sparselm::token_batch{ids, tg, {}, 2, 4}, {.max_checks = 100});
  CHECK_MESSAGE(m.ok, m.message);
}
