// The fused block-sparse feed-forward (kernels/bsr_ffn.hpp) against a naive reference: densified
// weights, double precision, GELU from its formula; every block size the fused kernel serves, the
// portable (SSE2), AVX2 and native paths, odd row counts, several tile sizes and thread counts.

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "bsr_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr_ffn.hpp"

namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using kernels::gelu_kind;

namespace {

double gelu_ref(double x, gelu_kind k) {
  if (k == gelu_kind::tanh) return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
double gelu_grad_ref(double x, gelu_kind k) {
  if (k == gelu_kind::tanh) {
    const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
  }
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// The whole feed-forward in double on dense copies of the weights.
struct ffn_reference {
  std::vector<double> y, dx, dw1, db1, dw2;  // dw1, dw2 dense (in x out)
  ffn_reference(const std::vector<float>& x, const std::vector<float>& dy, std::size_t M, std::size_t C, std::size_t F,
                const std::vector<float>& w1, const std::vector<float>& b1, const std::vector<float>& w2,
                const std::vector<float>& b2, gelu_kind k)
      : y(M * C), dx(M * C), dw1(C * F), db1(F), dw2(F * C) {
    std::vector<double> h(F), a(F), dh(F);
    for (std::size_t m = 0; m < M; ++m) {
      for (std::size_t f = 0; f < F; ++f) {
        double s = b1[f];
        for (std::size_t c = 0; c < C; ++c) s += double(x[m * C + c]) * w1[c * F + f];
        h[f] = s;
        a[f] = gelu_ref(s, k);
      }
      for (std::size_t c = 0; c < C; ++c) {
        double s = b2[c];
        for (std::size_t f = 0; f < F; ++f) s += a[f] * w2[f * C + c];
        y[m * C + c] = s;
      }
      for (std::size_t f = 0; f < F; ++f) {
        double s = 0;
        for (std::size_t c = 0; c < C; ++c) s += double(dy[m * C + c]) * w2[f * C + c];
        dh[f] = s * gelu_grad_ref(h[f], k);
        db1[f] += dh[f];
        for (std::size_t c = 0; c < C; ++c) dw2[f * C + c] += a[f] * dy[m * C + c];
      }
      for (std::size_t c = 0; c < C; ++c) {
        double s = 0;
        for (std::size_t f = 0; f < F; ++f) s += dh[f] * w1[c * F + f];
        dx[m * C + c] = s;
        for (std::size_t f = 0; f < F; ++f) dw1[c * F + f] += double(x[m * C + c]) * dh[f];
      }
    }
  }
};

// |got - want| <= tol·(1 + |want|) everywhere (NaN fails).
void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= tol)) ++bad;
    if (!(e <= worst)) worst = e;
  }
  INFO(what, ": worst relative error ", worst, ", tolerance ", tol);
  CHECK(bad == 0);
}

// The active blocks of a dense gradient in slot order.
std::vector<double> at_slots(const sparse::block_pattern& p, const std::vector<double>& dense) {
  const std::size_t B = p.block, out = p.out();
  std::vector<double> v(p.nnz() * B * B);
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t a = 0; a < B; ++a)
      for (std::size_t b = 0; b < B; ++b) v[(s * B + a) * B + b] = dense[(p.row[s] * B + a) * out + p.col[s] * B + b];
  return v;
}

