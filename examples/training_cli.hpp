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
// `--options-reference` prints the program's own keys and flags as Markdown, and
// `--common-options-reference` the common ones (docs/reference/options.md is made from them by
// scripts/gen_options_reference.sh, and the ctest docs.options_reference checks the two agree).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "sparselm/io/output_rule.hpp"
#include "sparselm/train/plan.hpp"
#include "sparselm/train/run_config.hpp"
#include "sparselm/train/run_settings.hpp"

namespace examples {

class training_cli {
 public:
  // tables: the program's own option tables (the task's and the model's), after the common one;
  // defaults: what the program uses for keys that neither the run config nor a flag gives.
  training_cli(std::string program, std::string description,
               std::initializer_list<std::span<const sparselm::option_entry>> tables,
               nlohmann::json defaults = nlohmann::json::object())
      : program_(std::move(program)), app_(std::move(description)), tables_(tables), defaults_(std::move(defaults)) {
    app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
    reads(app_.add_option("-c,--config", config_path_, "Run config JSON (its keys: docs/reference/options.md)"));
    app_.add_flag("--resume", resume, "Continue the run in --out from its newest checkpoint (exact resume)");
    app_.add_flag("--overwrite", overwrite,
                  "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app_.add_flag("--no-verify", [this](std::int64_t) { verify = false; },
                  "Resume without checking the checkpoint's CRC-32C checksums");
    app_.add_flag("--dry-run", dry_run,
                  "Print the run's plan (parameters, memory by part, FLOPs and predicted time per step) and exit "
                  "without building the model");
    app_.add_flag("--options-reference", reference_, "Print this program's own run-config keys and flags (Markdown)")
        ->group("");
    app_.add_flag("--common-options-reference", common_reference_, "Print the common run-config keys (Markdown)")
        ->group("");
    for (auto t : tables_) flags_.add(app_, t);
    flags_.add(app_, sparselm::common_options());
    flags_.add_set(app_);
  }

  CLI::App& app() { return app_; }

  // nullopt to go on, or the exit status (0 after --help or --options-reference, 2 for a usage error).
  std::optional<int> parse(int argc, char** argv) {
    if (auto status = examples::parse(app_, argc, argv)) return status;
    if (reference_) {
      std::printf("### %s\n", program_.c_str());
      for (auto t : tables_) std::printf("%s", sparselm::options_reference(t).c_str());
      std::printf("\nIts defaults (under the run config and the flags):\n\n```json\n%s\n```\n", defaults_.dump(2).c_str());
      return 0;
    }
    if (common_reference_) {
      std::printf("%s", sparselm::options_reference(sparselm::common_options()).c_str());
      return 0;
    }
    return std::nullopt;
  }

  // The flags and --set overrides alone (e.g. to learn --init-from before reading a model).
  nlohmann::json overlay() const { return flags_.overlay(); }

  // The run config (-c, or {}), with a "model" given as a file name inlined, the flags and --set
  // overrides applied, then the program's defaults under what is still missing.
  // A run config naming another program ("program") is refused.
  nlohmann::json run_json() {
    auto [j, base] = sparselm::read_run_json(config_path_, &model_file_);
    base_ = base;
    flags_.apply(j);
    if (j.contains("program"))
      SPARSELM_CHECK(j["program"] == program_, context(), ": this run config is for ", j["program"].dump(),
                     ", not ", program_);
    sparselm::apply_defaults(j, defaults_);
    check_outputs(j);
    refuse_tensor_parallel(j);
    return j;
  }

  // Tensor parallelism (trainer.tensor_parallel) splits GPT's blocks, in gpt_train only: the other
  // programs refuse a group of more than one rank here, before any work, naming the option.
  void refuse_tensor_parallel(const nlohmann::json& j) const {
    if (program_ == "gpt_train") return;
    const nlohmann::json* t = sparselm::find_key(j, "trainer.tensor_parallel");
    if (!t || !t->is_number_unsigned() || t->get<std::size_t>() <= 1) return;  // absent, 1 or the reader's error
    throw sparselm::error(sparselm::detail::concat(
        context(), ": trainer.tensor_parallel (--tensor-parallel) ", t->get<std::size_t>(), ": ", program_,
        " does not split its model over ranks yet; tensor parallelism is implemented for GPT models in gpt_train"));
  }

  // The one output rule (io/output_rule.hpp): the run directory is not, does not contain, does
  // not lie inside and does not link to an input of the run: the run config, its model file, the
  // files of the input keys (data, vocabulary, --init-from). A resumed run rewrites its own
  // config.json and may have been started from it.
  void check_outputs(const nlohmann::json& j) const {
    const nlohmann::json* out = sparselm::find_key(j, "out");
    if (!out || !out->is_string() || out->get<std::string>().empty()) return;
    const std::filesystem::path dir = out->get<std::string>();
    std::vector<sparselm::io::named_path> inputs;
    if (!config_path_.empty()) inputs.push_back({config_path_, "run config (-c)"});
    if (!model_file_.empty()) inputs.push_back({model_file_, "model file"});
    auto add = [&](const sparselm::option_entry& e) {
      if (e.kind != sparselm::option_kind::input || (resume && e.key == "init_from")) return;
      const nlohmann::json* v = sparselm::find_key(j, e.key);
      if (!v || !v->is_string()) return;
      const std::filesystem::path p = v->get<std::string>();
      const std::string what = e.flag.empty() ? "'" + std::string(e.key) + "'" : std::string(e.flag);
      inputs.push_back({p, what});
      if (p.is_relative() && !base_.empty()) inputs.push_back({base_ / p, what});
    };
    for (auto t : tables_)
      for (const auto& e : t) add(e);
    for (const auto& e : sparselm::common_options()) add(e);
    if (resume)
      std::erase_if(inputs, [&](const auto& in) {
        std::error_code ec;
        return std::filesystem::equivalent(in.path, dir / "config.json", ec);
      });
    sparselm::io::check_output(dir, inputs, "--out");
  }
  // The run config's name in errors, and its directory (relative model files).
  std::string context() const { return config_path_.empty() ? std::string("run config") : config_path_; }
  // Where the run config's "model" came from, for errors: the model file it names, else the run config.
  std::string model_context() const { return model_file_.empty() ? context() + " model" : model_file_; }
  const std::filesystem::path& base() const { return base_; }
  const std::string& program() const { return program_; }
  bool has_config() const { return !config_path_.empty(); }

  bool resume = false, overwrite = false, verify = true, dry_run = false;

  // The plan of a run of model m under `in` (train/plan.hpp). --dry-run: printed by the first
  // process, and the exit status (0) returned. Otherwise the run's memory budget is checked against
  // it (an error naming what the run needs when it does not fit) and nothing returned: the run goes on.
  std::optional<int> plan_gate(const sparselm::model_shape& m, const sparselm::plan_inputs& in, bool first_process) const {
    if (dry_run) {
      if (first_process) sparselm::print_run_plan(m, in);
      return 0;
    }
    sparselm::check_memory_budget(m, in, context());
    return std::nullopt;
  }

 private:
  std::string program_;
  CLI::App app_;
  std::vector<std::span<const sparselm::option_entry>> tables_;
  run_flags flags_;
  std::string config_path_, model_file_;
  std::filesystem::path base_;
  nlohmann::json defaults_;
  bool reference_ = false, common_reference_ = false;
};

}  // namespace examples
