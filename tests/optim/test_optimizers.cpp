// Adam, AdamW, SGD and LAMB against naive scalar references (double precision), plus slots,
// checkpoint state, thread-count determinism, slot dtypes and config errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sparselm/core/threads.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
#include "test_helpers.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace optim_test;
using nlohmann::json;
using vvd = std::vector<std::vector<double>>;

namespace {

bool has(unsigned flags, unsigned f) { return (flags & f) != 0; }

// ---- naive references -----------------------------------------------------------------------

// Adam moments, shared by the Adam(W) and LAMB references.
struct moments_ref {
  double b1, b2, eps, wd;
  bool bc;
  std::size_t t = 0;
  vvd m, v;
  moments_ref(const arena_layout& l, double b1_, double b2_, double eps_, double wd_, bool bc_)
      : b1(b1_), b2(b2_), eps(eps_), wd(wd_), bc(bc_), m(zeros_like(l)), v(zeros_like(l)) {}

  // Updates one element's moments with gradient g; returns m̂ / (sqrt(v̂) + ε) at step t.
  double adam_direction(double& mj, double& vj, double g) const {
    mj = b1 * mj + (1 - b1) * g;
    vj = b2 * vj + (1 - b2) * g * g;
    double mh = bc ? mj / (1 - std::pow(b1, double(t))) : mj;
    double vh = bc ? vj / (1 - std::pow(b2, double(t))) : vj;
    return mh / (std::sqrt(vh) + eps);
  }
  std::vector<std::pair<std::string, vvd*>> slots() { return {{"m", &m}, {"v", &v}}; }
};

struct adam_ref : moments_ref {
  using moments_ref::moments_ref;

  void step(vvd& w, const arena<float>& g, double lr, double gs) {
    ++t;
    const auto& l = g.layout();
    for (std::size_t i = 0; i < l.count(); ++i) {
      if (has(l[i].flags, param_frozen)) continue;
      double decay = has(l[i].flags, param_no_decay) ? 0.0 : wd;
      for (std::size_t j = 0; j < l[i].size; ++j) {
        w[i][j] -= lr * (adam_direction(m[i][j], v[i][j], double(g[i][j]) * gs) + decay * w[i][j]);
      }
    }
  }
};

struct lamb_ref : moments_ref {
  std::vector<double> ratio;
  lamb_ref(const arena_layout& l, double b1_, double b2_, double eps_, double wd_, bool bc_)
      : moments_ref(l, b1_, b2_, eps_, wd_, bc_), ratio(l.count(), 1.0) {}

  void step(vvd& w, const arena<float>& g, double lr, double gs) {
    ++t;
    const auto& l = g.layout();
    for (std::size_t i = 0; i < l.count(); ++i) {
      if (has(l[i].flags, param_frozen)) continue;
      double decay = has(l[i].flags, param_no_decay) ? 0.0 : wd;
      std::vector<double> u(l[i].size);
      double nw = 0, nu = 0;
      for (std::size_t j = 0; j < l[i].size; ++j) {
        u[j] = adam_direction(m[i][j], v[i][j], double(g[i][j]) * gs) + decay * w[i][j];
        nw += w[i][j] * w[i][j];
        nu += u[j] * u[j];
      }
      nw = std::sqrt(nw);
      nu = std::sqrt(nu);
      ratio[i] = (!has(l[i].flags, param_no_trust) && nw > 0 && nu > 0) ? nw / nu : 1.0;
      for (std::size_t j = 0; j < l[i].size; ++j) w[i][j] -= lr * ratio[i] * u[j];
    }
  }
};

struct sgd_ref {
  double mu, wd;
  bool nesterov;
  vvd b;
  sgd_ref(const arena_layout& l, double mu_, bool nesterov_, double wd_)
      : mu(mu_), wd(wd_), nesterov(nesterov_), b(zeros_like(l)) {}

