// Precision policies through the stack: the dense layers' GEMMs take the step's compute type
// (step_context::compute); the trainer sets it from its policy or its options; bf16 and fp16 runs
// train like fp32 within their rounding, really compute in the low precision, are deterministic;
// fp16 gets dynamic loss scaling; mismatched policy and options are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/scratch.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/layers/attention.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

gpt_config small() { return test::small_gpt_config(); }

// A fixed stream of 4 x 16 batches of a learnable sequence (next id = 5 * id + 3 mod 64, with noise).
struct stream {
  std::vector<std::vector<std::int32_t>> ids, targets;
  explicit stream(int n) {
    std::mt19937 g(7);
    for (int b = 0; b < n; ++b) {
      std::vector<std::int32_t> x, y;
      for (int r = 0; r < 4; ++r) {
        std::int32_t t = std::int32_t(g() % 64);
        for (int i = 0; i < 16; ++i) {
          x.push_back(t);
          t = g() % 8 == 0 ? std::int32_t(g() % 64) : (5 * t + 3) % 64;
          y.push_back(t);
        }
      }
      ids.push_back(x), targets.push_back(y);
    }
  }
  std::vector<token_batch> micro(int k) const { return {{ids[k], targets[k], {}, 4, 16}}; }
};

optim::schedule constant_lr() { return optim::make_schedule({{"type", "constant"}, {"lr", 3e-3}}); }

trainer_options with_precision(dtype d) {
  trainer_options o;
  o.precision = d;
  return o;
}

struct run {
  std::vector<double> losses;
  std::vector<float> params;
  std::vector<float> scales;
};

template <class Policies = default_policies, class Model = gpt<>>
run train(trainer_options o, int steps) {
  stream s(steps);
  Model m = [] {
    if constexpr (std::is_same_v<Model, gpt<>>) return Model(small());
    else return Model(small(), sparse_plan{0.5});
  }();
  m.init(11);
  trainer<Model, Policies> t(m, o, optim::adamw<>(), constant_lr());
  run r;
  for (int k = 0; k < steps; ++k) {
    const auto st = t.train_step(s.micro(k));
    r.losses.push_back(st.loss.mean_loss());
    r.scales.push_back(st.loss_scale);
  }
  r.params = test::param_snapshot(m);
  return r;
}

}  // namespace

TEST_CASE("precision: a linear layer multiplies in the step's compute type; W and dW stay fp32") {
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto layout = std::make_shared<arena_layout>();
  linear<> lin(*layout, "fc", 40, 24);
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> params(lay), grads(lay);
  lin.init(params, counter_rng(1), 0.5f);
  for (auto& b : params[lin.bias().index]) b = n(g);
  std::vector<float> x(30 * 40), dy(30 * 24);
  for (auto& v : x) v = n(g);
  for (auto& v : dy) v = n(g);
  scratch tmp;
  for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
    step_context s{&params, &grads, &tmp};
    s.compute = d;
    grads.zero();
    std::vector<float> y(30 * 24), dx(30 * 40);
    linear<>::cache c;
    lin.forward(s, {x.data(), 30, 40}, {y.data(), 30, 24}, c);
    lin.backward(s, {dy.data(), 30, 24}, {dx.data(), 30, 40}, c);
    // The same products through gemm_as directly.
    std::vector<float> y2(30 * 24), dx2(30 * 40), dw2(40 * 24, 0.0f);
    kernels::gemm_as(d, kernels::trans::n, kernels::trans::n, 1.0f, {x.data(), 30, 40}, params.matrix(lin.weight().index),
                     0.0f, {y2.data(), 30, 24}, params[lin.bias().index].data());
    kernels::gemm_as(d, kernels::trans::n, kernels::trans::t, 1.0f, {dy.data(), 30, 24}, params.matrix(lin.weight().index),
                     0.0f, {dx2.data(), 30, 40});
    kernels::gemm_as(d, kernels::trans::t, kernels::trans::n, 1.0f, {x.data(), 30, 40}, {dy.data(), 30, 24}, 1.0f,
                     {dw2.data(), 40, 24});
    INFO("compute ", precision::name(d));
    CHECK(y == y2);
    CHECK(dx == dx2);
    const auto dw = grads[lin.weight().index];
    CHECK(std::vector<float>(dw.begin(), dw.end()) == dw2);
    if (d != dtype::f32) {
      // Not the fp32 result: the operands were rounded.
      std::vector<float> y32(30 * 24);
      kernels::gemm(kernels::trans::n, kernels::trans::n, 1.0f, {x.data(), 30, 40}, params.matrix(lin.weight().index), 0.0f,
                    {y32.data(), 30, 24}, params[lin.bias().index].data());
      CHECK(y != y32);
    }
  }
}

