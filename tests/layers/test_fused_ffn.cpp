// The block-sparse feed-forward with the fused kernel (kernels/bsr_ffn.hpp) against the same layer
// unfused (ffn_fusion() off: two block-sparse linear layers and GELU with h and a in memory), same
// pattern and values: forward, dx (assigned and accumulated), every parameter gradient, the
// layer-kept input and block recompute; gradients by finite differences; the switch conditions.

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sparselm/layers/feed_forward.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/testing/layer_check.hpp"

namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using sparselm::testing::check_layer;
using sparselm::testing::layer_case;

namespace {

// Sets ffn_fusion() for a scope.
struct fusion_scope {
  ffn_fusion_mode saved;
  explicit fusion_scope(ffn_fusion_mode m) : saved(ffn_fusion().load()) { ffn_fusion() = m; }
  ~fusion_scope() { ffn_fusion() = saved; }
};
constexpr ffn_fusion_mode fused_modes[] = {ffn_fusion_mode::keep, ffn_fusion_mode::recompute};

// |a - b| <= tol·(1 + |b|) everywhere (NaN fails).
void check_same(std::span<const float> a, std::span<const float> b, double tol, const std::string& what) {
  REQUIRE(a.size() == b.size());
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i])));
    if (!(e <= tol)) ++bad;
    if (!(e <= worst)) worst = e;
  }
  INFO(what, ": worst relative difference ", worst, ", tolerance ", tol);
  CHECK(bad == 0);
}