  void step(vvd& w, const arena<float>& g, double lr, double gs) {
    const auto& l = g.layout();
    for (std::size_t i = 0; i < l.count(); ++i) {
      if (has(l[i].flags, param_frozen)) continue;
      double decay = has(l[i].flags, param_no_decay) ? 0.0 : wd;
      for (std::size_t j = 0; j < l[i].size; ++j) {
        double d = double(g[i][j]) * gs + decay * w[i][j];
        if (mu == 0) {
          w[i][j] -= lr * d;
          continue;
        }
        b[i][j] = mu * b[i][j] + d;
        w[i][j] -= lr * (nesterov ? d + mu * b[i][j] : b[i][j]);
      }
    }
  }
  std::vector<std::pair<std::string, vvd*>> slots() {
    if (mu == 0) return {};
    return {{"momentum", &b}};
  }
};

float lr_at(std::size_t t) { return 0.01f * (1.0f + 0.25f * float(t)); }

// Runs `steps` updates of opt and ref on the same gradients (hook(t) runs after step t) and
// compares params and slots; frozen tensors must be untouched.
template <class Opt, class Ref>
void compare_run(Opt& opt, Ref& ref, std::size_t steps, double rtol, float grad_scale = 1.0f,
                 const std::function<void(std::size_t, model&, vvd&)>& hook = {}) {
  model md;
  opt.attach(md.layout);
  vvd w = to_double(md.params);
  arena<float> w0 = md.params.clone();
  for (std::size_t t = 1; t <= steps; ++t) {
    md.fill_grads(t);
    opt.step(md.params, md.grads, lr_at(t), grad_scale);
    ref.step(w, md.grads, lr_at(t), grad_scale);
    if (hook) hook(t, md, w);
  }
  CHECK(opt.step_count() == steps);
  const auto& l = *md.layout;
  auto st = opt.state();
  CHECK(st.step == steps);
  CHECK(st.slots.size() == ref.slots().size());
  for (std::size_t i = 0; i < l.count(); ++i) {
    if (has(l[i].flags, param_frozen)) {
      for (std::size_t j = 0; j < l[i].size; ++j) CHECK(md.params[i][j] == w0[i][j]);
      for (auto& s : st.slots)
        for (auto x : (*s.slots)[i]) CHECK(to_float(x) == 0.0f);
      continue;
    }
    check_close<float>(md.params[i], w[i], rtol, "param " + l[i].name);
    for (auto& [name, r] : ref.slots())
      check_close<typename Opt::slot_type>(st.slot(name)[i], (*r)[i], rtol, "slot " + name + " of " + l[i].name);
  }
}

}  // namespace

TEST_CASE("adamw matches the naive reference (decay exclusions, frozen tensors, bias correction)") {
  for (bool bc : {true, false}) {
    CAPTURE(bc);
    optim::adamw_config c;
    c.bias_correction = bc;
    c.weight_decay = 0.1;
    optim::adamw<> opt(c);
    adam_ref ref(model().params.layout(), 0.9, 0.999, 1e-6, 0.1, bc);
    compare_run(opt, ref, 6, 1e-5);
  }
}

TEST_CASE("adam (S1 defaults: eps 1e-2, no decay) matches the naive reference, with a gradient scale") {
  optim::adam<> opt;
  CHECK(opt.config().eps == doctest::Approx(1e-2));
  adam_ref ref(model().params.layout(), 0.9, 0.999, 1e-2, 0.0, true);
  compare_run(opt, ref, 5, 1e-5, 0.25f);
}

TEST_CASE("sgd matches the naive reference: plain, momentum, nesterov, weight decay") {
  struct variant {
    float mu;
    bool nesterov;
    float wd;
  };
  for (variant v : {variant{0.0f, false, 0.0f}, variant{0.9f, false, 0.0f}, variant{0.9f, true, 0.01f},
                    variant{0.5f, false, 0.1f}}) {
    CAPTURE(v.mu);
    CAPTURE(v.nesterov);
    CAPTURE(v.wd);
    optim::sgd_config c;
    c.momentum = v.mu;
    c.nesterov = v.nesterov;
    c.weight_decay = v.wd;
    optim::sgd<> opt(c);
    sgd_ref ref(model().params.layout(), v.mu, v.nesterov, v.wd);
    compare_run(opt, ref, 5, 1e-5, 2.0f);
  }
}

TEST_CASE("lamb matches the naive reference (trust ratio, no-trust and zero-norm tensors)") {
  for (bool bc : {true, false}) {
    CAPTURE(bc);
    optim::lamb_config c;
    c.bias_correction = bc;
    optim::lamb<> opt(c);
    lamb_ref ref(model().params.layout(), 0.9, 0.999, 1e-6, 0.01, bc);
    compare_run(opt, ref, 5, 1e-5);
    const auto& l = opt.layout();
    for (std::size_t i = 0; i < l.count(); ++i) {
      CAPTURE(l[i].name);
      CHECK(opt.trust_ratios()[i] == doctest::Approx(ref.ratio[i]).epsilon(1e-5));
    }
    // the tensor that started at zero gets ratio 1 on the first step only; no-trust tensors always 1
    CHECK(opt.trust_ratios()[l.at("h.0.b")] == 1.0f);
    CHECK(opt.trust_ratios()[l.at("frozen.w")] == 1.0f);
  }
}

TEST_CASE("reset_slots zeroes exactly the range, and the range then trains like fresh slots") {
  // The range crosses the boundary between two work segments of tensor "big".
  const std::size_t off = 16380, count = 100;
  optim::adamw<> opt;
  adam_ref ref(model().params.layout(), 0.9, 0.999, 1e-6, 0.01, true);
  compare_run(opt, ref, 4, 1e-5, 1.0f, [&](std::size_t t, model& md, vvd&) {
    if (t != 2) return;
    auto st = opt.state();
    auto before_m = st.slot("m").clone();
    opt.reset_slots(md.big, off, count);
    for (std::size_t i = 0; i < md.layout->count(); ++i) {
      auto now = st.slot("m")[i];
      auto old = before_m[i];
      for (std::size_t j = 0; j < now.size(); ++j) {
        bool in = i == md.big && j >= off && j < off + count;
        if (in)
          CHECK(now[j] == 0.0f);
        else
          CHECK(now[j] == old[j]);
      }
      for (std::size_t j = 0; j < now.size(); ++j)
        if (i == md.big && j >= off && j < off + count) CHECK(st.slot("v")[i][j] == 0.0f);
    }
    for (std::size_t j = off; j < off + count; ++j) ref.m[md.big][j] = ref.v[md.big][j] = 0.0;
  });
}

