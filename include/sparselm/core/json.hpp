#pragma once
// The one JSON reader of the library: model configs, run configs, optimiser, schedule, sparsity
// and trainer objects are all read field by field through `json_fields`, so every error has the
// same shape and names the context (a file or an object path) and the field:
//
//   json_fields f(read_json_file("configs/gpt2-small.json"), "configs/gpt2-small.json");
//   c.n_layer = f.get("n_layer", c.n_layer, at_least(1));   // "...: field 'n_layer' must be >= 1, got 0"
//   f.read("beta1", c.beta1, in_range(0.0, 1.0));           // absent: c.beta1 unchanged
//   f.read_all<std::size_t>({{"n_head", &c.n_head}, {"n_embd", &c.n_embd}}, at_least(1));
//   f.require("lr");                                          // "...: missing required field 'lr'"
//   f.nullable({"n_inner"});     // HF configs write null for "use the default"; elsewhere null is an error
//   f.ignore({"architectures"}); // known keys that are accepted and not used
//   f.finish();                  // "...: unknown field 'betas' (known: beta1, beta2, ...)"
//
// Values are converted strictly: integers must be whole and fit the target type (1e30 for a
// count is "too large", not undefined behaviour), floating-point values must be finite, flags
// must be true/false. Checks are callables returning "" when the value is fine, or the phrase
// that follows the field name ("must be >= 1, got 0").
//
// read_json_file refuses non-regular files (a FIFO would block for ever), files over a size limit
// (core/input_file.hpp) and documents nested
// deeper than max_json_depth (a deeply nested document would exhaust the stack).

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/core/input_file.hpp"

namespace sparselm {

using json = nlohmann::json;

inline constexpr std::size_t max_json_depth = 256;

namespace detail {
// Nesting depth of a JSON text (brackets outside strings), scanned before parsing.
inline std::size_t json_depth(std::string_view text) noexcept {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

inline std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail

namespace detail {
// Parses `text` refusing an object that names a key twice (nlohmann keeps the last, so a repeated
// "steps" would silently win): the error names `context`, the key and the object's path.
inline json parse_unique_keys(std::string_view text, const std::string& context) {
  struct level {
    std::set<std::string> keys;
    std::string last;  // the key being read, for the path of nested objects
  };
  std::vector<level> open;
  auto check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open.emplace_back(); break;
      case json::parse_event_t::object_end: open.pop_back(); break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open.back().keys.insert(key).second) {
          std::string path;
          for (std::size_t i = 0; i + 1 < open.size(); ++i) path += open[i].last + ".";
          fail(context, ": duplicate key '", path + key, "' (each key may appear once in an object)");
        }
        open.back().last = key;
        break;
      }
      default: break;
    }
    return true;
  };
  return json::parse(text, check);
}
}  // namespace detail

// Parses JSON text; errors name `context` and the parse position. An object naming a key twice is
// an error naming the key.
inline json parse_json(std::string_view text, const std::string& context) {
  const std::size_t depth = detail::json_depth(text);
  SPARSELM_CHECK(depth <= max_json_depth, context, ": JSON nested ", depth, " levels deep (the limit is ",
                 max_json_depth, ")");
  try {
    return detail::parse_unique_keys(text, context);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    fail(context, " is not valid JSON: ", e.what());
  }
}

// Reads and parses a JSON file (core/input_file.hpp: a regular file of at most `max_bytes`); errors
// name the path and say what the file is (`what`).
inline json read_json_file(const std::string& path, const std::string& what = "config file",
                           std::uint64_t max_bytes = max_config_bytes) {
  return parse_json(read_input(path, what.c_str(), max_bytes), what + " '" + path + "'");
}

