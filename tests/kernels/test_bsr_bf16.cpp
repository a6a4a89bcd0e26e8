// bf16 block-sparse kernels (kernels/bsr_bf16.hpp) against a naive double reference on the
// bf16-rounded operands: every element within (2K + 4) * eps32 * (sum |a*b| + |bias| + |beta*C0|),
// the fp32 summation bound (the products of bf16 values are exact in fp32). Forward, data and
// weight gradients; native and portable paths, 1 and 2 threads, B = 16, 8, 4, empty block rows and
// columns, odd and small M, K not a multiple of 32, NaN propagation; X given in bf16.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../sparse/bsr_reference.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/sparse/block_pattern.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using kernels::bsr_bf16_path;

namespace {

constexpr double eps32 = std::numeric_limits<float>::epsilon();
const float nan_f = std::numeric_limits<float>::quiet_NaN();

using test::layout;
using test::make_pattern;
using test::random_vec;

double r16(float x) { return double(float(bf16(x))); }

// Expected output and error bound per element of a (rows x cols) result, leading dimension ld.
struct expected {
  std::vector<double> want, bound;
  std::size_t rows, cols, ld;
};

// C = beta*C0 + A · S [+ bias] on the rounded operands, with S the block-sparse W (trans: Wᵀ).
// A (rows x K, lda); C0 (rows x N, ld ldc). Only the active blocks are multiplied (a NaN in A
// reaches the outputs of the blocks its column meets).
expected reference(bool trans, const float* A, std::size_t lda, std::size_t rows, const sparse::block_pattern& p,
                   const float* values, float beta, const float* C0, std::size_t ldc, const float* bias) {
  const std::size_t B = p.block, K = trans ? p.out() : p.in(), N = trans ? p.in() : p.out();
  expected e{std::vector<double>(rows * ldc, 0.0), std::vector<double>(rows * ldc, 0.0), rows, N, ldc};
  std::vector<double> mag(rows * ldc, 0.0);
  for (std::size_t s = 0; s < p.nnz(); ++s) {
    const std::size_t kb = trans ? p.col[s] : p.row[s], nb = trans ? p.row[s] : p.col[s];
    for (std::size_t m = 0; m < rows; ++m)
      for (std::size_t k = 0; k < B; ++k)
        for (std::size_t c = 0; c < B; ++c) {
          const double a = r16(A[m * lda + kb * B + k]);
          const double w = r16(values[s * B * B + (trans ? c * B + k : k * B + c)]);
          e.want[m * ldc + nb * B + c] += a * w;
          mag[m * ldc + nb * B + c] += std::fabs(a * w);
        }
  }
  for (std::size_t m = 0; m < rows; ++m)
    for (std::size_t c = 0; c < N; ++c) {
      double extra = 0;
      if (bias) extra += bias[c];
      if (beta != 0.0f) extra += double(beta) * C0[m * ldc + c];
      e.want[m * ldc + c] += extra;
      e.bound[m * ldc + c] = (2.0 * double(K) + 4.0) * eps32 * (mag[m * ldc + c] + std::fabs(extra)) + 1e-30;
    }
  return e;
}

// dvalues0 + Xᵀ·dY on the active blocks (slot order) on the rounded operands.
expected reference_wgrad(const float* X, std::size_t ldx, const float* dY, std::size_t ldd, std::size_t M,
                         const sparse::block_pattern& p, const std::vector<float>& dv0) {
  const std::size_t B = p.block;
  expected e{std::vector<double>(dv0.size(), 0.0), std::vector<double>(dv0.size(), 0.0), 1, dv0.size(), 0};
  for (std::size_t s = 0; s < p.nnz(); ++s)
    for (std::size_t a = 0; a < B; ++a)
      for (std::size_t c = 0; c < B; ++c) {
        double sum = 0, mag = 0;
        for (std::size_t m = 0; m < M; ++m) {
          const double x = r16(X[m * ldx + p.row[s] * B + a]) * r16(dY[m * ldd + p.col[s] * B + c]);
          sum += x;
          mag += std::fabs(x);
        }
        const std::size_t i = s * B * B + a * B + c;
        e.want[i] = sum + dv0[i];
        e.bound[i] = (2.0 * double(M) + 4.0) * eps32 * (mag + std::fabs(dv0[i])) + 1e-30;
      }
  return e;
}

// Every element within its bound; NaN exactly where the reference is NaN.
void check_result(const float* got, const expected& e, const std::string& what) {
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t r = 0; r < e.rows; ++r)
    for (std::size_t c = 0; c < e.cols; ++c) {
      const double g = got[r * e.ld + c], w = e.want[r * e.ld + c];
      if (std::isnan(w) || std::isnan(g)) {
        bad += std::isnan(w) != std::isnan(g);
        continue;
      }
      const double ratio = std::fabs(g - w) / e.bound[r * e.ld + c];
      worst = std::max(worst, ratio);
      bad += !(ratio <= 1.0);
    }
  INFO(what, ": worst error / bound ", worst);
  CHECK(bad == 0);
}

