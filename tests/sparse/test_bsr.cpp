// Block-sparse kernels (kernels/bsr.hpp) against the densifying references in bsr_reference.hpp,
// for every block size, the native and the portable SIMD paths, odd shapes and densities.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bsr_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/sparse/block_sparse.hpp"
#include "sparselm/sparse/sparsity.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using kernels::block_pooling;

namespace {

static_assert(sparsity_type<dense> && sparsity_type<block_sparse<1>> && sparsity_type<block_sparse<16>>);
static_assert(block_sparse<8>::block == 8 && block_sparse<4>::is_sparse && !dense::is_sparse);

using portable_arch = xsimd::sse2;
#if defined(__AVX2__) && defined(__FMA__) && defined(__AVX512F__)
// A middle path when the native one is AVX-512: 8 lanes (B = 4 and 1 below the width).
#define SPARSELM_TEST_AVX2 1
using avx2_arch = xsimd::fma3<xsimd::avx2>;
#endif

using test::layout;
using test::make_pattern;
using test::random_vec;


// |got - want| <= tol * (1 + |want|) elementwise over a (rows x cols) matrix with leading dimensions.
void check_close(const float* got, std::size_t ldg, const float* want, std::size_t ldw, std::size_t rows,
                 std::size_t cols, double tol, const char* what) {
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const double g = got[r * ldg + c], w = want[r * ldw + c];
      const double e = std::fabs(g - w) / (1.0 + std::fabs(w));
      if (!(e <= tol)) ++bad;  // also catches NaN
      if (!(e <= worst)) worst = e;
    }
  INFO(std::string(what), ": worst relative error ", worst, ", tolerance ", tol);
  CHECK(bad == 0);
}

struct shape {
  std::size_t M, rows_b, cols_b;
};

