// Block-sparse linear layer: finite-difference gradients for every block size, agreement with the
// dense layer on the densified weight, pooled RigL scores, the bf16 products, bad input; sparse GPT
// gradients and a pattern update inside training; block_sparse<runtime_block> against block_sparse<B>.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "sparselm/testing/layer_check.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/sparse/update.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using sparselm::testing::check_layer;
using sparselm::testing::layer_case;

static_assert(layer<linear<float, block_sparse<16>>>);

// n random token ids and targets below vocab (a fixed stream).
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> random_tokens(std::size_t n, std::size_t vocab) {
  std::vector<std::int32_t> ids(n), tg(n);
  counter_rng rng(8);
  for (std::size_t i = 0; i < n; ++i) {
    ids[i] = std::int32_t(rng.below(0, i, vocab));
    tg[i] = std::int32_t(rng.below(1, i, vocab));
  }
  return {ids, tg};
}

TEST_CASE_TEMPLATE("block-sparse linear: gradients by finite differences", S, block_sparse<1>, block_sparse<4>,
                   block_sparse<8>, block_sparse<16>) {
  constexpr std::size_t B = S::block;
  for (double sparsity : {0.0, 0.5, 0.75}) {
    CAPTURE(sparsity);
    auto layout = std::make_shared<arena_layout>();
    sparse_plan plan{sparsity};
    linear<float, S> l(*layout, "fc", 2 * B, 3 * B, true, &plan);
    typename linear<float, S>::cache c;
    layer_case lc{layout, 5, 2 * B, 3 * B};
    lc.init = [&](arena<float>& p) { l.init(p, counter_rng(3), 0.5f); };
    lc.forward = [&](auto& s, auto x, auto y) { l.forward(s, x, y, c); };
    lc.backward = [&](auto& s, auto dy, auto dx) { l.backward(s, dy, dx, c); };
    lc.options.max_checks = 300;
    auto r = check_layer(lc);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("block-sparse linear equals the dense layer on the densified weight; pooled scores") {
  constexpr std::size_t B = 4, in = 12, out = 16, N = 7;
  auto ls = std::make_shared<arena_layout>(), ld = std::make_shared<arena_layout>();
  sparse_plan plan{0.6};
  linear<float, block_sparse<B>> sp(*ls, "w", in, out, true, &plan);
  linear<float, dense> dn(*ld, "w", in, out, true);
  const std::shared_ptr<const arena_layout> cls = ls, cld = ld;
  arena<float> ps(cls), gs(cls), pd(cld), gd(cld);
  sp.init(ps, counter_rng(1), 0.3f);
  counter_rng(2).fill_normal(ps.at("w.bias"), 0, 0.0f, 1.0f);
  sp.to_dense(ps, pd.at("w.weight"));
  std::copy(ps.at("w.bias").begin(), ps.at("w.bias").end(), pd.at("w.bias").begin());
  CHECK(sp.nnz_blocks() == 5);  // ceil(0.4 · 12)
  std::vector<float> x(N * in), ys(N * out), yd(N * out), dy(N * out), dxs(N * in), dxd(N * in);
  counter_rng(4).fill_normal(x, 0, 0.0f, 1.0f);
  counter_rng(5).fill_normal(dy, 0, 0.0f, 1.0f);
  scratch tmp;
  step_context ss{&ps, &gs, &tmp}, sd{&pd, &gd, &tmp};
  ss.need_dense_grad = true;
  decltype(sp)::cache cs;
  decltype(dn)::cache cd;
  gs.zero();
  gd.zero();
  sp.forward(ss, {x.data(), N, in}, {ys.data(), N, out}, cs);
  dn.forward(sd, {x.data(), N, in}, {yd.data(), N, out}, cd);
  for (std::size_t i = 0; i < ys.size(); ++i) CHECK(ys[i] == doctest::Approx(yd[i]).epsilon(1e-5));
  sp.backward(ss, {dy.data(), N, out}, {dxs.data(), N, in}, cs);
  dn.backward(sd, {dy.data(), N, out}, {dxd.data(), N, in}, cd);
  for (std::size_t i = 0; i < dxs.size(); ++i) CHECK(dxs[i] == doctest::Approx(dxd[i]).epsilon(1e-5));
  // weight gradient at active blocks equals the dense gradient there; pooled = mean |dense grad|
  const auto& p = sp.state().pattern;
  auto gw = gs.at("w.weight");
  auto gdw = gd.at("w.weight");
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t r = 0; r < B; ++r)
      for (std::size_t c = 0; c < B; ++c)
        CHECK(gw[s * B * B + r * B + c] ==
              doctest::Approx(gdw[(p.row[s] * B + r) * out + p.col[s] * B + c]).epsilon(1e-5));
  const auto& pooled = sp.state().pooled;
  REQUIRE(pooled.size() == (in / B) * (out / B));
  for (std::size_t br = 0; br < in / B; ++br)
    for (std::size_t bc = 0; bc < out / B; ++bc) {
      double m = 0;
      for (std::size_t r = 0; r < B; ++r)
        for (std::size_t c = 0; c < B; ++c) m += std::fabs(gdw[(br * B + r) * out + bc * B + c]);
      CHECK(pooled[br * (out / B) + bc] == doctest::Approx(m / (B * B)).epsilon(1e-4));
    }
}

// bf16 compute where the CPU's bf16 dot products pay (kernels::bsr_bf16_pays(); the ctest
// layers.sparse_linear_bf16 forces them with SPARSELM_BF16_KERNEL=native) or, for B = 16, where the
// bf16 GEMM runs on AMX: each product equals the
// double product of the bf16-rounded operands (products of two bf16 values are exact in fp32; only
// the fp32 sums round: 1e-5 of the sum of |terms|) and differs from the fp32 layer's result, so the
// rounding happened. B = 1, and every B where they do not pay: the bf16 step is the fp32 step, bit
// for bit.
TEST_CASE_TEMPLATE("block-sparse linear under bf16 compute: the products of bf16-rounded operands", S,
                   block_sparse<1>, block_sparse<4>, block_sparse<8>, block_sparse<16>) {
  constexpr std::size_t B = S::block, in = 4 * B, out = 6 * B, N = 9;
  auto layout = std::make_shared<arena_layout>();
  sparse_plan plan{0.5};
  linear<float, S> l(*layout, "w", in, out, true, &plan);
  const std::shared_ptr<const arena_layout> cl = layout;
  arena<float> p(cl), g16(cl), g32(cl);
  l.init(p, counter_rng(11), 0.4f);
  counter_rng(12).fill_normal(p.at("w.bias"), 0, 0.0f, 1.0f);
  std::vector<float> x(N * in), dy(N * out), y16(N * out), y32(N * out), dx16(N * in), dx32(N * in), wd(in * out);
  counter_rng(13).fill_normal(x, 0, 0.0f, 1.0f);
  counter_rng(14).fill_normal(dy, 0, 0.0f, 1.0f);
  l.to_dense(p, wd);
  scratch tmp;
  step_context s16{&p, &g16, &tmp}, s32{&p, &g32, &tmp};
  s16.compute = dtype::bf16;
  typename linear<float, S>::cache c16, c32;
  g16.zero();
  g32.zero();
  l.forward(s16, {x.data(), N, in}, {y16.data(), N, out}, c16);
  l.forward(s32, {x.data(), N, in}, {y32.data(), N, out}, c32);
  l.backward(s16, {dy.data(), N, out}, {dx16.data(), N, in}, c16);
  l.backward(s32, {dy.data(), N, out}, {dx32.data(), N, in}, c32);
  // bf16 where the dot products pay or (B = 16) on AMX.
  const bool products = B > 1 && (kernels::bsr_bf16_pays() || (B == 16 && kernels::bsr_bf16_amx_chosen()));
  MESSAGE("bf16 block-sparse products ", std::string(products ? "used" : "not used (fp32 is faster here)"));
  if (!products) {
    CHECK(y16 == y32);
    CHECK(dx16 == dx32);
    CHECK(std::equal(g16.all().begin(), g16.all().end(), g32.all().begin()));
  } else {
    auto r = [](float v) { return double(to_float(bf16(v))); };
    const auto bias = p.at("w.bias");
    double diff = 0;  // largest |bf16 - fp32| of the forward
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t o = 0; o < out; ++o) {
        double ref = bias[o], mag = std::fabs(bias[o]);
        for (std::size_t i = 0; i < in; ++i) {
          ref += r(x[n * in + i]) * r(wd[i * out + o]);
          mag += std::fabs(r(x[n * in + i]) * r(wd[i * out + o]));
        }
        CHECK(std::fabs(y16[n * out + o] - ref) <= 1e-5 * mag + 1e-6);
        diff = std::max(diff, double(std::fabs(y16[n * out + o] - y32[n * out + o])));
      }
    CHECK(diff > 1e-4);
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t i = 0; i < in; ++i) {
        double ref = 0, mag = 0;
        for (std::size_t o = 0; o < out; ++o) {
          ref += r(dy[n * out + o]) * r(wd[i * out + o]);
          mag += std::fabs(r(dy[n * out + o]) * r(wd[i * out + o]));
        }
        CHECK(std::fabs(dx16[n * in + i] - ref) <= 1e-5 * mag + 1e-6);
      }
    const auto& pat = l.state().pattern;
    const auto gw = g16.at("w.weight");
    for (std::size_t k = 0; k < pat.nnz(); ++k)
      for (std::size_t a = 0; a < B; ++a)
        for (std::size_t b = 0; b < B; ++b) {
          const std::size_t i = pat.row[k] * B + a, o = pat.col[k] * B + b;
          double ref = 0, mag = 0;
          for (std::size_t n = 0; n < N; ++n) {
            ref += r(x[n * in + i]) * r(dy[n * out + o]);
            mag += std::fabs(r(x[n * in + i]) * r(dy[n * out + o]));
          }
          CHECK(std::fabs(gw[k * B * B + a * B + b] - ref) <= 1e-5 * mag + 1e-6);
        }
    // the bias gradient is the fp32 column sum under every precision
    CHECK(std::equal(g16.at("w.bias").begin(), g16.at("w.bias").end(), g32.at("w.bias").begin()));
  }
}