// The paths this build and CPU run: AMX for B = 16 where usable, native, portable.
std::vector<bsr_bf16_path> paths(std::size_t B = 0) {
  std::vector<bsr_bf16_path> r;
  if (B == 16 && kernels::bsr_bf16_amx && kernels::gemm_bf16_amx_usable()) r.push_back(bsr_bf16_path::amx);
  if (kernels::bsr_bf16_native && simd_width<float> == 16) r.push_back(bsr_bf16_path::native);
  r.push_back(bsr_bf16_path::portable);
  return r;
}

const char* path_name(bsr_bf16_path p) {
  return p == bsr_bf16_path::amx ? "amx" : p == bsr_bf16_path::native ? "native" : "portable";
}

struct shape {
  std::size_t M, rows_b, cols_b;
};

// Forward and data gradient on one pattern, every path, beta 0 / 1 / 0.5, with and without bias;
// the weight gradient. with_nan puts a NaN into X, dY and the block values.
template <std::size_t B, class Arch = native_arch>
void check_products(const shape& sh, std::size_t nblocks, layout lay, std::uint32_t seed, bool with_nan = false) {
  const auto p = make_pattern(B, sh.rows_b, sh.cols_b, nblocks, seed, lay);
  const std::size_t M = sh.M, in = p.in(), out = p.out();
  const std::size_t ldx = in + 3, ldy = out + 5;  // views with padding
  auto X = random_vec(M * ldx, seed + 1);
  auto dY = random_vec(M * ldy, seed + 5);
  auto values = random_vec(std::max<std::size_t>(1, p.nnz() * B * B), seed + 2);
  if (with_nan && M > 0) {
    X[(M / 2) * ldx + in / 2] = nan_f;
    dY[(M - 1) * ldy + out / 3] = nan_f;
    if (p.nnz()) values[values.size() / 2 + 1] = nan_f;
  }
  const auto bias = random_vec(out, seed + 3);
  const auto Y0 = random_vec(M * ldy, seed + 4);
  const auto dX0 = random_vec(M * ldx, seed + 6);
  INFO("B = ", B, ", M = ", M, ", in = ", in, ", out = ", out, ", blocks = ", p.nnz(), ", arch = ",
       std::string(Arch::name()), ", threads = ", num_threads());
  std::vector<float> first_y, first_dx;  // the first path's results, for the agreement check
  for (bsr_bf16_path path : paths(B)) {
    if (path != bsr_bf16_path::portable && !kernels::detail::arch_is_avx512<Arch>) continue;
    for (float beta : {0.0f, 1.0f, 0.5f})
      for (bool with_bias : {false, true}) {
        INFO("path ", std::string(path_name(path)), ", beta = ", beta, ", bias = ", with_bias);
        std::vector<float> Y = Y0;
        if (beta == 0.0f) std::fill(Y.begin(), Y.end(), nan_f);
        const float* b = with_bias ? bias.data() : nullptr;
        kernels::bsr_matmul_bf16<B, Arch>({X.data(), M, in, ldx}, p, values.data(), beta, {Y.data(), M, out, ldy}, b,
                                          path);
        check_result(Y.data(), reference(false, X.data(), ldx, M, p, values.data(), beta, Y0.data(), ldy, b),
                     "bsr_matmul_bf16");
        if (with_bias) continue;
        std::vector<float> dX = dX0;
        if (beta == 0.0f) std::fill(dX.begin(), dX.end(), nan_f);
        kernels::bsr_matmul_t_bf16<B, Arch>({dY.data(), M, out, ldy}, p, values.data(), beta, {dX.data(), M, in, ldx},
                                            path);
        check_result(dX.data(), reference(true, dY.data(), ldy, M, p, values.data(), beta, dX0.data(), ldx, nullptr),
                     "bsr_matmul_t_bf16");
        if (beta != 1.0f) continue;
        // The paths agree within twice the bound of each against the reference.
        if (first_y.empty()) {
          first_y = Y;
          first_dx = dX;
        } else {
          auto ey = reference(false, X.data(), ldx, M, p, values.data(), beta, Y0.data(), ldy, nullptr);
          for (std::size_t i = 0; i < ey.want.size(); ++i) {
            ey.want[i] = first_y[i];
            ey.bound[i] *= 2.0;
          }
          check_result(Y.data(), ey, "bsr_matmul_bf16: two paths");
          auto ex = reference(true, dY.data(), ldy, M, p, values.data(), beta, dX0.data(), ldx, nullptr);
          for (std::size_t i = 0; i < ex.want.size(); ++i) {
            ex.want[i] = first_dx[i];
            ex.bound[i] *= 2.0;
          }
          check_result(dX.data(), ex, "bsr_matmul_t_bf16: two paths");
        }
      }
  }
  // Both backward products (one pass on the native path): dX bitwise bsr_matmul_t_bf16's on the
  // same path, dvalues within the weight gradient's bound.
  for (bsr_bf16_path path : paths(B)) {
    if (path != bsr_bf16_path::portable && !kernels::detail::arch_is_avx512<Arch>) continue;
    for (float beta : {0.0f, 0.5f}) {
      INFO("bsr_backward_bf16, path ", std::string(path_name(path)), ", beta = ", beta);
      std::vector<float> dXs = dX0, dXf = dX0;
      if (beta == 0.0f) {
        std::fill(dXs.begin(), dXs.end(), nan_f);
        std::fill(dXf.begin(), dXf.end(), nan_f);
      }
      kernels::bsr_matmul_t_bf16<B, Arch>({dY.data(), M, out, ldy}, p, values.data(), beta, {dXs.data(), M, in, ldx},
                                          path);
      const auto dvb0 = random_vec(std::max<std::size_t>(1, p.nnz() * B * B), seed + 8);
      auto dvb = dvb0;
      kernels::bsr_backward_bf16<B, Arch>(const_matrix_view<float>(X.data(), M, in, ldx), {dY.data(), M, out, ldy}, p,
                                          values.data(), beta, {dXf.data(), M, in, ldx}, dvb.data(), path);
      CHECK_MESSAGE(std::memcmp(dXs.data(), dXf.data(), dXs.size() * sizeof(float)) == 0,
                    "bsr_backward_bf16's dX differs from bsr_matmul_t_bf16's");
      if (p.nnz())
        check_result(dvb.data(), reference_wgrad(X.data(), ldx, dY.data(), ldy, M, p, dvb0), "bsr_backward_bf16");
    }
  }
  // Weight gradient (accumulates).
  if (p.nnz() == 0) return;
  const auto dv0 = random_vec(p.nnz() * B * B, seed + 7);
  std::vector<float> first_dv;
  for (bsr_bf16_path path : paths(B)) {
    if (path != bsr_bf16_path::portable && !kernels::detail::arch_is_avx512<Arch>) continue;
    INFO("path ", std::string(path_name(path)));
    auto dv = dv0;
    kernels::bsr_weight_grad_bf16<B, Arch>({X.data(), M, in, ldx}, {dY.data(), M, out, ldy}, p, dv.data(), path);
    auto e = reference_wgrad(X.data(), ldx, dY.data(), ldy, M, p, dv0);
    check_result(dv.data(), e, "bsr_weight_grad_bf16");
    if (first_dv.empty()) {
      first_dv = dv;
      continue;
    }
    for (std::size_t i = 0; i < e.want.size(); ++i) {
      e.want[i] = first_dv[i];
      e.bound[i] *= 2.0;
    }
    check_result(dv.data(), e, "bsr_weight_grad_bf16: two paths");
  }
}

