#pragma once
// Strict JSON config reading: every error names the file (or context) and the field.
//
//   config_reader r(j, "configs/gpt2-small.json");
//   c.n_layer = r.get("n_layer", c.n_layer, at_least(1));
//   r.ignore({"model_type", "architectures"});   // known keys we accept but do not use
//   r.finish();                                   // unknown keys -> error naming them

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"

namespace sparselm {

using json = nlohmann::json;

// Reads a JSON file; errors name the path and the parse position.
inline json read_json_file(const std::string& path) {
  std::ifstream in(path);
  SPARSELM_CHECK(in.good(), "cannot open config file '", path, "'");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    fail("config file '", path, "' is not valid JSON: ", e.what());
  }
}

class config_reader {
 public:
  config_reader(const json& j, std::string context) : j_(j), ctx_(std::move(context)) {
    SPARSELM_CHECK(j.is_object(), ctx_, ": expected a JSON object, got ", j.type_name());
  }

  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  // Returns j[key] converted to T, or `fallback` when absent. `check` (optional) validates the value
  // and returns an error text ("" when fine).
  template <class T, class Check = std::nullptr_t>
  T get(const std::string& key, T fallback, Check check = nullptr) {
    used_.insert(key);
    if (!has(key)) return fallback;
    T v = convert<T>(key, j_.at(key));
    if constexpr (!std::is_same_v<Check, std::nullptr_t>) {
      std::string msg = check(v);
      SPARSELM_CHECK(msg.empty(), ctx_, ": field '", key, "' ", msg);
    }
    return v;
  }

  // Required field.
  template <class T, class Check = std::nullptr_t>
  T require(const std::string& key, Check check = nullptr) {
    SPARSELM_CHECK(has(key), ctx_, ": missing required field '", key, "'");
    return get<T>(key, T{}, check);
  }

  // A nested object (or an empty object when absent).
  json object(const std::string& key) {
    used_.insert(key);
    if (!has(key)) return json::object();
    SPARSELM_CHECK(j_.at(key).is_object(), ctx_, ": field '", key, "' must be an object, got ", j_.at(key).type_name());
    return j_.at(key);
  }

  // Keys that are accepted and deliberately unused.
  void ignore(std::initializer_list<const char*> keys) {
    for (auto k : keys) used_.insert(k);
  }

  // Throws naming every key that no get/require/ignore asked for.
  void finish() const {
    std::vector<std::string> unknown;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.contains(it.key())) unknown.push_back(it.key());
    if (unknown.empty()) return;
    std::string list;
    for (auto& k : unknown) list += (list.empty() ? "'" : ", '") + k + "'";
    fail(ctx_, ": unknown field", unknown.size() > 1 ? "s " : " ", list);
  }

  const std::string& context() const noexcept { return ctx_; }

 private:
  template <class T>
  T convert(const std::string& key, const json& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      SPARSELM_CHECK(v.is_boolean(), ctx_, ": field '", key, "' must be true or false, got ", v.dump());
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      SPARSELM_CHECK(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
                     ctx_, ": field '", key, "' must be an integer, got ", v.dump());
      if constexpr (std::is_unsigned_v<T>) {
        SPARSELM_CHECK(!(v.is_number_integer() && !v.is_number_unsigned() && v.get<long long>() < 0) &&
                           !(v.is_number_float() && v.get<double>() < 0),
                       ctx_, ": field '", key, "' must not be negative, got ", v.dump());
      }
      return v.is_number_float() ? T(v.get<double>()) : v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      SPARSELM_CHECK(v.is_number(), ctx_, ": field '", key, "' must be a number, got ", v.dump());
      T x = v.get<T>();
      SPARSELM_CHECK(std::isfinite(double(x)), ctx_, ": field '", key, "' must be finite, got ", v.dump());
      return x;
    } else if constexpr (std::is_same_v<T, std::string>) {
      SPARSELM_CHECK(v.is_string(), ctx_, ": field '", key, "' must be a string, got ", v.dump());
      return v.get<std::string>();
    } else {
      try {
        return v.get<T>();
      } catch (const json::exception& e) {
        fail(ctx_, ": field '", key, "' has the wrong type: ", e.what());
      }
    }
  }

  const json& j_;
  std::string ctx_;
  std::set<std::string> used_;
};

namespace detail {
inline std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail

// Common value checks for config_reader::get.
inline auto at_least(double lo) {
  return [lo](auto v) { return double(v) >= lo ? std::string() : "must be >= " + detail::num(lo) + ", got " + detail::num(double(v)); };
}
// Half-open [lo, hi).
inline auto in_range(double lo, double hi) {
  return [lo, hi](auto v) {
    return (double(v) >= lo && double(v) < hi)
               ? std::string()
               : "must be in [" + detail::num(lo) + ", " + detail::num(hi) + "), got " + detail::num(double(v));
  };
}
inline auto one_of(std::vector<std::string> options) {
  return [options](const std::string& v) {
    for (auto& o : options)
      if (o == v) return std::string();
    std::string list;
    for (auto& o : options) list += (list.empty() ? "" : ", ") + o;
    return "must be one of " + list + ", got '" + v + "'";
  };
}

// Applies a command-line override "a.b.c=value" to j: the value is parsed as JSON when it parses
// (numbers, true/false, null, arrays, objects, quoted strings), otherwise taken as a plain string.
// Intermediate objects are created; indexing into a non-object is an error naming the path.
inline void apply_override(json& j, const std::string& assignment) {
  const auto eq = assignment.find('=');
  SPARSELM_CHECK(eq != std::string::npos && eq > 0, "override '", assignment, "': expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  json* node = &j;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    SPARSELM_CHECK(!key.empty(), "override '", assignment, "': empty key in '", path, "'");
    SPARSELM_CHECK(node->is_object() || node->is_null(), "override '", assignment, "': '",
                   path.substr(0, start ? start - 1 : 0), "' is not an object");
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    node = &(*node)[key];
    start = dot + 1;
  }
}

}  // namespace sparselm
