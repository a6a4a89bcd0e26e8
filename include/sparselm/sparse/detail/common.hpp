#pragma once
// Internals shared by the sparse/ headers: block counts from real products, and reading JSON
// config objects field by field with errors that name the field.

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

#include <nlohmann/json.hpp>

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

// Reads the fields of one JSON config object. Every error names the config (`what`) and the field.
class json_fields {
 public:
  json_fields(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    SPARSELM_CHECK(j_.is_object(), what_, ": expected a JSON object, got ", j_.type_name());
  }

  // Fails on a key that is not in `known` (catches misspelt options).
  void only(std::initializer_list<std::string_view> known) const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      SPARSELM_CHECK(std::find(known.begin(), known.end(), std::string_view(it.key())) != known.end(), what_,
                     ": unknown field '", it.key(), "'");
  }

  // Each reader leaves `out` unchanged when the field is absent.
  void read(const char* field, double& out) const {
    if (!j_.contains(field)) return;
    const auto& v = j_.at(field);
    SPARSELM_CHECK(v.is_number(), what_, ": field '", field, "' must be a number, got ", v.dump());
    out = v.get<double>();
    SPARSELM_CHECK(std::isfinite(out), what_, ": field '", field, "' must be finite, got ", v.dump());
  }
  void read(const char* field, std::size_t& out) const {
    if (!j_.contains(field)) return;
    const auto& v = j_.at(field);
    bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    SPARSELM_CHECK(ok, what_, ": field '", field, "' must be a non-negative integer, got ", v.dump());
    out = v.get<std::size_t>();
  }
  void read(const char* field, std::string& out) const {
    if (!j_.contains(field)) return;
    const auto& v = j_.at(field);
    SPARSELM_CHECK(v.is_string(), what_, ": field '", field, "' must be a string, got ", v.dump());
    out = v.get<std::string>();
  }
  // An enum spelled as a string; `parse(text, field_label)` throws for an unknown spelling.
  template <class E, class Parse>
  void read_enum(const char* field, E& out, Parse parse) const {
    std::string s;
    if (!j_.contains(field)) return;
    read(field, s);
    out = parse(s, what_ + ": field '" + field + "'");
  }

  const std::string& what() const noexcept { return what_; }

 private:
  const nlohmann::json& j_;
  std::string what_;
};

}  // namespace sparselm::sparse::detail