template <std::size_t B>
void check_all_products() {
  // K = rows_b * B and N = cols_b * B, mostly not multiples of 32; M odd and small to several panels.
  // K = 0 or N = 0 (no blocks: the output is beta*C [+ bias]).
  const shape shapes[] = {{5, 0, 2}, {5, 2, 0}, {1, 1, 1}, {2, 1, 3}, {7, 3, 1}, {33, 3, 5}, {129, 5, 2}, {50, 6, 4},
                          {300, 3, 7}};
  std::uint32_t seed = 100;
  for (const auto& sh : shapes) {
    const std::size_t n = sh.rows_b * sh.cols_b;
    for (std::size_t nb : {std::size_t(0), std::size_t(1), std::max<std::size_t>(1, n / 3), n})
      check_products<B>(sh, nb, layout::random, seed++);
  }
  // Empty block columns (forward) and empty block rows (data gradient).
  check_products<B>({37, 4, 5}, 8, layout::skip_first_col, 7);
  check_products<B>({37, 4, 5}, 8, layout::skip_first_row, 8);
  // A deep K (not a multiple of 32 for B = 16), several column groups.
  check_products<B>({61, 1040 / B, 48 / B}, (1040 / B) * (48 / B) / 4, layout::random, 12);
  // The weight gradient over several chunks of rows per thread, odd rows per thread.
  check_products<B>({1101, 2, 3}, 4, layout::random, 14);
  // The portable path on a narrower SIMD architecture.
  check_products<B, xsimd::sse2>({33, 3, 5}, 6, layout::random, 13);
}

