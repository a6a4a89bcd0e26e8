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

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

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
                       std::size_t pad = 0, dtype compute = dtype::f32) {
  const std::size_t N = c.B * c.T, HD = c.H * c.D, ld = 3 * HD + pad, lo = HD + pad;
  fvec q(N * ld, 1e30f), o(N * lo, 1e30f), g(N * lo, 0.0f), dq(N * ld, 1e30f), lse(c.B * c.H * c.T, 1e30f);
  for (std::size_t r = 0; r < N; ++r) {
    for (std::size_t k = 0; k < 3 * HD; ++k) q[r * ld + k] = qkv[r * 3 * HD + k];
    for (std::size_t k = 0; k < HD; ++k) g[r * lo + k] = dout[r * HD + k];
  }
  const float scale = 1.0f / std::sqrt(float(c.D));
  kernels::attention_shape s{c.B, c.T, c.H, c.D};
  kernels::attention_forward<Arch>({q.data(), N, 3 * HD, ld}, {o.data(), N, HD, lo}, lse, s, mask, scale, lengths, drop,
                                   compute);
  kernels::attention_backward<Arch>({g.data(), N, HD, lo}, {q.data(), N, 3 * HD, ld}, {o.data(), N, HD, lo}, lse,
                                    {dq.data(), N, 3 * HD, ld}, s, mask, scale, lengths, drop, compute);
  attn_result r{fvec(N * HD), lse, fvec(N * 3 * HD)};
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t k = 0; k < HD; ++k) r.out[i * HD + k] = o[i * lo + k];
    for (std::size_t k = 0; k < 3 * HD; ++k) r.dqkv[i * 3 * HD + k] = dq[i * ld + k];
  }
  return r;
}

