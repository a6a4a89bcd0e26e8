#pragma once
// Strict reading of the small JSON objects that configure optimisers, schedules, loss scaling and
// gradient accumulation. Every error names the context and the field:
//
//   detail::json_fields f(j, "adamw config");
//   f.number("beta1", c.beta1, detail::in_unit_open);   // "adamw config: field 'beta1' must be in [0, 1), got 1.5"
//   f.finish();                                         // "adamw config: unknown field 'betas'"
//
// (models/config.hpp has a general config reader; this one is kept to what optim needs: numbers
// with range checks, counts, flags, a fixed "type" tag.)

#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "sparselm/core/error.hpp"

namespace sparselm::optim::detail {

// Range checks: a predicate and the phrase used when it fails.
struct range {
  bool (*ok)(double);
  const char* text;
};
inline constexpr range any_finite{[](double) { return true; }, "must be finite"};
inline constexpr range non_negative{[](double x) { return x >= 0; }, "must be >= 0"};
inline constexpr range positive{[](double x) { return x > 0; }, "must be > 0"};
inline constexpr range in_unit_open{[](double x) { return x >= 0 && x < 1; }, "must be in [0, 1)"};
inline constexpr range in_unit_closed{[](double x) { return x >= 0 && x <= 1; }, "must be in [0, 1]"};
inline constexpr range at_least_one{[](double x) { return x >= 1; }, "must be >= 1"};

class json_fields {
 public:
  json_fields(const nlohmann::json& j, std::string context) : j_(j), ctx_(std::move(context)) {
    SPARSELM_CHECK(j.is_object(), ctx_, ": expected a JSON object, got ", j.type_name(), " ", j.dump());
  }

  bool has(const char* key) const { return j_.contains(key); }

  // A floating-point field; absent keeps `out`.
  template <class F>
  void number(const char* key, F& out, range r = any_finite) {
    used_.insert(key);
    if (!j_.contains(key)) return;
    const auto& v = j_.at(key);
    SPARSELM_CHECK(v.is_number(), ctx_, ": field '", key, "' must be a number, got ", v.dump());
    double x = v.get<double>();
    SPARSELM_CHECK(std::isfinite(x), ctx_, ": field '", key, "' must be finite, got ", v.dump());
    SPARSELM_CHECK(r.ok(x), ctx_, ": field '", key, "' ", r.text, ", got ", v.dump());
    out = F(x);
  }

  // A non-negative integer field (a whole-valued float such as 1e4 is accepted).
  void count(const char* key, std::size_t& out, range r = non_negative) {
    used_.insert(key);
    if (!j_.contains(key)) return;
    const auto& v = j_.at(key);
    bool whole = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                           std::floor(v.get<double>()) == v.get<double>());
    SPARSELM_CHECK(whole, ctx_, ": field '", key, "' must be an integer, got ", v.dump());
    double x = v.get<double>();
    SPARSELM_CHECK(x >= 0, ctx_, ": field '", key, "' must not be negative, got ", v.dump());
    SPARSELM_CHECK(x < 9.0e18, ctx_, ": field '", key, "' is too large, got ", v.dump());
    SPARSELM_CHECK(r.ok(x), ctx_, ": field '", key, "' ", r.text, ", got ", v.dump());
    out = v.is_number_unsigned() ? v.get<std::size_t>() : std::size_t(x);
  }

  void flag(const char* key, bool& out) {
    used_.insert(key);
    if (!j_.contains(key)) return;
    const auto& v = j_.at(key);
    SPARSELM_CHECK(v.is_boolean(), ctx_, ": field '", key, "' must be true or false, got ", v.dump());
    out = v.get<bool>();
  }

  void text(const char* key, std::string& out) {
    used_.insert(key);
    if (!j_.contains(key)) return;
    const auto& v = j_.at(key);
    SPARSELM_CHECK(v.is_string(), ctx_, ": field '", key, "' must be a string, got ", v.dump());
    out = v.get<std::string>();
  }

  // Requires `key` to be present (call before reading it).
  void require(const char* key) const {
    SPARSELM_CHECK(j_.contains(key), ctx_, ": missing required field '", key, "'");
  }

  // An optional "type" tag must equal `expected` when present.
  void type_tag(std::string_view expected) {
    used_.insert("type");
    if (!j_.contains("type")) return;
    const auto& v = j_.at("type");
    SPARSELM_CHECK(v.is_string() && v.get<std::string>() == expected, ctx_, ": field 'type' must be \"", expected,
                   "\", got ", v.dump());
  }

  // Throws naming every key no reader asked for, and the known ones.
  void finish() const {
    std::string unknown;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.contains(it.key())) unknown += (unknown.empty() ? "'" : ", '") + it.key() + "'";
    if (unknown.empty()) return;
    std::string known;
    for (auto& k : used_) known += (known.empty() ? "" : ", ") + k;
    fail(ctx_, ": unknown field ", unknown, " (known: ", known, ")");
  }

  const std::string& context() const noexcept { return ctx_; }

 private:
  const nlohmann::json& j_;
  std::string ctx_;
  std::set<std::string> used_;
};

}  // namespace sparselm::optim::detail