void run_threads(void (*f)()) {
  const int saved = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    f();
  }
  set_num_threads(saved);
}

}  // namespace

TEST_CASE("bf16 block-sparse forward, data and weight gradients match the rounded double reference, B = 16") {
  run_threads(&check_all_products<16>);
}
TEST_CASE("bf16 block-sparse forward, data and weight gradients match the rounded double reference, B = 8") {
  run_threads(&check_all_products<8>);
}
TEST_CASE("bf16 block-sparse forward, data and weight gradients match the rounded double reference, B = 4") {
  run_threads(&check_all_products<4>);
}

// X given in bf16 (a layer's kept activations) gives the bits of the float X it rounds from: forward
// (beta 0 and 1, with bias) and weight gradient, every path, a row stride wider than the row
// (the widening of the non-native paths), M odd and over several weight-gradient chunks.
template <std::size_t B>
void check_bf16_x(std::size_t M, std::size_t rows_b, std::size_t cols_b, std::size_t n, std::uint32_t seed) {
  const auto p = make_pattern(B, rows_b, cols_b, n, seed, layout::random);
  const std::size_t K = p.in(), N = p.out(), ldx = K + 8;
  const auto X = random_vec(M * ldx, seed + 1), dY = random_vec(M * N, seed + 2);
  const auto values = random_vec(p.nnz() * B * B, seed + 3), bias = random_vec(N, seed + 4);
  std::vector<bf16> X16(X.size());
  for (std::size_t i = 0; i < X.size(); ++i) X16[i] = bf16(X[i]);
  for (bsr_bf16_path path : paths(B)) {
    INFO("B = ", B, ", M = ", M, ", path ", std::string(path_name(path)), ", threads ", num_threads());
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> Y32 = random_vec(M * N, seed + 5), Y16 = Y32;
      kernels::bsr_matmul_bf16<B>({X.data(), M, K, ldx}, p, values.data(), beta, {Y32.data(), M, N}, bias.data(), path);
      kernels::bsr_matmul_bf16<B>(const_matrix_view<bf16>(X16.data(), M, K, ldx), p, values.data(), beta,
                                  {Y16.data(), M, N}, bias.data(), path);
      CHECK(Y16 == Y32);
    }
    std::vector<float> dv32 = random_vec(p.nnz() * B * B, seed + 6), dv16 = dv32;
    kernels::bsr_weight_grad_bf16<B>({X.data(), M, K, ldx}, {dY.data(), M, N}, p, dv32.data(), path);
    kernels::bsr_weight_grad_bf16<B>(const_matrix_view<bf16>(X16.data(), M, K, ldx), {dY.data(), M, N}, p,
                                     dv16.data(), path);
    CHECK(dv16 == dv32);
    std::vector<float> dX32(M * K), dX16(M * K), dvb32 = random_vec(p.nnz() * B * B, seed + 7), dvb16 = dvb32;
    kernels::bsr_backward_bf16<B>(const_matrix_view<float>(X.data(), M, K, ldx), {dY.data(), M, N}, p, values.data(),
                                  0.0f, {dX32.data(), M, K}, dvb32.data(), path);
    kernels::bsr_backward_bf16<B>(const_matrix_view<bf16>(X16.data(), M, K, ldx), {dY.data(), M, N}, p, values.data(),
                                  0.0f, {dX16.data(), M, K}, dvb16.data(), path);
    CHECK(dX16 == dX32);
    CHECK(dvb16 == dvb32);
  }
}

