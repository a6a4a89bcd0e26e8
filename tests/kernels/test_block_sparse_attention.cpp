// Static block-sparse causal attention (kernels/block_sparse_attention.hpp): the pattern rule, the
// kernel against a naive dense T×T reference whose mask comes from the block pattern, density 1
// against the dense causal kernel, finite differences, thread-count independence, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "pointwise_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/block_sparse_attention.hpp"
#include "sparselm/testing/gradcheck.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using kernels::block_causal_options;
using kernels::block_causal_pattern;

namespace {

struct bsa_case {
  std::size_t B, T, H, D;
};

struct bsa_result {
  fvec out, lse, dqkv;
};

// Naive reference in double: dense T×T scores with −inf where the pattern (or causality, or a
// length) hides a key, softmax, dropout multipliers, and the textbook gradients.
struct ref_result {
  dvec out, lse, dqkv;
};
ref_result reference(const fvec& qkv, const fvec& dout, const bsa_case& c, const block_causal_pattern& p,
                     const std::vector<std::int32_t>& lengths, const kernels::attention_dropout& drop) {
  const std::size_t T = c.T, H = c.H, D = c.D, HD = H * D, ld = 3 * HD, Bk = p.block();
  const double scale = 1.0 / std::sqrt(double(float(D)));
  const double ninf = -std::numeric_limits<double>::infinity();
  const double dscale = drop.p < 1.0f ? 1.0 / (1.0 - double(drop.p)) : 0.0;
  ref_result r{dvec(c.B * T * HD, 0.0), dvec(c.B * H * T, ninf), dvec(c.B * T * ld, 0.0)};
  for (std::size_t b = 0; b < c.B; ++b) {
    const std::size_t len = lengths.empty() ? T : std::size_t(lengths[b]);
    for (std::size_t h = 0; h < H; ++h) {
      auto at = [&](std::size_t t, std::size_t part, std::size_t d) { return (b * T + t) * ld + part * HD + h * D + d; };
      dvec S(T * T, ninf), P(T * T, 0.0), M(T * T, 0.0);
      for (std::size_t i = 0; i < len; ++i) {
        const std::uint64_t row = (b * H + h) * T + i;
        double mx = ninf;
        for (std::size_t j = 0; j < T; ++j) {
          if (j > i || j >= len || !p.kept(i / Bk, j / Bk)) continue;
          double d = 0;
          for (std::size_t k = 0; k < D; ++k) d += double(qkv[at(i, 0, k)]) * qkv[at(j, 1, k)];
          S[i * T + j] = scale * d;
          mx = std::max(mx, S[i * T + j]);
          M[i * T + j] = drop.p > 0 ? (drop.rng.uniform(drop.stream, row * T + j) >= drop.p ? dscale : 0.0) : 1.0;
        }
        double z = 0;
        for (std::size_t j = 0; j < T; ++j) z += std::exp(S[i * T + j] - mx);
        r.lse[row] = mx + std::log(z);
        for (std::size_t j = 0; j < T; ++j) {
          P[i * T + j] = std::exp(S[i * T + j] - mx) / z;
          for (std::size_t k = 0; k < D; ++k)
            r.out[(b * T + i) * HD + h * D + k] += P[i * T + j] * M[i * T + j] * qkv[at(j, 2, k)];
        }
      }
      for (std::size_t i = 0; i < len; ++i) {
        auto dO = [&](std::size_t k) { return double(dout[(b * T + i) * HD + h * D + k]); };
        dvec dP(T, 0.0);
        double rs = 0;
        for (std::size_t j = 0; j < T; ++j) {
          double d = 0;
          for (std::size_t k = 0; k < D; ++k) d += dO(k) * qkv[at(j, 2, k)];
          dP[j] = M[i * T + j] * d;
          rs += P[i * T + j] * dP[j];
        }
        for (std::size_t j = 0; j < T; ++j) {
          const double ds = P[i * T + j] * (dP[j] - rs), pd = P[i * T + j] * M[i * T + j];
          for (std::size_t k = 0; k < D; ++k) {
            r.dqkv[at(i, 0, k)] += scale * ds * qkv[at(j, 1, k)];
            r.dqkv[at(j, 1, k)] += scale * ds * qkv[at(i, 0, k)];
            r.dqkv[at(j, 2, k)] += pd * dO(k);
          }
        }
      }
    }
  }
  return r;
}

// Runs forward and backward; qkv with row stride 3HD + pad.
template <class Arch>
bsa_result run(const fvec& qkv, const fvec& dout, const bsa_case& c, const block_causal_pattern* p,
               const std::vector<std::int32_t>& lengths, const kernels::attention_dropout& drop, std::size_t pad = 0,
               dtype compute = dtype::f32) {
  const std::size_t N = c.B * c.T, HD = c.H * c.D, ld = 3 * HD + pad;
  fvec q(N * ld, 1e30f), o(N * HD, 1e30f), dq(N * ld, 1e30f), lse(c.B * c.H * c.T, 1e30f);
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t k = 0; k < 3 * HD; ++k) q[r * ld + k] = qkv[r * 3 * HD + k];
  const float scale = 1.0f / std::sqrt(float(c.D));
  const kernels::attention_shape s{c.B, c.T, c.H, c.D};
  const const_matrix_view<float> Q(q.data(), N, 3 * HD, ld), G(dout.data(), N, HD, HD);
  if (p) {
    kernels::block_sparse_attention_forward<Arch>(Q, {o.data(), N, HD, HD}, lse, s, *p, scale, lengths, drop, compute);
    kernels::block_sparse_attention_backward<Arch>(G, Q, {o.data(), N, HD, HD}, lse, {dq.data(), N, 3 * HD, ld}, s, *p,
                                                   scale, lengths, drop, compute);
  } else {
    kernels::attention_forward<Arch>(Q, {o.data(), N, HD, HD}, lse, s, kernels::attention_mask::causal, scale, lengths,
                                     drop, compute);
    kernels::attention_backward<Arch>(G, Q, {o.data(), N, HD, HD}, lse, {dq.data(), N, 3 * HD, ld}, s,
                                      kernels::attention_mask::causal, scale, lengths, drop, compute);
  }
  bsa_result r{o, lse, fvec(N * 3 * HD)};
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t k = 0; k < 3 * HD; ++k) r.dqkv[i * 3 * HD + k] = dq[i * ld + k];
  return r;
}

}  // namespace