template <std::size_t B, gelu_kind K, class Arch>
void check_fused(std::size_t M, std::size_t cb, std::size_t fb, double density, std::size_t tile_rows, std::uint32_t seed) {
  const std::size_t C = cb * B, F = fb * B;
  CAPTURE(B);
  CAPTURE(M);
  CAPTURE(C);
  CAPTURE(tile_rows);
  CAPTURE(density);
  const auto p1 = test::make_pattern(B, cb, fb, std::max<std::size_t>(1, std::size_t(density * double(cb * fb))), seed);
  const auto p2 = test::make_pattern(B, fb, cb, std::max<std::size_t>(1, std::size_t(density * double(cb * fb))),
                                     seed + 1, test::layout::skip_first_row);
  const auto v1 = test::random_vec(p1.nnz() * B * B, seed + 2), v2 = test::random_vec(p2.nnz() * B * B, seed + 3);
  const auto b1 = test::random_vec(F, seed + 4), b2 = test::random_vec(C, seed + 5);
  const auto x = test::random_vec(M * C, seed + 6), dy = test::random_vec(M * C, seed + 7);
  const ffn_reference ref(x, dy, M, C, F, test::densify(p1, v1.data()), b1, test::densify(p2, v2.data()), b2, K);

  // Forward keeping H (for the first and third backward below) and without.
  std::vector<float> y(M * C, NAN), y2(M * C, NAN);  // never read
  std::vector<float> hidden(kernels::bsr_ffn_hidden_size<B, Arch>(M, F, tile_rows), NAN);
  kernels::bsr_ffn_forward<B, K, Arch>({x.data(), M, C}, p1, v1.data(), b1.data(), p2, v2.data(), b2.data(),
                                       {y.data(), M, C}, hidden.data(), tile_rows);
  kernels::bsr_ffn_forward<B, K, Arch>({x.data(), M, C}, p1, v1.data(), b1.data(), p2, v2.data(), b2.data(),
                                       {y2.data(), M, C}, nullptr, tile_rows);
  CHECK(y == y2);
  // fp32 sums of up to F = 256 products of magnitude ~1 (then C more): rounding ~ sqrt(F)·2^-24 of
  // the terms' size, which exceeds |want| where the sums cancel; 5e-5 of 1 + |want| holds that.
  const double tol = 5e-5;
  check_close(y, ref.y, tol, "Y");

  // dX assigned (NaN in it must not propagate), the gradients accumulated onto 1s.
  std::vector<float> dx(M * C, NAN), dw1(v1.size(), 1.0f), db1(F, 1.0f), dw2(v2.size(), 1.0f);
  kernels::bsr_ffn_backward<B, K, Arch>({x.data(), M, C}, {dy.data(), M, C}, p1, v1.data(), b1.data(), p2, v2.data(),
                                        0.0f, {dx.data(), M, C}, dw1.data(), db1.data(), dw2.data(), hidden.data(),
                                        tile_rows);
  check_close(dx, ref.dx, tol, "dX");
  auto plus1 = [](std::vector<double> v) {
    for (auto& e : v) e += 1.0;
    return v;
  };
  // Sums over M rows of products of values in [-1, 1] (|terms| up to ~F): a relative 1e-4.
  check_close(dw1, plus1(at_slots(p1, ref.dw1)), 1e-4, "dW1");
  check_close(db1, plus1(ref.db1), 1e-4, "db1");
  check_close(dw2, plus1(at_slots(p2, ref.dw2)), 1e-4, "dW2");

  // beta = 1 accumulates into dX (H recomputed); a null dX computes only the parameter gradients.
  std::vector<float> dx2(M * C, 0.5f), dw1b(v1.size(), 0.0f), dw2b(v2.size(), 0.0f);
  kernels::bsr_ffn_backward<B, K, Arch>({x.data(), M, C}, {dy.data(), M, C}, p1, v1.data(), b1.data(), p2, v2.data(),
                                        1.0f, {dx2.data(), M, C}, dw1b.data(), nullptr, dw2b.data(), nullptr, tile_rows);
  std::vector<double> want(ref.dx);
  for (auto& e : want) e += 0.5;
  check_close(dx2, want, tol, "dX with beta = 1");
  std::vector<float> dw1c(v1.size(), 0.0f), dw2c(v2.size(), 0.0f);
  kernels::bsr_ffn_backward<B, K, Arch>({x.data(), M, C}, {dy.data(), M, C}, p1, v1.data(), b1.data(), p2, v2.data(),
                                        0.0f, matrix_view<float>{}, dw1c.data(), nullptr, dw2c.data(), hidden.data(),
                                        tile_rows);
  check_close(dw1c, at_slots(p1, ref.dw1), 1e-4, "dW1 without dX");
  check_close(dw2c, at_slots(p2, ref.dw2), 1e-4, "dW2 without dX");
  // Kept or recomputed, H is the same: so are the gradients, to the last bit.
  CHECK(dw1b == dw1c);
  CHECK(dw2b == dw2c);
}

