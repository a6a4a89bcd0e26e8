// Dense GEMM against a double-accumulating reference: all transposes, edge sizes, alpha/beta/bias,
// sub-views, NaN-filled C with beta = 0, K = 0, calls from inside a parallel region, thread
// counts, the native and portable SIMD paths, and every argument error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gemm_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gemm.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using kernels::trans;

namespace {

// A row-major buffer with a padded leading dimension, filled with uniform(-1, 1).
struct mat {
  std::vector<float> buf;
  std::size_t rows, cols, ld;
  mat(std::size_t r, std::size_t c, std::size_t pad, std::mt19937& g) : rows(r), cols(c), ld(c + pad) {
    buf.resize(std::max<std::size_t>(1, r * ld));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : buf) x = u(g);
  }
  matrix_view<float> view() { return {buf.data(), rows, cols, ld}; }
  const_matrix_view<float> cview() const { return {buf.data(), rows, cols, ld}; }
};

using test::describe;
using test::gemm_case;

// Runs one case with gemm<Arch>, returns the error ratio against the reference (<= 1 passes).
template <class Arch>
double run_case(const gemm_case& c, unsigned seed) {
  std::mt19937 g(seed);
  const bool at = c.ta == trans::t, bt = c.tb == trans::t;
  mat A(at ? c.K : c.M, at ? c.M : c.K, c.pad, g);
  mat B(bt ? c.N : c.K, bt ? c.K : c.N, c.pad, g);
  mat C(c.M, c.N, c.pad, g);
  std::vector<float> bias(std::max<std::size_t>(1, c.N));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : bias) x = u(g);
  if (c.nan_c)
    for (auto& x : C.buf) x = std::numeric_limits<float>::quiet_NaN();
  const float* bp = c.bias ? bias.data() : nullptr;
  auto want = test::gemm_reference(c.ta, c.tb, c.alpha, A.cview(), B.cview(), c.beta, C.cview(), bp);
  // Padding between rows must survive untouched.
  const float guard = C.ld > C.cols && C.rows ? C.buf[C.cols] : 0.0f;
  kernels::gemm<Arch>(c.ta, c.tb, c.alpha, A.cview(), B.cview(), c.beta, C.view(), bp);
  if (C.ld > C.cols && C.rows && !(C.buf[C.cols] == guard || (std::isnan(guard) && std::isnan(C.buf[C.cols]))))
    return std::numeric_limits<double>::infinity();
  return test::gemm_error_ratio(want, C.cview(), c.K);
}

constexpr trans both[] = {trans::n, trans::t};

}  // namespace

#if defined(__AVX512F__)
#define SPARSELM_GEMM_ARCHS native_arch, xsimd::avx512f, xsimd::fma3<xsimd::avx2>, xsimd::sse2
#else
#define SPARSELM_GEMM_ARCHS native_arch, xsimd::sse2
#endif

TEST_CASE_TEMPLATE("gemm matches the reference on small and odd shapes, all transposes", Arch, SPARSELM_GEMM_ARCHS) {
  const std::size_t sizes[] = {1, 7, 33, 129};
  unsigned seed = 1;
  for (trans ta : both)
    for (trans tb : both)
      for (std::size_t M : sizes)
        for (std::size_t N : sizes)
          for (std::size_t K : sizes) {
            gemm_case c{ta, tb, M, N, K};
            // Cycle through epilogue variants so every shape class meets each of them.
            switch (seed % 4) {
              case 0: break;
              case 1: c.alpha = -0.5f, c.beta = 1.0f; break;
              case 2: c.alpha = 2.0f, c.beta = 0.25f, c.bias = true; break;
              case 3: c.bias = true, c.pad = 3; break;
            }
            const double r = run_case<Arch>(c, seed++);
            INFO(describe(c));
            CHECK(r <= 1.0);
          }
}

TEST_CASE_TEMPLATE("gemm on larger shapes crossing every cache block", Arch, SPARSELM_GEMM_ARCHS) {
  struct shape { std::size_t M, N, K; };
  // 257 x 300 x (KC + 9) crosses KC (two depth passes, the second accumulating) and MC;
  // 70 x 2100 x 40 crosses NC (and splits N across threads).
  using cfg = kernels::detail::gemm_config<Arch>;
  static_assert(257 > cfg::MC && 2100 > cfg::NC, "the shapes below must cross MC and NC");
  const shape shapes[] = {{257, 300, cfg::KC + 9}, {70, 2100, 40}, {200, 96, 300}};
  unsigned seed = 100;
  for (const auto& s : shapes)
    for (trans ta : both)
      for (trans tb : both) {
        gemm_case c{ta, tb, s.M, s.N, s.K, 0.75f, 0.5f, true, 5};
        const double r = run_case<Arch>(c, seed++);
        INFO(describe(c));
        CHECK(r <= 1.0);
      }
}

