// The LLaMA family's parts — RMSNorm, rotary positions, grouped-query attention, gated feed-forward —
// against naive references and finite differences, dense and block-sparse; blocks made of them and
// of a plain downstream layer.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/layers/block.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/gated_feed_forward.hpp"
#include "sparselm/layers/grouped_attention.hpp"
#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/rms_norm.hpp"
#include "sparselm/layers/rotary.hpp"
#include "sparselm/layers/visit.hpp"
#include "sparselm/testing/layer_check.hpp"

namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using sparselm::testing::check_layer;
using sparselm::testing::layer_check_options;

static_assert(layer<rms_norm>);
static_assert(layer<grouped_query_attention<float, dense>>);
static_assert(layer<gated_feed_forward<float, block_sparse<4>>>);

// Parameters N(0, σ), norms at their initial gamma, block-sparse weights on a random pattern.
template <class L>
std::function<void(arena<float>&)> init_of(const L& l, float sigma = 0.3f) {
  return [&l, sigma](arena<float>& p) {
    counter_rng(4).fill_normal(p.all(), 9, 0.0f, sigma);
    visit_tree(l, [&](const auto& n) {
      using N = std::decay_t<decltype(n)>;
      if constexpr (std::is_same_v<N, rms_norm>) {
        n.init(p);
        for (auto& g : p[n.weight().index]) g += 0.1f * float(&g - p[n.weight().index].data()) / 8.0f;
      }
      if constexpr (std::is_same_v<N, layer_norm>) n.init(p);
      if constexpr (is_linear_v<N>) {
        if constexpr (N::sparsity::is_sparse) n.init(p, counter_rng(5), sigma);
      }
    });
  };
}

std::vector<float> normal(std::size_t n, std::uint64_t stream, float sigma = 1.0f) {
  std::vector<float> v(n);
  counter_rng(11).fill_normal(v, stream, 0.0f, sigma);
  return v;
}

TEST_CASE("rms_norm: forward is x / sqrt(mean x² + eps) · gamma; gradients by finite differences") {
  const std::size_t N = 5, C = 12;
  auto layout = std::make_shared<arena_layout>();
  rms_norm n(*layout, "norm", C, {.eps = 1e-5f});
  arena<float> p(layout), g(layout);
  auto gamma = normal(C, 1);
  std::copy(gamma.begin(), gamma.end(), p[n.weight().index].begin());
  auto x = normal(N * C, 2);
  std::vector<float> y(N * C);
  scratch tmp;
  step_context s{.params = &p, .grads = &g, .tmp = &tmp};
  rms_norm::cache c;
  n.forward(s, {x.data(), N, C}, {y.data(), N, C}, c);
  for (std::size_t i = 0; i < N; ++i) {
    double ss = 0;
    for (std::size_t j = 0; j < C; ++j) ss += double(x[i * C + j]) * x[i * C + j];
    const double r = 1.0 / std::sqrt(ss / C + 1e-5);
    for (std::size_t j = 0; j < C; ++j) CHECK(y[i * C + j] == doctest::Approx(x[i * C + j] * r * gamma[j]).epsilon(1e-5));
  }
  auto r = check_layer(n, layout, {.batch = 1, .seq = 5, .in = C, .out = C, .init = init_of(n)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(rms_norm(*layout, "bad", 4, {.eps = 0.0f}), doctest::Contains("'eps'"), sparselm::error);
}

TEST_CASE("rotary_embedding: HF rotate-half layout, inverse is the transpose") {
  const std::size_t D = 8, H = 2, n = 3, B = 2, past = 5;
  rotary_embedding rope(D, 10000.0f, "test");
  std::vector<float> t(n * D);
  matrix_view<float> table(t.data(), n, D);
  rope.fill(past, n, table);
  auto x0 = normal(B * n * H * D, 3);
  auto x = x0;
  matrix_view<float> m(x.data(), B * n, H * D);
  rope.apply(m, 0, H, n, table);
  for (std::size_t r = 0; r < B * n; ++r)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < D; ++i) {
        const std::size_t k = i % (D / 2);
        const double a = double(past + r % n) / std::pow(10000.0, double(2 * k) / D);
        const double xi = x0[r * H * D + h * D + i];
        const double rot = i < D / 2 ? -double(x0[r * H * D + h * D + i + D / 2]) : double(x0[r * H * D + h * D + i - D / 2]);
        CHECK(x[r * H * D + h * D + i] == doctest::Approx(xi * std::cos(a) + rot * std::sin(a)).epsilon(1e-5));
      }
  rope.apply(m, 0, H, n, table, true);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i] == doctest::Approx(x0[i]).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(rotary_embedding(7, 10000.0f, "attention 'a'"), doctest::Contains("'head_dim' (7) must be even"),
                       sparselm::error);
}

