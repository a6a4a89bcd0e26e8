#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "sparselm/core/rng.hpp"
#include "sparselm/core/threads.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  auto r0 = philox4x32({0, 0, 0, 0}, {0, 0});
  CHECK(r0 == std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  auto r1 = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  CHECK(r1 == std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  auto r2 = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  CHECK(r2 == std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("counter rng: same numbers whatever the thread count") {
  counter_rng rng(1234);
  const std::size_t n = 10007;
  std::vector<float> serial(n), parallel(n);
  for (std::size_t i = 0; i < n; ++i) serial[i] = rng.uniform(9, i);
  int old = num_threads();
  set_num_threads(2);
  parallel_for(0, n, [&](std::size_t i) { parallel[i] = rng.uniform(9, i); });
  set_num_threads(old);
  CHECK(serial == parallel);
}

TEST_CASE("counter rng: moments of uniform and normal") {
  counter_rng rng(42);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    float u = rng.uniform(1, std::uint64_t(i));
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    su += u;
    float z = rng.normal(2, std::uint64_t(i));
    REQUIRE(std::isfinite(z));
    sn += z;
    sn2 += double(z) * z;
  }
  CHECK(umin >= 0.0f);
  CHECK(umax < 1.0f);
  CHECK(su / n == doctest::Approx(0.5).epsilon(0.01));
  CHECK(std::fabs(sn / n) < 0.01);
  CHECK(sn2 / n == doctest::Approx(1.0).epsilon(0.02));
  // different streams and seeds differ
  CHECK(rng.bits(1, 0) != rng.bits(2, 0));
  CHECK(counter_rng(1).bits(1, 0) != counter_rng(2).bits(1, 0));
  // below(n) stays in range and covers it
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 7000; ++i) hist[rng.below(3, std::uint64_t(i), 7)]++;
  for (int h : hist) CHECK(h > 800);
}

TEST_CASE("set_num_threads rejects non-positive counts") {
  CHECK_THROWS_AS(set_num_threads(0), error);
}

}  // namespace SPARSELM_UNITY_ID
