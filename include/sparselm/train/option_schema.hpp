#pragma once
// The machinery of an option schema (train/run_settings.hpp holds the training programs' one schema):
// option_entry, a run-config key with its flag, kind, bounds, default and help; the checks that read
// a run config against a table of entries (check_option_bounds), the defaults it is filled with
// (apply_defaults) and the Markdown reference rendered from a table (options_reference, which
// docs/reference/options.md is generated from).
//
//   const sparselm::option_entry mine[] = {
//       {"model.n_layer", "--layers", sparselm::option_kind::count, "Transformer blocks", "", "", "model", 1, 96}};
//   sparselm::check_option_bounds(run_json, mine, "run.json");   // "run.json: field 'model.n_layer' must be in [1, 96], got 0"
//   std::string table = sparselm::options_reference(mine);

#include <algorithm>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"

namespace sparselm {

// --- the schema ------------------------------------------------------------------------------------

// What a key holds, which decides how its flag is checked: a whole number >= 0, a finite number,
// one of `choices`, true/false (a flag without value), text, a file the run reads (input) or the
// directory it writes (output). Input and output keys are what the output rule
// (io/output_rule.hpp) compares, and what tests/hostile/ probes.
enum class option_kind { count, number, choice, boolean, text, input, output };

struct option_entry {
  std::string_view key;      // dotted run-config path, e.g. "trainer.accumulation.steps"
  std::string_view flag;     // the program flag, e.g. "--accumulation" ("": run config only)
  option_kind kind;
  std::string_view help;     // one sentence: what it does
  std::string_view choices;  // kind choice: the values, separated by spaces
  std::string_view fallback; // the value when absent ("" when it depends on the program or the run)
  std::string_view group;    // heading in --help and the reference
  // kind number or count: the closed range every program accepts for this quantity, as a flag, a
  // run-config key or a --set (lo > hi: no range)
  double lo = 1, hi = 0;
  bool bounded() const { return lo <= hi; }
};

// "" when v is within e's bounds, else the phrase that follows the field or flag name.
inline std::string out_of_bounds(const option_entry& e, double v) {
  if (!e.bounded() || (v >= e.lo && v <= e.hi)) return "";
  std::ostringstream o;
  o << "must be in [" << e.lo << ", " << e.hi << "], got " << v;
  return o.str();
}

inline std::vector<std::string> option_choices(const option_entry& e) {
  std::vector<std::string> v;
  std::istringstream in{std::string(e.choices)};
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

// The value at a dotted key of j, or null.
inline const json* find_key(const json& j, std::string_view dotted) {
  const json* node = &j;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted.find('.', start);
    const std::string part(dotted.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string_view::npos) return node;
    start = dot + 1;
  }
}

// Checks the bounded numbers of `entries` in the run config j (their other names too: the
// schedule's peak_lr and lr are its max_lr), and that the schedule's min_lr is at most its peak;
// errors name `context`, the key and the bounds.
inline void check_option_bounds(const json& j, std::span<const option_entry> entries, const std::string& context) {
  auto check = [&](const option_entry& e, std::string_view key) {
    const json* v = find_key(j, key);
    if (!v || !v->is_number()) return;  // absent, or the wrong type: the key's reader names it
    const std::string msg = out_of_bounds(e, v->get<double>());
    SPARSELM_CHECK(msg.empty(), context, ": field '", key, "' ", msg);
  };
  for (const auto& e : entries) {
    if (!e.bounded()) continue;
    check(e, e.key);
    if (e.key == "schedule.max_lr")
      for (auto alias : {"schedule.peak_lr", "schedule.lr"}) check(e, alias);
  }
  const json* lo = find_key(j, "schedule.min_lr");
  if (!lo || !lo->is_number()) return;
  for (auto peak : {"schedule.max_lr", "schedule.peak_lr", "schedule.lr"})
    if (const json* hi = find_key(j, peak); hi && hi->is_number())
      SPARSELM_CHECK(lo->get<double>() <= hi->get<double>(), context, ": field 'schedule.min_lr' (--min-lr) is ",
                     lo->get<double>(), ", above the peak learning rate '", peak, "' (--lr) ", hi->get<double>());
}

// --- defaults --------------------------------------------------------------------------------------

// Fills the keys of `defaults` that `j` lacks, recursively. The "optimizer" and "schedule" objects
// take the defaults' other fields only when they name the defaults' type (or none): the defaults
// of one optimiser are not fields of another. A key is not defaulted when `j` gives another name
// of the same quantity: steps / epochs; in the schedule max_lr / peak_lr / lr and warmup_steps /
// warmup_frac / warmup_proportion.
inline void apply_defaults(json& j, const json& defaults, std::string_view where = "") {
  if (!j.is_object() || !defaults.is_object()) return;
  static const std::vector<std::vector<std::string>> top = {{"steps", "epochs"}},
                                                     schedule = {{"max_lr", "peak_lr", "lr"},
                                                                 {"warmup_steps", "warmup_frac", "warmup_proportion"}};
  const auto& aliases = where.empty() ? top : where == "schedule" ? schedule : std::vector<std::vector<std::string>>{};
  for (const auto& [key, value] : defaults.items()) {
    bool named = false;
    for (const auto& group : aliases)
      if (std::find(group.begin(), group.end(), key) != group.end())
        for (const auto& other : group) named = named || (j.contains(other) && !j[other].is_null());
    if (named && !j.contains(key)) continue;
    if (!j.contains(key) || j[key].is_null()) {
      j[key] = value;
      continue;
    }
    if (!value.is_object() || !j[key].is_object()) continue;
    if ((key == "optimizer" || key == "schedule") && j[key].contains("type") && value.contains("type") &&
        j[key]["type"] != value["type"])
      continue;
    apply_defaults(j[key], value, where.empty() ? std::string_view(key) : std::string_view("nested"));
  }
}

// --- the reference ---------------------------------------------------------------------------------

// A Markdown table of entries (key, flag, values, default, meaning), grouped under headings.
inline std::string options_reference(std::span<const option_entry> entries) {
  std::ostringstream o;
  std::string_view group;
  for (const auto& e : entries) {
    if (e.group != group) {
      group = e.group;
      o << "\n#### " << group << "\n\n| key | flag | values | default | meaning |\n|---|---|---|---|---|\n";
    }
    std::string values;
    switch (e.kind) {
      case option_kind::count:
      case option_kind::number: {
        std::ostringstream b;
        b << (e.kind == option_kind::count ? "whole number" : "number");
        if (e.bounded()) b << " in [" << e.lo << ", " << e.hi << "]";
        values = b.str();
        break;
      }
      case option_kind::input: values = "file name (read)"; break;
      case option_kind::output: values = "directory (written)"; break;
      case option_kind::boolean: values = "true, false"; break;
      case option_kind::text: values = "text"; break;
      case option_kind::choice: {
        for (const auto& c : option_choices(e)) values += (values.empty() ? "" : ", ") + c;
        break;
      }
    }
    std::string help(e.help);
    for (auto& ch : help)
      if (ch == '|') ch = '/';
    o << "| `" << e.key << "` | " << (e.flag.empty() ? std::string("") : "`" + std::string(e.flag) + "`") << " | "
      << values << " | " << (e.fallback.empty() ? std::string("(program)") : std::string(e.fallback)) << " | " << help
      << " |\n";
  }
  return o.str();
}

}  // namespace sparselm