// Random inputs of a case: qkv in [-2, 2), dout, and for the padding mask the lengths T and
// ceil(T/2); queries past a length get no gradient (the reference does not mask them). With
// round_bf16 every value is rounded to bf16 first.
struct attn_inputs {
  fvec qkv, dout;
  std::vector<std::int32_t> lengths;
};
attn_inputs make_inputs(const attn_case& c, attention_mask mask, std::uint64_t seed, bool round_bf16 = false) {
  const std::size_t N = c.B * c.T, HD = c.H * c.D;
  attn_inputs in{random_vector(N * 3 * HD, seed, -2.0f, 2.0f), random_vector(N * HD, seed + 1), {}};
  if (round_bf16) {
    for (auto& x : in.qkv) x = float(bf16(x));
    for (auto& x : in.dout) x = float(bf16(x));
  }
  if (mask == attention_mask::padding)
    for (std::size_t b = 0; b < c.B; ++b) in.lengths.push_back(std::int32_t(b == 0 ? c.T : (c.T + 1) / 2));
  for (std::size_t b = 0; b < in.lengths.size(); ++b)
    for (std::size_t i = std::size_t(in.lengths[b]); i < c.T; ++i)
      for (std::size_t k = 0; k < HD; ++k) in.dout[(b * c.T + i) * HD + k] = 0.0f;
  return in;
}
// The double reference with the dropout of drop_of(p).
kernels::attention_dropout drop_of(float p) { return {p, counter_rng(5), 99}; }
auto reference(const attn_inputs& in, const attn_case& c, attention_mask mask, float p) {
  return attention_ref(in.qkv, in.dout, c.B, c.T, c.H, c.D,
                       mask == attention_mask::causal ? ref_mask::causal : ref_mask::padding,
                       1.0 / std::sqrt(double(float(c.D))), in.lengths, p, counter_rng(5), 99);
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
        const std::size_t HD = c.H * c.D;
        const attn_inputs in = make_inputs(c, mask, 1);
        const auto& [qkv, dout, lengths] = in;
        const auto drop = drop_of(p);
        const auto ref = reference(in, c, mask, p);
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

// bf16 compute (the bf16 precision policy): the tile products take bf16 operands with fp32 sums.
// On inputs already rounded to bf16 (q, k, v and dO), S = s·QKᵀ and G = dO·Vᵀ are the fp32 ones up
// to the order of the sums, so lse matches the double reference to fp32 rounding; what bf16 adds is
// the rounding of P (for P·V and Pdᵀ·dO) and of dS (for dQ and dK), a relative 2^-9 per element:
// out within 4e-3 (relative to 1 + |ref|); the gradients, sums of up to T such terms that partly
// cancel, within 1.5e-2 (measured up to 6.7e-3; fp32 compute gives 1e-4). Native and portable paths.
TEST_CASE_TEMPLATE("attention in bf16 compute: within the rounding of P and dS of the reference", Arch,
                   SPARSELM_TEST_ARCHS) {
  const attn_case cases[] = {{2, 7, 2, 4}, {1, 70, 2, 32}, {2, 129, 1, 64}};
  for (const auto& c : cases) {
    for (attention_mask mask : {attention_mask::causal, attention_mask::padding}) {
      for (float p : {0.0f, 0.25f}) {
        CAPTURE(c.T);
        CAPTURE(c.D);
        CAPTURE(int(mask));
        CAPTURE(p);
        const std::size_t HD = c.H * c.D;
        const attn_inputs in = make_inputs(c, mask, 7, true);
        const auto& [qkv, dout, lengths] = in;
        const auto drop = drop_of(p);
        const auto ref = reference(in, c, mask, p);
        auto r = run_kernel<Arch>(qkv, dout, c, mask, lengths, drop, 3, dtype::bf16);
        auto f = run_kernel<Arch>(qkv, dout, c, mask, lengths, drop, 3, dtype::f32);
        // Queries past a length (which the reference does not mask) are compared as in the test above.
        double e_lse = 0, e_out = 0, e_out32 = 0;
        for (std::size_t b = 0; b < c.B; ++b)
          for (std::size_t h = 0; h < c.H; ++h)
            for (std::size_t i = 0; i < c.T; ++i) {
              const std::size_t row = (b * c.H + h) * c.T + i;
              if (!lengths.empty() && i >= std::size_t(lengths[b])) {
                REQUIRE(r.lse[row] == -std::numeric_limits<float>::infinity());
                continue;
              }
              e_lse = std::max(e_lse, std::fabs(r.lse[row] - ref.lse[row]));
              for (std::size_t d = 0; d < c.D; ++d) {
                const std::size_t k = (b * c.T + i) * HD + h * c.D + d;
                e_out = std::max(e_out, std::fabs(r.out[k] - ref.out[k]) / (1.0 + std::fabs(ref.out[k])));
                e_out32 = std::max(e_out32, std::fabs(f.out[k] - ref.out[k]) / (1.0 + std::fabs(ref.out[k])));
              }
            }
        CHECK(e_lse < 2e-5);
        CHECK(e_out < 4e-3);
        CHECK(max_rel_err(r.dqkv, ref.dqkv) < 1.5e-2);
        // the compute type is honoured: bf16 differs from fp32 (which is within 2e-5 of the reference)
        CHECK(e_out32 < 2e-5);
        CHECK(r.out != f.out);
        CHECK(r.dqkv != f.dqkv);
      }
    }
  }
}

// qkv and out held in bf16 (the attention layer's bf16 activations): the same results, bit for bit,
// as fp32 storage under bf16 compute (whose products round them the same way), given the same
// rounded out in backward. fp32 compute over bf16 storage is refused.
TEST_CASE_TEMPLATE("attention: qkv and out held in bf16 give the results of bf16 compute on fp32 storage", Arch,
                   SPARSELM_TEST_ARCHS) {
  for (const attn_case c : {attn_case{2, 7, 2, 4}, attn_case{1, 70, 2, 32}, attn_case{2, 129, 1, 64}})
    for (attention_mask mask : {attention_mask::causal, attention_mask::padding}) {
      CAPTURE(c.T);
      CAPTURE(int(mask));
      const std::size_t N = c.B * c.T, HD = c.H * c.D;
      const attn_inputs in = make_inputs(c, mask, 21);
      const auto drop = drop_of(0.25f);
      const float scale = 1.0f / std::sqrt(float(c.D));
      const kernels::attention_shape s{c.B, c.T, c.H, c.D};
      auto round = [](const fvec& v) {
        std::vector<bf16> r(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
        return r;
      };
      // fp32 storage, bf16 compute; backward given out rounded to bf16 (held in float)
      fvec o32(N * HD), l32(c.B * c.H * c.T), d32(N * 3 * HD);
      const const_matrix_view<float> q32(in.qkv.data(), N, 3 * HD);
      kernels::attention_forward<Arch>(q32, {o32.data(), N, HD}, l32, s, mask, scale, in.lengths, drop, dtype::bf16);
      fvec o32r(o32.size());
      for (std::size_t i = 0; i < o32.size(); ++i) o32r[i] = float(bf16(o32[i]));
      kernels::attention_backward<Arch>({in.dout.data(), N, HD}, q32, {o32r.data(), N, HD}, l32,
                                        {d32.data(), N, 3 * HD}, s, mask, scale, in.lengths, drop, dtype::bf16);
      // bf16 storage
      const std::vector<bf16> q16 = round(in.qkv);
      const const_matrix_view<bf16> qv(q16.data(), N, 3 * HD);
      fvec o(N * HD), l(c.B * c.H * c.T), d(N * 3 * HD);
      kernels::attention_forward<Arch>(qv, {o.data(), N, HD}, l, s, mask, scale, in.lengths, drop, dtype::bf16);
      const std::vector<bf16> o16 = round(o);
      kernels::attention_backward<Arch>({in.dout.data(), N, HD}, qv, const_matrix_view<bf16>(o16.data(), N, HD), l,
                                        {d.data(), N, 3 * HD}, s, mask, scale, in.lengths, drop, dtype::bf16);
      CHECK(o == o32);
      CHECK(d == d32);
      for (std::size_t i = 0; i < l.size(); ++i) REQUIRE((l[i] == l32[i]));
      CHECK_THROWS_WITH_AS(
          kernels::attention_forward<Arch>(qv, {o.data(), N, HD}, l, s, mask, scale, in.lengths, drop, dtype::f32),
          doctest::Contains("attention_forward: qkv held in bf16 needs the bf16 compute type, got F32"), error);
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

}  // namespace SPARSELM_UNITY_ID
