#pragma once
// Command-line checks shared by the example programs (CLI11):
//
//   app.add_option("--steps", steps)->check(examples::at_most(sparselm::limits::steps));
//   if (auto status = examples::parse(app, argc, argv)) return *status;   // help: 0, bad flags: 2
//
// parse() first gives every unsigned option (CLI11 type UINT, plain or std::optional) a check
// that refuses negative numbers: CLI11 2.1 reads "-1" into a std::size_t as 2^64 - 1, which turned
// `--max-new-tokens -1` into "for ever". A value that does not fit its type is refused too, and
// every floating-point option refuses nan and inf, and every option that takes a value refuses an
// empty one (`--top-k ''` is not 0).
//
// Every program also answers `--options-json` (hidden): its options as JSON — names, whether they
// take a value, CLI11's type, what the value is (kind: count, integer, number, choice, boolean,
// text, input, output), bounds and choices — which tests/hostile/ reads to probe each option. Mark
// an option naming a file the program reads with examples::reads(o), one it writes with
// examples::writes(o).

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"
#include "sparselm/train/option_schema.hpp"

namespace examples {

namespace detail {
// "" when `s` is a whole number in [0, limit], else what is wrong with it.
inline std::string whole_at_most(const std::string& s, std::uint64_t limit) {
  std::size_t i = s.find_first_not_of(" \t");
  if (i != std::string::npos && s[i] == '-') return "must not be negative, got " + s;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (s.empty() || end != s.c_str() + s.size()) return "must be a whole number, got '" + s + "'";
  if (errno == ERANGE || v > limit) return "is " + s + ", above the limit " + std::to_string(limit);
  return "";
}
}  // namespace detail

// What --options-json says about an option beyond CLI11's own view of it (its kind, bounds, role).
inline std::map<const CLI::Option*, nlohmann::json>& option_notes() {
  static std::map<const CLI::Option*, nlohmann::json> notes;
  return notes;
}
// Marks an option whose value names a file or directory the program reads / writes.
inline CLI::Option* reads(CLI::Option* o) {
  option_notes()[o]["kind"] = "input";
  return o;
}
inline CLI::Option* writes(CLI::Option* o) {
  option_notes()[o]["kind"] = "output";
  return o;
}

// A whole number in [0, limit].
inline CLI::Validator at_most(std::uint64_t limit) {
  return CLI::Validator([limit](std::string& s) { return detail::whole_at_most(s, limit); },
                        "0.." + std::to_string(limit), "at_most");
}

// The flags of a training program, made from option tables (train/option_schema.hpp; run_settings.hpp's
// common_options and the program's own): each flag writes its run-config key, so a flag, its key
// in a run config and `--set key=value` are one setting.
//
//   examples::run_flags flags;
//   flags.add(app, sparselm::common_options());
//   flags.add(app, my_task_options);
//   ... parse ...
//   flags.apply(j);                      // the given flags, then the --set overrides
class run_flags {
 public:
  void add(CLI::App& app, std::span<const sparselm::option_entry> entries) {
    for (const auto& e : entries) {
      if (e.flag.empty()) continue;
      entries_.push_back(&e);
      auto& v = values_.emplace_back();
      CLI::Option_group* g = group(app, e.group);
      std::string help = std::string(e.help) + " (" + std::string(e.key) + ")";
      CLI::Option* o = nullptr;
      if (e.kind == sparselm::option_kind::boolean) {
        o = g->add_flag(std::string(e.flag), flags_.emplace_back(), help);
        v.reset();
      } else {
        flags_.emplace_back();
        o = g->add_option(std::string(e.flag), v, help);
      }
      options_.push_back(o);
      switch (e.kind) {
        case sparselm::option_kind::count: {
          // The entry's bounds, or the limit of core/checked.hpp for the key: beyond it is a usage
          // error naming the flag.
          const std::uint64_t limit = e.bounded() ? std::uint64_t(e.hi) : count_limit(e.key);
          o->check(CLI::Validator(
                       [&e, limit](std::string& s) {
                         std::string m = detail::whole_at_most(s, limit);
                         if (m.empty() && e.bounded() && std::strtod(s.c_str(), nullptr) < e.lo)
                           m = sparselm::out_of_bounds(e, std::strtod(s.c_str(), nullptr));
                         return m;
                       },
                       "", "count"))
              ->type_name("N");
          break;
        }
        case sparselm::option_kind::number:
          o->check(CLI::Validator(
              [&e](std::string& s) -> std::string {
                char* end = nullptr;
                const double d = std::strtod(s.c_str(), &end);
                if (s.empty() || end != s.c_str() + s.size()) return "must be a number, got '" + s + "'";
                if (!std::isfinite(d)) return "must be a finite number, got " + s;
                return sparselm::out_of_bounds(e, d);  // the bounds every program shares
              },
              "", "number"))->type_name("X");
          break;
        case sparselm::option_kind::choice: o->check(CLI::IsMember(sparselm::option_choices(e))); break;
        case sparselm::option_kind::text:
        case sparselm::option_kind::input:
        case sparselm::option_kind::output:
          o->check(CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : ""; },
                                  "", "text"))->type_name(e.kind == sparselm::option_kind::text ? "TEXT" : "PATH");
          break;
        case sparselm::option_kind::boolean: break;
      }
      static const char* kinds[] = {"count", "number", "choice", "boolean", "text", "input", "output"};
      nlohmann::json& note = option_notes()[o];
      note = {{"kind", kinds[int(e.kind)]}, {"key", std::string(e.key)}};
      if (e.bounded()) note["lo"] = e.lo, note["hi"] = e.hi;
      if (e.kind == sparselm::option_kind::choice) note["choices"] = sparselm::option_choices(e);
    }
  }

  // The value of a --set assignment for a key of the tables, checked as its flag would be: kind,
  // choices and bounds; errors name the --set (a usage error). Keys outside the tables are
  // checked by their readers.
  void check_set(const std::string& assignment) const {
    const auto eq = assignment.find('=');
    if (eq == std::string::npos) return;  // apply_override names it
    const std::string key = assignment.substr(0, eq);
    nlohmann::json probe = nlohmann::json::object();
    sparselm::apply_override(probe, assignment);
    const nlohmann::json* v = sparselm::find_key(probe, key);
    for (const auto* e : entries_) {
      if (e->key != key || !v) continue;
      using k = sparselm::option_kind;
      std::string msg;
      switch (e->kind) {
        case k::count: {  // as the readers take it: 1e15 is a whole number
          const bool whole = v->is_number_unsigned() ||
                             (v->is_number_float() && v->get<double>() >= 0 && std::floor(v->get<double>()) == v->get<double>());
          if (!whole) msg = "must be a whole number >= 0, got " + v->dump();
          else msg = sparselm::out_of_bounds(*e, v->get<double>());
          break;
        }
        case k::number:
          if (!v->is_number()) msg = "must be a number, got " + v->dump();
          else msg = sparselm::out_of_bounds(*e, v->get<double>());
          break;
        case k::boolean:
          if (!v->is_boolean()) msg = "must be true or false, got " + v->dump();
          break;
        case k::choice: {
          const std::string text = v->is_string() ? v->get<std::string>() : v->dump();
          const auto c = sparselm::option_choices(*e);
          if (std::find(c.begin(), c.end(), text) == c.end())
            msg = "must be one of: " + std::string(e->choices) + ", got " + v->dump();
          break;
        }
        case k::text:
        case k::input:
        case k::output:
          if (e->key != "trainer.loss_scaling" && !(v->is_string() && !v->get<std::string>().empty()))
            msg = "must be a non-empty string, got " + v->dump();
          break;
      }
      if (!msg.empty()) throw sparselm::usage_error("--set " + assignment + ": field '" + key + "' " + msg);
    }
  }
  // The largest value a count key may take (core/checked.hpp's limits), so that a flag beyond it is
  // a usage error naming the flag.
  static std::uint64_t count_limit(std::string_view key) {
    namespace L = sparselm::limits;
    if (key.starts_with("model."))
      if (const std::size_t l = sparselm::model_field_limit(key.substr(key.rfind('.') + 1))) return l;
    if (key == "threads") return L::threads;
    if (key == "steps") return L::steps;
    if (key == "batch_size" || key == "global_batch") return L::batch;
    if (key == "trainer.accumulation.steps") return L::accumulation;
    if (key == "seq_len" || key == "max_seq") return L::positions;
    return UINT64_MAX;
  }
  // --set key.path=value (repeatable), applied after the flags.
  void add_set(CLI::App& app) {
    app.add_option("--set", sets_, "Override any run-config field: key.path=value (repeatable)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }

  // The given flags, then the --set overrides, as a JSON object of their keys.
  nlohmann::json overlay() const {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = *entries_[i];
      nlohmann::json v;
      if (e.kind == sparselm::option_kind::boolean) {
        // CLI11 runs a flag's callback with its default (false) when the flag is absent: only a
        // given flag overrides the run config
        if (!flags_[i] || options_[i]->count() == 0) continue;
        v = *flags_[i];
      } else {
        if (!values_[i]) continue;
        v = value_of(e, *values_[i]);
      }
      nlohmann::json* node = &j;
      const std::string key(e.key);
      std::size_t start = 0;
      for (std::size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
        node = &(*node)[key.substr(start, dot - start)];
      (*node)[key.substr(start)] = std::move(v);
    }
    for (const auto& s : sets_) {
      check_set(s);
      sparselm::apply_override(j, s);
    }
    return j;
  }
  // Writes the overlay into the run config j: objects merge key by key, anything else replaces;
  // a new optimiser type starts a new "optimizer" object (the fields of one optimiser are not
  // another's), keeping its common fields.
  // A flag replaces the run config's other names of its quantity: --steps its "epochs" (and the
  // reverse), --global-batch its accumulation steps (and the reverse), --lr its schedule's peak_lr
  // or lr, --warmup-steps its warmup_frac or warmup_proportion (and the reverse).
  void apply(nlohmann::json& j) const { apply(j, overlay()); }
  // The same with the overlay already computed (overlay() checks every --set once).
  void apply(nlohmann::json& j, const nlohmann::json& over) const {
    auto drop_others = [](nlohmann::json& into, const nlohmann::json& given,
                          std::initializer_list<std::initializer_list<const char*>> groups) {
      if (!into.is_object() || !given.is_object()) return;
      for (auto group : groups)
        for (const char* k : group)
          if (given.contains(k))
            for (const char* other : group)
              if (std::string_view(other) != k) into.erase(other);
    };
    drop_others(j, over, {{"steps", "epochs"}});
    if (over.contains("schedule") && j.contains("schedule"))
      drop_others(j["schedule"], over["schedule"],
                  {{"max_lr", "peak_lr", "lr"}, {"warmup_steps", "warmup_frac", "warmup_proportion"}});
    const bool acc_given = over.contains("trainer") && over["trainer"].is_object() &&
                           over["trainer"].contains("accumulation") && over["trainer"]["accumulation"].is_object() &&
                           over["trainer"]["accumulation"].contains("steps");
    if (acc_given) j.erase("global_batch");
    if (over.contains("global_batch") && j.contains("trainer") && j["trainer"].is_object() &&
        j["trainer"].contains("accumulation") && j["trainer"]["accumulation"].is_object())
      j["trainer"]["accumulation"].erase("steps");
    merge(j, over, "");
  }

  // The value of a flag as its key holds it.
  static nlohmann::json value_of(const sparselm::option_entry& e, const std::string& text) {
    using k = sparselm::option_kind;
    if (e.key == "trainer.loss_scaling") {
      if (text == "dynamic") return {{"type", "dynamic"}};
      if (text == "none") return 1.0;
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      SPARSELM_CHECK(end == text.c_str() + text.size() && std::isfinite(d) && d > 0, "--loss-scaling: '", text,
                     "' is not none, dynamic or a positive scale");
      return d;
    }
    switch (e.kind) {
      case k::count: return std::stoull(text, nullptr, 0);
      case k::number: return std::strtod(text.c_str(), nullptr);
      case k::choice: {
        if (text == "true" || text == "false") return text == "true";
        const bool numeric = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        return numeric ? nlohmann::json(std::stoull(text)) : nlohmann::json(text);
      }
      default: return text;
    }
  }

 private:
  static void merge(nlohmann::json& j, const nlohmann::json& over, const std::string& path) {
    if (!j.is_object() || !over.is_object()) {
      j = over;
      return;
    }
    if (path == "optimizer" && over.contains("type") && j.value("type", nlohmann::json()) != over["type"]) {
      nlohmann::json kept = nlohmann::json::object();
      for (const char* f : {"weight_decay", "slots"})
        if (j.contains(f)) kept[f] = j[f];
      j = kept;
    }
    for (const auto& [k, v] : over.items()) {
      if (j.contains(k))
        merge(j[k], v, path.empty() ? k : path + "." + k);
      else
        j[k] = v;
    }
  }
  CLI::Option_group* group(CLI::App& app, std::string_view name) {
    for (auto& [n, g] : groups_)
      if (n == name) return g;
    return groups_.emplace_back(std::string(name), app.add_option_group(std::string(name))).second;
  }

  std::vector<const sparselm::option_entry*> entries_;
  std::deque<std::optional<std::string>> values_;
  std::deque<std::optional<bool>> flags_;
  std::vector<CLI::Option*> options_;  // each entry's flag
  std::vector<std::pair<std::string, CLI::Option_group*>> groups_;
  std::vector<std::string> sets_;
};

// Adds the non-negative check to every unsigned option of `app` and its option groups.
inline void refuse_negative_unsigned(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_type_name().rfind("UINT", 0) == 0)
      o->check(CLI::Validator([](std::string& s) { return detail::whole_at_most(s, UINT64_MAX); }, "", "unsigned"));
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) refuse_negative_unsigned(*sub);
}