TEST_CASE("bf16 block-sparse products of a bf16 X equal those of the float X it rounds from, bit for bit") {
  run_threads([] {
    check_bf16_x<16>(61, 5, 3, 9, 300);
    check_bf16_x<8>(37, 6, 4, 12, 301);
    check_bf16_x<4>(29, 8, 6, 20, 302);
    check_bf16_x<16>(1101, 2, 3, 4, 303);
  });
  // Wrong shapes are refused, naming the bf16 operand.
  const auto p = make_pattern(8, 2, 3, 3, 1, layout::random);
  const auto values = random_vec(p.nnz() * 64, 2);
  std::vector<bf16> X16(5 * 24);
  std::vector<float> Y(5 * 24), dv(p.nnz() * 64);
  CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<8>(const_matrix_view<bf16>(X16.data(), 5, 24), p, values.data(), 0.0f,
                                                {Y.data(), 5, 24}),
                    doctest::Contains("X (bf16)"));
  CHECK_THROWS_WITH(kernels::bsr_weight_grad_bf16<8>(const_matrix_view<bf16>(X16.data(), 4, 16), {Y.data(), 5, 24}, p,
                                                     dv.data()),
                    doctest::Contains("bsr_weight_grad_bf16: shapes do not match: X (bf16)"));
}

TEST_CASE("bf16 block-sparse products propagate NaN from X, dY and the block values") {
  const int saved = num_threads();
  for (int t : {1, 2}) {
    set_num_threads(t);
    check_products<16>({33, 3, 4}, 7, layout::random, 200, true);
    check_products<8>({20, 4, 3}, 7, layout::random, 201, true);
    check_products<4>({9, 5, 5}, 11, layout::random, 202, true);
  }
  set_num_threads(saved);
}

TEST_CASE("bf16 rounding happens: the result differs from the fp32 product where bf16 loses bits") {
  // X = 1 + 2^-10 rounds to 1 in bf16; W = 1: the bf16 product is exactly 1 per term.
  const auto p = make_pattern(16, 1, 1, 1, 1, layout::random);
  std::vector<float> X(16, 1.0f + 0x1p-10f), values(256, 0.0f), Y(16);
  for (std::size_t a = 0; a < 16; ++a) values[a * 16 + a] = 1.0f;
  for (bsr_bf16_path path : paths(16)) {
    INFO("path ", std::string(path_name(path)));
    kernels::bsr_matmul_bf16<16>({X.data(), 1, 16}, p, values.data(), 0.0f, {Y.data(), 1, 16}, nullptr, path);
    for (float y : Y) CHECK(y == 1.0f);
  }
}