TEST_CASE("block_causal_pattern: diagonal and band kept, round(density·(I−1)) of the rest, seeded, prefix of longer") {
  for (double density : {0.0, 0.25, 0.5, 1.0}) {
    CAPTURE(density);
    const block_causal_pattern p({.block = 16, .density = density, .seed = 3}, 1000);
    CHECK(p.block_rows() == 63);  // ceil(1000 / 16), the last block partial
    std::size_t total = 0;
    for (std::size_t I = 0; I < p.block_rows(); ++I) {
      auto r = p.row(I);
      REQUIRE(!r.empty());
      CHECK(r.back() == I);
      CHECK(std::is_sorted(r.begin(), r.end()));
      CHECK(std::adjacent_find(r.begin(), r.end()) == r.end());
      if (I >= 1) CHECK(p.kept(I, I - 1));
      const std::size_t far = I >= 1 ? I - 1 : 0;
      CHECK(r.size() == std::min<std::size_t>(I, 1) + 1 + std::size_t(std::floor(density * double(far) + 0.5)));
      for (std::size_t J = I + 1; J < p.block_rows(); ++J) REQUIRE(!p.kept(I, J));
      total += r.size();
    }
    CHECK(p.kept_blocks(1000) == total);
    if (density == 1.0) CHECK(total == 63 * 64 / 2);
    if (density == 0.0) CHECK(total == 63 + 62);
    // the same options give the same pattern; a shorter sequence's pattern is the top-left corner
    const block_causal_pattern again({.block = 16, .density = density, .seed = 3}, 1000),
        shorter({.block = 16, .density = density, .seed = 3}, 300);
    for (std::size_t I = 0; I < p.block_rows(); ++I)
      CHECK(std::ranges::equal(p.row(I), again.row(I)));
    for (std::size_t I = 0; I < shorter.block_rows(); ++I) CHECK(std::ranges::equal(p.row(I), shorter.row(I)));
    CHECK(p.kept_blocks(300) == shorter.kept_blocks(300));
  }
  // another seed picks other far blocks (same counts)
  const block_causal_pattern a({.block = 16, .density = 0.25, .seed = 1}, 1024), b({.block = 16, .density = 0.25, .seed = 2}, 1024);
  bool differs = false;
  for (std::size_t I = 0; I < a.block_rows(); ++I) {
    CHECK(a.row(I).size() == b.row(I).size());
    differs = differs || !std::ranges::equal(a.row(I), b.row(I));
  }
  CHECK(differs);
  CHECK_THROWS_WITH_AS(block_causal_pattern({.block = 0}, 16), doctest::Contains("block must be >= 1"), error);
  CHECK_THROWS_WITH_AS(block_causal_pattern({.density = 1.5}, 16), doctest::Contains("density must be in [0, 1], got 1.5"),
                       error);
}