// Dense attention, and static block-sparse attention (blocks of 2, half the far blocks kept).
TEST_CASE("precision: self-attention multiplies in the step's compute type (fp32 under fp16), keeps qkv in bf16") {
  const std::size_t B = 2, T = 9, C = 16, H = 2, D = 8, N = B * T;
  for (const bool sparse_attention : {false, true}) {
    CAPTURE(sparse_attention);
    std::mt19937 g(5);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::shared_ptr<const kernels::block_causal_pattern> pattern;
    if (sparse_attention)
      pattern = std::make_shared<kernels::block_causal_pattern>(
          kernels::block_causal_options{.block = 2, .density = 0.5, .seed = 3}, T);
    auto layout = std::make_shared<arena_layout>();
    self_attention<> att(*layout, "attn", C, H, D, true, true, 0.0f, 0, nullptr, pattern);
    auto lay = std::shared_ptr<const arena_layout>(layout);
    arena<float> params(lay), grads(lay);
    att.qkv().init(params, counter_rng(1), 0.5f);
    att.proj().init(params, counter_rng(2), 0.5f);
    std::vector<float> x(N * C), dy(N * C);
    for (auto& v : x) v = n(g);
    for (auto& v : dy) v = n(g);
    scratch tmp;
    const kernels::attention_shape shape{B, T, H, D};
    const float scale = 1.0f / std::sqrt(float(D));
    struct variant {
      dtype d;
      bool bf16_activations;
    };
    std::vector<float> y_wide, dx_wide;  // bf16 compute with fp32 activations
    for (const variant v : {variant{dtype::f32, true}, variant{dtype::bf16, false}, variant{dtype::bf16, true},
                            variant{dtype::f16, true}}) {
      INFO("compute ", precision::name(v.d), ", bf16 activations ", v.bf16_activations);
      step_context s{&params, &grads, &tmp};
      s.compute = v.d;
      s.bf16_activations = v.bf16_activations;
      s.batch = B;
      s.seq = T;
      grads.zero();
      std::vector<float> y(N * C), dx(N * C);
      self_attention<>::cache c;
      att.forward(s, {x.data(), N, C}, {y.data(), N, C}, c);
      att.backward(s, {dy.data(), N, C}, {dx.data(), N, C}, c);
      // qkv and the heads' output are kept in bf16 exactly under bf16 compute with bf16 activations
      const bool compact = v.d == dtype::bf16 && v.bf16_activations;
      CHECK(c.in_bf16 == compact);
      std::vector<float> qkv(N * 3 * H * D);
      if (compact)
        for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(c.qkv16.get(qkv.size())[i]);
      else
        std::copy_n(c.qkv.get(qkv.size()).data(), qkv.size(), qkv.data());
      // The layer's own QKV through the kernels with the compute type the layer should pass (bf16
      // for bf16, fp32 otherwise), then the output projection.
      const dtype expect = v.d == dtype::bf16 ? dtype::bf16 : dtype::f32;
      auto core = [&](dtype k, bool use_pattern = true) {
        std::vector<float> a(N * H * D), lse(B * H * T), y2(N * C);
        if (pattern && use_pattern)
          kernels::block_sparse_attention_forward({qkv.data(), N, 3 * H * D}, {a.data(), N, H * D}, lse, shape,
                                                  *pattern, scale, {}, {}, k);
        else
          kernels::attention_forward({qkv.data(), N, 3 * H * D}, {a.data(), N, H * D}, lse, shape,
                                     kernels::attention_mask::causal, scale, {}, {}, k);
        kernels::gemm_as(v.d, kernels::trans::n, kernels::trans::n, 1.0f, {a.data(), N, H * D},
                         params.matrix(att.proj().weight().index), 0.0f, {y2.data(), N, C},
                         params[att.proj().bias().index].data());
        return y2;
      };
      CHECK(y == core(expect));
      if (pattern) CHECK(y != core(expect, false));  // the pattern is honoured
      if (v.d == dtype::bf16) CHECK(y != core(dtype::f32));
      double norm = 0;
      for (float e : dx) norm += double(e) * e;
      CHECK(std::isfinite(norm));
      CHECK(norm > 0);
      if (v.d == dtype::bf16 && !v.bf16_activations) y_wide = y, dx_wide = dx;
      if (compact) {
        // The same output as with fp32 activations (the products round qkv and the output anyway);
        // the input gradient differs only through δ = dO·O seeing the rounded output (relative L2
        // distance, as for the blocks in test_layers.cpp).
        CHECK(y == y_wide);
        double num = 0, den = 0;
        for (std::size_t i = 0; i < dx.size(); ++i) {
          num += double(dx[i] - dx_wide[i]) * double(dx[i] - dx_wide[i]);
          den += double(dx_wide[i]) * double(dx_wide[i]);
        }
        CHECK(num > 0);
        CHECK(std::sqrt(num / den) < 1e-2);
      }
    }
  }
}