TEST_CASE("reset_slots and state need attach; bad ranges name the tensor") {
  optim::adamw<> opt;
  CHECK_THROWS_WITH_AS(opt.reset_slots(0, 0, 1), doctest::Contains("adamw: reset_slots() before attach()"), error);
  CHECK_THROWS_WITH_AS(opt.state(), doctest::Contains("before attach()"), error);
  model md;
  CHECK_THROWS_WITH_AS(opt.step(md.params, md.grads, 0.1f), doctest::Contains("step() before attach()"), error);
  opt.attach(md.layout);
  CHECK_THROWS_WITH_AS(opt.reset_slots(md.w, 700, 4), doctest::Contains("outside tensor 'h.0.w' of 703 elements"),
                       error);
  CHECK_THROWS_WITH_AS(opt.reset_slots(99, 0, 1), doctest::Contains("tensor index 99 out of range"), error);
  opt.reset_slots(md.w, 700, 3);  // the last three elements: fine

  model other;  // same names and shapes: accepted
  opt.step(other.params, other.grads, 0.1f);
  auto l2 = std::make_shared<arena_layout>();
  l2->add("x", {3});
  arena<float> p2(l2), g2(l2);
  CHECK_THROWS_WITH_AS(opt.step(p2, md.grads, 0.1f), doctest::Contains("params do not follow the attached layout"),
                       error);
  CHECK_THROWS_WITH_AS(opt.step(md.params, g2, 0.1f), doctest::Contains("grads do not follow the attached layout"),
                       error);
  CHECK_THROWS_WITH_AS(opt.step(md.params, md.grads, NAN), doctest::Contains("learning rate must be finite"), error);
}

TEST_CASE_TEMPLATE("state and restore resume bit-exactly", Opt, optim::adamw<>, optim::lamb<bf16>, optim::sgd<half>) {
  model a, b;
  Opt oa, ob;
  oa.attach(a.layout);
  for (std::size_t t = 1; t <= 3; ++t) {
    a.fill_grads(t);
    oa.step(a.params, a.grads, lr_at(t));
  }
  // a "checkpoint": copies of the slot arenas and the params
  auto sa = oa.state();
  std::vector<arena<typename Opt::slot_type>> saved;
  for (auto& s : sa.slots) saved.push_back(s.slots->clone());
  optim::optimizer_state<typename Opt::slot_type> ckpt;
  for (std::size_t k = 0; k < saved.size(); ++k) ckpt.slots.push_back({sa.slots[k].name, &saved[k]});
  ckpt.step = sa.step;
  b.params = a.params.clone();

  SUBCASE("restore from separate arenas") {
    ob.attach(b.layout);
    ob.restore(ckpt);
  }
  SUBCASE("load in place through state()") {
    ob.attach(b.layout);
    auto st = ob.state();
    for (std::size_t k = 0; k < st.slots.size(); ++k) {
      auto src = ckpt.slot(st.slots[k].name).all();
      std::copy(src.begin(), src.end(), st.slots[k].slots->all().begin());
    }
    st.step = ckpt.step;
    ob.restore(st);
  }
  CHECK(ob.step_count() == 3);
  for (std::size_t t = 4; t <= 5; ++t) {
    a.fill_grads(t);
    b.fill_grads(t);
    oa.step(a.params, a.grads, lr_at(t));
    ob.step(b.params, b.grads, lr_at(t));
  }
  CHECK(bitwise_equal(a.params, b.params));

  optim::optimizer_state<typename Opt::slot_type> bad = ckpt;
  bad.slots.pop_back();
  CHECK_THROWS_WITH_AS(ob.restore(bad), doctest::Contains("the state has no slot"), error);
  CHECK_THROWS_WITH_AS(ckpt.slot("nope"), doctest::Contains("no slot named 'nope'"), error);
}

