// Every layer's backward against finite differences of its forward (parameters and inputs), plus
// the bad-input errors of the layer constructors and calls.
#include <doctest/doctest.h>

#include <cmath>

#include "sparselm/testing/layer_check.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/block.hpp"
#include "sparselm/layers/embedding.hpp"
#include "sparselm/layers/feed_forward.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/layers/lm_head.hpp"
#include "sparselm/layers/visit.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using sparselm::testing::check_layer;
using sparselm::testing::layer_check_options;
using sparselm::testing::layer_case;

static_assert(layer<linear<float, dense>>);
static_assert(layer<layer_norm>);
static_assert(layer<feed_forward<float, dense>>);
static_assert(layer<self_attention<float, dense>>);
static_assert(layer<pre_ln_block<float, block_sparse<16>>>);

TEST_CASE("linear: gradients by finite differences, with and without bias") {
  for (bool bias : {true, false}) {
    for (auto [N, in, out] : {std::tuple{1ul, 1ul, 1ul}, {7ul, 5ul, 3ul}, {9ul, 33ul, 17ul}}) {
      CAPTURE(bias);
      CAPTURE(N);
      auto layout = std::make_shared<arena_layout>();
      linear<float, dense> l(*layout, "fc", in, out, bias);
      linear<float, dense>::cache c;
      layer_case lc{layout, N, in, out};
      lc.forward = [&](auto& s, auto x, auto y) { l.forward(s, x, y, c); };
      lc.backward = [&](auto& s, auto dy, auto dx) { l.backward(s, dy, dx, c); };
      auto r = check_layer(lc);
      CHECK_MESSAGE(r.ok, r.message);
      CHECK(r.checked == layout->total() + N * in);
    }
  }
}