TEST_CASE_TEMPLATE("block_sparse_attention forward/backward match the naive masked reference", Arch, SPARSELM_TEST_ARCHS) {
  // partial last blocks (T not a multiple of the block), a single block, several blocks, lengths
  const bsa_case cases[] = {{1, 1, 1, 4}, {2, 7, 2, 3}, {1, 16, 1, 8}, {2, 37, 2, 8}, {1, 70, 1, 32}, {2, 64, 2, 16}};
  for (const auto& c : cases)
    for (std::size_t block : {std::size_t(4), std::size_t(16)})
      for (double density : {0.0, 0.4, 1.0})
        for (float pdrop : {0.0f, 0.2f}) {
          CAPTURE(c.B);
          CAPTURE(c.T);
          CAPTURE(c.H);
          CAPTURE(c.D);
          CAPTURE(block);
          CAPTURE(density);
          CAPTURE(pdrop);
          const block_causal_pattern p({.block = block, .density = density, .seed = 11}, c.T + 5);
          const std::size_t N = c.B * c.T, HD = c.H * c.D;
          const fvec qkv = random_vector(N * 3 * HD, 1, -2.0f, 2.0f), dout = random_vector(N * HD, 2);
          const kernels::attention_dropout drop{pdrop, counter_rng(5), 77};
          std::vector<std::int32_t> lengths;
          if (c.B == 2) lengths = {std::int32_t(c.T), std::int32_t((c.T + 1) / 2)};
          for (const auto& lens : {std::vector<std::int32_t>{}, lengths}) {
            const auto ref = reference(qkv, dout, c, p, lens, drop);
            for (std::size_t pad : {std::size_t(0), std::size_t(3)}) {
              const auto r = run<Arch>(qkv, dout, c, &p, lens, drop, pad);
              for (std::size_t i = 0; i < r.lse.size(); ++i) {
                if (std::isinf(ref.lse[i]))
                  REQUIRE(r.lse[i] == -std::numeric_limits<float>::infinity());
                else
                  REQUIRE(std::fabs(r.lse[i] - ref.lse[i]) < 2e-5);
              }
              CHECK(max_rel_err(r.out, ref.out) < 2e-5);
              CHECK(max_rel_err(r.dqkv, ref.dqkv) < 1e-4);
            }
          }
        }
}

// bf16 compute (the bf16 precision policy): on inputs already rounded to bf16, only the rounding
// of P and dS (a relative 2^-9 per element) separates the result from the double reference, as for
// the dense kernel (test_attention.cpp): lse to fp32 rounding, out within 4e-3, gradients 1.5e-2.
TEST_CASE_TEMPLATE("block_sparse_attention in bf16 compute: within the rounding of P and dS of the reference", Arch,
                   SPARSELM_TEST_ARCHS) {
  for (const bsa_case c : {bsa_case{2, 37, 2, 8}, bsa_case{1, 70, 1, 32}, bsa_case{2, 64, 2, 16}})
    for (double density : {0.4, 1.0})
      for (float pdrop : {0.0f, 0.2f}) {
        CAPTURE(c.T);
        CAPTURE(density);
        CAPTURE(pdrop);
        const block_causal_pattern p({.block = 16, .density = density, .seed = 11}, c.T);
        const std::size_t N = c.B * c.T, HD = c.H * c.D;
        fvec qkv = random_vector(N * 3 * HD, 3, -2.0f, 2.0f), dout = random_vector(N * HD, 4);
        for (auto& x : qkv) x = float(bf16(x));
        for (auto& x : dout) x = float(bf16(x));
        const kernels::attention_dropout drop{pdrop, counter_rng(5), 77};
        std::vector<std::int32_t> lengths;
        if (c.B == 2) lengths = {std::int32_t(c.T), std::int32_t((c.T + 1) / 2)};
        const auto ref = reference(qkv, dout, c, p, lengths, drop);
        const auto r = run<Arch>(qkv, dout, c, &p, lengths, drop, 3, dtype::bf16);
        const auto f = run<Arch>(qkv, dout, c, &p, lengths, drop, 3, dtype::f32);
        for (std::size_t i = 0; i < r.lse.size(); ++i) {
          if (std::isinf(ref.lse[i]))
            REQUIRE(r.lse[i] == -std::numeric_limits<float>::infinity());
          else
            REQUIRE(std::fabs(r.lse[i] - ref.lse[i]) < 2e-5);
        }
        CHECK(max_rel_err(r.out, ref.out) < 4e-3);
        CHECK(max_rel_err(r.dqkv, ref.dqkv) < 1.5e-2);
        CHECK(max_rel_err(f.out, ref.out) < 2e-5);
        CHECK(r.out != f.out);  // the compute type is honoured
        CHECK(r.dqkv != f.dqkv);
      }
}

