// Mixed-precision GEMMs (kernels::gemm_bf16, gemm_f16, gemm_as): every bf16 path (portable,
// native AVX512-BF16, AMX where this build and CPU have it) against a double-accumulating reference on
// the bf16-rounded operands, against each other, against the fp32 GEMM within the bf16 rounding,
// for every transpose, operand type (float / bf16), edge sizes, odd depths, depths crossing KC,
// alpha/beta/bias, beta = 0 over NaN, NaN operands, threads, parallel regions and argument errors.
#include <doctest/doctest.h>

#include <bit>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gemm_reference.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using kernels::gemm_bf16_path;
using kernels::trans;

namespace {

constexpr trans both[] = {trans::n, trans::t};

// A (rows x cols, ld = cols + pad) matrix of uniform(-1, 1) values, as float and as bf16; `rounded`
// holds the bf16 values widened to float (what both paths multiply).
struct operand {
  std::vector<float> f, rounded;
  std::vector<bf16> h;
  std::size_t rows, cols, ld;
  operand(std::size_t r, std::size_t c, std::size_t pad, std::mt19937& g) : rows(r), cols(c), ld(c + pad) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    f.resize(std::max<std::size_t>(1, r * ld));
    for (auto& x : f) x = u(g);
    for (float x : f) h.push_back(bf16(x)), rounded.push_back(float(bf16(x)));
  }
  template <class S>
  const_matrix_view<S> view() const {
    if constexpr (std::is_same_v<S, float>) return {f.data(), rows, cols, ld};
    else return {h.data(), rows, cols, ld};
  }
  const_matrix_view<float> rounded_view() const { return {rounded.data(), rows, cols, ld}; }
};

using bf16_case = test::gemm_case;
using test::describe;

struct bf16_result {
  double ratio;             // against the reference on rounded operands, <= 1 passes
  std::vector<float> c;     // C after the call (row-major, ld = N + pad)
  std::vector<double> scale;  // the reference's |alpha| |op(A)| |op(B)| + |beta C| + |bias|, M x N
};

// One case with operand types SA, SB on path `path` of gemm_bf16<.., Arch>.
template <class SA, class SB, class Arch>
bf16_result run_case(const bf16_case& c, unsigned seed, gemm_bf16_path path) {
  std::mt19937 g(seed);
  const bool at = c.ta == trans::t, bt = c.tb == trans::t;
  operand A(at ? c.K : c.M, at ? c.M : c.K, c.pad, g), B(bt ? c.N : c.K, bt ? c.K : c.N, c.pad, g);
  operand Cm(c.M, c.N, c.pad, g);
  std::vector<float> bias(std::max<std::size_t>(1, c.N));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : bias) x = u(g);
  std::vector<float> C = Cm.f;
  if (c.nan_c) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
  const float* bp = c.bias ? bias.data() : nullptr;
  const matrix_view<float> Cv(C.data(), c.M, c.N, Cm.ld);
  auto want = test::gemm_reference(c.ta, c.tb, c.alpha, A.rounded_view(), B.rounded_view(), c.beta, Cv, bp);
  const float guard = Cm.ld > c.N && c.M ? C[c.N] : 0.0f;
  kernels::gemm_bf16<SA, SB, Arch>(c.ta, c.tb, c.alpha, A.template view<SA>(), B.template view<SB>(), c.beta, Cv, bp,
                                   path);
  if (Cm.ld > c.N && c.M && !(C[c.N] == guard || (std::isnan(guard) && std::isnan(C[c.N]))))
    return {std::numeric_limits<double>::infinity(), C, want.scale};
  return {test::gemm_error_ratio(want, Cv, c.K), C, want.scale};
}

// AMX runs here: compiled in, and this CPU and OS allow it. Otherwise the AMX checks are skipped
// with a message (AMD hosts, builds without -march=native) and the other paths still run.
bool amx_here() { return kernels::gemm_bf16_amx && kernels::gemm_bf16_amx_usable(); }

