// float <-> bf16 conversion kernels (kernels/convert.hpp) against the scalar conversions of
// core/dtype.hpp, bit for bit, on every SIMD path; and the bf16 forms of GELU against the float
// GELU on the same values.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "pointwise_reference.hpp"
#include "sparselm/kernels/convert.hpp"
#include "sparselm/kernels/gelu.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;

namespace {
// Random floats over many binades, and the values rounding must get right: ties to even (both
// ways), the largest finite values (rounding up to infinity), infinities, NaNs of both signs and
// with payloads only in the low bits, subnormals, signed zeros.
fvec conversion_inputs(std::size_t n) {
  fvec x = random_vector(n, 3, -1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], int(i % 61) - 30);
  const std::uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu,
                                   0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                                   0x00000001u, 0x80008000u, 0x007fffffu, 0x00000000u, 0x80000000u, 0x0000ffffu};
  for (std::size_t k = 0; k < std::size(special) && 3 * k < n; ++k) x[3 * k] = std::bit_cast<float>(special[k]);
  return x;
}
}  // namespace

TEST_CASE_TEMPLATE("to_bf16 rounds like bf16(float), to_float widens exactly", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t n : {1, 5, 16, 31, 100, 70001}) {
    CAPTURE(n);
    const fvec x = conversion_inputs(n);
    std::vector<bf16> y(n);
    kernels::to_bf16<Arch>(x, y);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += y[i].bits != bf16(x[i]).bits;
    CHECK(bad == 0);
    fvec back(n);
    kernels::to_float<Arch>(y, back);
    for (std::size_t i = 0; i < n; ++i)
      bad += std::bit_cast<std::uint32_t>(back[i]) != std::uint32_t(y[i].bits) << 16;
    CHECK(bad == 0);
  }
  // The cases above, spelled out: a tie rounds to the even neighbour, 0x7f7fffff to infinity, a
  // signalling NaN to a quiet one with its sign.
  const fvec x{std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u), std::numeric_limits<float>::max(),
               std::bit_cast<float>(0xff800001u)};
  std::vector<bf16> y(x.size());
  kernels::to_bf16<Arch>(x, y);
  CHECK(y[0].bits == 0x3f80u);
  CHECK(y[1].bits == 0x3f82u);
  CHECK(y[2].bits == 0x7f80u);
  CHECK(y[3].bits == 0xffc0u);
}

TEST_CASE("to_bf16 and to_float refuse spans of different sizes") {
  fvec x(4);
  std::vector<bf16> y(3);
  CHECK_THROWS_WITH_AS(kernels::to_bf16(x, y), doctest::Contains("x has 4 elements but y has 3"), sparselm::error);
  CHECK_THROWS_AS(kernels::to_float(y, x), sparselm::error);
}

TEST_CASE_TEMPLATE("gelu in bf16: forward rounds the float GELU, backward evaluates it at the bf16 input", Arch,
                   SPARSELM_TEST_ARCHS) {
  using kernels::gelu_kind;
  for (std::size_t n : {1, 9, 40, 20001}) {
    CAPTURE(n);
    const fvec x = random_vector(n, 5, -6.0f, 6.0f), dy = random_vector(n, 6);
    // forward: y16 = bf16(gelu(x)) and x16 = bf16(x), the float kernel's values rounded
    std::vector<bf16> y16(n), x16(n);
    fvec y(n);
    kernels::gelu_forward<gelu_kind::tanh, Arch>(x, y16, x16);
    kernels::gelu_forward<gelu_kind::tanh, Arch>(x, y);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += y16[i].bits != bf16(y[i]).bits || x16[i].bits != bf16(x[i]).bits;
    CHECK(bad == 0);
    // backward from the bf16 input = the float backward at the widened values, bit for bit
    fvec xw(n), dx16(n), dx(n);
    for (std::size_t i = 0; i < n; ++i) xw[i] = float(x16[i]);
    for (gelu_kind k : {gelu_kind::tanh, gelu_kind::erf}) {
      if (k == gelu_kind::tanh) {
        kernels::gelu_backward<gelu_kind::tanh, Arch>(std::span<const bf16>(x16), dy, dx16);
        kernels::gelu_backward<gelu_kind::tanh, Arch>(xw, dy, dx);
      } else {
        kernels::gelu_backward<gelu_kind::erf, Arch>(std::span<const bf16>(x16), dy, dx16);
        kernels::gelu_backward<gelu_kind::erf, Arch>(xw, dy, dx);
      }
      CHECK(dx16 == dx);
    }
    // accumulate adds to what is there
    fvec acc(n, 2.0f);
    kernels::gelu_backward<gelu_kind::tanh, Arch>(std::span<const bf16>(x16), dy, acc, true);
    kernels::gelu_backward<gelu_kind::tanh, Arch>(xw, dy, dx);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(acc[i] == doctest::Approx(2.0f + dx[i]).epsilon(1e-6));
  }
}

}  // namespace SPARSELM_UNITY_ID