// qkv and out held in bf16 (the attention layer's bf16 activations): bit for bit the results of bf16
// compute on fp32 storage of the same rounded values, gathered tiles (density < 1) and in-place
// runs of keys (density 1) alike; fp32 compute over bf16 storage is refused.
TEST_CASE_TEMPLATE("block_sparse_attention: qkv and out held in bf16 give the results of bf16 compute on fp32 storage",
                   Arch, SPARSELM_TEST_ARCHS) {
  auto round = [](const fvec& v) {
    std::vector<bf16> r(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
    return r;
  };
  for (const bsa_case c : {bsa_case{2, 37, 2, 8}, bsa_case{1, 70, 1, 32}})
    for (double density : {0.4, 1.0}) {
      CAPTURE(c.T);
      CAPTURE(density);
      const block_causal_pattern p({.block = 16, .density = density, .seed = 11}, c.T);
      const std::size_t N = c.B * c.T, HD = c.H * c.D;
      fvec qkv = random_vector(N * 3 * HD, 13, -2.0f, 2.0f);
      for (auto& x : qkv) x = float(bf16(x));
      const fvec dout = random_vector(N * HD, 14);
      const kernels::attention_dropout drop{0.2f, counter_rng(5), 77};
      std::vector<std::int32_t> lengths;
      if (c.B == 2) lengths = {std::int32_t(c.T), std::int32_t((c.T + 1) / 2)};
      const float scale = 1.0f / std::sqrt(float(c.D));
      const kernels::attention_shape s{c.B, c.T, c.H, c.D};
      // fp32 storage, bf16 compute; backward given out rounded to bf16 (held in float)
      fvec o32(N * HD), l32(c.B * c.H * c.T), d32(N * 3 * HD);
      const const_matrix_view<float> q32(qkv.data(), N, 3 * HD);
      kernels::block_sparse_attention_forward<Arch>(q32, {o32.data(), N, HD}, l32, s, p, scale, lengths, drop,
                                                    dtype::bf16);
      fvec o32r(o32.size());
      for (std::size_t i = 0; i < o32.size(); ++i) o32r[i] = float(bf16(o32[i]));
      kernels::block_sparse_attention_backward<Arch>({dout.data(), N, HD}, q32, {o32r.data(), N, HD}, l32,
                                                     {d32.data(), N, 3 * HD}, s, p, scale, lengths, drop, dtype::bf16);
      // bf16 storage
      const std::vector<bf16> q16 = round(qkv);
      const const_matrix_view<bf16> qv(q16.data(), N, 3 * HD);
      fvec o(N * HD), l(c.B * c.H * c.T), d(N * 3 * HD, 1e30f);
      kernels::block_sparse_attention_forward<Arch>(qv, {o.data(), N, HD}, l, s, p, scale, lengths, drop, dtype::bf16);
      const std::vector<bf16> o16 = round(o);
      kernels::block_sparse_attention_backward<Arch>({dout.data(), N, HD}, qv,
                                                     const_matrix_view<bf16>(o16.data(), N, HD), l,
                                                     {d.data(), N, 3 * HD}, s, p, scale, lengths, drop, dtype::bf16);
      CHECK(o == o32);
      CHECK(d == d32);
      for (std::size_t i = 0; i < l.size(); ++i) REQUIRE((l[i] == l32[i]));
      // and not the fp32-compute result
      fvec of(N * HD), lf(c.B * c.H * c.T);
      kernels::block_sparse_attention_forward<Arch>(q32, {of.data(), N, HD}, lf, s, p, scale, lengths, drop);
      CHECK(o != of);
      CHECK_THROWS_WITH_AS(kernels::block_sparse_attention_forward<Arch>(qv, {o.data(), N, HD}, l, s, p, scale, lengths,
                                                                         drop, dtype::f32),
                           doctest::Contains("block_sparse_attention_forward: qkv held in bf16 needs the bf16 compute "
                                             "type, got F32"),
                           error);
      CHECK_THROWS_WITH_AS(kernels::block_sparse_attention_backward<Arch>(
                               {dout.data(), N, HD}, qv, const_matrix_view<bf16>(o16.data(), N, HD), l,
                               {d.data(), N, 3 * HD}, s, p, scale, lengths, drop, dtype::f16),
                           doctest::Contains("block_sparse_attention_backward: qkv held in bf16 needs the bf16 compute "
                                             "type, got F16"),
                           error);
    }
}

TEST_CASE("block_sparse_attention: density 1 is the dense causal kernel (dropout and lengths included)") {
  for (const bsa_case c : {bsa_case{2, 45, 2, 16}, bsa_case{1, 130, 3, 32}, bsa_case{1, 64, 1, 64}})
    for (std::size_t block : {std::size_t(16), std::size_t(5)})
      for (float pdrop : {0.0f, 0.3f}) {
        CAPTURE(c.T);
        CAPTURE(block);
        CAPTURE(pdrop);
        const block_causal_pattern p({.block = block, .density = 1.0, .seed = 4}, c.T);
        const std::size_t N = c.B * c.T, HD = c.H * c.D;
        const fvec qkv = random_vector(N * 3 * HD, 5, -2.0f, 2.0f), dout = random_vector(N * HD, 6);
        const kernels::attention_dropout drop{pdrop, counter_rng(8), 3};
        std::vector<std::int32_t> lengths;
        if (c.B == 2) lengths = {std::int32_t(c.T), 20};
        const auto dense = run<native_arch>(qkv, dout, c, nullptr, lengths, drop);
        const auto sparse = run<native_arch>(qkv, dout, c, &p, lengths, drop);
        CHECK(max_abs_err(sparse.out, to_double(dense.out)) < 1e-6);
        CHECK(max_abs_err(sparse.dqkv, to_double(dense.dqkv)) < 1e-5);
        for (std::size_t i = 0; i < dense.lse.size(); ++i)
          REQUIRE((dense.lse[i] == sparse.lse[i] || std::fabs(dense.lse[i] - sparse.lse[i]) < 1e-6));
        // below density 1 the results differ from dense attention
        const block_causal_pattern thin({.block = block, .density = 0.0, .seed = 4}, c.T);
        if (thin.kept_blocks(c.T) < p.kept_blocks(c.T))
          CHECK(max_abs_err(run<native_arch>(qkv, dout, c, &thin, lengths, drop).out, to_double(dense.out)) > 1e-3);
      }
}

TEST_CASE("block_sparse_attention: gradients by finite differences (partial last block)") {
  const bsa_case c{2, 11, 2, 4};
  const block_causal_pattern p({.block = 3, .density = 0.5, .seed = 9}, c.T);
  const std::size_t N = c.B * c.T, HD = c.H * c.D;
  const fvec x = random_vector(N * 3 * HD, 7, -1.5f, 1.5f), w = random_vector(N * HD, 8);
  const kernels::attention_shape s{c.B, c.T, c.H, c.D};
  const float scale = 1.0f / std::sqrt(float(c.D));
  const std::vector<std::int32_t> lengths{11, 8};
  auto loss = [&](std::span<const float> v) {
    fvec o(N * HD), lse(c.B * c.H * c.T);
    kernels::block_sparse_attention_forward({v.data(), N, 3 * HD}, {o.data(), N, HD}, lse, s, p, scale, lengths, {});
    return dot(o, w);
  };
  fvec o(N * HD), lse(c.B * c.H * c.T), g(N * 3 * HD);
  kernels::block_sparse_attention_forward({x.data(), N, 3 * HD}, {o.data(), N, HD}, lse, s, p, scale, lengths, {});
  kernels::block_sparse_attention_backward({w.data(), N, HD}, {x.data(), N, 3 * HD}, {o.data(), N, HD}, lse,
                                           {g.data(), N, 3 * HD}, s, p, scale, lengths, {});
  auto r = sparselm::testing::gradcheck(loss, x, g, {.step = 2e-2});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.checked == x.size());
}