// Naive grouped-query causal attention with rotary positions, in double, from the layer's weights.
template <class A>
std::vector<double> naive_attention(const A& a, const arena<float>& p, const std::vector<float>& x, std::size_t B,
                                    std::size_t T, std::size_t C) {
  const std::size_t H = a.heads(), G = a.kv_heads(), D = a.head_dim(), rep = H / G;
  auto proj = [&](const auto& l, std::size_t out) {  // dense (in, out) weight
    std::vector<double> y(B * T * out);
    auto W = p[l.weight().index];
    for (std::size_t r = 0; r < B * T; ++r)
      for (std::size_t o = 0; o < out; ++o) {
        double acc = 0;
        for (std::size_t i = 0; i < C; ++i) acc += double(x[r * C + i]) * W[i * out + o];
        y[r * out + o] = acc;
      }
    return y;
  };
  auto q = proj(a.q_proj(), H * D), k = proj(a.k_proj(), G * D), v = proj(a.v_proj(), G * D);
  auto rope = [&](std::vector<double>& m, std::size_t heads) {
    for (std::size_t r = 0; r < B * T; ++r)
      for (std::size_t h = 0; h < heads; ++h) {
        double* z = &m[(r * heads + h) * D];
        for (std::size_t i = 0; i < D / 2; ++i) {
          const double ang = double(r % T) / std::pow(10000.0, double(2 * i) / D);
          const double u = z[i], w = z[i + D / 2];
          z[i] = u * std::cos(ang) - w * std::sin(ang);
          z[i + D / 2] = w * std::cos(ang) + u * std::sin(ang);
        }
      }
  };
  rope(q, H);
  rope(k, G);
  std::vector<double> att(B * T * H * D, 0.0);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300, z = 0;
        for (std::size_t j = 0; j <= t; ++j) {
          double acc = 0;
          for (std::size_t i = 0; i < D; ++i) acc += q[((b * T + t) * H + h) * D + i] * k[((b * T + j) * G + h / rep) * D + i];
          s[j] = acc / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (std::size_t j = 0; j <= t; ++j)
          for (std::size_t i = 0; i < D; ++i)
            att[((b * T + t) * H + h) * D + i] += s[j] / z * v[((b * T + j) * G + h / rep) * D + i];
      }
  std::vector<double> y(B * T * C, 0.0);
  auto Wo = p[a.o_proj().weight().index];
  for (std::size_t r = 0; r < B * T; ++r)
    for (std::size_t o = 0; o < C; ++o)
      for (std::size_t i = 0; i < H * D; ++i) y[r * C + o] += att[r * H * D + i] * Wo[i * C + o];
  return y;
}