TEST_CASE("layer_norm: gradients by finite differences") {
  auto layout = std::make_shared<arena_layout>();
  layer_norm ln(*layout, "ln", 13);
  layer_norm::cache c;
  layer_case lc{layout, 5, 13, 13};
  lc.forward = [&](auto& s, auto x, auto y) { ln.forward(s, x, y, c); };
  lc.backward = [&](auto& s, auto dy, auto dx) { ln.backward(s, dy, dx, c); };
  auto r = check_layer(lc);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("feed_forward: gradients by finite differences (tanh and erf GELU)") {
  auto layout = std::make_shared<arena_layout>();
  feed_forward<float, dense, kernels::gelu_kind::tanh> f1(*layout, "a", 6, 10);
  feed_forward<float, dense, kernels::gelu_kind::erf> f2(*layout, "b", 6, 10);
  decltype(f1)::cache c1;
  decltype(f2)::cache c2;
  std::vector<float> mid(7 * 6);
  layer_case lc{layout, 7, 6, 6};
  scratch tmp2;
  lc.forward = [&](auto& s, auto x, auto y) {
    f1.forward(s, x, matrix_view<float>(mid.data(), 7, 6), c1);
    f2.forward(s, const_matrix_view<float>(mid.data(), 7, 6), y, c2);
  };
  lc.backward = [&](auto& s, auto dy, auto dx) {
    std::vector<float> dmid(7 * 6);
    f2.backward(s, dy, matrix_view<float>(dmid.data(), 7, 6), c2);
    f1.backward(s, const_matrix_view<float>(dmid.data(), 7, 6), dx, c1);
  };
  lc.init = [&](arena<float>& p) { counter_rng(3).fill_normal(p.all(), 9, 0.0f, 0.4f); };
  auto r = check_layer(lc);
  CHECK_MESSAGE(r.ok, r.message);
}

namespace {
// A causal self_attention (dense, or block-sparse under `pattern`) against finite differences.
void check_causal_attention(std::size_t B, std::size_t T, std::size_t H, std::size_t D,
                            std::shared_ptr<const kernels::block_causal_pattern> pattern = nullptr) {
  const std::size_t C = 6;
  auto layout = std::make_shared<arena_layout>();
  self_attention<float, dense> a(*layout, "attn", C, H, D, true, true, 0.0f, 0, nullptr, pattern);
  CHECK(a.block_pattern() == pattern.get());
  decltype(a)::cache c;
  layer_case lc{layout, B * T, C, C, B, T};
  lc.forward = [&](auto& s, auto x, auto y) { a.forward(s, x, y, c); };
  lc.backward = [&](auto& s, auto dy, auto dx) { a.backward(s, dy, dx, c); };
  auto r = check_layer(lc);
  CHECK_MESSAGE(r.ok, r.message);
}
}  // namespace

TEST_CASE("self_attention: gradients by finite differences, causal, several heads") {
  for (auto [B, T, H, D] : {std::tuple{1ul, 1ul, 1ul, 4ul}, {2ul, 5ul, 2ul, 3ul}, {1ul, 9ul, 3ul, 2ul}}) {
    CAPTURE(T);
    check_causal_attention(B, T, H, D);
  }
}

TEST_CASE("self_attention: static block-sparse causal attention, gradients by finite differences (partial block)") {
  const std::size_t C = 6, H = 2, D = 3;
  auto pattern = std::make_shared<const kernels::block_causal_pattern>(
      kernels::block_causal_options{.block = 2, .density = 0.5, .seed = 1}, 7);
  check_causal_attention(2, 7, H, D, pattern);
  // only the causal mask takes a block pattern
  arena_layout other;
  using padded = self_attention<float, dense, kernels::attention_mask::padding>;
  CHECK_THROWS_WITH_AS(padded(other, "enc", C, H, D, true, true, 0.0f, 0, nullptr, pattern),
                       doctest::Contains("attention 'enc': block_sparse_attention needs the causal mask"), sparselm::error);
}

TEST_CASE("self_attention: padding mask ignores keys past each length") {
  const std::size_t B = 2, T = 5, C = 4;
  auto layout = std::make_shared<arena_layout>();
  self_attention<float, dense, kernels::attention_mask::padding> a(*layout, "attn", C, 2, 2);
  decltype(a)::cache c;
  std::vector<std::int32_t> lengths{5, 3};
  layer_case lc{layout, B * T, C, C, B, T};
  lc.forward = [&](auto s, auto x, auto y) {
    s.lengths = lengths;
    a.forward(s, x, y, c);
  };
  lc.backward = [&](auto s, auto dy, auto dx) {
    s.lengths = lengths;
    a.backward(s, dy, dx, c);
  };
  auto r = check_layer(lc);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE_TEMPLATE("transformer_block: gradients by finite differences (pre-LN causal, post-LN padding; dropout)", Block,
                   pre_ln_block<float, dense>, post_ln_block<float, dense>, post_ln_block<float, block_sparse<4>>) {
  static_assert(layer<Block>);
  const std::size_t B = 2, T = 4, C = 8;
  for (bool training : {false, true}) {
    CAPTURE(training);
    auto layout = std::make_shared<arena_layout>();
    sparse_plan plan{.sparsity = 0.5};
    block_options o{.channels = C, .heads = 2, .head_dim = 4, .hidden = 16, .attn_dropout = 0.2f,
                    .resid_dropout = 0.3f, .plan = &plan};
    Block blk(*layout, "h.0", o, 5);
    layer_check_options lo{.batch = B, .seq = T, .in = C, .out = C, .training = training};
    if constexpr (Block::attention_type::mask == kernels::attention_mask::padding) lo.lengths = {4, 3};
    // A whole block evaluated in float: rounding noise in the loss, not truncation, limits the
    // finite differences (smaller steps fail more on the AVX-512 host, 2e-2 passes on every host).
    lo.tolerance.step = 2e-2;
    lo.init = [&](arena<float>& p) {
      counter_rng(4).fill_normal(p.all(), 9, 0.0f, 0.3f);
      visit_tree(blk, [&](const auto& n) {
        if constexpr (std::is_same_v<std::decay_t<decltype(n)>, layer_norm>) n.init(p);  // well-conditioned norms
        if constexpr (is_linear_v<std::decay_t<decltype(n)>>) {
          if constexpr (std::decay_t<decltype(n)>::sparsity::is_sparse) n.init(p, counter_rng(5), 0.3f);
        }
      });
    };
    auto r = check_layer(blk, layout, lo);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE_TEMPLATE("transformer_block under bf16: activations kept in bf16 give the same output, gradients within gelu' rounding",
                   Block, pre_ln_block<float, dense>, post_ln_block<float, dense>) {
  const std::size_t B = 2, T = 8, C = 32, N = B * T;
  auto layout = std::make_shared<arena_layout>();
  Block blk(*layout, "h.0", {.channels = C, .heads = 2, .head_dim = 16, .hidden = 128}, 5);
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> p(lay), g(lay);
  counter_rng(1).fill_normal(p.all(), 2, 0.0f, 0.3f);
  visit_tree(blk, [&](const auto& n) {
    if constexpr (std::is_same_v<std::decay_t<decltype(n)>, layer_norm>) n.init(p);
  });
  std::vector<float> x(N * C), dy(N * C);
  counter_rng(2).fill_normal(x, 3, 0.0f, 1.0f);
  counter_rng(2).fill_normal(dy, 4, 0.0f, 1.0f);
  std::vector<std::int32_t> lengths{8, 5};
  struct pass {
    std::vector<float> y, dx, grads;
  };
  auto run = [&](bool bf16_activations) {
    scratch tmp;
    step_context s{&p, &g, &tmp};
    s.batch = B;
    s.seq = T;
    s.training = true;
    s.compute = dtype::bf16;
    s.bf16_activations = bf16_activations;
    if constexpr (Block::attention_type::mask == kernels::attention_mask::padding) s.lengths = lengths;
    typename Block::cache c;
    pass r{std::vector<float>(N * C), std::vector<float>(N * C), {}};
    for (int k = 0; k < 2; ++k) {  // twice: the second pass reuses the caches and scratch
      g.zero();
      blk.forward(s, const_matrix_view<float>(x.data(), N, C), matrix_view<float>(r.y.data(), N, C), c);
      std::vector<float> d = dy;
      blk.backward(s, const_matrix_view<float>(d.data(), N, C), matrix_view<float>(r.dx.data(), N, C), c);
    }
    r.grads.assign(g.all().begin(), g.all().end());
    return r;
  };
  const pass compact = run(true), wide = run(false);
  CHECK(compact.y == wide.y);  // the same bf16 products
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      num += double(a[i] - b[i]) * double(a[i] - b[i]);
      den += double(b[i]) * double(b[i]);
    }
    return std::sqrt(num / den);
  };
  CHECK(rel(compact.dx, wide.dx) < 1e-2);
  CHECK(rel(compact.grads, wide.grads) < 1e-2);
  CHECK(compact.grads != wide.grads);
}

TEST_CASE("post_ln_block: forward is ln2(x1 + ffn(x1)), x1 = ln1(x + attn(x)), from its own sub-layers") {
  const std::size_t B = 2, T = 3, C = 6, N = B * T;
  auto layout = std::make_shared<arena_layout>();
  post_ln_block<float, dense> blk(*layout, "h.0", {.channels = C, .heads = 2, .head_dim = 3, .hidden = 12}, 5);
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> p(lay), g(lay);
  counter_rng(1).fill_normal(p.all(), 2, 0.0f, 0.5f);
  scratch tmp;
  step_context s{&p, &g, &tmp};
  s.batch = B;
  s.seq = T;
  std::vector<std::int32_t> lengths{3, 2};
  s.lengths = lengths;
  std::vector<float> x(N * C), y(N * C), a(N * C), t(N * C), x1(N * C), f(N * C), ref(N * C);
  counter_rng(2).fill_normal(x, 3, 0.0f, 1.0f);
  decltype(blk)::cache c;
  blk.forward(s, const_matrix_view<float>(x.data(), N, C), matrix_view<float>(y.data(), N, C), c);
  decltype(blk)::attention_type::cache ac;
  decltype(blk)::ffn_type::cache fc;
  layer_norm::cache n1, n2;
  auto M = [&](std::vector<float>& v) { return matrix_view<float>(v.data(), N, C); };
  blk.attn().forward(s, M(x), M(a), ac);
  for (std::size_t i = 0; i < N * C; ++i) t[i] = x[i] + a[i];
  blk.ln1().forward(s, M(t), M(x1), n1);
  blk.ffn().forward(s, M(x1), M(f), fc);
  for (std::size_t i = 0; i < N * C; ++i) t[i] = x1[i] + f[i];
  blk.ln2().forward(s, M(t), M(ref), n2);
  for (std::size_t i = 0; i < N * C; ++i) CHECK(y[i] == doctest::Approx(ref[i]).epsilon(1e-6));
}

TEST_CASE("embedding and tied head: gradients by finite differences through the loss") {
  const std::size_t B = 2, T = 3, V = 11, P = 5, C = 4;
  auto layout = std::make_shared<arena_layout>();
  token_position_embedding emb(*layout, V, P, C);
  auto lb = layout->add("head.bias", {V}, param_no_decay);
  tied_lm_head head(emb.wte(), V, C, param_ref{"head.bias", lb}, /*chunk_rows=*/4);  // several chunks
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> params(lay), grads(lay);
  counter_rng(5).fill_normal(params.all(), 1, 0.0f, 0.7f);
  std::vector<std::int32_t> ids{1, 4, 10, 0, 3, 3};
  std::vector<std::int32_t> targets{4, 10, ignore_index, 3, 3, 7};
  std::vector<float> weights{1.0f, 0.5f, 1.0f, 2.0f, 0.0f, 1.0f};
  scratch tmp;
  auto loss = [&](const arena<float>& p, bool grad) {
    step_context s;
    s.params = &p;
    s.grads = &grads;
    s.tmp = &tmp;
    s.batch = B;
    s.seq = T;
    std::vector<float> x(B * T * C), dx(grad ? B * T * C : 0);
    token_position_embedding::cache ec;
    emb.forward(s, ids, matrix_view<float>(x.data(), B * T, C), ec);
    auto st = head.forward_backward(s, const_matrix_view<float>(x.data(), B * T, C), targets, weights, 0.5f,
                                    matrix_view<float>(dx.data(), grad ? B * T : 0, C));
    if (grad) emb.backward(s, ids, matrix_view<float>(dx.data(), B * T, C), ec);
    return st;
  };
  grads.zero();
  auto st = loss(params, true);
  CHECK(st.count == 5);
  CHECK(st.weight_sum == doctest::Approx(4.5));
  arena<float> probe(lay);
  auto f = [&](std::span<const float> v) {
    std::copy(v.begin(), v.end(), probe.all().begin());
    return 0.5 * loss(probe, false).loss_sum;
  };
  std::vector<float> x0(params.all().begin(), params.all().end());
  auto r = sparselm::testing::gradcheck(f, x0, grads.all());
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("layers: bad sizes and shapes are errors naming the layer") {
  arena_layout layout;
  using dense_linear = linear<float, dense>;
  CHECK_THROWS_WITH_AS(dense_linear(layout, "h.0.mlp.c_fc", 0, 4), doctest::Contains("h.0.mlp.c_fc"), sparselm::error);
  CHECK_THROWS_AS(layer_norm(layout, "ln_x", 0), sparselm::error);
  using attention_f = self_attention<float>;
  CHECK_THROWS_AS(attention_f(layout, "attn_x", 4, 0, 2), sparselm::error);
  auto lay = std::make_shared<arena_layout>();
  linear<float, dense> l(*lay, "proj", 3, 2);
  auto clay = std::shared_ptr<const arena_layout>(lay);
  arena<float> p(clay), g(clay);
  scratch tmp;
  step_context s{&p, &g, &tmp};
  std::vector<float> x(4 * 5), y(4 * 2);
  linear<float, dense>::cache c;
  CHECK_THROWS_WITH_AS(l.forward(s, const_matrix_view<float>(x.data(), 4, 5), matrix_view<float>(y.data(), 4, 2), c),
                       doctest::Contains("proj.weight"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