TEST_CASE_TEMPLATE("gemm with beta = 0 never reads C", Arch, SPARSELM_GEMM_ARCHS) {
  unsigned seed = 200;
  for (trans ta : both)
    for (trans tb : both)
      for (std::size_t M : {5, 64})
        for (bool bias : {false, true}) {
          gemm_case c{ta, tb, M, 37, 300, 1.5f, 0.0f, bias, 2, true};
          const double r = run_case<Arch>(c, seed++);
          INFO(describe(c));
          CHECK(r <= 1.0);
        }
}

TEST_CASE_TEMPLATE("gemm with K = 0 scales C and adds the bias; empty M or N is a no-op", Arch, SPARSELM_GEMM_ARCHS) {
  std::vector<float> c(12, 2.0f), bias = {1, 2, 3, 4};
  std::vector<float> a(1), b(1);
  matrix_view<float> C(c.data(), 3, 4);
  kernels::gemm<Arch>(trans::n, trans::n, 1.0f, {a.data(), 3, 0}, {b.data(), 0, 4}, 0.5f, C, bias.data());
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(C(i, j) == 1.0f + bias[j]);
  std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
  kernels::gemm<Arch>(trans::t, trans::t, 1.0f, {a.data(), 0, 3}, {b.data(), 4, 0}, 0.0f, C);
  for (float x : c) CHECK(x == 0.0f);
  // Empty M and N: nothing is touched (null data is fine for empty views).
  kernels::gemm<Arch>(trans::n, trans::n, 1.0f, {nullptr, 0, 5}, {b.data(), 5, 1, 1}, 0.0f, {nullptr, 0, 1});
  kernels::gemm<Arch>(trans::n, trans::n, 1.0f, {a.data(), 1, 5, 5}, {nullptr, 5, 0}, 0.0f, {nullptr, 1, 0});
}

TEST_CASE_TEMPLATE("gemm inside a parallel region runs on the calling thread", Arch, SPARSELM_GEMM_ARCHS) {
  // Each thread of an outer region runs its own GEMMs (like attention does per head).
  constexpr int jobs = 8;
  std::vector<double> ratio(jobs, 0.0);
#pragma omp parallel for schedule(static) num_threads(2)
  for (int h = 0; h < jobs; ++h) {
    gemm_case c{h % 2 ? trans::n : trans::t, h % 4 < 2 ? trans::t : trans::n, 64 + std::size_t(h), 70, 64, 1.0f, 0.0f};
    ratio[std::size_t(h)] = run_case<Arch>(c, 300u + unsigned(h));
  }
  for (int h = 0; h < jobs; ++h) CHECK(ratio[std::size_t(h)] <= 1.0);
}

namespace {
// The fp32 family with A always packed (the in-place reading of narrow products switched off).
template <class Arch>
struct packed_a_family : kernels::detail::gemm_fp32_family<Arch> {
  static constexpr bool reads_a_in_place = false;
};
}  // namespace

