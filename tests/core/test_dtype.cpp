#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/rng.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
// Independent reference: the nearest representable value by exhaustive comparison of neighbours.
template <class T>
float nearest_even_reference(float x, std::uint16_t lo_bits, std::uint16_t hi_bits) {
  float lo = float(T::from_bits(lo_bits)), hi = float(T::from_bits(hi_bits));
  double dlo = std::fabs(double(x) - lo), dhi = std::fabs(double(hi) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo_bits & 1) ? hi : lo;
}
}  // namespace

TEST_CASE("bf16 round trip is exact for every bf16 value") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    bf16 v = bf16::from_bits(std::uint16_t(b));
    float f = float(v);
    if (std::isnan(f)) {
      CHECK(std::isnan(float(bf16(f))));
      continue;
    }
    CHECK(bf16(f).bits == b);
  }
}

TEST_CASE("half round trip is exact for every half value") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    half v = half::from_bits(std::uint16_t(b));
    float f = float(v);
    if (std::isnan(f)) {
      CHECK(std::isnan(float(half(f))));
      continue;
    }
    CHECK(half(f).bits == b);
  }
}

TEST_CASE("bf16 rounds to nearest, ties to even") {
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties to even (1.0)
  CHECK(float(bf16(1.0f + 0x1p-8f)) == 1.0f);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): goes up
  CHECK(float(bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  CHECK(float(bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::max()))));
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::signbit(float(bf16(-0.0f))));
  // sweep: compare against the neighbour reference for many floats
  counter_rng rng(7);
  for (std::uint64_t i = 0; i < 200000; ++i) {
    float x = std::bit_cast<float>(rng.bits(1, i) & 0xbfffffffu);  // finite values mostly
    if (!std::isfinite(x)) continue;
    std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    std::uint16_t lo = std::uint16_t(u >> 16);
    std::uint16_t hi = std::uint16_t(lo + 1);
    float ref = nearest_even_reference<bf16>(x, lo, hi);
    if (!std::isfinite(ref)) continue;
    REQUIRE(float(bf16(x)) == ref);
  }
}

TEST_CASE("half rounds to nearest even, with subnormals and overflow") {
  CHECK(float(half(1.0f)) == 1.0f);
  CHECK(float(half(65504.0f)) == 65504.0f);
  CHECK(float(half(65519.0f)) == 65504.0f);
  CHECK(std::isinf(float(half(65520.0f))));
  CHECK(float(half(0x1p-24f)) == 0x1p-24f);      // smallest subnormal
  CHECK(float(half(0x1p-25f)) == 0.0f);          // exactly half of it: ties to even (zero)
  CHECK(float(half(0x1.8p-25f)) == 0x1p-24f);    // above half: rounds up
  CHECK(float(half(3 * 0x1p-25f)) == 2 * 0x1p-24f);  // 1.5 ulp ties to even (2)
  CHECK(float(half(1.0f + 0x1p-11f)) == 1.0f);   // tie to even
  CHECK(float(half(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
  CHECK(std::isnan(float(half(std::numeric_limits<float>::quiet_NaN()))));
  counter_rng rng(11);
  for (std::uint64_t i = 0; i < 200000; ++i) {
    // floats in the half range, including subnormals
    float x = (rng.uniform(2, i) * 2 - 1) * std::ldexp(1.0f, int(rng.bits(3, i) % 42) - 26);
    float a = std::fabs(x);
    if (a >= 65504.0f) continue;
    // bracket |x| by scanning from the truncated guess
    std::uint16_t lo = half(a).bits;
    if (float(half::from_bits(lo)) > a) --lo;
    float ref = nearest_even_reference<half>(a, lo, std::uint16_t(lo + 1));
    REQUIRE(float(half(a)) == ref);
    REQUIRE(float(half(-a)) == -ref);
  }
}

TEST_CASE_TEMPLATE("stochastic rounding is unbiased and picks a neighbour", T, bf16, half) {
  counter_rng rng(3);
  const float x = 1.0f + 0.3f * (std::is_same_v<T, bf16> ? 0x1p-7f : 0x1p-10f);
  float lo = float(T(1.0f));
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    float r = to_float(from_float_stochastic<T>(x, rng.bits(5, std::uint64_t(i))));
    REQUIRE((r == lo || r > x));
    sum += r;
  }
  CHECK(sum / n == doctest::Approx(double(x)).epsilon(1e-4));
  // exact values are never perturbed
  for (int i = 0; i < 100; ++i) CHECK(to_float(from_float_stochastic<T>(0.75f, rng.bits(6, std::uint64_t(i)))) == 0.75f);
}

TEST_CASE("dtype names and sizes") {
  CHECK(dtype_name(dtype_of<float>()) == "F32");
  CHECK(dtype_name(dtype_of<bf16>()) == "BF16");
  CHECK(dtype_name(dtype_of<half>()) == "F16");
  CHECK(dtype_size(dtype::f32) == 4);
  CHECK(dtype_size(dtype::bf16) == 2);
}

}  // namespace SPARSELM_UNITY_ID