TEST_CASE("precision: input_keeper::layer keeps the layer's own copy of x (bf16 under bf16 compute), same results") {
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto layout = std::make_shared<arena_layout>();
  linear<> lin(*layout, "fc", 40, 24);
  linear<float, block_sparse<4>> sparse_lin(*layout, "sp", 40, 24, true, [] {
    static const sparse_plan plan{0.5};
    return &plan;
  }());
  auto lay = std::shared_ptr<const arena_layout>(layout);
  arena<float> params(lay), grads(lay);
  lin.init(params, counter_rng(1), 0.5f);
  sparse_lin.init(params, counter_rng(2), 0.5f);
  std::vector<float> x(30 * 40), dy(30 * 24);
  for (auto& v : x) v = n(g);
  for (auto& v : dy) v = n(g);
  scratch tmp;
  struct result {
    std::vector<float> y, dx, dw;
  };
  // One forward and backward; with the layer keeping x, x is overwritten in between.
  auto run_layer = [&](const auto& l, step_context s, input_keeper keeper, auto& c) {
    grads.zero();
    std::vector<float> xin = x, y(30 * 24), dx(30 * 40);
    l.forward(s, {xin.data(), 30, 40}, {y.data(), 30, 24}, c, keeper);
    if (keeper == input_keeper::layer) std::fill(xin.begin(), xin.end(), std::numeric_limits<float>::quiet_NaN());
    l.backward(s, {dy.data(), 30, 24}, {dx.data(), 30, 40}, c);
    const auto dw = grads[l.weight().index];
    return result{y, dx, std::vector<float>(dw.begin(), dw.end())};
  };
  for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
    INFO("compute ", precision::name(d));
    step_context s{&params, &grads, &tmp};
    s.compute = d;
    linear<>::cache kept, own;
    const result a = run_layer(lin, s, input_keeper::caller, kept);
    const result b = run_layer(lin, s, input_keeper::layer, own);
    CHECK(a.y == b.y);
    CHECK(a.dx == b.dx);
    CHECK(a.dw == b.dw);
    // The copy is bf16 exactly where the GEMMs round x to bf16.
    CHECK(linear<>::compact_input(s) == (d == dtype::bf16));
    CHECK(own.own16.capacity() == (d == dtype::bf16 ? 30u * 40u : 0u));
    CHECK(own.own.capacity() == (d == dtype::bf16 ? 0u : 30u * 40u));
    CHECK(kept.own.capacity() + kept.own16.capacity() == 0);
    // A sparse layer keeps a bf16 copy where its products are the bf16 ones (which round x anyway),
    // an fp32 copy elsewhere; the same results either way.
    using sparse_type = decltype(sparse_lin);
    const bool sparse16 = d == dtype::bf16 && kernels::bsr_bf16_pays();
    CHECK(sparse_lin.compact_input(s) == sparse16);
    sparse_type::cache skept, sown;
    const result sa = run_layer(sparse_lin, s, input_keeper::caller, skept);
    const result sb = run_layer(sparse_lin, s, input_keeper::layer, sown);
    CHECK(sa.y == sb.y);
    CHECK(sa.dx == sb.dx);
    CHECK(sa.dw == sb.dw);
    CHECK(sown.own.capacity() == (sparse16 ? 0u : 30u * 40u));
    CHECK(sown.own16.capacity() == (sparse16 ? 30u * 40u : 0u));
    {
      // A step that pools the dense gradient (RigL scores read x in fp32) keeps fp32.
      step_context sd = s;
      sd.need_dense_grad = true;
      CHECK_FALSE(sparse_lin.compact_input(sd));
      sparse_type::cache cd;
      const result e = run_layer(sparse_lin, sd, input_keeper::layer, cd);
      CHECK(e.y == sa.y);
      CHECK(e.dw == sa.dw);
      CHECK(cd.own.capacity() == 30u * 40u);
      // and a bf16 input is refused on such a step, naming the layer.
      std::vector<bf16> x16(x.size());
      std::vector<float> y(30 * 24);
      CHECK_THROWS_WITH_AS(sparse_lin.forward(sd, const_matrix_view<bf16>(x16.data(), 30, 40), {y.data(), 30, 24}, cd),
                           doctest::Contains("'sp.weight'"), sparselm::error);
    }
    if (sparse16) {
      // A bf16 input multiplies like the float input rounded in the products.
      std::vector<bf16> x16(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) x16[i] = bf16(x[i]);
      grads.zero();
      std::vector<float> y(30 * 24), dx(30 * 40);
      sparse_type::cache c16;
      sparse_lin.forward(s, const_matrix_view<bf16>(x16.data(), 30, 40), {y.data(), 30, 24}, c16);
      sparse_lin.backward(s, {dy.data(), 30, 24}, {dx.data(), 30, 40}, c16);
      CHECK(y == sa.y);
      CHECK(dx == sa.dx);
      const auto dw = grads[sparse_lin.weight().index];
      CHECK(std::vector<float>(dw.begin(), dw.end()) == sa.dw);
    }
    if (d == dtype::bf16) {
      // bf16_activations off: an fp32 copy, the same products.
      step_context s32 = s;
      s32.bf16_activations = false;
      linear<>::cache c;
      const result e = run_layer(lin, s32, input_keeper::layer, c);
      CHECK(e.y == a.y);
      CHECK(e.dw == a.dw);
      CHECK(c.own16.capacity() == 0);
      // A bf16 input multiplies like the float input rounded in the GEMM.
      std::vector<bf16> x16(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) x16[i] = bf16(x[i]);
      grads.zero();
      std::vector<float> y(30 * 24), dx(30 * 40);
      linear<>::cache c16;
      lin.forward(s, const_matrix_view<bf16>(x16.data(), 30, 40), {y.data(), 30, 24}, c16);
      lin.backward(s, {dy.data(), 30, 24}, {dx.data(), 30, 40}, c16);
      CHECK(y == a.y);
      CHECK(dx == a.dx);
      const auto dw = grads[lin.weight().index];
      CHECK(std::vector<float>(dw.begin(), dw.end()) == a.dw);
    } else {
      // ... and is refused under another compute type, naming it.
      std::vector<bf16> x16(x.size());
      std::vector<float> y(30 * 24);
      linear<>::cache c16;
      CHECK_THROWS_WITH_AS(lin.forward(s, const_matrix_view<bf16>(x16.data(), 30, 40), {y.data(), 30, 24}, c16),
                           doctest::Contains("a bf16 input needs bf16 compute"), sparselm::error);
    }
  }
}