// The paths an architecture has: portable always, native with AVX512-BF16 on AVX-512, amx with
// AMX on AVX-512 where the CPU and OS run it.
template <class Arch>
std::vector<gemm_bf16_path> paths() {
  std::vector<gemm_bf16_path> p{gemm_bf16_path::portable};
  if (kernels::gemm_bf16_native && simd_width<float, Arch> == 16) p.push_back(gemm_bf16_path::native);
  if (amx_here() && simd_width<float, Arch> == 16) p.push_back(gemm_bf16_path::amx);
  return p;
}

const char* name(gemm_bf16_path p) {
  return p == gemm_bf16_path::native ? "native" : p == gemm_bf16_path::amx ? "amx" : "portable";
}

// Runs the case for every operand-type combination and path; checks each against the reference.
template <class Arch>
void check_all_types(const bf16_case& c, unsigned seed) {
  for (gemm_bf16_path p : paths<Arch>()) {
    INFO(describe(c), " path ", name(p));
    CHECK(run_case<float, float, Arch>(c, seed, p).ratio <= 1.0);
    CHECK(run_case<bf16, bf16, Arch>(c, seed, p).ratio <= 1.0);
    CHECK(run_case<float, bf16, Arch>(c, seed, p).ratio <= 1.0);
    CHECK(run_case<bf16, float, Arch>(c, seed, p).ratio <= 1.0);
  }
}

}  // namespace

#if defined(__AVX512F__)
#define SPARSELM_GEMM_ARCHS native_arch, xsimd::avx512f, xsimd::fma3<xsimd::avx2>, xsimd::sse2
#elif defined(__AVX2__)
#define SPARSELM_GEMM_ARCHS native_arch, xsimd::fma3<xsimd::avx2>, xsimd::sse2
#else
#define SPARSELM_GEMM_ARCHS native_arch, xsimd::sse2
#endif

TEST_CASE_TEMPLATE("gemm_bf16 matches the reference on rounded operands: small, odd shapes, all transposes", Arch,
                   SPARSELM_GEMM_ARCHS) {
  const std::size_t sizes[] = {1, 2, 17, 33, 70};
  unsigned seed = 1;
  for (trans ta : both)
    for (trans tb : both)
      for (std::size_t M : sizes)
        for (std::size_t N : sizes)
          for (std::size_t K : {std::size_t(1), std::size_t(2), std::size_t(31), std::size_t(64), std::size_t(99)}) {
            bf16_case c{ta, tb, M, N, K};
            switch (seed % 4) {
              case 0: break;
              case 1: c.alpha = -0.5f, c.beta = 1.0f; break;
              case 2: c.alpha = 2.0f, c.beta = 0.25f, c.bias = true; break;
              case 3: c.bias = true, c.pad = 3, c.nan_c = true; break;
            }
            check_all_types<Arch>(c, seed++);
          }
}

TEST_CASE_TEMPLATE("gemm_bf16 on shapes crossing every cache block, odd depth", Arch, SPARSELM_GEMM_ARCHS) {
  struct shape { std::size_t M, N, K; };
  // 1025 and 2057 cross the depth block of both kernels (odd: the last pair is padded); 257 rows
  // cross MC; 2100 columns cross NC.
  const shape shapes[] = {{257, 70, 1025}, {40, 2100, 37}, {30, 50, 2057}};
  unsigned seed = 100;
  for (const auto& s : shapes)
    for (trans ta : both)
      for (trans tb : both) check_all_types<Arch>({ta, tb, s.M, s.N, s.K, 0.75f, 0.5f, true, 5}, seed++);
}