TEST_CASE_TEMPLATE("offloaded slots (in files) update bit for bit as slots in memory, sharded too", Opt, optim::adamw<>,
                   optim::lamb<bf16>, optim::sgd<half>, optim::adam<>) {
  const auto dir = std::filesystem::temp_directory_path() / ("sparselm-offload-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const bool sharded : {false, true}) {
    CAPTURE(sharded);
    model mem, off;
    Opt om, oo;
    oo.offload_to(dir);
    CHECK(oo.offloaded());
    CHECK_FALSE(om.offloaded());
    const auto part = optim::partition_tensors(*mem.layout, 2)[1];
    if (sharded) {
      om.attach(mem.layout, part);
      oo.attach(off.layout, part);
    } else {
      om.attach(mem.layout);
      oo.attach(off.layout);
    }
    for (std::size_t t = 1; t <= 4; ++t) {
      mem.fill_grads(t);
      off.fill_grads(t);
      om.step(mem.params, mem.grads, lr_at(t));
      oo.step(off.params, off.grads, lr_at(t));
    }
    CHECK(bitwise_equal(mem.params, off.params));
    auto sm = om.state(), so = oo.state();
    REQUIRE(sm.slots.size() == so.slots.size());
    for (std::size_t k = 0; k < sm.slots.size(); ++k) {
      CHECK(so.slots[k].slots->file_backed());
      CHECK(bitwise_equal(*sm.slots[k].slots, *so.slots[k].slots));  // read back from the file
    }
    // reset_slots zeroes in the file too: the next steps still agree
    om.reset_slots(mem.big, 100, 20000);
    oo.reset_slots(off.big, 100, 20000);
    mem.fill_grads(5);
    off.fill_grads(5);
    om.step(mem.params, mem.grads, lr_at(5));
    oo.step(off.params, off.grads, lr_at(5));
    CHECK(bitwise_equal(mem.params, off.params));
  }
  // the files have no names: nothing is left in the directory
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);

  Opt bad;
  bad.offload_to(dir / "missing");
  model m;
  const std::string want = "offloaded to '" + (dir / "missing").string() + "': cannot create a file there";
  CHECK_THROWS_WITH_AS(bad.attach(m.layout), doctest::Contains(want.c_str()), error);
}

TEST_CASE_TEMPLATE("updates do not depend on the thread count", Opt, optim::adamw<>, optim::lamb<>, optim::sgd<>,
                   optim::adamw<half>) {
  auto run = [](int threads) {
    set_num_threads(threads);
    model md;
    Opt opt;
    opt.attach(md.layout);
    for (std::size_t t = 1; t <= 3; ++t) {
      md.fill_grads(t);
      opt.step(md.params, md.grads, lr_at(t));
    }
    return std::move(md.params);
  };
  const int nt = num_threads();
  arena<float> p1 = run(1), p2 = run(2), p3 = run(3);
  set_num_threads(nt);
  CHECK(bitwise_equal(p1, p2));
  CHECK(bitwise_equal(p1, p3));
}

#if XSIMD_WITH_SSE2
TEST_CASE("the portable SSE2 path agrees with the native path") {
  model a, b;
  optim::lamb<> oa, ob;
  oa.attach(a.layout);
  ob.attach(b.layout);
  for (std::size_t t = 1; t <= 3; ++t) {
    a.fill_grads(t);
    b.fill_grads(t);
    oa.step(a.params, a.grads, lr_at(t));
    ob.step<xsimd::sse2>(b.params, b.grads, lr_at(t));
  }
  for (std::size_t i = 0; i < a.layout->count(); ++i) {
    std::vector<double> ref(a.params[i].begin(), a.params[i].end());
    check_close<float>(b.params[i], ref, 1e-6, (*a.layout)[i].name);
  }
}
#endif

TEST_CASE_TEMPLATE("bf16 and half slots stay close to fp32 slots", S, bf16, half) {
  // gradient magnitudes ~0.05 .. 0.3, and ~100x smaller (half v would underflow without sqrt_v)
  for (float gscale : {1.0f, 0.01f}) {
    CAPTURE(gscale);
    model a, b;
    optim::adamw<> of;
    optim::adamw<S> oh;
    of.attach(a.layout);
    oh.attach(b.layout);
    arena<float> w0 = a.params.clone();
    for (std::size_t t = 1; t <= 5; ++t) {
      a.fill_grads(t);
      b.fill_grads(t);
      of.step(a.params, a.grads, lr_at(t), gscale);
      oh.step(b.params, b.grads, lr_at(t), gscale);
    }
    // relative precision of S, and (half) the spacing of its subnormals
    const double slot_tol = std::is_same_v<S, bf16> ? 1.0 / 128 : 1.0 / 1024;
    const double slot_abs = std::is_same_v<S, bf16> ? 0.0 : 6e-8;
    auto sf = of.state(), sh = oh.state();
    for (std::size_t i = 0; i < a.layout->count(); ++i) {
      CAPTURE((*a.layout)[i].name);
      double max_update = 0, max_diff = 0;
      for (std::size_t j = 0; j < a.params[i].size(); ++j) {
        max_update = std::max(max_update, std::fabs(double(a.params[i][j]) - w0[i][j]));
        max_diff = std::max(max_diff, std::fabs(double(a.params[i][j]) - b.params[i][j]));
      }
      INFO("max update ", max_update, ", max difference ", max_diff);
      CHECK(max_diff <= 0.02 * max_update + 1e-7);
      for (const char* name : {"m", "v"}) {
        // stored values stay within a few roundings of the fp32 slots; half keeps sqrt(v)
        const bool root = std::is_same_v<S, half> && std::string(name) == "v";
        auto f = sf.slot(name)[i];
        auto h = sh.slot(root ? "sqrt_v" : name)[i];
        double scale = 0;
        for (float x : f) scale = std::max(scale, double(std::fabs(x)));
        for (std::size_t j = 0; j < f.size(); ++j) {
          double got = to_float(h[j]);
          if (root) got *= got;
          CHECK(std::fabs(got - f[j]) <= 4 * slot_tol * (std::fabs(f[j]) + 0.1 * scale) + 5 * slot_abs);
        }
      }
    }
  }
}

