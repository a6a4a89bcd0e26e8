#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/detail/philox.hpp"
#include "sparselm/kernels/dropout.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;

TEST_CASE_TEMPLATE("vectorised Philox matches counter_rng bit for bit", Arch, SPARSELM_TEST_ARCHS) {
  counter_rng rng(0x123456789abcdefull);
  for (std::uint64_t first : {0ull, 1ull, 3ull, 4ull, 1001ull, (1ull << 34) + 5}) {
    for (std::size_t n : {0, 1, 5, 31, 64, 1000}) {
      std::vector<std::uint32_t> out(n);
      kernels::detail::philox_bits<Arch>(rng, 0xfeedbeefcafeull, first, n, out.data());
      for (std::size_t j = 0; j < n; ++j) REQUIRE(out[j] == rng.bits(0xfeedbeefcafeull, first + j));
    }
  }
}

TEST_CASE_TEMPLATE("dropout matches the reference mask and scale", Arch, SPARSELM_TEST_ARCHS) {
  counter_rng rng(42);
  for (std::size_t n : {1, 7, 33, 129, 5000}) {
    for (float p : {0.1f, 0.5f, 0.9f}) {
      CAPTURE(n);
      CAPTURE(p);
      fvec x = random_vector(n, 1), y(n), dx(n);
      kernels::dropout_forward<Arch>(x, y, p, rng, 77);
      auto ref = dropout_ref(x, p, rng, 77);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(double(y[i]) == ref[i]);
      kernels::dropout_backward<Arch>(x, dx, p, rng, 77);
      CHECK(dx == y);
    }
  }
}

TEST_CASE("dropout: p = 0 is the identity, p = 1 zeros, the keep rate is 1 - p") {
  counter_rng rng(5);
  const std::size_t n = 200001;
  fvec x = random_vector(n, 2), y(n);
  kernels::dropout_forward(x, y, 0.0f, rng, 1);
  CHECK(y == x);
  kernels::dropout_forward(x, y, 1.0f, rng, 1);
  for (float v : y) REQUIRE(v == 0.0f);
  fvec ones(n, 1.0f);
  kernels::dropout_forward(ones, y, 0.3f, rng, 9);
  std::size_t kept = 0;
  for (float v : y) kept += v != 0.0f;
  CHECK(double(kept) / n == doctest::Approx(0.7).epsilon(0.01));
  for (float v : y) REQUIRE((v == 0.0f || v == 1.0f / 0.7f));
  // different streams give different masks
  fvec y2(n);
  kernels::dropout_forward(ones, y2, 0.3f, rng, 10);
  CHECK(y2 != y);
}

TEST_CASE("dropout masks are identical for 1 and 2 threads, in place and out of place") {
  counter_rng rng(6);
  const std::size_t n = 300007;
  fvec x = random_vector(n, 3);
  int old = num_threads();
  set_num_threads(1);
  fvec y1(n);
  kernels::dropout_forward(x, y1, 0.25f, rng, 3);
  set_num_threads(2);
  fvec y2(n), yi = x;
  kernels::dropout_forward(x, y2, 0.25f, rng, 3);
  kernels::dropout_forward(yi, yi, 0.25f, rng, 3);
  set_num_threads(old);
  CHECK(y1 == y2);
  CHECK(yi == y1);
}

TEST_CASE("dropout backward passes a finite-difference check") {
  counter_rng rng(8);
  const std::size_t n = 40;
  fvec x = random_vector(n, 4), w = random_vector(n, 5), g(n);
  auto f = [&](std::span<const float> v) {
    fvec y(n);
    kernels::dropout_forward(v, y, 0.4f, rng, 2);
    return dot(y, w);
  };
  kernels::dropout_backward(w, g, 0.4f, rng, 2);
  auto r = gradcheck(f, x, g);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("dropout rejects bad arguments") {
  counter_rng rng;
  fvec a(4), b(3);
  CHECK_THROWS_WITH_AS(kernels::dropout_forward(a, b, 0.1f, rng, 0),
                       "dropout_forward: input has 4 elements but output has 3", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::dropout_backward(a, a, 1.5f, rng, 0),
                       "dropout_backward: probability p = 1.5 is outside [0, 1]", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::dropout_forward(a, a, -0.1f, rng, 0),
                       "dropout_forward: probability p = -0.1 is outside [0, 1]", sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