TEST_CASE("gemm_bf16: the native and portable paths agree, and both are the fp32 GEMM within the bf16 rounding") {
  std::mt19937 g(11);
  for (trans ta : both)
    for (trans tb : both) {
      const std::size_t M = 61, N = 83, K = 515;
      operand A(ta == trans::t ? K : M, ta == trans::t ? M : K, 0, g), B(tb == trans::t ? N : K, tb == trans::t ? K : N, 0, g);
      std::vector<float> c32(M * N), cp(M * N), cn(M * N);
      kernels::gemm(ta, tb, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {c32.data(), M, N});
      kernels::gemm_bf16(ta, tb, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {cp.data(), M, N}, nullptr,
                         gemm_bf16_path::portable);
      kernels::gemm_bf16(ta, tb, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {cn.data(), M, N});
      auto exact = test::gemm_reference(ta, tb, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {c32.data(), M, N});
      double worst_paths = 0, worst_fp32 = 0, mean_diff = 0;
      for (std::size_t i = 0; i < M * N; ++i) {
        const double scale = exact.scale[i];
        // Paths: same products, other addition order: the fp32 GEMM's bound.
        worst_paths = std::max(worst_paths, std::abs(double(cp[i]) - cn[i]) /
                                                ((2.0 * K + 4.0) * std::numeric_limits<float>::epsilon() * scale));
        // Against fp32 on the unrounded operands: each product is off by at most
        // (1 + 2^-9)^2 - 1 < 2.01 * 2^-9 of |a*b| (two rounded operands), plus the fp32 sums.
        worst_fp32 = std::max(worst_fp32, std::abs(double(cn[i]) - c32[i]) /
                                              ((2.01 * std::ldexp(1.0, -9) + (4.0 * K + 8.0) * std::numeric_limits<float>::epsilon()) * scale));
        mean_diff += std::abs(double(cn[i]) - c32[i]);
      }
      INFO("ta ", int(ta), " tb ", int(tb));
      CHECK(worst_paths <= 1.0);
      CHECK(worst_fp32 <= 1.0);
      // The rounding is really applied (the operands are not multiplied in fp32): C differs.
      CHECK(mean_diff / double(M * N) > 1e-5);
    }
}

TEST_CASE_TEMPLATE("gemm_bf16: a NaN or infinity in an operand reaches C", Arch, SPARSELM_GEMM_ARCHS) {
  for (gemm_bf16_path p : paths<Arch>())
    for (trans ta : both)
      for (trans tb : both) {
        std::mt19937 g(5);
        const std::size_t M = 20, N = 40, K = 33;
        operand A(ta == trans::t ? K : M, ta == trans::t ? M : K, 0, g), B(tb == trans::t ? N : K, tb == trans::t ? K : N, 0, g);
        // op(A)(3, 7) = NaN; op(B)(5, 11) = +inf (with positive op(A)(i, 5), row i of column 11 is +inf
        // unless the NaN row).
        (ta == trans::t ? A.f[7 * A.ld + 3] : A.f[3 * A.ld + 7]) = std::numeric_limits<float>::quiet_NaN();
        (tb == trans::t ? B.f[11 * B.ld + 5] : B.f[5 * B.ld + 11]) = std::numeric_limits<float>::infinity();
        // NaNs whose rounding on the bits would carry into the exponent (to -0) or stay at the
        // infinity pattern (to inf): op(A)(8, 2) and op(A)(9, 4).
        (ta == trans::t ? A.f[2 * A.ld + 8] : A.f[8 * A.ld + 2]) = std::bit_cast<float>(0x7fffffffu);
        (ta == trans::t ? A.f[4 * A.ld + 9] : A.f[9 * A.ld + 4]) = std::bit_cast<float>(0x7f800001u);
        std::vector<float> C(M * N);
        kernels::gemm_bf16<float, float, Arch>(ta, tb, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {C.data(), M, N},
                                               nullptr, p);
        INFO("path ", name(p), " ta ", int(ta), " tb ", int(tb));
        for (std::size_t j = 0; j < N; ++j) CHECK((std::isnan(C[3 * N + j]) && std::isnan(C[8 * N + j]) && std::isnan(C[9 * N + j])));
        for (std::size_t i = 0; i < M; ++i)
          if (i != 3 && i != 8 && i != 9) CHECK(!std::isfinite(C[i * N + 11]));
        CHECK(std::isfinite(C[0 * N + 0]));
      }
}