// Densities from nothing to full, as block counts for a grid of n cells.
std::vector<std::size_t> block_counts(std::size_t n) {
  std::vector<std::size_t> c{0, 1, std::max<std::size_t>(1, n / 3), n};
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

template <std::size_t B, class Arch>
void check_products(const shape& sh, std::size_t nblocks, layout lay, std::uint32_t seed) {
  const auto p = make_pattern(B, sh.rows_b, sh.cols_b, nblocks, seed, lay);
  const std::size_t M = sh.M, in = p.in(), out = p.out();
  const std::size_t ldx = in + 3, ldy = out + 5;  // views with padding
  const auto X = random_vec(M * ldx, seed + 1);
  const auto values = random_vec(std::max<std::size_t>(1, p.nnz() * B * B), seed + 2);
  const auto bias = random_vec(out, seed + 3);
  const auto Y0 = random_vec(M * ldy, seed + 4);
  const auto dY = random_vec(M * ldy, seed + 5);
  const auto dX0 = random_vec(M * ldx, seed + 6);
  const double tol = 2e-6 * double(std::max(in, out) + 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  INFO("B = ", B, ", M = ", M, ", in = ", in, ", out = ", out, ", blocks = ", p.nnz(), ", arch = ", std::string(Arch::name()));

  for (float beta : {0.0f, 1.0f, 0.5f})
    for (bool with_bias : {false, true}) {
      INFO("beta = ", beta, ", bias = ", with_bias);
      // Forward.
      std::vector<float> Y = Y0, Yr = Y0;
      if (beta == 0.0f) std::fill(Y.begin(), Y.end(), nan);
      kernels::bsr_matmul<B, Arch>({X.data(), M, in, ldx}, p, values.data(), beta, {Y.data(), M, out, ldy},
                                   with_bias ? bias.data() : nullptr);
      test::ref_matmul(X.data(), ldx, M, p, values.data(), beta, Yr.data(), ldy, with_bias ? bias.data() : nullptr);
      check_close(Y.data(), ldy, Yr.data(), ldy, M, out, tol, "bsr_matmul");
      if (with_bias) continue;
      // Backward, data.
      std::vector<float> dX = dX0, dXr = dX0;
      if (beta == 0.0f) std::fill(dX.begin(), dX.end(), nan);
      kernels::bsr_matmul_t<B, Arch>({dY.data(), M, out, ldy}, p, values.data(), beta, {dX.data(), M, in, ldx});
      test::ref_matmul_t(dY.data(), ldy, M, p, values.data(), beta, dXr.data(), ldx);
      check_close(dX.data(), ldx, dXr.data(), ldx, M, in, tol, "bsr_matmul_t");
      // Both backward products together (one pass where B allows): dX bitwise bsr_matmul_t's.
      std::vector<float> dXf = dX0;
      if (beta == 0.0f) std::fill(dXf.begin(), dXf.end(), nan);
      auto dvf = random_vec(std::max<std::size_t>(1, p.nnz() * B * B), seed + 7), dvfr = dvf;
      kernels::bsr_backward<B, Arch>({X.data(), M, in, ldx}, {dY.data(), M, out, ldy}, p, values.data(), beta,
                                     {dXf.data(), M, in, ldx}, dvf.data());
      std::size_t differ = 0;
      for (std::size_t r = 0; r < M; ++r)
        for (std::size_t c = 0; c < in; ++c) differ += dXf[r * ldx + c] != dX[r * ldx + c];
      CHECK_MESSAGE(differ == 0, "bsr_backward's dX differs from bsr_matmul_t's in ", differ, " elements");
      test::ref_weight_grad(X.data(), ldx, dY.data(), ldy, M, p, dvfr.data());
      check_close(dvf.data(), 0, dvfr.data(), 0, 1, p.nnz() * B * B, 2e-6 * double(M + 8), "bsr_backward, dvalues");
    }
  // Backward, weights (accumulates).
  if (p.nnz()) {
    auto dv = random_vec(p.nnz() * B * B, seed + 7);
    auto dvr = dv;
    kernels::bsr_weight_grad<B, Arch>({X.data(), M, in, ldx}, {dY.data(), M, out, ldy}, p, dv.data());
    test::ref_weight_grad(X.data(), ldx, dY.data(), ldy, M, p, dvr.data());
    check_close(dv.data(), 0, dvr.data(), 0, 1, dv.size(), 2e-6 * double(M + 8), "bsr_weight_grad");
  }
}

template <std::size_t B, class Arch>
void check_all_products() {
  const shape shapes[] = {{1, 1, 1}, {7, 1, 3}, {33, 3, 1}, {129, 2, 5}, {33, 6, 4}, {7, 5, 7}};
  std::uint32_t seed = 100;
  for (const auto& sh : shapes)
    for (std::size_t n : block_counts(sh.rows_b * sh.cols_b)) check_products<B, Arch>(sh, n, layout::random, seed++);
  // Empty block columns (forward) and empty block rows (backward).
  check_products<B, Arch>({33, 4, 5}, 6, layout::skip_first_col, 7);
  check_products<B, Arch>({33, 4, 5}, 6, layout::skip_first_row, 8);
  // Enough rows for several panels and threads.
  check_products<B, Arch>({300, 3, 4}, 5, layout::random, 9);
  // A deep K: several row blocks of the blocked lanes-N driver (rows per block shrink with K), a
  // partial last block and panel, column groups balanced by blocks per column.
  check_products<B, Arch>({203, 1024 / B, 48 / B}, (1024 / B) * (48 / B) / 5, layout::random, 12);
  // Depths on both sides of the lanes-N driver's panel layout switch (row-major up to K = 3072,
  // k-major beyond): the forward at K = 3072 and 3088, the data gradient at out = 3088.
  check_products<B, Arch>({40, 3072 / B, 32 / B}, (3072 / B) * (32 / B) / 6, layout::random, 14);
  check_products<B, Arch>({40, 3088 / B, 32 / B}, (3088 / B) * (32 / B) / 6, layout::random, 15);
  check_products<B, Arch>({40, 32 / B, 3088 / B}, (3088 / B) * (32 / B) / 6, layout::random, 16);
  // Long block rows: the weight gradient's groups of slots of one block row (6 for B = 4 on
  // AVX-512, with kernels of 1 to 5 slots for a row's end) full and with every tail; row counts
  // that are not multiples of 4 (B = 4 on AVX-512 steps 4 rows, zero-padded).
  check_products<B, Arch>({70, 3, 29}, 3 * 29, layout::random, 13);
  check_products<B, Arch>({70, 5, 40}, 150, layout::random, 14);
  for (std::size_t cb = 7; cb <= 12; ++cb) check_products<B, Arch>({37, 2, cb}, 2 * cb, layout::random, 20 + cb);
  // B = 1: grids large enough that the weight gradient's slot order spans several L1 tiles and
  // runs, with either side streaming.
  if constexpr (B == 1) {
    check_products<B, Arch>({300, 150, 70}, 1500, layout::random, 10);
    check_products<B, Arch>({300, 70, 150}, 1500, layout::random, 11);
  }
}

template <std::size_t B, class Arch>
void check_pooled() {
  const std::size_t dims[][3] = {{1, 1, 1}, {7, 3, 2}, {33, 5, 6}, {129, 2, 9}, {40, 0, 0}};
  std::uint32_t seed = 500;
  for (const auto& d : dims) {
    std::size_t M = d[0], rb = d[1], cb = d[2];
    if (rb == 0) {  // crosses the 256 x 384 tiles for every B
      rb = 272 / B;
      cb = 400 / B;
    }
    const std::size_t in = rb * B, out = cb * B, ldx = in + 1, ldd = out + 2;
    const auto X = random_vec(M * ldx, seed++);
    const auto dY = random_vec(M * ldd, seed++);
    for (auto pool : {block_pooling::sum, block_pooling::avg, block_pooling::max}) {
      INFO("B = ", B, ", M = ", M, ", in = ", in, ", out = ", out, ", pooling = ", int(pool), ", arch = ", std::string(Arch::name()));
      std::vector<float> res(rb * (cb + 1), std::numeric_limits<float>::quiet_NaN());
      kernels::dense_grad_pooled<B, Arch>({X.data(), M, in, ldx}, {dY.data(), M, out, ldd}, pool,
                                          {res.data(), rb, cb, cb + 1});
      const auto ref = test::ref_pooled(X.data(), ldx, dY.data(), ldd, M, in, out, B, pool);
      check_close(res.data(), cb + 1, ref.data(), cb, rb, cb, 2e-6 * double(M + 8), "dense_grad_pooled");
    }
  }
}

// Gradients of the scalar loss L = sum(R ⊙ (X·W + bias)) by central differences: L is linear in X
// and in W, so the difference quotient equals the derivative up to rounding.
template <std::size_t B>
void check_finite_differences() {
  const auto p = make_pattern(B, 3, 4, 5, 42);
  const std::size_t M = 9, in = p.in(), out = p.out();
  auto X = random_vec(M * in, 1);
  auto values = random_vec(p.nnz() * B * B, 2);
  const auto bias = random_vec(out, 3);
  const auto R = random_vec(M * out, 4);
  std::vector<float> Y(M * out);
  auto loss = [&] {
    kernels::bsr_matmul<B>({X.data(), M, in}, p, values.data(), 0.0f, {Y.data(), M, out}, bias.data());
    double l = 0;
    for (std::size_t e = 0; e < Y.size(); ++e) l += double(R[e]) * Y[e];
    return l;
  };
  std::vector<float> dX(M * in), dv(p.nnz() * B * B, 0.0f);
  kernels::bsr_matmul_t<B>({R.data(), M, out}, p, values.data(), 0.0f, {dX.data(), M, in});
  kernels::bsr_weight_grad<B>({X.data(), M, in}, {R.data(), M, out}, p, dv.data());
  const float h = 0.25f;
  auto fd = [&](float& x) {
    const float x0 = x;
    x = x0 + h;
    const double lp = loss();
    x = x0 - h;
    const double lm = loss();
    x = x0;
    return (lp - lm) / (2.0 * h);
  };
  std::mt19937 rng(7);
  for (int t = 0; t < 20; ++t) {
    const std::size_t e = rng() % X.size();
    CHECK(fd(X[e]) == doctest::Approx(dX[e]).epsilon(1e-3).scale(1.0));
  }
  for (int t = 0; t < 20; ++t) {
    const std::size_t e = rng() % values.size();
    CHECK(fd(values[e]) == doctest::Approx(dv[e]).epsilon(1e-3).scale(1.0));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("bsr kernels match the dense reference", BC, std::integral_constant<std::size_t, 1>,
                   std::integral_constant<std::size_t, 4>, std::integral_constant<std::size_t, 8>,
                   std::integral_constant<std::size_t, 16>) {
  constexpr std::size_t B = BC::value;
  SUBCASE("native arch") { check_all_products<B, native_arch>(); }
  SUBCASE("portable arch") { check_all_products<B, portable_arch>(); }
#if defined(SPARSELM_TEST_AVX2)
  SUBCASE("avx2 arch") { check_all_products<B, avx2_arch>(); }
#endif
}

TEST_CASE_TEMPLATE("dense_grad_pooled matches the pooled dense reference", BC, std::integral_constant<std::size_t, 1>,
                   std::integral_constant<std::size_t, 4>, std::integral_constant<std::size_t, 8>,
                   std::integral_constant<std::size_t, 16>) {
  constexpr std::size_t B = BC::value;
  SUBCASE("native arch") { check_pooled<B, native_arch>(); }
  SUBCASE("portable arch") { check_pooled<B, portable_arch>(); }
#if defined(SPARSELM_TEST_AVX2)
  SUBCASE("avx2 arch") { check_pooled<B, avx2_arch>(); }
#endif
}

TEST_CASE_TEMPLATE("bsr backward kernels agree with finite differences", BC, std::integral_constant<std::size_t, 1>,
                   std::integral_constant<std::size_t, 4>, std::integral_constant<std::size_t, 8>,
                   std::integral_constant<std::size_t, 16>) {
  check_finite_differences<BC::value>();
}

TEST_CASE_TEMPLATE("bsr kernels are deterministic and callable inside a parallel region", BC,
                   std::integral_constant<std::size_t, 1>, std::integral_constant<std::size_t, 4>,
                   std::integral_constant<std::size_t, 8>, std::integral_constant<std::size_t, 16>) {
  constexpr std::size_t B = BC::value;
  const auto p = make_pattern(B, 64 / B, 96 / B, 64 / B * 96 / B / 4, 3);
  const std::size_t M = 200, in = p.in(), out = p.out();
  const auto X = random_vec(M * in, 1), dY = random_vec(M * out, 2), values = random_vec(p.nnz() * B * B, 3);
  struct result {
    std::vector<float> Y, dX, dv, dX2, dv2;  // dX2, dv2: bsr_backward's
  };
  auto run = [&] {
    result r{std::vector<float>(M * out), std::vector<float>(M * in), std::vector<float>(p.nnz() * B * B, 0.0f)};
    kernels::bsr_matmul<B>({X.data(), M, in}, p, values.data(), 0.0f, {r.Y.data(), M, out});
    kernels::bsr_matmul_t<B>({dY.data(), M, out}, p, values.data(), 0.0f, {r.dX.data(), M, in});
    kernels::bsr_weight_grad<B>({X.data(), M, in}, {dY.data(), M, out}, p, r.dv.data());
    r.dX2.resize(M * in);
    r.dv2.assign(p.nnz() * B * B, 0.0f);
    kernels::bsr_backward<B>({X.data(), M, in}, {dY.data(), M, out}, p, values.data(), 0.0f, {r.dX2.data(), M, in},
                             r.dv2.data());
    return r;
  };
  const int threads = num_threads();
  const result a = run(), b = run();
  CHECK(a.Y == b.Y);
  CHECK(a.dX == b.dX);
  CHECK(a.dv == b.dv);
  CHECK(a.dX2 == a.dX);
  CHECK(a.dv2 == b.dv2);
  check_close(a.dv2.data(), 0, a.dv.data(), 0, 1, a.dv.size(), 1e-5 * M, "bsr_backward vs bsr_weight_grad");
  set_num_threads(1);
  const result one = run();
  set_num_threads(threads);
  // Products do not depend on the thread count; the weight gradient sums partial gradients per
  // thread, so it only agrees to rounding.
  CHECK(one.Y == a.Y);
  CHECK(one.dX == a.dX);
  CHECK(one.dX2 == a.dX);
  check_close(one.dv.data(), 0, a.dv.data(), 0, 1, a.dv.size(), 1e-5 * M, "bsr_weight_grad, 1 vs 2 threads");
  std::vector<result> inner(2);
  run_team(2, [&](int t, int T) {  // a team of two (OpenMP or std::thread); every index once if it has fewer
    for (int i = t; i < 2; i += T) inner[std::size_t(i)] = run();
  });
  for (const auto& r : inner) {  // serial inside the region: as with one thread
    CHECK(r.Y == one.Y);
    CHECK(r.dX == one.dX);
    CHECK(r.dv == one.dv);
    CHECK(r.dX2 == one.dX2);
    CHECK(r.dv2 == one.dv2);
  }
}

// The B = 1 weight gradient keeps its slot order with the pattern (block_pattern::derived) and
// must follow every change: other chunk lengths (SIMD paths), a copy changed and finalized, the
// pattern itself changed in place, a pattern never finalized, several threads building it at once.
TEST_CASE("the B = 1 weight gradient's kept slot order follows the pattern") {
  for (const auto& [rows_b, cols_b] : {std::pair<std::size_t, std::size_t>{40, 56}, {56, 40}}) {
    INFO("in = ", rows_b, ", out = ", cols_b);
    auto p = make_pattern(1, rows_b, cols_b, rows_b * cols_b / 5, 21);
    const std::size_t M = 150;
    const auto X = random_vec(M * rows_b, 22), dY = random_vec(M * cols_b, 23);
    auto check = [&](const sparse::block_pattern& q, auto arch, const char* what) {
      using Arch = decltype(arch);
      std::vector<float> dv(q.nnz(), 0.0f), dvr(q.nnz(), 0.0f);
      kernels::bsr_weight_grad<1, Arch>({X.data(), M, rows_b}, {dY.data(), M, cols_b}, q, dv.data());
      test::ref_weight_grad(X.data(), rows_b, dY.data(), cols_b, M, q, dvr.data());
      check_close(dv.data(), 0, dvr.data(), 0, 1, dv.size(), 2e-6 * double(M + 8), what);
    };
    check(p, native_arch{}, "first call");
    check(p, portable_arch{}, "another chunk length");
    check(p, native_arch{}, "back to the first");
    REQUIRE(p.derived != nullptr);
    // A copy shares the kept order; changed and finalized, it gets its own, and p keeps p's.
    auto q = p;
    CHECK(q.derived == p.derived);
    std::vector<std::uint8_t> used(rows_b * cols_b, 0);
    for (std::size_t s = 0; s < q.nnz(); ++s) used[q.row[s] * cols_b + q.col[s]] = 1;
    std::size_t moved = 0;
    for (std::size_t cell = 0; cell < used.size() && moved < q.nnz() / 2; ++cell)
      if (!used[cell]) {  // slot 2*moved moves to a free cell
        q.row[2 * moved] = std::uint32_t(cell / cols_b);
        q.col[2 * moved] = std::uint32_t(cell % cols_b);
        ++moved;
      }
    REQUIRE(moved > 0);
    q.finalize("moved");
    CHECK(q.derived != p.derived);
    check(q, native_arch{}, "the changed copy");
    check(p, native_arch{}, "the original after the copy changed");
    // p itself changed in place (as a pattern update does), then finalized.
    p = q;
    p.row.swap(p.col);
    std::swap(p.rows_b, p.cols_b);  // the transposed grid: other stream side and tiles
    p.finalize("transposed");
    {
      std::vector<float> dv(p.nnz(), 0.0f), dvr(p.nnz(), 0.0f);
      kernels::bsr_weight_grad<1>({dY.data(), M, cols_b}, {X.data(), M, rows_b}, p, dv.data());
      test::ref_weight_grad(dY.data(), cols_b, X.data(), rows_b, M, p, dvr.data());
      check_close(dv.data(), 0, dvr.data(), 0, 1, dv.size(), 2e-6 * double(M + 8), "changed in place");
    }
    // Never finalized (orderings filled by hand): built for the call, nothing kept.
    sparse::block_pattern h;
    h.block = 1;
    h.rows_b = q.rows_b;
    h.cols_b = q.cols_b;
    h.row = q.row;
    h.col = q.col;
    h.row_ptr = q.row_ptr;
    h.row_slots = q.row_slots;
    h.col_ptr = q.col_ptr;
    h.col_slots = q.col_slots;
    check(h, native_arch{}, "not finalized");
    CHECK(h.derived == nullptr);
    // Two threads inside a parallel region build a fresh pattern's order at once.
    auto f = q;
    f.finalize("fresh");
    std::vector<std::vector<float>> dvs(2, std::vector<float>(f.nnz(), 0.0f));
    run_team(2, [&](int t, int T) {
      for (int i = t; i < 2; i += T)
        kernels::bsr_weight_grad<1>({X.data(), M, rows_b}, {dY.data(), M, cols_b}, f, dvs[std::size_t(i)].data());
    });
    CHECK(dvs[0] == dvs[1]);
    std::vector<float> dvr(f.nnz(), 0.0f);
    test::ref_weight_grad(X.data(), rows_b, dY.data(), cols_b, M, f, dvr.data());
    check_close(dvs[0].data(), 0, dvr.data(), 0, 1, dvr.size(), 2e-6 * double(M + 8), "built by two threads");
  }
}

TEST_CASE("bsr kernels reject bad shapes and patterns with messages") {
  auto p = make_pattern(4, 2, 3, 2, 1);  // W (8 x 12), B = 4
  std::vector<float> X(5 * 8), Y(5 * 12), v(2 * 16), dv(2 * 16), pooled(2 * 3);
  using doctest::Contains;
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul<8>({X.data(), 5, 8}, p, v.data(), 0.0f, {Y.data(), 5, 12}),
                       Contains("bsr_matmul: the pattern has block size 4 but the kernel was instantiated for B = 8"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul<4>({X.data(), 5, 8}, p, v.data(), 0.0f, {Y.data(), 4, 12}),
                       Contains("bsr_matmul: shapes do not match: X (5x8), W (8x12, 4x4 blocks, 2 of 6 active), Y (4x12)"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul<4>({X.data(), 5, 6}, p, v.data(), 0.0f, {Y.data(), 5, 12}),
                       Contains("bsr_matmul: X columns (in) = 6 is not a multiple of the block size B = 4"), sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul_t<4>({Y.data(), 5, 12}, p, v.data(), 0.0f, {X.data(), 5, 4}),
                       Contains("bsr_matmul_t: shapes do not match: dY (5x12)"), sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::bsr_weight_grad<4>({X.data(), 5, 8}, {Y.data(), 4, 12}, p, dv.data()),
                       Contains("bsr_weight_grad: shapes do not match: X (5x8), dY (4x12)"), sparselm::error);
  // bsr_backward: the one-pass kernel (every B > 1) and B = 1's fallback to the two products.
  std::vector<float> dX(5 * 8);
  const auto backward4 = kernels::bsr_backward<4, portable_arch>;
  const auto backward8 = kernels::bsr_backward<8, portable_arch>;
  const auto backward1 = kernels::bsr_backward<1>;
  CHECK_THROWS_WITH_AS(backward4({X.data(), 5, 8}, {Y.data(), 5, 12}, p, v.data(), 0.0f, {dX.data(), 4, 8}, dv.data()),
                       Contains("bsr_backward: shapes do not match: X (5x8), dY (5x12), dX (4x8), W (8x12"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(backward4({X.data(), 5, 8}, {Y.data(), 5, 12}, p, v.data(), 0.0f, {dX.data(), 5, 8}, nullptr),
                       Contains("bsr_backward: null dvalues for a pattern with 2 blocks"), sparselm::error);
  CHECK_THROWS_WITH_AS(backward8({X.data(), 5, 8}, {Y.data(), 5, 12}, p, v.data(), 0.0f, {dX.data(), 5, 8}, dv.data()),
                       Contains("bsr_backward: the pattern has block size 4 but the kernel was instantiated for B = 8"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(backward1({X.data(), 5, 8}, {Y.data(), 5, 12}, p, v.data(), 0.0f, {dX.data(), 5, 8}, dv.data()),
                       Contains("bsr_matmul_t: the pattern has block size 4 but the kernel was instantiated for B = 1"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul<4>({X.data(), 5, 8}, p, nullptr, 0.0f, {Y.data(), 5, 12}),
                       Contains("bsr_matmul: null values"), sparselm::error);
  CHECK_THROWS_WITH_AS(
      kernels::dense_grad_pooled<4>({X.data(), 5, 8}, {Y.data(), 5, 12}, block_pooling::max, {pooled.data(), 3, 2}),
      Contains("dense_grad_pooled: shapes do not match: X (5x8), dY (5x12), out (3x2) (expected 2x3 for B = 4)"),
      sparselm::error);
  CHECK_THROWS_WITH_AS(
      kernels::dense_grad_pooled<4>({X.data(), 5, 8}, {Y.data(), 5, 10}, block_pooling::sum, {pooled.data(), 2, 3}),
      Contains("dense_grad_pooled: dY columns (out) = 10 is not a multiple of the block size B = 4"), sparselm::error);
  p.row.push_back(1);
  p.col.push_back(2);  // changed but not finalized
  CHECK_THROWS_WITH_AS(kernels::bsr_matmul<4>({X.data(), 5, 8}, p, v.data(), 0.0f, {Y.data(), 5, 12}),
                       Contains("is not finalized"), sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