TEST_CASE("the fast half conversions are bit-identical to core/dtype") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    float x = optim::detail::half_to_float_fast(std::uint16_t(b));
    float y = half::to_float(std::uint16_t(b));
    if (std::bit_cast<std::uint32_t>(x) != std::bit_cast<std::uint32_t>(y)) {
      CAPTURE(b);
      CHECK(std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y));
    }
  }
  std::size_t mismatches = 0;
  auto check = [&](std::uint32_t u) {
    float f = std::bit_cast<float>(u);
    if (optim::detail::float_to_half_fast(f) != half::from_float(f) && ++mismatches < 10) {
      CAPTURE(u);
      CHECK(optim::detail::float_to_half_fast(f) == half::from_float(f));
    }
  };
  for (std::uint64_t u = 0; u < (1ull << 32); u += 251) check(std::uint32_t(u));
  // around every half value and every halfway point, both signs
  for (std::uint32_t h = 0; h < 0x7c01; ++h) {
    std::uint32_t c = std::bit_cast<std::uint32_t>(half::to_float(std::uint16_t(h)));
    float next = half::to_float(std::uint16_t(h + 1));
    std::uint32_t mid = std::bit_cast<std::uint32_t>(0.5f * (half::to_float(std::uint16_t(h)) + next));
    for (std::uint32_t p : {c, mid})
      for (int d = -2; d <= 2; ++d) {
        check(p + std::uint32_t(d));
        check((p + std::uint32_t(d)) | 0x80000000u);
      }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("optimiser configs read JSON and reject bad fields by name") {
  optim::adamw_config c(json{{"beta1", 0.8},
                             {"beta2", 0.99},
                             {"eps", 1e-8},
                             {"weight_decay", 0.0},
                             {"bias_correction", false},
                             {"type", "adamw"}});
  CHECK(c.beta1 == 0.8);
  CHECK(c.beta2 == 0.99);
  CHECK(c.eps == 1e-8);
  CHECK(c.weight_decay == 0.0);
  CHECK_FALSE(c.bias_correction);
  CHECK(json(c).get<optim::adamw_config>().beta2 == 0.99);
  optim::adamw<> from_json(json{{"eps", 1e-3}});
  CHECK(from_json.config().eps == 1e-3);
  CHECK(optim::adamw_config().eps == 1e-6);
  CHECK(optim::adamw_config().weight_decay == 0.01);

  struct bad {
    std::function<void()> make;
    const char* message;
  };
  const bad cases[] = {
      {[] {
         optim::adamw_config(json{{"beta1", 1.0}});
       },
       "adamw config: field 'beta1' must be in [0, 1), got 1"},
      {[] {
         optim::adamw_config(json{{"beta2", -0.1}});
       },
       "field 'beta2' must be in [0, 1)"},
      {[] {
         optim::adamw_config(json{{"eps", 0}});
       },
       "adamw config: field 'eps' must be > 0, got 0"},
      {[] {
         optim::adamw_config(json{{"eps", "small"}});
       },
       "field 'eps' must be a number, got \"small\""},
      {[] {
         optim::adamw_config(json{{"weight_decay", -1}});
       },
       "field 'weight_decay' must be >= 0"},
      {[] {
         optim::adamw_config(json{{"bias_correction", 1}});
       },
       "field 'bias_correction' must be true or false"},
      {[] {
         optim::adamw_config(json{{"betas", 0.9}});
       },
       "adamw config: unknown field 'betas'"},
      {[] {
         optim::adamw_config(json{{"type", "lamb"}});
       },
       "adamw config: field 'type' must be \"adamw\""},
      {[] { optim::adamw_config(json::array()); }, "adamw config: expected a JSON object"},
      {[] {
         optim::adam_config(json{{"weight_decay", 0.01}});
       },
       "adam has no weight decay (use adamw)"},
      {[] {
         optim::adam_config(json{{"beta1", nullptr}});
       },
       "adam config: field 'beta1' is null (give it a value, or remove it to use the default)"},
      {[] {
         optim::lamb_config(json{{"eps", -1e-6}});
       },
       "lamb config: field 'eps' must be > 0"},
      {[] {
         optim::lamb_config(json{{"trust", true}});
       },
       "lamb config: unknown field 'trust'"},
      {[] {
         optim::sgd_config(json{{"momentum", 1.5}});
       },
       "sgd config: field 'momentum' must be in [0, 1)"},
      {[] {
         optim::sgd_config(json{{"nesterov", true}, {"momentum", 0}});
       },
       "'nesterov' needs 'momentum' > 0"},
      {[] {
         optim::sgd_config(json{{"nesterov", "yes"}});
       },
       "sgd config: field 'nesterov' must be true or false"},
      {[] {
         optim::sgd_config(json{{"lr", 0.1}});
       },
       "sgd config: unknown field 'lr'"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.message);
    CHECK_THROWS_WITH_AS(b.make(), doctest::Contains(b.message), error);
  }
}

// ---- sharded optimiser state (ZeRO stage 1) ----------------------------------------------------

namespace {

template <class S>
bool bitwise_equal_slots(const arena<S>& a, const arena<S>& b) {
  auto x = std::as_bytes(a.all()), y = std::as_bytes(b.all());
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

// Full-layout slot arenas named like `like`'s slots, zeroed, and a state pointing at them.
template <class S>
struct full_state {
  std::vector<arena<S>> arenas;
  optim::optimizer_state<S> st;
  full_state(const optim::optimizer_state<S>& like, std::shared_ptr<const arena_layout> layout) {
    arenas.reserve(like.slots.size());
    for (auto& s : like.slots) {
      arenas.emplace_back(layout);
      st.slots.push_back({s.name, &arenas.back()});
    }
  }
};

// The allgather of the params after a step: every replica's owned elements copied to the others.
template <class Opt>
void gather_params(std::vector<model>& reps, const std::vector<Opt>& opts) {
  for (std::size_t r = 0; r < reps.size(); ++r) {
    auto e = opts[r].owned_elements();
    auto from = reps[r].params.all();
    for (std::size_t q = 0; q < reps.size(); ++q)
      if (q != r) std::copy(from.begin() + e.first, from.begin() + e.last, reps[q].params.all().begin() + e.first);
  }
}

// P shards of an optimiser (each attached with its range of partition_tensors, each on its own
// replica of the params, the params gathered after every step) against one unsharded optimiser:
// params, exported state, gathered slot bytes and a resume from the full state are bit-identical.
template <class Opt>
void check_sharded_matches(const typename Opt::config_type& cfg) {
  using S = typename Opt::slot_type;
  for (std::size_t parts : {1, 2, 3}) {
    CAPTURE(parts);
    model ref;
    Opt whole(cfg);
    whole.attach(ref.layout);
    std::vector<model> reps(parts);
    std::vector<Opt> shards;
    for (std::size_t r = 0; r < parts; ++r) shards.emplace_back(cfg);
    const auto ranges = optim::partition_tensors(*ref.layout, parts);
    std::size_t largest = 0;
    for (const auto& t : *ref.layout) largest = std::max(largest, (t.size + 15) / 16 * 16);
    for (std::size_t r = 0; r < parts; ++r) {
      shards[r].attach(reps[r].layout, ranges[r]);
      CHECK(shards[r].owned() == ranges[r]);
      CHECK(shards[r].sharded() == (parts > 1));
      auto st = shards[r].state();
      for (std::size_t k = 0; k < st.slots.size(); ++k) {
        // memory: only the owned slice is allocated
        CHECK(shards[r].owned_slot_bytes(k).size() == shards[r].owned_elements().size() * sizeof(S));
        CHECK(shards[r].owned_slot_bytes(k).size() < (ref.layout->total() / parts + largest) * sizeof(S));
      }
    }
    auto run = [&](std::size_t from, std::size_t to) {
      for (std::size_t t = from; t <= to; ++t) {
        ref.fill_grads(t);
        whole.step(ref.params, ref.grads, lr_at(t), 0.5f);
        for (std::size_t r = 0; r < parts; ++r) {
          reps[r].fill_grads(t);
          arena<float> before = reps[r].params.clone();
          shards[r].step(reps[r].params, reps[r].grads, lr_at(t), 0.5f);
          for (std::size_t i = 0; i < ref.layout->count(); ++i)  // only the owned tensors moved
            if (!ranges[r].contains(i)) {
              CAPTURE(i);
              CHECK(std::equal(before[i].begin(), before[i].end(), reps[r].params[i].begin()));
            }
        }
        gather_params(reps, shards);
        for (std::size_t r = 0; r < parts; ++r) CHECK(bitwise_equal(reps[r].params, ref.params));
      }
    };
    run(1, 3);
    for (auto& o : shards) CHECK(o.step_count() == 3);

    // export every shard into one full-layout state; gather the slot bytes into another
    auto want = whole.state();
    full_state<S> exported(want, ref.layout), gathered(want, ref.layout);
    for (std::size_t r = 0; r < parts; ++r) {
      shards[r].export_owned(exported.st);
      auto e = shards[r].owned_elements();
      for (std::size_t k = 0; k < gathered.arenas.size(); ++k) {
        auto src = shards[r].owned_slot_bytes(k);
        auto dst = std::as_writable_bytes(gathered.arenas[k].all()).subspan(e.first * sizeof(S), e.size() * sizeof(S));
        REQUIRE(src.size() == dst.size());
        std::copy(src.begin(), src.end(), dst.begin());
      }
    }
    CHECK(exported.st.step == 3);
    for (std::size_t k = 0; k < want.slots.size(); ++k) {
      CAPTURE(want.slots[k].name);
      CHECK(bitwise_equal_slots(exported.arenas[k], *want.slots[k].slots));
      CHECK(bitwise_equal_slots(gathered.arenas[k], *want.slots[k].slots));
    }

    // resume: fresh shards restored from the full state (a checkpoint of the unsharded run) and
    // from their own sub-layout states, continued with the unsharded optimiser
    for (bool from_full : {true, false}) {
      CAPTURE(from_full);
      const std::size_t done = whole.step_count();
      std::vector<Opt> resumed;
      for (std::size_t r = 0; r < parts; ++r) {
        resumed.emplace_back(cfg);
        resumed[r].attach(reps[r].layout, ranges[r]);
        if (from_full) {
          resumed[r].restore(exported.st);
        } else {
          auto own = shards[r].state();
          std::vector<arena<S>> copies;
          for (auto& s : own.slots) copies.push_back(s.slots->clone());
          optim::optimizer_state<S> st;
          for (std::size_t k = 0; k < copies.size(); ++k) st.slots.push_back({own.slots[k].name, &copies[k]});
          st.step = own.step;
          resumed[r].restore(st);
        }
        CHECK(resumed[r].step_count() == done);
      }
      shards = std::move(resumed);
      run(done + 1, done + 2);
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("sharded optimisers (P = 1, 2, 3) match the unsharded one bit for bit", Opt, optim::adamw<>,
                   optim::adamw<bf16>, optim::adam<>, optim::adam<bf16>, optim::sgd<>, optim::sgd<bf16>, optim::lamb<>,
                   optim::lamb<bf16>, optim::adamw<half>, optim::lamb<half>) {
  check_sharded_matches<Opt>(typename Opt::config_type{});
}

TEST_CASE("sharded sgd without momentum (no slots) and with nesterov matches the unsharded one") {
  optim::sgd_config plain;
  plain.momentum = 0;
  plain.weight_decay = 0.01;
  check_sharded_matches<optim::sgd<>>(plain);
  optim::sgd_config nesterov;
  nesterov.nesterov = true;
  check_sharded_matches<optim::sgd<bf16>>(nesterov);
}

TEST_CASE("sharded reset_slots: outside the owned range a no-op, inside the sub-layout tensor") {
  model md;
  optim::adamw<> opt;
  const optim::tensor_range owned{1, 5};  // h.0.b .. big
  opt.attach(md.layout, owned);
  for (std::size_t t = 1; t <= 2; ++t) {
    md.fill_grads(t);
    opt.step(md.params, md.grads, lr_at(t));
  }
  auto st = opt.state();
  CHECK(st.slot("m").layout().count() == 4);
  CHECK(st.slot("m").layout()[0].name == "h.0.b");
  auto before = st.slot("m").clone();
  opt.reset_slots(md.w, 0, 703);
  opt.reset_slots(md.zeros, 3, 10);
  CHECK(bitwise_equal(st.slot("m"), before));
  opt.reset_slots(md.big, 100, 50);
  auto big = st.slot("m")[md.big - owned.begin];
  for (std::size_t j = 0; j < big.size(); ++j) {
    if (j >= 100 && j < 150) {
      CHECK(big[j] == 0.0f);
      CHECK(st.slot("v")[md.big - owned.begin][j] == 0.0f);
    } else {
      CHECK(big[j] == before[md.big - owned.begin][j]);
    }
  }
  // ranges are still checked against the full tensor, owned or not
  CHECK_THROWS_WITH_AS(opt.reset_slots(md.w, 700, 4), doctest::Contains("outside tensor 'h.0.w' of 703 elements"),
                       error);
  CHECK_THROWS_WITH_AS(opt.reset_slots(99, 0, 1), doctest::Contains("tensor index 99 out of range"), error);
}

TEST_CASE("sharded optimisers: owned elements, errors") {
  model md;
  const auto& l = *md.layout;
  optim::lamb<> opt;
  CHECK_THROWS_WITH_AS(opt.owned_elements(), doctest::Contains("lamb: owned_elements() before attach()"), error);
  CHECK_THROWS_WITH_AS(opt.attach(md.layout, {2, 7}), doctest::Contains("owned tensor range [2, 7) is outside"), error);
  CHECK_THROWS_WITH_AS(opt.attach(md.layout, {3, 2}), doctest::Contains("is outside the layout"), error);
  opt.attach(md.layout, {2, 4});
  CHECK(opt.sharded());
  CHECK(opt.owned_elements() == optim::element_range{l[2].offset, l[4].offset});
  CHECK(opt.owned_elements().size() == 32 + 64);  // ln.g (21, padded to 32) and frozen.w
  CHECK_THROWS_WITH_AS(opt.owned_slot_bytes(2), doctest::Contains("slot 2 out of range (2 slots)"), error);

  // the tail range ends at total(), an empty range owns nothing and steps nothing
  opt.attach(md.layout, {5, 6});
  CHECK(opt.owned_elements() == optim::element_range{l[5].offset, l.total()});
  optim::adamw<> none;
  none.attach(md.layout, {6, 6});
  CHECK(none.sharded());
  CHECK(none.owned_elements().size() == 0);
  CHECK(none.owned_slot_bytes(0).empty());
  arena<float> w0 = md.params.clone();
  md.fill_grads(1);
  none.step(md.params, md.grads, 0.1f);
  CHECK(bitwise_equal(md.params, w0));
  CHECK(none.step_count() == 1);
  auto own = none.state();
  none.restore(own);

  // a sharded optimiser attached to the full range is not sharded
  optim::adamw<> all;
  all.attach(md.layout, {0, l.count()});
  CHECK_FALSE(all.sharded());
  CHECK(all.owned_elements() == optim::element_range{0, l.total()});

  // restore / export_owned check layouts and slot names
  optim::adamw<> part;
  part.attach(md.layout, {1, 3});
  auto l2 = std::make_shared<arena_layout>();
  l2->add("x", {3});
  arena<float> m2(l2), v2(l2);
  optim::optimizer_state<float> bad{{{"m", &m2}, {"v", &v2}}, 1};
  CHECK_THROWS_WITH_AS(part.restore(bad),
                       doctest::Contains("slot 'm' does not follow the attached parameter layout (nor the owned"),
                       error);
  CHECK_THROWS_WITH_AS(part.export_owned(bad), doctest::Contains("export_owned: slot 'm' does not follow"), error);
  auto sub = part.state();  // sub-layout arenas are not full-layout ones
  CHECK_THROWS_WITH_AS(part.export_owned(sub), doctest::Contains("does not follow the attached parameter layout"),
                       error);
  arena<float> x(md.layout);
  optim::optimizer_state<float> extra{{{"m", &x}, {"v", &x}, {"w", &x}}, 0};
  CHECK_THROWS_WITH_AS(part.export_owned(extra), doctest::Contains("export_owned: unexpected slot 'w'"), error);
  CHECK_THROWS_WITH_AS(part.restore(extra), doctest::Contains("restore: unexpected slot 'w'"), error);
}

TEST_CASE("partition_tensors: contiguous, covering, balanced by padded size") {
  counter_rng rng(11);
  for (std::size_t trial = 0; trial < 40; ++trial) {
    arena_layout l;
    const std::size_t n = 1 + std::size_t(rng.uniform(trial, 0) * 30);
    for (std::size_t i = 0; i < n; ++i) {
      // mostly small tensors, a few large ones
      float u = rng.uniform(trial, i + 1);
      std::size_t size = 1 + std::size_t(u * u * u * 50000);
      l.add(std::string("t").append(std::to_string(i)), {size});
    }
    std::size_t largest = 0;
    for (std::size_t i = 0; i < n; ++i)
      largest = std::max(largest, (i + 1 < n ? l[i + 1].offset : l.total()) - l[i].offset);
    for (std::size_t parts = 1; parts <= 12; ++parts) {
      CAPTURE(trial);
      CAPTURE(n);
      CAPTURE(parts);
      auto r = optim::partition_tensors(l, parts);
      REQUIRE(r.size() == parts);
      CHECK(r.front().begin == 0);
      CHECK(r.back().end == n);
      std::size_t covered = 0;
      for (std::size_t k = 0; k < parts; ++k) {
        CHECK(r[k].begin <= r[k].end);
        if (k > 0) CHECK(r[k].begin == r[k - 1].end);
        CHECK((r[k].empty() ? n < parts : true));
        const std::size_t elems = optim::flat_elements(l, r[k]).size();
        CHECK(elems <= l.total() / parts + largest);
        covered += elems;
      }
      CHECK(covered == l.total());
      if (n < parts)
        for (std::size_t k = 0; k < parts; ++k) CHECK(r[k].size() == (k < n ? 1u : 0u));
    }
  }
  // equal tensors split evenly
  arena_layout even;
  for (int i = 0; i < 12; ++i) even.add(std::string("e").append(std::to_string(i)), {64});
  for (std::size_t parts : {1, 2, 3, 4, 6, 12})
    for (auto& r : optim::partition_tensors(even, parts)) CHECK(r.size() == 12 / parts);
  CHECK(optim::partition_tensors(arena_layout{}, 3) == std::vector<optim::tensor_range>(3));
  CHECK_THROWS_WITH_AS(optim::partition_tensors(even, 0), doctest::Contains("parts must be in [1, 1048576], got 0"),
                       error);
}

}  // namespace SPARSELM_UNITY_ID