TEST_CASE_TEMPLATE("narrow products read A in place: the packed path's bits, the reference's values", Arch,
                   SPARSELM_GEMM_ARCHS) {
  using cfg = kernels::detail::gemm_config<Arch>;
  static_assert(kernels::detail::gemm_can_read_a_in_place<kernels::detail::gemm_fp32_family<Arch>, float>());
  // C at most 128 wide (read in place), rows with a partial last tile, depths over two KC passes,
  // padded rows, partial column tiles, beta and bias; also split over 2 threads.
  struct shape {
    std::size_t M, N, K;
  };
  const shape shapes[] = {{5 * cfg::MR + 3, 128, 2 * cfg::KC + 9},
                          {cfg::MC + 1, 100, 300},
                          {cfg::MR, 1, 40},
                          {3 * cfg::MR, kernels::detail::gemm_in_place_max_cols, 17}};
  std::mt19937 g(11);
  const int saved = num_threads();
  for (const auto& s : shapes)
    for (int threads : {1, 2})
      for (std::size_t pad : {0, 5}) {
        mat A(s.M, s.K, pad, g), B(s.K, s.N, pad, g), C(s.M, s.N, pad, g);
        std::vector<float> bias(s.N);
        for (auto& x : bias) x = 0.25f;
        mat C2 = C;
        set_num_threads(threads);
        INFO("M=", s.M, " N=", s.N, " K=", s.K, " threads=", threads, " pad=", pad);
        auto want = test::gemm_reference(trans::n, trans::n, 0.5f, A.cview(), B.cview(), 1.0f, C.cview(), bias.data());
        kernels::gemm<Arch>(trans::n, trans::n, 0.5f, A.cview(), B.cview(), 1.0f, C.view(), bias.data());
        kernels::detail::gemm_run<packed_a_family<Arch>>(
            kernels::detail::gemm_problem<float, float>{false, false, s.M, s.N, s.K, 0.5f, 1.0f, A.buf.data(), A.ld,
                                                        B.buf.data(), B.ld, C2.buf.data(), C2.ld, bias.data()});
        CHECK(C.buf == C2.buf);
        CHECK(test::gemm_error_ratio(want, C.cview(), s.K) <= 1.0);
      }
  set_num_threads(saved);
}

TEST_CASE("gemm gives the same numbers for 1 and 2 threads") {
  std::mt19937 g(7);
  for (trans ta : both)
    for (trans tb : both)
      for (auto [M, N] : {std::pair<std::size_t, std::size_t>{300, 64}, {20, 900}}) {
        const std::size_t K = 200;
        mat A(ta == trans::t ? K : M, ta == trans::t ? M : K, 0, g), B(tb == trans::t ? N : K, tb == trans::t ? K : N, 0, g);
        mat C1(M, N, 0, g), C2(M, N, 0, g);
        const int saved = num_threads();
        set_num_threads(1);
        kernels::gemm(ta, tb, 1.0f, A.cview(), B.cview(), 0.0f, C1.view());
        set_num_threads(2);
        kernels::gemm(ta, tb, 1.0f, A.cview(), B.cview(), 0.0f, C2.view());
        set_num_threads(saved);
        // Every element is computed by one thread with the same blocking along K: bitwise equal.
        CHECK(C1.buf == C2.buf);
      }
}

TEST_CASE("gemm argument errors name the shapes") {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const sparselm::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string shapes = message([&] {
    kernels::gemm(trans::n, trans::t, 1.0f, {a.data(), 4, 3}, {b.data(), 5, 2}, 0.0f, {c.data(), 4, 5, 6});
  });
  CHECK(shapes.find("gemm: shapes do not match") != std::string::npos);
  CHECK(shapes.find("A (4x3)") != std::string::npos);
  CHECK(shapes.find("B^T, B (5x2)") != std::string::npos);
  CHECK(shapes.find("C (4x5, ld 6)") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm(trans::n, trans::n, 1.0f, {a.data(), 4, 3}, {b.data(), 3, 5}, 0.0f, {c.data(), 5, 4});
        }).find("C (5x4)") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm(trans::n, trans::n, 1.0f, {nullptr, 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 2});
        }).find("gemm: A: null data for a (2x2) view") != std::string::npos);
  CHECK(message([&] {
          const float* mis = reinterpret_cast<const float*>(reinterpret_cast<const char*>(b.data()) + 1);
          kernels::gemm(trans::n, trans::n, 1.0f, {a.data(), 2, 2}, {mis, 2, 2}, 0.0f, {c.data(), 2, 2});
        }).find("gemm: B: data pointer is not aligned") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm(trans::n, trans::n, 1.0f, {a.data(), 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 3, 2});
        }).find("gemm: C: leading dimension 2 is smaller than the column count in (2x3, ld 2)") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm(trans(7), trans::n, 1.0f, {a.data(), 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 2});
        }).find("gemm: unsupported transpose code 7 for A") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm(trans::n, trans(2), 1.0f, {a.data(), 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 2});
        }).find("gemm: unsupported transpose code 2 for B") != std::string::npos);
}

}  // namespace SPARSELM_UNITY_ID

#undef SPARSELM_GEMM_ARCHS  // (a unity build compiles the next file in the same translation unit)