template <class Arch>
void check_arch() {
  constexpr std::size_t W = simd_width<float, Arch>;
  const auto each_b = [&]<std::size_t B>() {
    if constexpr (kernels::bsr_ffn_fuses<B, Arch>) {
      constexpr std::size_t MR = kernels::detail::bsr_tiling<B, Arch>::MR;
      check_fused<B, gelu_kind::tanh, Arch>(1, 2, 8, 0.5, 0, 11);
      check_fused<B, gelu_kind::tanh, Arch>(37, 3, 12, 0.3, 0, 12);
      check_fused<B, gelu_kind::erf, Arch>(2 * MR + 5, 2, 6, 0.7, 0, 13);
      check_fused<B, gelu_kind::tanh, Arch>(5 * MR + 3, 3, 12, 0.25, 2 * MR, 14);
      check_fused<B, gelu_kind::tanh, Arch>(130, 4, 16, 1.0, 3 * MR + 1, 15);  // dense pattern, tiles of 3 panels
    }
  };
  each_b.template operator()<1>();
  each_b.template operator()<4>();
  each_b.template operator()<8>();
  each_b.template operator()<16>();
  CHECK(kernels::bsr_ffn_fuses<16, Arch>);  // 16 is a multiple of every SIMD width here
  CHECK(kernels::bsr_ffn_fuses<W, Arch>);
}

}  // namespace

TEST_CASE("fused block-sparse feed-forward: portable path against the naive reference") { check_arch<xsimd::sse2>(); }

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("fused block-sparse feed-forward: AVX2 path against the naive reference") {
  check_arch<xsimd::fma3<xsimd::avx2>>();
}
#endif

TEST_CASE("fused block-sparse feed-forward: native path, one and two threads") {
  const int saved = num_threads();
  for (int t : {1, 2}) {
    CAPTURE(t);
    set_num_threads(t);
    check_arch<native_arch>();
  }
  set_num_threads(saved);
}

TEST_CASE("fused block-sparse feed-forward: mismatched shapes are errors naming the kernel and the shapes") {
  constexpr std::size_t B = 16;
  const auto p1 = test::make_pattern(B, 2, 8, 4, 1), p2 = test::make_pattern(B, 8, 2, 4, 2);
  const auto v = test::random_vec(4 * B * B, 3);
  std::vector<float> x(3 * 2 * B), y(3 * 2 * B);
  using kernels::gelu_kind;
  const auto fwd = [&](const sparse::block_pattern& a, const sparse::block_pattern& b, std::size_t yrows) {
    kernels::bsr_ffn_forward<B, gelu_kind::tanh>({x.data(), 3, 2 * B}, a, v.data(), nullptr, b, v.data(), nullptr,
                                                 {y.data(), yrows, 2 * B});
  };
  const auto bwd = [&] {
    kernels::bsr_ffn_backward<B, gelu_kind::tanh>({x.data(), 3, 2 * B}, {y.data(), 3, 2 * B}, p1, v.data(), nullptr, p2,
                                                  v.data(), 0.0f, {y.data(), 3, 2 * B}, nullptr, nullptr, nullptr);
  };
  CHECK_THROWS_WITH_AS(fwd(p1, p1, 3), doctest::Contains("bsr_ffn_forward: shapes do not match: X (3x32)"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(fwd(p1, p2, 2), doctest::Contains("output (2x32)"), sparselm::error);
  CHECK_THROWS_WITH_AS(bwd(), doctest::Contains("bsr_ffn_backward: null weight gradients"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
