#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "pointwise_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/attention.hpp"
// Included on purpose: its detail::scratch(std::size_t, int) overload once captured the attention
// kernel's scratch calls (int slot literals) in programs that use both.
#include "sparselm/kernels/bsr.hpp"

using namespace sparselm;
using namespace sparselm::test;
using kernels::attention_mask;

namespace {

struct attn_case {
  std::size_t B, T, H, D;
};

struct attn_result {
  fvec out, lse, dqkv;
};

// Runs the kernel on qkv stored with row stride ld (>= 3HD) and returns dense results.
template <class Arch>
attn_result run_kernel(const fvec& qkv, const fvec& dout, const attn_case& c, attention_mask mask,
                       const std::vector<std::int32_t>& lengths, const kernels::attention_dropout& drop,
                       std::size_t pad = 0) {
  const std::size_t N = c.B * c.T, HD = c.H * c.D, ld = 3 * HD + pad, lo = HD + pad;
  fvec q(N * ld, 1e30f), o(N * lo, 1e30f), g(N * lo, 0.0f), dq(N * ld, 1e30f), lse(c.B * c.H * c.T, 1e30f);
  for (std::size_t r = 0; r < N; ++r) {
    for (std::size_t k = 0; k < 3 * HD; ++k) q[r * ld + k] = qkv[r * 3 * HD + k];
    for (std::size_t k = 0; k < HD; ++k) g[r * lo + k] = dout[r * HD + k];
  }
  const float scale = 1.0f / std::sqrt(float(c.D));
  kernels::attention_shape s{c.B, c.T, c.H, c.D};
  kernels::attention_forward<Arch>({q.data(), N, 3 * HD, ld}, {o.data(), N, HD, lo}, lse, s, mask, scale, lengths,
                                   drop);
  kernels::attention_backward<Arch>({g.data(), N, HD, lo}, {q.data(), N, 3 * HD, ld}, {o.data(), N, HD, lo}, lse,
                                    {dq.data(), N, 3 * HD, ld}, s, mask, scale, lengths, drop);
  attn_result r{fvec(N * HD), lse, fvec(N * 3 * HD)};
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t k = 0; k < HD; ++k) r.out[i * HD + k] = o[i * lo + k];
    for (std::size_t k = 0; k < 3 * HD; ++k) r.dqkv[i * 3 * HD + k] = dq[i * ld + k];
  }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("attention forward/backward match the naive reference", Arch, SPARSELM_TEST_ARCHS) {
  const attn_case cases[] = {{1, 1, 1, 4}, {2, 7, 2, 3}, {1, 33, 3, 8}, {2, 129, 2, 16}, {1, 70, 1, 64}};
  for (const auto& c : cases) {
    for (attention_mask mask : {attention_mask::causal, attention_mask::padding}) {
      for (float p : {0.0f, 0.25f}) {
        CAPTURE(c.B);
        CAPTURE(c.T);
        CAPTURE(c.H);
        CAPTURE(c.D);
        CAPTURE(int(mask));
        CAPTURE(p);
        const std::size_t N = c.B * c.T, HD = c.H * c.D;
        fvec qkv = random_vector(N * 3 * HD, 1, -2.0f, 2.0f), dout = random_vector(N * HD, 2);
        std::vector<std::int32_t> lengths;
        if (mask == attention_mask::padding)
          for (std::size_t b = 0; b < c.B; ++b) lengths.push_back(std::int32_t(b == 0 ? c.T : (c.T + 1) / 2));
        // The reference does not mask queries past a length: give them no gradient.
        for (std::size_t b = 0; b < lengths.size(); ++b)
          for (std::size_t i = std::size_t(lengths[b]); i < c.T; ++i)
            for (std::size_t k = 0; k < HD; ++k) dout[(b * c.T + i) * HD + k] = 0.0f;
        counter_rng rng(5);
        kernels::attention_dropout drop{p, rng, 99};
        auto ref = attention_ref(qkv, dout, c.B, c.T, c.H, c.D,
                                 mask == attention_mask::causal ? ref_mask::causal : ref_mask::padding,
                                 1.0 / std::sqrt(double(float(c.D))), lengths, p, rng, 99);
        for (std::size_t pad : {std::size_t(0), std::size_t(5)}) {
          CAPTURE(pad);
          auto r = run_kernel<Arch>(qkv, dout, c, mask, lengths, drop, pad);
          double e_out = 0, e_lse = 0;
          for (std::size_t b = 0; b < c.B; ++b)
            for (std::size_t h = 0; h < c.H; ++h)
              for (std::size_t i = 0; i < c.T; ++i) {
                const bool masked = !lengths.empty() && i >= std::size_t(lengths[b]);
                const std::size_t row = (b * c.H + h) * c.T + i;
                if (masked) {
                  REQUIRE(r.lse[row] == -std::numeric_limits<float>::infinity());
                } else {
                  e_lse = std::max(e_lse, std::fabs(r.lse[row] - ref.lse[row]));
                }
                for (std::size_t d = 0; d < c.D; ++d) {
                  const std::size_t k = (b * c.T + i) * HD + h * c.D + d;
                  if (masked)
                    REQUIRE(r.out[k] == 0.0f);
                  else
                    e_out = std::max(e_out, std::fabs(r.out[k] - ref.out[k]) / (1.0 + std::fabs(ref.out[k])));
                }
              }
          CHECK(e_out < 2e-5);
          CHECK(e_lse < 2e-5);
          CHECK(max_rel_err(r.dqkv, ref.dqkv) < 1e-4);
        }
      }
    }
  }
}