TEST_CASE("block_sparse_attention: results and dropout masks do not depend on the thread count") {
  const bsa_case c{3, 45, 2, 16};
  const block_causal_pattern p({.block = 8, .density = 0.3, .seed = 2}, c.T);
  const std::size_t N = c.B * c.T, HD = c.H * c.D;
  const fvec qkv = random_vector(N * 3 * HD, 3, -2.0f, 2.0f), dout = random_vector(N * HD, 4);
  const kernels::attention_dropout drop{0.3f, counter_rng(11), 1234};
  const std::vector<std::int32_t> lengths{45, 17, 0};
  const int before = num_threads();
  set_num_threads(1);
  const auto one = run<native_arch>(qkv, dout, c, &p, lengths, drop);
  set_num_threads(2);
  const auto two = run<native_arch>(qkv, dout, c, &p, lengths, drop);
  set_num_threads(before);
  CHECK(one.out == two.out);
  CHECK(one.dqkv == two.dqkv);
  for (std::size_t i = 0; i < one.lse.size(); ++i) REQUIRE((one.lse[i] == two.lse[i]));
  for (std::size_t i = 2 * c.T; i < 3 * c.T; ++i)  // the empty sequence: zeros, gradients included
    for (std::size_t k = 0; k < 3 * HD; ++k) REQUIRE(one.dqkv[i * 3 * HD + k] == 0.0f);
}