// One bf16 forward and backward of model m with its activations in bf16 and in fp32: the forward
// multiplies the same bf16 values either way (the loss is bit for bit the same); backward differs
// only where gelu' reads the bf16 pre-activation (relative step 2^-8), when `compact` says the model
// keeps it; deterministic.
template <class Model>
void check_bf16_activations(Model& m, bool compact) {
  m.init(3);
  stream data(1);
  const auto batch = data.micro(0).front();
  auto run_pass = [&](bool bf16_activations) {
    step_context ctx;
    ctx.compute = dtype::bf16;
    ctx.training = true;
    ctx.bf16_activations = bf16_activations;
    m.grads().zero();
    std::pair<double, std::vector<float>> r;
    r.first = m.forward_backward(ctx, batch, 1.0f).mean_loss();
    const auto& g = m.grads();
    for (std::size_t i = 0; i < g.layout().count(); ++i) r.second.insert(r.second.end(), g[i].begin(), g[i].end());
    return r;
  };
  const auto c16 = run_pass(true), c32 = run_pass(false);
  CHECK(c16.first == c32.first);
  REQUIRE(c16.second.size() == c32.second.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < c32.second.size(); ++i) {
    num += double(c16.second[i] - c32.second[i]) * double(c16.second[i] - c32.second[i]);
    den += double(c32.second[i]) * double(c32.second[i]);
  }
  CHECK(den > 0);
  CHECK(std::sqrt(num / den) < 1e-2);
  CHECK((c16.second != c32.second) == compact);  // gelu' really saw the bf16 pre-activation
  CHECK(run_pass(true).second == c16.second);    // deterministic
}