TEST_CASE("grouped_query_attention: forward against a naive reference; cached decoding gives the same rows") {
  const std::size_t B = 2, T = 5, C = 8;
  for (std::size_t G : {1ul, 2ul, 4ul}) {
    CAPTURE(G);
    auto layout = std::make_shared<arena_layout>();
    grouped_query_attention<float, dense> a(*layout, "attn", C, 4, G, 4);
    CHECK(a.kv_width() == G * 4);
    arena<float> p(layout), g(layout);
    counter_rng(3).fill_normal(p.all(), 1, 0.0f, 0.4f);
    auto x = normal(B * T * C, 4);
    std::vector<float> y(B * T * C);
    scratch tmp;
    step_context s{.params = &p, .grads = &g, .tmp = &tmp, .batch = B, .seq = T};
    decltype(a)::cache c;
    a.forward(s, {x.data(), B * T, C}, {y.data(), B * T, C}, c);
    auto ref = naive_attention(a, p, x, B, T, C);
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == doctest::Approx(ref[i]).epsilon(1e-4).scale(1.0));
    // Decoding: 3 positions, then 2 more, per sequence; the cache holds G·D per position.
    kv_cache kv(1, B, T, a.kv_width());
    std::vector<float> yc(B * T * C);
    for (auto [p0, n] : {std::pair{0ul, 3ul}, {3ul, 2ul}}) {
      std::vector<float> xs(B * n * C), ys(B * n * C);
      for (std::size_t b = 0; b < B; ++b)
        std::copy_n(x.data() + (b * T + p0) * C, n * C, xs.data() + b * n * C);
      step_context sd{.params = &p, .tmp = &tmp, .batch = B, .seq = n};
      a.forward_cached(sd, {xs.data(), B * n, C}, {ys.data(), B * n, C}, c, kv, 0, p0);
      kv.advance(n);
      for (std::size_t b = 0; b < B; ++b) std::copy_n(ys.data() + b * n * C, n * C, yc.data() + (b * T + p0) * C);
    }
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(yc[i] == doctest::Approx(y[i]).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE_TEMPLATE("grouped_query_attention: gradients by finite differences (multi-head, grouped, multi-query)", S,
                   dense, block_sparse<4>) {
  const std::size_t C = 8;
  for (std::size_t G : {1ul, 2ul, 4ul}) {
    CAPTURE(G);
    auto layout = std::make_shared<arena_layout>();
    sparse_plan plan{.sparsity = 0.5};
    grouped_query_attention<float, S> a(*layout, "attn", C, 4, G, 4, 10000.0f, G == 2, G == 2, 0.0f, 0, &plan);
    layer_check_options lo{.batch = 2, .seq = 4, .in = C, .out = C, .init = init_of(a)};
    lo.tolerance.step = 1e-2;
    auto r = check_layer(a, layout, lo);
    CHECK_MESSAGE(r.ok, r.message);
  }
  auto layout = std::make_shared<arena_layout>();
  CHECK_THROWS_WITH_AS(grouped_query_attention<float>(*layout, "h.0.attn", C, 4, 3, 2),
                       doctest::Contains("'num_attention_heads' (4) is not divisible by 'num_key_value_heads' (3)"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(grouped_query_attention<float>(*layout, "h.1.attn", C, 2, 2, 3), doctest::Contains("'head_dim' (3)"),
                       sparselm::error);
}

TEST_CASE_TEMPLATE("gated_feed_forward: forward against a naive reference, gradients by finite differences", S, dense,
                   block_sparse<4>) {
  const std::size_t N = 6, C = 8, F = 12;
  for (int act = 0; act < 3; ++act) {
    CAPTURE(act);
    auto run = [&]<gate_activation A>() {
      auto layout = std::make_shared<arena_layout>();
      sparse_plan plan{.sparsity = 0.5};
      gated_feed_forward<float, S, A> f(*layout, "mlp", C, F, act == 1, &plan);
      layer_check_options lo{.batch = 2, .seq = 3, .in = C, .out = C, .init = init_of(f)};
      auto r = check_layer(f, layout, lo);
      CHECK_MESSAGE(r.ok, r.message);
      if constexpr (!S::is_sparse) {  // forward against loops over the stored weights
        arena<float> p(layout), g(layout);
        lo.init(p);
        auto x = normal(N * C, 5);
        std::vector<float> y(N * C);
        scratch tmp;
        step_context s{.params = &p, .grads = &g, .tmp = &tmp, .batch = 2, .seq = 3};
        typename decltype(f)::cache c;
        f.forward(s, {x.data(), N, C}, {y.data(), N, C}, c);
        auto Wg = p[f.gate_proj().weight().index], Wu = p[f.up_proj().weight().index], Wd = p[f.down_proj().weight().index];
        for (std::size_t r2 = 0; r2 < N; ++r2)
          for (std::size_t o = 0; o < C; ++o) {
            double acc = 0;
            for (std::size_t h = 0; h < F; ++h) {
              double gv = 0, uv = 0;
              for (std::size_t i = 0; i < C; ++i) {
                gv += double(x[r2 * C + i]) * Wg[i * F + h];
                uv += double(x[r2 * C + i]) * Wu[i * F + h];
              }
              if (act == 1) {
                gv += p[f.gate_proj().bias().index][h];
                uv += p[f.up_proj().bias().index][h];
              }
              const double a = A == gate_activation::silu        ? gv / (1 + std::exp(-gv))
                               : A == gate_activation::gelu_erf ? 0.5 * gv * (1 + std::erf(gv / std::sqrt(2.0)))
                                                                  : 0.5 * gv * (1 + std::tanh(std::sqrt(2 / M_PI) * (gv + 0.044715 * gv * gv * gv)));
              acc += a * uv * Wd[h * C + o];
            }
            if (act == 1) acc += p[f.down_proj().bias().index][o];
            CHECK(y[r2 * C + o] == doctest::Approx(acc).epsilon(1e-4).scale(1.0));
          }
      }
    };
    if (act == 0) run.template operator()<gate_activation::silu>();
    if (act == 1) run.template operator()<gate_activation::gelu_tanh>();
    if (act == 2) run.template operator()<gate_activation::gelu_erf>();
  }
}

// A downstream feed-forward with only what `layer` asks: no compact_input, no keeper, no
// accumulating backward, no forward_cached. y = tanh(x)·W.
struct plain_ffn {
  struct cache {
    const_matrix_view<float> x;
    buffer t;
  };
  plain_ffn() = default;
  plain_ffn(arena_layout& layout, const std::string& prefix, const block_options& o) : c_(o.channels) {
    w_ = {prefix + ".w", layout.add(prefix + ".w", {c_, c_})};
  }
  std::vector<param_ref> parameters() const { return {w_}; }
  void forward(const step_context& s, const_matrix_view<float> x, matrix_view<float> y, cache& c) const {
    c.x = x;
    auto t = c.t.matrix(x.rows, c_);
    for (std::size_t i = 0; i < x.rows * c_; ++i) t.data[i] = std::tanh(x.row(i / c_)[i % c_]);
    auto W = s.p(w_.index);
    for (std::size_t r = 0; r < x.rows; ++r)
      for (std::size_t o = 0; o < c_; ++o) {
        float acc = 0;
        for (std::size_t i = 0; i < c_; ++i) acc += t.data[r * c_ + i] * W[i * c_ + o];
        y.row(r)[o] = acc;
      }
  }
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c) const {
    auto W = s.p(w_.index);
    auto dW = s.g(w_.index);
    const float* t = c.t.get(dy.rows * c_).data();
    for (std::size_t r = 0; r < dy.rows; ++r)
      for (std::size_t i = 0; i < c_; ++i) {
        float acc = 0;
        for (std::size_t o = 0; o < c_; ++o) {
          acc += dy.row(r)[o] * W[i * c_ + o];
          dW[i * c_ + o] += t[r * c_ + i] * dy.row(r)[o];
        }
        dx.row(r)[i] = acc * (1 - t[r * c_ + i] * t[r * c_ + i]);
      }
  }
  std::size_t c_ = 0;
  param_ref w_;
};

using llama_dense_block = residual_block<pre_ln, rms_norm, grouped_query_attention<float, dense>, swiglu_feed_forward<float, dense>>;
using llama_sparse_block =
    residual_block<pre_ln, rms_norm, grouped_query_attention<float, block_sparse<4>>, swiglu_feed_forward<float, block_sparse<4>>>;
using plain_pre_block = residual_block<pre_ln, rms_norm, self_attention<float, dense>, plain_ffn>;
using plain_post_block = residual_block<post_ln, layer_norm, self_attention<float, dense>, plain_ffn>;

TEST_CASE_TEMPLATE("residual_block of parts: LLaMA's (RMSNorm, GQA + rotary, SwiGLU) and one with a downstream FFN", Block,
                   llama_dense_block, llama_sparse_block, plain_pre_block, plain_post_block) {
  static_assert(layer<Block>);
  const std::size_t C = 8;
  auto layout = std::make_shared<arena_layout>();
  sparse_plan plan{.sparsity = 0.5};
  block_options o{.channels = C, .heads = 4, .head_dim = 2, .hidden = 12, .qkv_bias = false, .proj_bias = false,
                  .ffn_bias = false, .kv_heads = 4, .plan = &plan};
  if constexpr (std::is_same_v<typename Block::attention_type, grouped_query_attention<float, dense>>) o.kv_heads = 2;
  o.names = {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"};
  Block blk(*layout, "model.layers.0", o, 3);
  CHECK(parameters_of(blk).front().name == "model.layers.0.input_layernorm.weight");
  layer_check_options lo{.batch = 2, .seq = 4, .in = C, .out = C, .init = init_of(blk)};
  lo.tolerance.step = 2e-2;
  auto r = check_layer(blk, layout, lo);
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace SPARSELM_UNITY_ID

namespace SPARSELM_UNITY_ID {

// A linear layer whose accumulating backward forgets to accumulate: check_layer's path check must
// catch it (finite differences alone cannot: they only see the plain backward).
struct forgetful_linear : linear<float, dense> {
  using linear<float, dense>::linear;
  void backward(const step_context& s, const_matrix_view<float> dy, matrix_view<float> dx, cache& c,
                bool = false) const {
    linear<float, dense>::backward(s, dy, dx, c, false);
  }
};

TEST_CASE("check_layer: block-sparse layers need no init; the optional paths are compared with the plain one") {
  auto layout = std::make_shared<arena_layout>();
  sparse_plan plan{.sparsity = 0.5};
  gated_feed_forward<float, block_sparse<4>> f(*layout, "mlp", 8, 12, false, &plan);
  auto r = check_layer(f, layout, {.batch = 2, .seq = 3, .in = 8, .out = 8});  // the default init visits the layer
  CHECK_MESSAGE(r.ok, r.message);

  auto l2 = std::make_shared<arena_layout>();
  forgetful_linear bad(*l2, "fc", 5, 4);
  auto rb = check_layer(bad, l2, {.batch = 2, .seq = 2, .in = 5, .out = 4});
  CHECK_FALSE(rb.ok);
  CHECK(rb.message.find("accumulating backward path differs") != std::string::npos);
  CHECK(rb.failures == 0);  // the finite differences alone pass
}

}  // namespace SPARSELM_UNITY_ID
