#pragma once
// Generic finite-difference gradient checker (public: downstream projects test their own layers
// and models with it; sparselm/testing/layer_check.hpp builds on it).
//
// Given a scalar function f of a vector of floats (evaluated by float kernels, returned as double)
// and an analytic gradient, compares every (or a random subset of) component(s) with a numerical
// derivative. Inputs are floats, so a step x ± h is generally not exactly representable; the
// checker therefore evaluates f at the float points it can actually reach, x_k = float(x + c_k·h),
// and differentiates the Lagrange interpolant through (x_k − x, f(x_k)) at 0 in double. With the
// default five-point stencil (order 4) the truncation error is O(h⁴), so a fairly large step keeps
// float rounding noise in f small relative to the difference.
//
// Pack several tensors into one vector and unpack them inside f to check them all at once:
//
//   auto r = sparselm::testing::gradcheck([&](std::span<const float> v) { return loss(v); }, x, grad);
//   CHECK_MESSAGE(r.ok, r.message);

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace sparselm::testing {

struct gradcheck_options {
  double step = 1e-2;          // h = step · max(1, |x_i|)
  int order = 4;               // 2: central difference (3 points), 4: five-point stencil
  double rtol = 1e-2;          // component passes if |a − n| <= atol + rtol·max(|a|, |n|)
  double atol = 1e-4;
  std::size_t max_checks = 0;  // 0: every component; else this many, chosen with a fixed seed
  std::uint64_t seed = 12345;
};

struct gradcheck_result {
  bool ok = true;
  std::size_t checked = 0, failures = 0;
  std::size_t worst = 0;          // index with the largest error relative to its tolerance
  double worst_ratio = 0;         // |a − n| / tolerance at `worst` (<= 1 passes)
  double analytic = 0, numeric = 0;
  std::string message;            // human-readable summary (first failures listed)
};

namespace detail {
// d/dt at t = 0 of the polynomial interpolating (t_k, f_k).
inline double lagrange_derivative_at_zero(const std::vector<double>& t, const std::vector<double>& f) {
  const std::size_t n = t.size();
  double d = 0;
  for (std::size_t k = 0; k < n; ++k) {
    double wk = 0;
    for (std::size_t m = 0; m < n; ++m) {
      if (m == k) continue;
      double prod = 1.0 / (t[k] - t[m]);
      for (std::size_t j = 0; j < n; ++j)
        if (j != k && j != m) prod *= (0.0 - t[j]) / (t[k] - t[j]);
      wk += prod;
    }
    d += wk * f[k];
  }
  return d;
}
}  // namespace detail

// Numerical derivative of f at x along component i.
template <class F>
double numeric_derivative(F&& f, std::vector<float>& x, std::size_t i, double f0, const gradcheck_options& o = {}) {
  const float xi = x[i];
  const double h = o.step * std::max(1.0, std::fabs(double(xi)));
  std::vector<int> coeffs = o.order == 2 ? std::vector<int>{-1, 1} : std::vector<int>{-2, -1, 1, 2};
  std::vector<double> t{0.0}, fv{f0};
  for (int c : coeffs) {
    float xc = float(double(xi) + c * h);
    if (xc == xi) continue;  // step below float resolution
    x[i] = xc;
    t.push_back(double(xc) - double(xi));
    fv.push_back(f(std::span<const float>(x)));
  }
  x[i] = xi;
  return detail::lagrange_derivative_at_zero(t, fv);
}

// Compares `grad` (analytic df/dx at x) with finite differences of f.
template <class F>
gradcheck_result gradcheck(F&& f, std::vector<float> x, std::span<const float> grad, gradcheck_options o = {}) {
  gradcheck_result r;
  if (grad.size() != x.size()) {
    r.ok = false;
    r.message = "gradcheck: gradient has " + std::to_string(grad.size()) + " entries for " + std::to_string(x.size()) +
                " inputs";
    return r;
  }
  std::vector<std::size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), std::size_t(0));
  if (o.max_checks && o.max_checks < idx.size()) {
    std::uint64_t s = o.seed;  // Fisher–Yates with splitmix64, first max_checks entries
    for (std::size_t k = 0; k < o.max_checks; ++k) {
      s += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      std::swap(idx[k], idx[k + z % (idx.size() - k)]);
    }
    idx.resize(o.max_checks);
    std::sort(idx.begin(), idx.end());
  }
  const double f0 = f(std::span<const float>(x));
  std::ostringstream msg;
  for (std::size_t i : idx) {
    const double n = numeric_derivative(f, x, i, f0, o);
    const double a = grad[i];
    const double tol = o.atol + o.rtol * std::max(std::fabs(a), std::fabs(n));
    const double ratio = std::fabs(a - n) / tol;
    ++r.checked;
    if (!(ratio <= 1.0)) {
      if (r.failures < 8) msg << "  [" << i << "] analytic " << a << " numeric " << n << '\n';
      ++r.failures;
    }
    if (!(ratio <= r.worst_ratio) || r.checked == 1) {
      r.worst = i;
      r.worst_ratio = ratio;
      r.analytic = a;
      r.numeric = n;
    }
  }
  r.ok = r.failures == 0;
  std::ostringstream head;
  head << "gradcheck: " << r.failures << " of " << r.checked << " components outside tolerance (worst [" << r.worst
       << "] analytic " << r.analytic << " numeric " << r.numeric << ", " << r.worst_ratio << "x tolerance)\n";
  r.message = head.str() + msg.str();
  return r;
}

}  // namespace sparselm::testing