TEST_CASE("block-sparse linear: bad sizes and sparsity are errors naming the weight") {
  arena_layout layout;
  sparse_plan ok{0.5}, bad{1.0};
  using sl = linear<float, block_sparse<16>>;
  CHECK_THROWS_WITH_AS(sl(layout, "h.0.mlp.c_fc", 24, 32, true, &ok), doctest::Contains("h.0.mlp.c_fc"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(sl(layout, "h.1.attn.c_attn", 32, 32, true, &bad), doctest::Contains("h.1.attn.c_attn"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(sl(layout, "nop", 32, 32, true, nullptr), doctest::Contains("sparse_plan"), sparselm::error);
}

TEST_CASE("sparse GPT: whole-model gradients by finite differences; RigL updates during training keep it learning") {
  auto cfg = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"));
  cfg.initializer_range = 0.2f;
  using model_t = gpt<float, block_sparse<4>>;
  model_t m(cfg, sparse_plan{0.5});
  m.init(3);
  CHECK(m.sparse_weights().size() == 4 * cfg.n_layer);
  const std::size_t B = 2, T = 6;
  const auto [ids, tg] = random_tokens(B * T, cfg.vocab_size);
  token_batch batch{ids, tg, {}, B, T};
  m.grads().zero();
  m.forward_backward({}, batch, 1.0f);
  std::vector<float> x0(m.params().all().begin(), m.params().all().end());
  std::vector<float> g(m.grads().all().begin(), m.grads().all().end());
  auto f = [&](std::span<const float> v) {
    std::copy(v.begin(), v.end(), m.params().all().begin());
    return m.evaluate(batch).loss_sum;
  };
  sparselm::testing::gradcheck_options o;
  o.max_checks = 300;
  o.rtol = 2e-2;
  o.atol = 2e-4;
  auto r = sparselm::testing::gradcheck(f, x0, g, o);
  CHECK_MESSAGE(r.ok, r.message);
  std::copy(x0.begin(), x0.end(), m.params().all().begin());

  // Train with a RigL update every 5 steps: patterns change, nnz stays, loss goes down.
  trainer_options to;
  trainer<model_t> t(m, to, optim::adamw<>(json{{"weight_decay", 0.0}}),
                     optim::schedule(optim::constant_schedule(1e-2f)));
  sparse::pattern_updater up(sparse::update_config::from_json(
                                 json{{"prune_ratio", 0.3}, {"update_period", 5}, {"total_steps", 40}, {"regrow", "rigl"}}),
                             counter_rng(5));
  for (auto& w : m.sparse_weights()) up.track(w.name, *w.pattern);
  std::size_t updates = 0, changed = 0;
  t.set_hooks({[&](std::size_t step) { return up.needs_dense_gradient(step); },
               [&](std::size_t step) {
                 if (!up.is_update_step(step)) return;
                 auto before = m.sparse_weights()[0].pattern->row;
                 auto st = up.update(step, m.sparse_weights(), [&](std::size_t tensor, std::size_t off, std::size_t n) {
                   t.optimizer().reset_slots(tensor, off, n);
                 });
                 ++updates;
                 changed += before != m.sparse_weights()[0].pattern->row;
               }});
  std::vector<token_batch> micro{batch};
  const double first = t.train_step(micro).loss.mean_loss();
  double last = first;
  for (int i = 1; i < 40; ++i) last = t.train_step(micro).loss.mean_loss();
  CHECK(updates >= 5);
  CHECK(changed >= 1);
  for (auto& w : m.sparse_weights()) CHECK(w.pattern->nnz() == w.values.size() / 16);
  CHECK(last < 0.5 * first);
}

// block_sparse<runtime_block> (the programs' models, train/registry.hpp) takes B from the plan and
// calls the kernel instances of block_sparse<B>: the same numbers bit for bit, fp32 and bf16.
TEST_CASE_TEMPLATE("block-sparse linear: runtime_block gives block_sparse<B>'s results bit for bit", S,
                   block_sparse<1>, block_sparse<4>, block_sparse<8>, block_sparse<16>) {
  constexpr std::size_t B = S::block, in = 4 * B, out = 6 * B, N = 9;
  using rt = linear<float, block_sparse<runtime_block>>;
  auto lc = std::make_shared<arena_layout>(), lr = std::make_shared<arena_layout>();
  sparse_plan plan{.sparsity = 0.5, .block = B};
  linear<float, S> fixed(*lc, "w", in, out, true, &plan);
  rt run(*lr, "w", in, out, true, &plan);
  CHECK(run.block_size() == B);
  CHECK(run.nnz_blocks() == fixed.nnz_blocks());
  const std::shared_ptr<const arena_layout> clc = lc, clr = lr;
  arena<float> pc(clc), gc(clc), pr(clr), gr(clr);
  fixed.init(pc, counter_rng(11), 0.4f);
  run.init(pr, counter_rng(11), 0.4f);
  CHECK(fixed.state().pattern.col == run.state().pattern.col);
  CHECK(std::ranges::equal(pc.all(), pr.all()));
  std::vector<float> x(N * in), dy(N * out);
  counter_rng(13).fill_normal(x, 0, 0.0f, 1.0f);
  counter_rng(14).fill_normal(dy, 0, 0.0f, 1.0f);
  scratch tmp;
  for (dtype d : {dtype::f32, dtype::bf16}) {
    for (bool pooled : {false, true}) {
      CAPTURE(dtype_name(d));
      CAPTURE(pooled);
      step_context sc{&pc, &gc, &tmp}, sr{&pr, &gr, &tmp};
      sc.compute = sr.compute = d;
      sc.need_dense_grad = sr.need_dense_grad = pooled;
      CHECK(fixed.compact_input(sc) == run.compact_input(sr));
      typename linear<float, S>::cache cc;
      rt::cache cr;
      std::vector<float> yc(N * out), yr(N * out), dxc(N * in), dxr(N * in);
      gc.zero();
      gr.zero();
      fixed.forward(sc, {x.data(), N, in}, {yc.data(), N, out}, cc, input_keeper::layer);
      run.forward(sr, {x.data(), N, in}, {yr.data(), N, out}, cr, input_keeper::layer);
      fixed.backward(sc, {dy.data(), N, out}, {dxc.data(), N, in}, cc);
      run.backward(sr, {dy.data(), N, out}, {dxr.data(), N, in}, cr);
      CHECK(yc == yr);
      CHECK(dxc == dxr);
      CHECK(std::ranges::equal(gc.all(), gr.all()));
      if (pooled) CHECK(fixed.state().pooled == run.state().pooled);
    }
  }
}

TEST_CASE("block-sparse GPT: runtime_block gives block_sparse<B>'s model bit for bit (fused feed-forward included)") {
  auto cfg = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"));
  cfg.n_embd = 32;
  const std::size_t Bt = 2, T = 6;
  const auto [ids, tg] = random_tokens(Bt * T, cfg.vocab_size);
  token_batch batch{ids, tg, {}, Bt, T};
  auto step = [&](auto& m) {
    m.init(3);
    m.grads().zero();
    const double loss = m.forward_backward({}, batch, 1.0f).mean_loss();
    return std::tuple(loss, std::vector<float>(m.params().all().begin(), m.params().all().end()),
                      std::vector<float>(m.grads().all().begin(), m.grads().all().end()));
  };
  auto compare = [&]<std::size_t B>() {
    CAPTURE(B);
    const sparse_plan plan{.sparsity = 0.5, .block = B};
    gpt<float, block_sparse<B>> fixed(cfg, plan);
    gpt<float, block_sparse<runtime_block>> run(cfg, plan);
    CHECK(run.num_parameters() == fixed.num_parameters());
    const auto [lf, pf, gf] = step(fixed);
    const auto [lr, pr, gr] = step(run);
    CHECK(lf == lr);
    CHECK(pf == pr);
    CHECK(gf == gr);
  };
  compare.template operator()<4>();
  compare.template operator()<16>();
  // The block size must be one the kernels are written for; the error names the weight.
  CHECK_THROWS_WITH_AS((gpt<float, block_sparse<runtime_block>>(cfg, sparse_plan{.sparsity = 0.5, .block = 2})),
                       doctest::Contains("h.0.attn.c_attn"), sparselm::error);
  CHECK_THROWS_WITH_AS((gpt<float, block_sparse<runtime_block>>(cfg, sparse_plan{0.5})),
                       doctest::Contains("takes its block size from the sparse_plan"), sparselm::error);
  CHECK_THROWS_WITH_AS((gpt<float, block_sparse<4>>(cfg, sparse_plan{.sparsity = 0.5, .block = 8})),
                       doctest::Contains("with a sparse_plan for blocks of 8"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