TEST_CASE("gemm_bf16 inside a parallel region, and with 1 and 2 threads") {
  constexpr int jobs = 6;
  std::vector<double> ratio(jobs, 0.0);
#pragma omp parallel for schedule(static) num_threads(2)
  for (int h = 0; h < jobs; ++h) {
    bf16_case c{h % 2 ? trans::n : trans::t, h % 4 < 2 ? trans::t : trans::n, 64 + std::size_t(h), 70, 64};
    ratio[std::size_t(h)] = run_case<bf16, float, native_arch>(c, 300u + unsigned(h), gemm_bf16_path::best).ratio;
  }
  for (int h = 0; h < jobs; ++h) CHECK(ratio[std::size_t(h)] <= 1.0);

  const int saved = num_threads();
  for (trans ta : both)
    for (trans tb : both) {
      const bf16_case c{ta, tb, 300, 64, 200};
      set_num_threads(1);
      const auto one = run_case<float, bf16, native_arch>(c, 9, gemm_bf16_path::best);
      set_num_threads(2);
      const auto two = run_case<float, bf16, native_arch>(c, 9, gemm_bf16_path::best);
      CHECK(one.ratio <= 1.0);
      CHECK(one.c == two.c);  // same blocking along K on every thread: bitwise equal
    }
  set_num_threads(saved);
}