template <std::size_t B, kernels::gelu_kind Act>
void fused_against_unfused(std::size_t N, std::size_t C, double sparsity, input_keeper keeper, bool accumulate,
                           ffn_fusion_mode mode) {
  CAPTURE(B);
  CAPTURE(int(mode));
  CAPTURE(N);
  CAPTURE(sparsity);
  CAPTURE(accumulate);
  CAPTURE(keeper == input_keeper::layer);
  using ffn = feed_forward<float, block_sparse<B>, Act>;
  auto layout = std::make_shared<arena_layout>();
  sparse_plan plan{sparsity};
  ffn f(*layout, "mlp", C, 4 * C, &plan);
  CHECK(f.fusable() == kernels::bsr_ffn_fuses<B>);
  const std::shared_ptr<const arena_layout> cl = layout;
  arena<float> params(cl), g_fused(cl), g_plain(cl);
  f.fc().init(params, counter_rng(1), 0.3f);
  f.proj().init(params, counter_rng(2), 0.3f);
  counter_rng(3).fill_normal(params.at("mlp.c_fc.bias"), 0, 0.0f, 0.5f);
  counter_rng(4).fill_normal(params.at("mlp.c_proj.bias"), 0, 0.0f, 0.5f);
  std::vector<float> x(N * C), dy(N * C);
  counter_rng(5).fill_normal(x, 0, 0.0f, 1.0f);
  counter_rng(6).fill_normal(dy, 0, 0.0f, 1.0f);
  scratch tmp;
  g_fused.zero();
  g_plain.zero();
  step_context sf{&params, &g_fused, &tmp}, sp{&params, &g_plain, &tmp};
  typename ffn::cache cf, cp;
  std::vector<float> yf(N * C), yp(N * C), dxf(N * C, 0.25f), dxp(N * C, 0.25f);
  {
    fusion_scope on(mode);
    std::vector<float> xin(x);
    f.forward(sf, {xin.data(), N, C}, {yf.data(), N, C}, cf, keeper);
    CHECK(cf.fused == f.fusable());
    CHECK(cf.kept_h == (f.fusable() && mode == ffn_fusion_mode::keep));
    // The layer's own copy serves backward when it keeps x: the caller's buffer may change.
    if (keeper == input_keeper::layer) std::fill(xin.begin(), xin.end(), 1e3f);
    f.backward(sf, {dy.data(), N, C}, {dxf.data(), N, C}, cf, accumulate);
  }
  {
    fusion_scope off(ffn_fusion_mode::off);
    f.forward(sp, {x.data(), N, C}, {yp.data(), N, C}, cp, keeper);
    CHECK_FALSE(cp.fused);
    f.backward(sp, {dy.data(), N, C}, {dxp.data(), N, C}, cp, accumulate);
  }
  // The same tiles in the same order: y and dx agree to the last bits, up to FMA contraction
  // differences between the two code paths (compiled apart: the fused kernel in sparselm::kernels).
  // dx sums 4C products through gelu', where a one-ulp difference per term reaches ~1.3e-6 (B = 16,
  // measured), hence its wider tolerance; gradients sum rows in other chunks.
  check_same(yf, yp, 1e-6, "y");
  check_same(dxf, dxp, 4e-6, "dx");
  for (const char* name : {"mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
    check_same(g_fused.at(name), g_plain.at(name), 1e-5, name);
}

}  // namespace

TEST_CASE("fused block-sparse feed-forward equals the unfused layer: forward, dx, every gradient") {
  using kernels::gelu_kind;
  for (ffn_fusion_mode m : fused_modes) {
    for (input_keeper k : {input_keeper::caller, input_keeper::layer})
      for (bool acc : {false, true}) {
        fused_against_unfused<16, gelu_kind::tanh>(37, 48, 0.75, k, acc, m);
        fused_against_unfused<8, gelu_kind::tanh>(61, 32, 0.5, k, acc, m);
      }
    fused_against_unfused<16, gelu_kind::erf>(100, 64, 0.9, input_keeper::caller, false, m);
    fused_against_unfused<16, gelu_kind::tanh>(1, 32, 0.0, input_keeper::caller, false, m);
    fused_against_unfused<4, gelu_kind::tanh>(19, 16, 0.5, input_keeper::caller, true, m);  // unfused on AVX-512
  }
}

TEST_CASE("fused block-sparse feed-forward: gradients by finite differences") {
  // The same check for the unfused layer, so that the tolerance is the one both pass: the fp32 loss
  // of 9 x 32 outputs carries rounding of ~1e-6 relative, which the 1e-2 step turns into ~1e-4 of
  // absolute noise in the numeric derivative (atol 3e-4; rtol as check_layer's default).
  for (ffn_fusion_mode mode : {ffn_fusion_mode::keep, ffn_fusion_mode::recompute, ffn_fusion_mode::off}) {
    const bool on = mode != ffn_fusion_mode::off;
    CAPTURE(int(mode));
    fusion_scope sc(mode);
    auto layout = std::make_shared<arena_layout>();
    sparse_plan plan{0.5};
    feed_forward<float, block_sparse<16>> f(*layout, "mlp", 32, 128, &plan);
    decltype(f)::cache c;
    layer_case lc{layout, 9, 32, 32};
    lc.init = [&](arena<float>& p) {
      f.fc().init(p, counter_rng(3), 0.4f);
      f.proj().init(p, counter_rng(4), 0.4f);
      counter_rng(5).fill_normal(p.at("mlp.c_fc.bias"), 0, 0.0f, 0.5f);
    };
    lc.forward = [&](auto& s, auto x, auto y) {
      f.forward(s, x, y, c);
      CHECK(c.fused == (on && f.fusable()));
    };
    lc.backward = [&](auto& s, auto dy, auto dx) { f.backward(s, dy, dx, c); };
    lc.options.max_checks = 400;
    lc.options.atol = 3e-4;
    auto r = check_layer(lc);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("fused block-sparse feed-forward: not on bf16 steps, RigL steps, or when switched off") {
  auto layout = std::make_shared<arena_layout>();
  sparse_plan plan{0.5};
  using ffn = feed_forward<float, block_sparse<16>>;
  ffn f(*layout, "mlp", 32, 128, &plan);
  const std::shared_ptr<const arena_layout> cl = layout;
  arena<float> params(cl), grads(cl);
  scratch tmp;
  step_context s{&params, &grads, &tmp};
  CHECK(f.fused(s) == f.fusable());
  s.need_dense_grad = true;
  CHECK_FALSE(f.fused(s));
  s.need_dense_grad = false;
  s.compute = dtype::bf16;
  CHECK_FALSE(f.fused(s));
  s.compute = dtype::f32;
  {
    fusion_scope off(ffn_fusion_mode::off);
    CHECK_FALSE(f.fused(s));
  }
  feed_forward<float, dense> d(*layout, "dense", 32, 128);
  CHECK_FALSE(d.fused(s));
}

TEST_CASE("sparse GPT: the fused feed-forward gives the unfused model's loss and gradients, with and without block recompute") {
  auto cfg = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"));
  cfg.n_embd = 32;  // 2 x 8 blocks of 16 in each feed-forward weight
  cfg.initializer_range = 0.2f;
  using model_t = gpt<float, block_sparse<16>>;
  const std::size_t B = 2, T = 12;
  std::vector<std::int32_t> ids(B * T), tg(B * T);  // tokens spread over the vocabulary
  for (std::size_t i = 0; i < B * T; ++i)
    ids[i] = std::int32_t((7 * i + 3) % cfg.vocab_size), tg[i] = std::int32_t((11 * i + 5) % cfg.vocab_size);
  token_batch batch{ids, tg, {}, B, T};
  auto run = [&]<class Recompute>(ffn_fusion_mode mode) {
    fusion_scope sc(mode);
    model_t m(cfg, sparse_plan{0.5});
    m.init(3);
    m.grads().zero();
    const double loss = m.template forward_backward<Recompute>({}, batch, 1.0f).loss_sum;
    return std::make_pair(loss, std::vector<float>(m.grads().all().begin(), m.grads().all().end()));
  };
  const auto plain = run.template operator()<recompute::none>(ffn_fusion_mode::off);
  for (ffn_fusion_mode mode : fused_modes)
    for (bool recompute_blocks : {false, true}) {
      CAPTURE(int(mode));
      CAPTURE(recompute_blocks);
      const auto fused = recompute_blocks ? run.template operator()<recompute::blocks>(mode)
                                          : run.template operator()<recompute::none>(mode);
      CHECK(fused.first == doctest::Approx(plain.first).epsilon(1e-6));
      check_same(fused.second, plain.second, 1e-5, "model gradients");
    }
}

}  // namespace SPARSELM_UNITY_ID