TEST_CASE("block_sparse_attention: a pattern shorter than the sequence and bad shapes are errors") {
  const block_causal_pattern p({.block = 4}, 8);
  fvec qkv(9 * 12), out(9 * 4), lse(9);
  const kernels::attention_shape s{1, 9, 1, 4};
  CHECK_THROWS_WITH_AS(kernels::block_sparse_attention_forward({qkv.data(), 9, 12}, {out.data(), 9, 4}, lse, s, p, 0.5f,
                                                               {}, {}),
                       doctest::Contains("block_sparse_attention_forward: the block pattern covers 8 positions"),
                       error);
  const block_causal_pattern q({.block = 4}, 9);
  CHECK_THROWS_WITH_AS(kernels::block_sparse_attention_forward({qkv.data(), 9, 11}, {out.data(), 9, 4}, lse, s, q, 0.5f,
                                                               {}, {}),
                       doctest::Contains("block_sparse_attention_forward: qkv (9x11)"), error);
}

TEST_CASE("block_sparse_decode_attention: new rows over a KV cache equal the full forward's rows") {
  const bsa_case c{2, 13, 2, 4};
  const std::size_t N = c.B * c.T, HD = c.H * c.D, past = 5, n = c.T - past, cap = 16;
  const block_causal_pattern p({.block = 3, .density = 0.5, .seed = 6}, cap);
  const fvec qkv = random_vector(N * 3 * HD, 9, -2.0f, 2.0f);
  fvec out(N * HD), lse(c.B * c.H * c.T);
  kernels::block_sparse_attention_forward({qkv.data(), N, 3 * HD}, {out.data(), N, HD}, lse, {c.B, c.T, c.H, c.D}, p,
                                          1.0f / std::sqrt(float(c.D)), {}, {});
  fvec keys(c.B * cap * HD), values(c.B * cap * HD), rows(c.B * n * 3 * HD), att(c.B * n * HD), scores(c.B * c.H * cap);
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t t = 0; t < c.T; ++t) {
      const float* r = qkv.data() + (b * c.T + t) * 3 * HD;
      std::copy_n(r + HD, HD, keys.data() + (b * cap + t) * HD);
      std::copy_n(r + 2 * HD, HD, values.data() + (b * cap + t) * HD);
      if (t >= past) std::copy_n(r, 3 * HD, rows.data() + (b * n + t - past) * 3 * HD);
    }
  kernels::block_sparse_decode_attention({rows.data(), c.B * n, 3 * HD}, keys.data(), values.data(),
                                         {c.B, n, past, cap, c.H, c.D}, p, {att.data(), c.B * n, HD}, scores);
  double worst = 0;
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < HD; ++k)
        worst = std::max(worst, double(std::fabs(att[(b * n + i) * HD + k] - out[(b * c.T + past + i) * HD + k])));
  CHECK(worst < 1e-5);
  // the dense decode step sees more keys: different rows
  kernels::decode_attention({rows.data(), c.B * n, 3 * HD}, keys.data(), values.data(), {c.B, n, past, cap, c.H, c.D},
                            {att.data(), c.B * n, HD}, scores);
  worst = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < HD; ++k)
      worst = std::max(worst, double(std::fabs(att[i * HD + k] - out[(past + i) * HD + k])));
  CHECK(worst > 1e-3);
}

}  // namespace SPARSELM_UNITY_ID
