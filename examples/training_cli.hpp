#pragma once
// The command line every training program shares (gpt_train, sparse_lm, bert_pretrain,
// bert_classify, bert_squad): a run config (-c), the flags of the common option schema
// (train/run_settings.hpp) and of the program's task, --set key=value, and the run flags (--resume,
// --overwrite, --no-verify, --dry-run). Flags and --set override the run config's keys; the
// program's defaults fill what neither gives.
//
//   examples::training_cli cli("gpt_train", "Train a GPT ...", {gpt_model_options(), sparselm::lm_task_options()},
//                              defaults);
//   if (auto status = cli.parse(argc, argv)) return *status;
//   json j = cli.run_json();                // run config + flags + --set, then the defaults
//   auto rc = sparselm::lm_run_config::from_json(j, cli.context(), cli.base());
//
// The class is compiled once (examples/support/training_cli.cpp, the static library
// sparselm_training_cli every training program links): its header carries no CLI11, so a program's
// translation unit compiles neither the argument parser nor the plan's printing.
//
// `--options-reference` prints the program's own keys and flags as Markdown, and
// `--common-options-reference` the common ones (docs/reference/options.md is made from them by
// scripts/gen_options_reference.sh, and the ctest docs.options_reference checks the two agree).

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "sparselm/train/model_shape.hpp"
#include "sparselm/train/option_schema.hpp"
#include "sparselm/train/plan_inputs.hpp"

namespace examples {

class training_cli {
 public:
  // tables: the program's own option tables (the task's and the model's), after the common one;
  // defaults: what the program uses for keys that neither the run config nor a flag gives.
  training_cli(std::string program, std::string description,
               std::initializer_list<std::span<const sparselm::option_entry>> tables,
               nlohmann::json defaults = nlohmann::json::object());
  ~training_cli();
  training_cli(const training_cli&) = delete;  // the parser holds pointers to the flags below
  training_cli& operator=(const training_cli&) = delete;

  // nullopt to go on, or the exit status (0 after --help or --options-reference, 2 for a usage error).
  std::optional<int> parse(int argc, char** argv);
  // The flags and --set overrides alone (e.g. to learn --init-from before reading a model).
  nlohmann::json overlay() const;
  // The run config (-c, or {}), with a "model" given as a file name inlined, the flags and --set
  // overrides applied, then the program's defaults under what is still missing. A run config naming
  // another program ("program") is refused, and so are an output that is an input of the run (the
  // one output rule, io/output_rule.hpp) and a tensor-parallel group outside gpt_train.
  nlohmann::json run_json();
  // The run config's name in errors, and its directory (relative model files).
  std::string context() const;
  // Where the run config's "model" came from, for errors: the model file it names, else the run config.
  std::string model_context() const;
  const std::filesystem::path& base() const;
  const std::string& program() const;
  bool has_config() const;

  bool resume = false, overwrite = false, verify = true, dry_run = false;

  // The plan of a run of model m under `in` (train/plan.hpp, train/plan_report.hpp). --dry-run: printed by the first
  // process, and the exit status (0) returned. Otherwise the run's memory budget is checked against
  // it (an error naming what the run needs when it does not fit) and nothing returned: the run goes on.
  std::optional<int> plan_gate(const sparselm::model_shape& m, const sparselm::plan_inputs& in, bool first_process) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace examples