TEST_CASE("precision: under bf16 a GPT keeps its activations in bf16: the same loss, gradients within gelu' rounding") {
  gpt<> m(small());
  check_bf16_activations(m, true);
  // The trainer passes its option on: fp32 activations train like the pre-bf16-activation code.
  trainer_options wide_opts = with_precision(dtype::bf16);
  wide_opts.bf16_activations = false;
  const run a = train(with_precision(dtype::bf16), 3), b = train(wide_opts, 3);
  CHECK(a.losses.front() == b.losses.front());
  CHECK(a.params != b.params);
  for (std::size_t k = 0; k < a.losses.size(); ++k) CHECK(a.losses[k] == doctest::Approx(b.losses[k]).epsilon(1e-3));
}

TEST_CASE("precision: bf16 and fp16 training follow the fp32 run within their rounding, deterministically") {
  constexpr int steps = 30;
  const run f32 = train(with_precision(dtype::f32), steps);
  const run b16 = train(with_precision(dtype::bf16), steps);
  const run h16 = train(with_precision(dtype::f16), steps);
  // The model learns: the last losses are well below the first.
  CHECK(f32.losses.back() < f32.losses.front() - 1.0);
  for (int k = 0; k < steps; ++k) {
    INFO("step ", k + 1);
    // bf16 keeps 8 significant bits: the per-step losses stay within 2 % of fp32's on this model;
    // fp16 keeps 11.
    CHECK(std::abs(b16.losses[std::size_t(k)] - f32.losses[std::size_t(k)]) <= 0.02 * f32.losses[std::size_t(k)]);
    CHECK(std::abs(h16.losses[std::size_t(k)] - f32.losses[std::size_t(k)]) <= 0.005 * f32.losses[std::size_t(k)]);
  }
  CHECK(b16.params != f32.params);  // the compute really changed
  CHECK(h16.params != f32.params);
  CHECK(train(with_precision(dtype::bf16), steps).params == b16.params);  // deterministic
  // fp16 runs with dynamic loss scaling from 2^16; fp32 and bf16 without.
  CHECK(h16.scales.front() == 65536.0f);
  CHECK(f32.scales.front() == 1.0f);
  CHECK(b16.scales.front() == 1.0f);
}

TEST_CASE("precision: under bf16 a block-sparse GPT keeps its activations in bf16 where its products are bf16") {
  // Where the bf16 products run, gelu' sees the bf16 pre-activation (the MLP keeps h in bf16); where
  // they do not (no AVX512-BF16, or slower than the FMAs), nothing changes.
  gpt<float, block_sparse<16>> m(small(), sparse_plan{0.5});
  check_bf16_activations(m, kernels::bsr_bf16_pays());
}

TEST_CASE("precision: a block-sparse GPT (B = 16) trains in bf16 like fp32, deterministically") {
  using sparse_gpt = gpt<float, block_sparse<16>>;
  constexpr int steps = 30;
  const run f32 = train<default_policies, sparse_gpt>(with_precision(dtype::f32), steps);
  const run b16 = train<default_policies, sparse_gpt>(with_precision(dtype::bf16), steps);
  CHECK(f32.losses.back() < f32.losses.front() - 1.0);
  for (int k = 0; k < steps; ++k) {
    INFO("step ", k + 1);
    CHECK(std::abs(b16.losses[std::size_t(k)] - f32.losses[std::size_t(k)]) <= 0.02 * f32.losses[std::size_t(k)]);
  }
  CHECK(b16.params != f32.params);
  CHECK(train<default_policies, sparse_gpt>(with_precision(dtype::bf16), steps).params == b16.params);
}

