#pragma once
// Internals shared by the sparse/ headers: block counts from real products and enums spelled as
// strings in configs and logs.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "sparselm/core/error.hpp"

namespace sparselm::sparse::detail {

// ceil(x) for a block count, except that x within a relative 1e-9 of an integer counts as that
// integer: (1 - 0.9)·100 or 0.3·10 = 3.0000000000000004 must not gain a block from rounding error.
inline std::size_t ceil_count(double x) noexcept {
  if (!(x > 0.0)) return 0;
  double r = std::round(x);
  if (std::abs(x - r) <= 1e-9 * std::max(1.0, x)) return std::size_t(r);
  return std::size_t(std::ceil(x));
}

// Enums spelled as strings in configs and logs: a table of (name, value) per enum.
template <class E, std::size_t N>
using enum_names = std::array<std::pair<const char*, E>, N>;

template <class E, std::size_t N>
constexpr const char* enum_name(const enum_names<E, N>& names, E v) noexcept {
  for (auto& [n, e] : names)
    if (e == v) return n;
  return "?";
}

// `kind` names the enum in the message: "<what>: unknown <kind> 'x' (expected "a", "b")".
template <class E, std::size_t N>
E parse_enum(const enum_names<E, N>& names, const std::string& s, const std::string& what, const char* kind) {
  std::string expected;
  for (auto& [n, e] : names) {
    if (s == n) return e;
    expected += std::string(expected.empty() ? "" : ", ") + '"' + n + '"';
  }
  fail(what, ": unknown ", kind, " '", s, "' (expected ", expected, ")");
}

}  // namespace sparselm::sparse::detail