// Value checks for json_fields: each returns "" when the value is fine.
inline auto at_least(double lo) {
  return [lo](auto v) {
    return double(v) >= lo ? std::string() : "must be >= " + detail::num(lo) + ", got " + detail::num(double(v));
  };
}
inline auto greater_than(double lo) {
  return [lo](auto v) {
    return double(v) > lo ? std::string() : "must be > " + detail::num(lo) + ", got " + detail::num(double(v));
  };
}
// Half-open [lo, hi).
inline auto in_range(double lo, double hi) {
  return [lo, hi](auto v) {
    return (double(v) >= lo && double(v) < hi)
               ? std::string()
               : "must be in [" + detail::num(lo) + ", " + detail::num(hi) + "), got " + detail::num(double(v));
  };
}
// Closed [lo, hi].
inline auto in_closed(double lo, double hi) {
  return [lo, hi](auto v) {
    return (double(v) >= lo && double(v) <= hi)
               ? std::string()
               : "must be in [" + detail::num(lo) + ", " + detail::num(hi) + "], got " + detail::num(double(v));
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

class json_fields {
 public:
  json_fields(const json& j, std::string context) : j_(j), ctx_(std::move(context)) {
    SPARSELM_CHECK(j.is_object(), ctx_, ": expected a JSON object, got ", j.type_name(), " ", j.dump());
  }

  // Present with a value (a null counts as absent only for keys declared nullable).
  bool has(const std::string& key) const {
    if (!j_.contains(key)) return false;
    return !(j_.at(key).is_null() && nullable_.contains(key));
  }

  // Reads j[key] into `out` (converted to T and checked); absent leaves `out` unchanged and
  // returns false.
  template <class T, class Check = std::nullptr_t>
  bool read(const std::string& key, T& out, Check check = nullptr) {
    used_.insert(key);
    if (!has(key)) return false;
    const json& v = j_.at(key);
    SPARSELM_CHECK(!v.is_null(), ctx_, ": field '", key,
                   "' is null (give it a value, or remove it to use the default)");
    T x = convert<T>(key, v);
    if constexpr (!std::is_same_v<Check, std::nullptr_t>) {
      std::string msg = check(x);
      SPARSELM_CHECK(msg.empty(), ctx_, ": field '", key, "' ", msg);
    }
    out = std::move(x);
    return true;
  }

  // Several fields of one type and check: {{"n_layer", &c.n_layer}, {"n_head", &c.n_head}, ...}.
  template <class T, class Check = std::nullptr_t>
  void read_all(std::initializer_list<std::pair<const char*, T*>> fields, Check check = nullptr) {
    for (const auto& [key, out] : fields) read(key, *out, check);
  }

  // j[key] converted and checked, or `fallback` when absent.
  template <class T, class Check = std::nullptr_t>
  T get(const std::string& key, T fallback, Check check = nullptr) {
    read(key, fallback, std::move(check));
    return fallback;
  }

  // Fails unless `key` is present.
  void require(const std::string& key) const {
    SPARSELM_CHECK(j_.contains(key), ctx_, ": missing required field '", key, "'");
  }
  // A required field, converted and checked.
  template <class T, class Check = std::nullptr_t>
  T require(const std::string& key, Check check = nullptr) {
    require(key);
    return get<T>(key, T{}, std::move(check));
  }

  // An enum spelled as a string; `parse(text, label)` throws for an unknown spelling, naming `label`.
  template <class E, class Parse>
  bool read_enum(const std::string& key, E& out, Parse parse) {
    std::string s;
    if (!read(key, s)) return false;
    out = parse(s, ctx_ + ": field '" + key + "'");
    return true;
  }

  // A nested object (an empty object when absent).
  json object(const std::string& key) {
    used_.insert(key);
    if (!has(key)) return json::object();
    SPARSELM_CHECK(j_.at(key).is_object(), ctx_, ": field '", key, "' must be an object, got ", j_.at(key).dump());
    return j_.at(key);
  }

  // An optional "type" tag must equal `expected` when present.
  void type_tag(std::string_view expected) {
    std::string t(expected);
    read("type", t);
    SPARSELM_CHECK(t == expected, ctx_, ": field 'type' must be \"", expected, "\", got \"", t, "\"");
  }

  // Keys that are accepted and deliberately unused.
  void ignore(std::initializer_list<const char*> keys) {
    for (auto k : keys) used_.insert(k);
  }
  // Keys whose null value means "absent" (HF configs write `"n_inner": null`).
  void nullable(std::initializer_list<const char*> keys) {
    for (auto k : keys) nullable_.insert(k);
  }

  // Fails naming every key no reader asked for, and the known ones.
  void finish() const {
    std::string unknown;
    std::size_t n = 0;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.contains(it.key())) unknown += (n++ ? ", '" : "'") + it.key() + "'";
    if (n == 0) return;
    std::string known;
    for (auto& k : used_) known += (known.empty() ? "" : ", ") + k;
    fail(ctx_, ": unknown field", n > 1 ? "s " : " ", unknown, " (known: ", known, ")");
  }

  const std::string& context() const noexcept { return ctx_; }

 private:
  template <class T>
  T convert(const std::string& key, const json& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      SPARSELM_CHECK(v.is_boolean(), ctx_, ": field '", key, "' must be true or false, got ", v.dump());
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      const bool whole = v.is_number_integer() ||
                         (v.is_number_float() && std::isfinite(v.get<double>()) &&
                          std::floor(v.get<double>()) == v.get<double>());
      SPARSELM_CHECK(whole, ctx_, ": field '", key, "' must be an integer, got ", v.dump());
      const bool negative = v.is_number_float() ? v.get<double>() < 0
                                                : (!v.is_number_unsigned() && v.get<std::int64_t>() < 0);
      if constexpr (std::is_unsigned_v<T>)
        SPARSELM_CHECK(!negative, ctx_, ": field '", key, "' must not be negative, got ", v.dump());
      constexpr auto hi = std::numeric_limits<T>::max();
      constexpr auto lo = std::numeric_limits<T>::lowest();
      bool fits;
      if (v.is_number_float()) {
        const double x = v.get<double>();  // 2^63 and 2^64 are exact doubles: compare against them
        fits = x >= double(lo) && x < std::ldexp(1.0, std::numeric_limits<T>::digits);
      } else if (v.is_number_unsigned()) {
        fits = v.get<std::uint64_t>() <= std::uint64_t(hi);
      } else {
        const auto x = v.get<std::int64_t>();
        fits = x >= std::int64_t(lo) && (x < 0 || std::uint64_t(x) <= std::uint64_t(hi));
      }
      SPARSELM_CHECK(fits, ctx_, ": field '", key, "' is out of range, got ", v.dump(), " (limit ",
                     negative ? std::to_string(lo) : std::to_string(hi), ")");
      if (v.is_number_float()) return T(v.get<double>());
      if (v.is_number_unsigned()) return T(v.get<std::uint64_t>());
      return T(v.get<std::int64_t>());
    } else if constexpr (std::is_floating_point_v<T>) {
      SPARSELM_CHECK(v.is_number(), ctx_, ": field '", key, "' must be a number, got ", v.dump());
      const double x = v.get<double>();
      SPARSELM_CHECK(std::isfinite(x), ctx_, ": field '", key, "' must be finite, got ", v.dump());
      SPARSELM_CHECK(std::abs(x) <= double(std::numeric_limits<T>::max()), ctx_, ": field '", key,
                     "' is out of range, got ", v.dump(), " (limit ", std::numeric_limits<T>::max(), ")");
      return T(x);
    } else if constexpr (std::is_same_v<T, std::string>) {
      SPARSELM_CHECK(v.is_string(), ctx_, ": field '", key, "' must be a string, got ", v.dump());
      return v.get<std::string>();
    } else if constexpr (std::is_same_v<T, json>) {
      return v;
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
  std::set<std::string> used_, nullable_;
};

// Applies a command-line override "a.b.c=value" to j: the value is parsed as JSON when it parses
// (numbers, true/false, null, arrays, objects, quoted strings), otherwise taken as a plain string.
// Intermediate objects are created; indexing into a non-object is an error naming the path.
inline void apply_override(json& j, const std::string& assignment) {
  const auto eq = assignment.find('=');
  SPARSELM_CHECK(eq != std::string::npos && eq > 0, "override '", assignment, "': expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value = text;  // not JSON: the plain string
  if (detail::json_depth(text) <= max_json_depth && json::accept(text)) {
    try {
      value = detail::parse_unique_keys(text, "--set " + assignment);
    } catch (const json::exception& e) {  // a number beyond double range
      fail("--set ", assignment, ": ", e.what());
    }
  }
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
