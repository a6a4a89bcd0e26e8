#pragma once
// Shared by the optim tests: a small model layout with every tensor flag, deterministic values,
// and tolerance checks.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/rng.hpp"

namespace optim_test {

using namespace sparselm;

// Tensors: odd sizes (SIMD tails), one spanning three work segments, bias/norm flags, a frozen one,
// and one that starts at zero (LAMB trust ratio 1).
struct model {
  std::shared_ptr<arena_layout> layout = std::make_shared<arena_layout>();
  std::size_t w, b, g, frozen, big, zeros;
  arena<float> params, grads;

  explicit model(std::size_t big_size = 40000) {
    w = layout->add("h.0.w", {37, 19});
    b = layout->add("h.0.b", {19}, param_no_decay | param_no_trust);
    g = layout->add("ln.g", {3, 7}, param_no_decay | param_no_trust);
    frozen = layout->add("frozen.w", {8, 8}, param_frozen);
    big = layout->add("big", {big_size}, param_sparse);
    zeros = layout->add("zeros", {5, 5});
    params = arena<float>(layout);
    grads = arena<float>(layout);
    counter_rng rng(7);
    for (std::size_t i = 0; i < layout->count(); ++i)
      if (i != zeros) rng.fill_normal(params[i], i, 0.0f, 0.5f);
  }

  // Gradients of step t (1-based): N(0, σ) with σ varying by tensor, a few exact zeros.
  void fill_grads(std::size_t t) {
    counter_rng rng(1000 + t);
    for (std::size_t i = 0; i < layout->count(); ++i) {
      rng.fill_normal(grads[i], i, 0.0f, 0.05f * float(i + 1));
      grads[i][0] = 0.0f;
    }
  }
};

// Per-tensor double copies (the naive references work on these).
inline std::vector<std::vector<double>> to_double(const arena<float>& a) {
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < a.layout().count(); ++i) out.emplace_back(a[i].begin(), a[i].end());
  return out;
}
inline std::vector<std::vector<double>> zeros_like(const arena_layout& layout) {
  std::vector<std::vector<double>> out;
  for (const auto& t : layout) out.emplace_back(t.size, 0.0);
  return out;
}

// |a − r| <= rtol·(|r| + 1e-2·max|r|) element-wise; reports the worst element.
template <class T>
void check_close(std::span<const T> a, const std::vector<double>& r, double rtol, const std::string& what) {
  REQUIRE(a.size() == r.size());
  double scale = 0;
  for (double x : r) scale = std::max(scale, std::fabs(x));
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    double err = std::fabs(double(to_float(a[i])) - r[i]) / (std::fabs(r[i]) + 1e-2 * scale + 1e-30);
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  INFO(what, ": worst relative error ", worst, " at element ", at, " (got ", double(to_float(a[at])), ", want ", r[at],
       ")");
  CHECK(worst <= rtol);
}

// Same bytes (any storage type).
template <storage_type T>
bool bitwise_equal(const arena<T>& a, const arena<T>& b) {
  auto x = a.all(), y = b.all();
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0);
}
inline bool bitwise_equal(const arena<float>& a, const arena<float>& b) {
  auto x = a.all(), y = b.all();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](float p, float q) {
           return std::bit_cast<std::uint32_t>(p) == std::bit_cast<std::uint32_t>(q);
         });
}

}  // namespace optim_test