TEST_CASE("precision: the options choose the compute type (fp32 when unset); fp16 scales the loss") {
  gpt<> m(small());
  m.init(1);
  trainer<gpt<>> t(m, with_precision(dtype::bf16), optim::adamw<>(), constant_lr());
  CHECK(t.compute() == dtype::bf16);
  CHECK_FALSE(t.scaler().is_dynamic());
  trainer<gpt<>> d(m, {}, optim::adamw<>(), constant_lr());
  CHECK(d.compute() == dtype::f32);
  // The options' type acts: bf16 products change the trained weights, the same options repeat them.
  const run b16 = train(with_precision(dtype::bf16), 3);
  CHECK(b16.params != train({}, 3).params);
  CHECK(b16.params == train(with_precision(dtype::bf16), 3).params);
  // fp16 turns on dynamic loss scaling from 2^16 when the options leave it off ...
  trainer<gpt<>> f(m, with_precision(dtype::f16), optim::adamw<>(), constant_lr());
  CHECK(f.compute() == dtype::f16);
  CHECK(f.scaler().is_dynamic());
  CHECK(f.scaler().scale() == 65536.0f);
  // ... and keeps a configured static scale.
  trainer_options o = with_precision(dtype::f16);
  o.loss_scaling = optim::loss_scale_config(json(1024));
  trainer<gpt<>> h(m, o, optim::adamw<>(), constant_lr());
  CHECK_FALSE(h.scaler().is_dynamic());
  CHECK(h.scaler().scale() == 1024.0f);
}

TEST_CASE("precision: the trainer config's 'precision' field") {
  CHECK(trainer_options::from_json(json{{"precision", "bf16"}}).precision == dtype::bf16);
  CHECK(trainer_options::from_json(json{{"precision", "fp16"}}).precision == dtype::f16);
  CHECK_FALSE(trainer_options::from_json(json::object()).precision.has_value());
  CHECK(trainer_options::from_json(json::object()).bf16_activations);
  CHECK_FALSE(trainer_options::from_json(json{{"precision", "bf16"}, {"bf16_activations", false}}).bf16_activations);
  CHECK_THROWS_WITH_AS((void)trainer_options::from_json(json{{"bf16_activations", "no"}}),
                       doctest::Contains("bf16_activations"), sparselm::error);
  try {
    (void)trainer_options::from_json(json{{"precision", "fp8"}});
    FAIL("no error");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("precision") != std::string::npos);
    CHECK(std::string(e.what()).find("fp8") != std::string::npos);
  }
}

TEST_CASE("precision: a training state saved under one precision resumes under another") {
  const auto dir = test::fresh_dir("train", "precision_resume");
  stream s(6);
  gpt<> m(small());
  m.init(2);
  {
    trainer<gpt<>> t(m, with_precision(dtype::bf16), optim::adamw<>(), constant_lr());
    for (int k = 0; k < 3; ++k) t.train_step(s.micro(k));
    io::save_training_state(dir / "bf16.safetensors", t, json::object());
  }
  // bf16 -> fp16: the fp16 run keeps its own initial dynamic scale (the bf16 run had none).
  trainer<gpt<>> h(m, with_precision(dtype::f16), optim::adamw<>(), constant_lr());
  io::load_training_state(dir / "bf16.safetensors", h);
  CHECK(h.step() == 3);
  CHECK(h.scaler().scale() == 65536.0f);
  const auto st = h.train_step(s.micro(3));
  CHECK(st.step == 4);
  CHECK(std::isfinite(st.loss.mean_loss()));
  io::save_training_state(dir / "fp16.safetensors", h, json::object());
  // fp16 -> fp32: the dynamic scale is not carried into a run without scaling.
  trainer<gpt<>> f(m, with_precision(dtype::f32), optim::adamw<>(), constant_lr());
  io::load_training_state(dir / "fp16.safetensors", f);
  CHECK(f.step() == 4);
  CHECK(f.scaler().scale() == 1.0f);
  CHECK(f.train_step(s.micro(4)).loss_scale == 1.0f);
  // fp16 -> fp16: the dynamic scale and its counters are restored.
  trainer<gpt<>> h2(m, with_precision(dtype::f16), optim::adamw<>(), constant_lr());
  io::load_training_state(dir / "fp16.safetensors", h2);
  CHECK(h2.scaler().state() == h.scaler().state());
}

}  // namespace SPARSELM_UNITY_ID
