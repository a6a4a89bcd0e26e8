#pragma once
// Command-line checks shared by the example programs (CLI11):
//
//   app.add_option("--steps", steps)->check(examples::at_most(sparselm::limits::steps));
//   if (auto status = examples::parse(app, argc, argv)) return *status;   // help: 0, bad flags: 2
//
// parse() first gives every unsigned option (CLI11 type UINT, plain or std::optional) a check
// that refuses negative numbers: CLI11 2.1 reads "-1" into a std::size_t as 2^64 - 1, which turned
// `--max-new-tokens -1` into "for ever". A value that does not fit its type is refused too, and
// every floating-point option refuses nan and inf.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/program.hpp"

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

// A whole number in [0, limit].
inline CLI::Validator at_most(std::uint64_t limit) {
  return CLI::Validator([limit](std::string& s) { return detail::whole_at_most(s, limit); },
                        "0.." + std::to_string(limit), "at_most");
}

// The compute precision flag: --precision fp32|bf16|fp16 (run config "trainer.precision";
// policies/precision.hpp).
inline CLI::Option* add_precision_option(CLI::App& app, std::string& v) {
  return app
      .add_option("--precision", v,
                  "Compute type of the dense GEMMs: fp32, bf16 (AVX512-BF16 where the CPU has it) or fp16 "
                  "(dynamic loss scaling); weights, gradients and optimiser state stay fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
}
inline CLI::Option* add_precision_option(CLI::Option_group& g, std::optional<std::string>& v) {
  return g
      .add_option("--precision", v,
                  "Compute type of the dense GEMMs: fp32, bf16 (AVX512-BF16 where the CPU has it) or fp16 "
                  "(dynamic loss scaling); trainer.precision")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
}

// --shard-optimizer (run config "trainer.shard_optimizer"): under mpirun, each rank keeps 1/P of the
// optimiser state (ZeRO stage 1; docs/distributed.md).
inline constexpr const char* shard_option_help =
    "Data parallel (mpirun): each rank keeps and updates 1/P of the optimiser state, then the ranks exchange the "
    "updated weights (ZeRO stage 1; trainer.shard_optimizer); a pipeline over ranks: each rank keeps only its "
    "stage's optimiser state, weights and gradients";
inline CLI::Option* add_shard_option(CLI::Option_group& g, std::optional<bool>& v) {
  return g.add_flag("--shard-optimizer", v, shard_option_help);
}
inline CLI::Option* add_shard_option(CLI::App& app, bool& v) {
  return app.add_flag("--shard-optimizer", v, shard_option_help);
}

// --pipeline-stages N, --pipeline-schedule 1f1b|gpipe and --pipeline-placement threads|ranks (run
// config "trainer.pipeline"; policies/pipeline.hpp): the blocks split over N stages, each on
// threads/N threads or on its own MPI rank, fed by the micro-batches of --accumulation (more
// micro-batches, smaller bubble).
struct pipeline_flags {
  std::optional<std::size_t> stages;
  std::optional<std::string> schedule, placement;
  void add(CLI::Option_group& g) {
    g.add_option("--pipeline-stages", stages,
                 "Split the blocks over N pipeline stages on their own threads (threads/N each); the "
                 "micro-batches are --accumulation's (trainer.pipeline.stages)")
        ->check(CLI::Range(std::size_t(1), std::size_t(1024)));
    g.add_option("--pipeline-schedule", schedule,
                 "Order of a stage's work: 1f1b (at most N micro-batches in flight) or gpipe (all forwards, then "
                 "all backwards) (trainer.pipeline.schedule)")
        ->check(CLI::IsMember({"1f1b", "gpipe"}));
    g.add_option("--pipeline-placement", placement,
                 "Where the stages run: threads of each process, or ranks (under mpirun with as many ranks as "
                 "stages: one stage per rank; with a multiple of them, data replicas of the pipeline) "
                 "(trainer.pipeline.placement)")
        ->check(CLI::IsMember({"threads", "ranks"}));
  }
  // Writes the given flags into a run config's "trainer" object.
  void put(nlohmann::json& trainer) const {
    if (stages) trainer["pipeline"]["stages"] = *stages;
    if (schedule) trainer["pipeline"]["schedule"] = *schedule;
    if (placement) trainer["pipeline"]["placement"] = *placement;
  }
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

// Parses the command line: nullopt to go on, or the exit status (0 after --help, 2 for a usage
// error, whose message CLI11 has printed).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  refuse_negative_unsigned(app);
  refuse_non_finite(app);
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