// Adds a check that refuses nan and inf to every floating-point option of `app` and its option
// groups: "--lr nan" would otherwise reach the config as JSON null and be reported under the
// config's field name.
inline void refuse_non_finite(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_type_name().rfind("FLOAT", 0) == 0)
      o->check(CLI::Validator(
          [](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) return "must be a number, got '" + s + "'";
            return std::isfinite(v) ? "" : "must be a finite number, got " + s;
          },
          "", "finite"));
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) refuse_non_finite(*sub);
}

// Adds a check that refuses an empty value to every option of `app` that takes one.
inline void refuse_empty(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_expected_max() > 0 && o->get_type_size_max() > 0)
      o->check(CLI::Validator([](std::string& s) { return s.empty() ? std::string("must not be empty") : ""; }, "",
                              "not empty"));
  for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) refuse_empty(*sub);
}

// The options of `app` and its option groups as JSON (see --options-json above).
inline nlohmann::json options_json(CLI::App& app) {
  nlohmann::json list = nlohmann::json::array();
  std::function<void(CLI::App&)> walk = [&](CLI::App& a) {
    for (CLI::Option* o : a.get_options()) {
      if (o->get_lnames().empty() && o->get_snames().empty() && o->get_name(true).empty()) continue;
      const std::string type = o->get_type_name();
      const bool positional = o->get_lnames().empty() && o->get_snames().empty();
      std::vector<std::string> names;
      for (const auto& n : o->get_snames()) names.push_back("-" + n);
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
      if (std::find(names.begin(), names.end(), "--help") != names.end()) continue;
      const bool value = o->get_expected_max() > 0 && o->get_type_size_max() > 0;
      nlohmann::json j = {{"flag", positional ? o->get_name(true) : names.back()},
                          {"names", names},
                          {"positional", positional},
                          {"value", value},
                          {"required", o->get_required()},
                          {"many", o->get_expected_max() > 1},
                          {"type", type}};
      std::string kind = !value                          ? "boolean"
                         : type.rfind("UINT", 0) == 0    ? "count"
                         : type.rfind("INT", 0) == 0     ? "integer"
                         : type.rfind("FLOAT", 0) == 0   ? "number"
                                                         : "text";
      j["kind"] = kind;
      std::vector<std::string> checks;  // CLI11's descriptions: "[lo - hi]" of a range, "{a,b}" of a set
      for (int i = 0;; ++i) {
        try {
          if (auto d = o->get_validator(i)->get_description(); !d.empty()) checks.push_back(d);
        } catch (const CLI::OptionNotFound&) {
          break;
        }
      }
      j["checks"] = checks;
      if (auto it = option_notes().find(o); it != option_notes().end()) j.update(it->second);
      list.push_back(std::move(j));
    }
    for (CLI::App* sub : a.get_subcommands(std::function<bool(CLI::App*)>{})) walk(*sub);
  };
  walk(app);
  return {{"program", sparselm::detail::program_name()}, {"options", list}};
}

// Parses the command line: nullopt to go on, or the exit status (0 after --help, 2 for a usage
// error, whose message CLI11 has printed).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--options-json") {
      std::printf("%s\n", options_json(app).dump(1).c_str());
      return 0;
    }
  refuse_negative_unsigned(app);
  refuse_non_finite(app);
  refuse_empty(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: usage error: ", sparselm::detail::program_name());  // set by run_program
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace examples
