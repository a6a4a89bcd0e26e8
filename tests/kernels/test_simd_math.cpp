// detail::exp (the vector exp behind softmax, cross-entropy, GELU and attention) against std::exp
// in double precision, on every architecture the element-wise tests cover (the AVX-512 build has
// its own VSCALEFPS path): relative error over the whole finite range, the underflow cut-off,
// overflow, infinities and NaN.

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "pointwise_reference.hpp"
#include "sparselm/kernels/detail/simd_math.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

template <class Arch>
std::vector<float> vexp(const std::vector<float>& x) {
  using F = kernels::detail::fvec<Arch>;
  constexpr std::size_t W = F::size;
  std::vector<float> in(x);
  in.resize((x.size() + W - 1) / W * W, 0.0f);
  std::vector<float> out(in.size());
  for (std::size_t i = 0; i < in.size(); i += W) kernels::detail::exp<Arch>(F::load_unaligned(in.data() + i)).store_unaligned(out.data() + i);
  out.resize(x.size());
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("detail::exp is within 2 ulp of exp over the finite range", Arch, SPARSELM_TEST_ARCHS) {
  // Every 2^-10 from -87.33 to 88.72 plus values near 0, where the polynomial alone works.
  std::vector<float> x;
  for (double v = -87.33; v <= 88.72; v += 1.0 / 1024) x.push_back(float(v));
  for (int i = -2000; i <= 2000; ++i) x.push_back(float(i) * 1e-6f);
  const std::vector<float> y = vexp<Arch>(x);
  double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);  // float ulp at the expected value
    const double err = std::abs(double(y[i]) - want) / ulp;
    if (err > worst) worst = err, worst_x = x[i];
  }
  INFO("worst x = " << worst_x);
  CHECK(worst <= 2.0);
}

TEST_CASE_TEMPLATE("detail::exp underflows to 0, overflows to inf and keeps NaN", Arch, SPARSELM_TEST_ARCHS) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf, -1e30f, -1000.0f, -88.0f, -87.34f, 0.0f, -0.0f, 1.0f, 88.7f, 88.73f, 89.0f,
                                1000.0f, 1e30f, inf, nan, -nan};
  const std::vector<float> y = vexp<Arch>(x);
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 0.0f);
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == 0.0f);  // below -87.3365: flushed, never a denormal
  CHECK(y[4] == 0.0f);
  CHECK(y[5] == 1.0f);
  CHECK(y[6] == 1.0f);
  CHECK(y[7] == doctest::Approx(std::exp(double(1.0f))).epsilon(1e-6));
  CHECK(std::isfinite(y[8]));
  CHECK(y[8] == doctest::Approx(std::exp(double(88.7f))).epsilon(1e-6));
  for (std::size_t i = 9; i <= 13; ++i) {
    INFO("x = " << x[i]);
    CHECK(y[i] == inf);
  }
  CHECK(std::isnan(y[14]));
  CHECK(std::isnan(y[15]));
}

}  // namespace SPARSELM_UNITY_ID