TEST_CASE("gemm_bf16: K = 0, empty products and argument errors") {
  std::vector<float> c(12, 2.0f), bias = {1, 2, 3, 4};
  std::vector<bf16> a(1), b(1);
  matrix_view<float> C(c.data(), 3, 4);
  kernels::gemm_bf16<bf16, bf16>(trans::n, trans::n, 1.0f, {a.data(), 3, 0}, {b.data(), 0, 4}, 0.5f, C, bias.data());
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(C(i, j) == 1.0f + bias[j]);
  kernels::gemm_bf16<bf16, bf16>(trans::n, trans::n, 1.0f, {nullptr, 0, 5}, {b.data(), 5, 1, 1}, 0.0f, {nullptr, 0, 1});

  auto message = [](auto&& f) {
    try {
      f();
    } catch (const sparselm::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<bf16> x(64), y(64);
  std::vector<float> z(64);
  const std::string shapes = message([&] {
    kernels::gemm_bf16<bf16, bf16>(trans::n, trans::t, 1.0f, {x.data(), 4, 3}, {y.data(), 5, 2}, 0.0f,
                                   {z.data(), 4, 5, 6});
  });
  CHECK(shapes.find("gemm_bf16: shapes do not match") != std::string::npos);
  CHECK(shapes.find("B^T, B (5x2)") != std::string::npos);
  CHECK(message([&] {
          kernels::gemm_bf16<bf16, bf16>(trans::n, trans::n, 1.0f, {x.data(), 4, 4, 3}, {y.data(), 4, 4}, 0.0f,
                                         {z.data(), 4, 4});
        }).find("gemm_bf16: A: leading dimension 3") != std::string::npos);
  const std::string native = message([&] {
    kernels::gemm_bf16<bf16, bf16, xsimd::sse2>(trans::n, trans::n, 1.0f, {x.data(), 4, 4}, {y.data(), 4, 4}, 0.0f,
                                                {z.data(), 4, 4}, nullptr, gemm_bf16_path::native);
  });
  CHECK(native.find("gemm_bf16: the native path needs AVX512-BF16") != std::string::npos);
  const std::string amx = message([&] {
    kernels::gemm_bf16<bf16, bf16, xsimd::sse2>(trans::n, trans::n, 1.0f, {x.data(), 4, 4}, {y.data(), 4, 4}, 0.0f,
                                                {z.data(), 4, 4}, nullptr, gemm_bf16_path::amx);
  });
  CHECK(amx.find("gemm_bf16: the amx path is unavailable") != std::string::npos);
}

TEST_CASE("gemm_bf16 amx path: random shapes with tile edges against the reference and the portable path") {
  // Sizes around the AMX tile (16 rows / columns, 32 in k) and its 32 x 32 micro-tile; depths
  // crossing its depth block (1024) and rows / columns crossing MC (256) and NC (2048).
  if (!amx_here())
    MESSAGE("AMX unavailable, AMX checks skipped (portable and native paths still checked): ",
            std::string(kernels::gemm_bf16_amx_status()));
  const std::size_t edges[] = {1, 15, 16, 17, 31, 32, 33, 100};
  std::mt19937 pick(2024);
  auto any = [&](std::size_t n) { return edges[std::uniform_int_distribution<std::size_t>(0, n - 1)(pick)]; };
  std::vector<bf16_case> cases;
  for (trans ta : both)
    for (trans tb : both)
      for (int i = 0; i < 24; ++i) {
        bf16_case c{ta, tb, any(8), any(8), any(8)};
        switch (i % 5) {
          case 0: break;
          case 1: c.alpha = -0.5f, c.beta = 1.0f; break;
          case 2: c.alpha = 2.0f, c.beta = 0.25f, c.bias = true; break;
          case 3: c.bias = true, c.pad = 3, c.nan_c = true; break;
          case 4: c.beta = 1.0f, c.pad = 1; break;
        }
        cases.push_back(c);
      }
  for (trans ta : both)
    for (trans tb : both) {
      cases.push_back({ta, tb, 64, 64, 2049, 1.0f, 1.0f, false, 0});   // whole tiles, 3 depth blocks, beta 1
      cases.push_back({ta, tb, 300, 45, 1100, 1.0f, 0.0f, true, 2});  // crosses MC, depth block
      cases.push_back({ta, tb, 33, 2100, 70, 0.5f, 0.5f, false, 0});  // crosses NC
    }
  unsigned seed = 7000;
  for (const auto& c : cases) {
    INFO(describe(c));
    const unsigned sd = seed++;
    const auto portable = run_case<float, bf16, native_arch>(c, sd, gemm_bf16_path::portable);
    CHECK(portable.ratio <= 1.0);
    if (!amx_here()) continue;
    CHECK(run_case<float, float, native_arch>(c, sd, gemm_bf16_path::amx).ratio <= 1.0);
    CHECK(run_case<bf16, bf16, native_arch>(c, sd, gemm_bf16_path::amx).ratio <= 1.0);
    CHECK(run_case<bf16, float, native_arch>(c, sd, gemm_bf16_path::amx).ratio <= 1.0);
    const auto amx = run_case<float, bf16, native_arch>(c, sd, gemm_bf16_path::amx);
    CHECK(amx.ratio <= 1.0);
    // Against the portable path on the same operands: the same products in another order, so
    // within twice the fp32 GEMM's bound of each other (each is within it of the exact sum).
    std::size_t differ = 0;
    const std::size_t ld = c.N + c.pad;
    for (std::size_t i = 0; i < c.M; ++i)
      for (std::size_t j = 0; j < c.N; ++j) {
        const double bound = 2 * (2.0 * double(c.K) + 4.0) * std::numeric_limits<float>::epsilon() * amx.scale[i * c.N + j];
        if (!(std::abs(double(amx.c[i * ld + j]) - portable.c[i * ld + j]) <= bound)) ++differ;
      }
    CHECK(differ == 0);
  }
}

TEST_CASE("gemm_bf16: the kernel choice names AMX when it runs, and SPARSELM_BF16_KERNEL") {
  const auto& c = kernels::bf16_native_choice();
  CHECK(std::string(c.amx_status) == kernels::gemm_bf16_amx_status());
  CHECK(c.amx == (c.kernel == gemm_bf16_path::amx));
  CHECK(c.native == (c.kernel == gemm_bf16_path::native));
  const std::string said = kernels::describe_compute(dtype::bf16);
  if (c.amx) {
    CHECK(amx_here());
    CHECK(said.find("AMX tiles") != std::string::npos);
  } else {
    CHECK(said.find("AMX tiles") == std::string::npos);
    // Without an override, AMX is skipped only where it is unavailable.
    if (std::getenv("SPARSELM_BF16_KERNEL") == nullptr) CHECK(!amx_here());
  }
  if (!amx_here()) MESSAGE("AMX unavailable here: ", std::string(kernels::gemm_bf16_amx_status()));

  // SPARSELM_BF16_KERNEL, through the uncached choice (the cached one is made once per process).
  const char* saved = std::getenv("SPARSELM_BF16_KERNEL");
  const std::string keep = saved ? saved : "";
  auto with = [](const char* v) {
    ::setenv("SPARSELM_BF16_KERNEL", v, 1);
    return kernels::detail::choose_bf16_kernel();
  };
  const auto portable = with("portable");
  CHECK(portable.kernel == gemm_bf16_path::portable);
  CHECK(std::string(portable.reason) == "SPARSELM_BF16_KERNEL");
  const auto amx = with("amx");
  CHECK(amx.amx == amx_here());
  if (amx_here()) CHECK(std::string(amx.reason) == "SPARSELM_BF16_KERNEL");
  CHECK(with("anything else").amx == amx_here());  // not an override
  if (kernels::gemm_bf16_native) CHECK(with("native").kernel == gemm_bf16_path::native);
  if (saved) ::setenv("SPARSELM_BF16_KERNEL", keep.c_str(), 1);
  else ::unsetenv("SPARSELM_BF16_KERNEL");
}

TEST_CASE_TEMPLATE("gemm_f16 matches the reference on operands rounded to half", Arch, SPARSELM_GEMM_ARCHS) {
  unsigned seed = 500;
  for (trans ta : both)
    for (trans tb : both)
      for (const auto& shape : {std::tuple<std::size_t, std::size_t, std::size_t>{1, 1, 1}, {17, 33, 31}, {70, 40, 1030}}) {
        // Plain variables, not structured bindings: clang 14 cannot capture those in INFO.
        const std::size_t M = std::get<0>(shape), N = std::get<1>(shape), K = std::get<2>(shape);
        std::mt19937 g(seed++);
        operand A(ta == trans::t ? K : M, ta == trans::t ? M : K, 2, g), B(tb == trans::t ? N : K, tb == trans::t ? K : N, 1, g);
        // Half has 11 significant bits: uniform(-1, 1) floats differ from their rounding, so the
        // result differs from the fp32 GEMM's (the test sees whether the rounding happened).
        std::vector<float> ah, bh;
        for (float x : A.f) ah.push_back(float(half(x)));
        for (float x : B.f) bh.push_back(float(half(x)));
        std::vector<float> C(M * N, 0.0f), C32(M * N, 0.0f);
        kernels::gemm_f16<Arch>(ta, tb, 1.5f, A.view<float>(), B.view<float>(), 0.0f, {C.data(), M, N});
        kernels::gemm<Arch>(ta, tb, 1.5f, A.view<float>(), B.view<float>(), 0.0f, {C32.data(), M, N});
        auto want = test::gemm_reference(ta, tb, 1.5f, {ah.data(), A.rows, A.cols, A.ld}, {bh.data(), B.rows, B.cols, B.ld},
                                         0.0f, {C.data(), M, N});
        INFO("ta ", int(ta), " tb ", int(tb), " M ", M, " N ", N, " K ", K);
        CHECK(test::gemm_error_ratio(want, {C.data(), M, N}, K) <= 1.0);
        if (K > 1) CHECK(C != C32);
      }
}

TEST_CASE("gemm_f16: operands beyond the half range become infinity; gemm_as dispatches by compute type") {
  std::vector<float> a = {70000.0f, 1.0f, 1.0f, 1.0f}, b = {1.0f, 1.0f, 1.0f, 1.0f}, c(4);
  kernels::gemm_f16(trans::n, trans::n, 1.0f, {a.data(), 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 2});
  CHECK(std::isinf(c[0]));
  CHECK(c[2] == 2.0f);
  kernels::gemm_bf16<float, float>(trans::n, trans::n, 1.0f, {a.data(), 2, 2}, {b.data(), 2, 2}, 0.0f, {c.data(), 2, 2});
  CHECK(std::isfinite(c[0]));  // bf16 has fp32's range

  std::mt19937 g(3);
  operand A(50, 70, 0, g), B(70, 30, 0, g);
  for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
    std::vector<float> via(50 * 30), direct(50 * 30);
    kernels::gemm_as(d, trans::n, trans::n, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {via.data(), 50, 30});
    if (d == dtype::f32)
      kernels::gemm(trans::n, trans::n, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {direct.data(), 50, 30});
    else if (d == dtype::bf16)
      kernels::gemm_bf16<float, float>(trans::n, trans::n, 1.0f, A.view<float>(), B.view<float>(), 0.0f,
                                       {direct.data(), 50, 30});
    else
      kernels::gemm_f16(trans::n, trans::n, 1.0f, A.view<float>(), B.view<float>(), 0.0f, {direct.data(), 50, 30});
    CHECK(via == direct);
  }
}

}  // namespace SPARSELM_UNITY_ID

#undef SPARSELM_GEMM_ARCHS  // (a unity build compiles the next file in the same translation unit)