TEST_CASE("attention: results and dropout masks do not depend on the thread count") {
  const attn_case c{3, 45, 2, 16};
  const std::size_t N = c.B * c.T, HD = c.H * c.D;
  fvec qkv = random_vector(N * 3 * HD, 3, -2.0f, 2.0f), dout = random_vector(N * HD, 4);
  kernels::attention_dropout drop{0.3f, counter_rng(11), 1234};
  for (attention_mask mask : {attention_mask::causal, attention_mask::padding}) {
    std::vector<std::int32_t> lengths{45, 17, 0};
    const int before = num_threads();
    set_num_threads(1);
    auto one = run_kernel<native_arch>(qkv, dout, c, mask, lengths, drop);
    set_num_threads(2);
    auto two = run_kernel<native_arch>(qkv, dout, c, mask, lengths, drop);
    set_num_threads(before);
    CHECK(one.out == two.out);
    CHECK(one.dqkv == two.dqkv);
    for (std::size_t i = 0; i < one.lse.size(); ++i) REQUIRE((one.lse[i] == two.lse[i]));
    // the empty sequence (length 0) is all zeros, gradients included
    for (std::size_t i = 2 * c.T; i < 3 * c.T; ++i) {
      for (std::size_t k = 0; k < HD; ++k) REQUIRE(one.out[i * HD + k] == 0.0f);
      for (std::size_t k = 0; k < 3 * HD; ++k) REQUIRE(one.dqkv[i * 3 * HD + k] == 0.0f);
    }
  }
}

TEST_CASE("attention: argument errors name the kernel and the shapes") {
  fvec qkv(2 * 3 * 4), out(2 * 4), lse(2);
  kernels::attention_shape s{1, 2, 1, 4};
  CHECK_THROWS_WITH_AS(kernels::attention_forward({qkv.data(), 2, 11}, {out.data(), 2, 4}, lse, s,
                                                  attention_mask::causal, 0.5f, {}, {}),
                       doctest::Contains("attention_forward: qkv (2x11)"), sparselm::error);
  std::vector<std::int32_t> bad{3};
  CHECK_THROWS_WITH_AS(kernels::attention_forward({qkv.data(), 2, 12}, {out.data(), 2, 4}, lse, s,
                                                  attention_mask::padding, 0.5f, bad, {}),
                       doctest::Contains("length 3"), sparselm::error);
}