TEST_CASE("bf16 block-sparse products check their arguments") {
  const auto p = make_pattern(8, 2, 3, 3, 1, layout::random);
  const auto values = random_vec(p.nnz() * 64, 2);
  std::vector<float> X(5 * 16), Y(5 * 24);
  CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<16>({X.data(), 5, 16}, p, values.data(), 0.0f, {Y.data(), 5, 24}),
                    doctest::Contains("block size 8"));
  CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<8>({X.data(), 5, 16}, p, values.data(), 0.0f, {Y.data(), 4, 24}),
                    doctest::Contains("shapes do not match"));
  CHECK_THROWS_WITH(kernels::bsr_matmul_t_bf16<8>({Y.data(), 5, 24}, p, nullptr, 0.0f, {X.data(), 5, 16}),
                    doctest::Contains("null values"));
  std::vector<float> dv(p.nnz() * 64);
  CHECK_THROWS_WITH(kernels::bsr_weight_grad_bf16<8>({X.data(), 5, 16}, {Y.data(), 4, 24}, p, dv.data()),
                    doctest::Contains("bsr_weight_grad_bf16: shapes do not match"));
  std::vector<float> dX(5 * 16);
  CHECK_THROWS_WITH(kernels::bsr_backward_bf16<8>(const_matrix_view<float>(X.data(), 5, 16), {Y.data(), 5, 24}, p,
                                                  values.data(), 0.0f, {dX.data(), 4, 16}, dv.data()),
                    doctest::Contains("bsr_backward_bf16: shapes do not match: dY (5x24), W (16x24"));
  CHECK_THROWS_WITH(kernels::bsr_backward_bf16<8>(const_matrix_view<float>(X.data(), 5, 16), {Y.data(), 4, 24}, p,
                                                  values.data(), 0.0f, {dX.data(), 5, 16}, dv.data()),
                    doctest::Contains("bsr_backward_bf16: shapes do not match: X (5x16), dY (4x24)"));
  CHECK_THROWS_WITH(kernels::bsr_backward_bf16<8>(const_matrix_view<float>(X.data(), 5, 16), {Y.data(), 5, 24}, p,
                                                  nullptr, 0.0f, {dX.data(), 5, 16}, dv.data()),
                    doctest::Contains("bsr_backward_bf16: null values"));
  CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<8>({X.data(), 5, 16}, p, values.data(), 0.0f, {Y.data(), 5, 24}, nullptr,
                                                bsr_bf16_path(7)),
                    doctest::Contains("unknown path"));
  if (!kernels::bsr_bf16_native)
    CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<8>({X.data(), 5, 16}, p, values.data(), 0.0f, {Y.data(), 5, 24},
                                                  nullptr, bsr_bf16_path::native),
                      doctest::Contains("AVX512-BF16"));
  // AMX: B = 16 products only
  CHECK_THROWS_WITH(kernels::bsr_matmul_bf16<8>({X.data(), 5, 16}, p, values.data(), 0.0f, {Y.data(), 5, 24}, nullptr,
                                                bsr_bf16_path::amx),
                    doctest::Contains("path amx needs B = 16"));
  CHECK_THROWS_WITH(kernels::bsr_weight_grad_bf16<8>({X.data(), 5, 16}, {Y.data(), 5, 24}, p, dv.data(),
                                                     bsr_bf16_path::amx),
                    doctest::Contains("path amx needs B = 16"));
  const auto narrow_native = [&] {
    kernels::bsr_matmul_t_bf16<8, xsimd::sse2>({Y.data(), 5, 24}, p, values.data(), 0.0f, {X.data(), 5, 16},
                                               bsr_bf16_path::native);
  };
  CHECK_THROWS_WITH(narrow_native(), doctest::Contains("AVX512-BF16"));
}

}  // namespace SPARSELM_UNITY_ID
