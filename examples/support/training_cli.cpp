// examples::training_cli (examples/training_cli.hpp), compiled once into the static library
// sparselm_training_cli that every training program links: the argument parser (CLI11), the run
// flags of the option tables (examples/cli.hpp), the output rule and the plan's printing.
#include "../training_cli.hpp"

#include <cstdint>
#include <cstdio>
#include <system_error>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "../cli.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/io/output_rule.hpp"
#include "sparselm/train/plan_report.hpp"
#include "sparselm/train/run_config.hpp"
#include "sparselm/train/run_settings.hpp"

namespace examples {

struct training_cli::impl {
  impl(training_cli& self, std::string program, std::string description,
       std::initializer_list<std::span<const sparselm::option_entry>> tables, nlohmann::json defaults)
      : program(std::move(program)), app(std::move(description)), tables(tables), defaults(std::move(defaults)) {
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
    reads(app.add_option("-c,--config", config_path, "Run config JSON (its keys: docs/reference/options.md)"));
    app.add_flag("--resume", self.resume, "Continue the run in --out from its newest checkpoint (exact resume)");
    app.add_flag("--overwrite", self.overwrite,
                 "Start again in a used --out: delete its checkpoints, metrics.jsonl and config.json first");
    app.add_flag("--no-verify", [&self](std::int64_t) { self.verify = false; },
                 "Resume without checking the checkpoint's CRC-32C checksums");
    app.add_flag("--dry-run", self.dry_run,
                 "Print the run's plan (parameters, memory by part, FLOPs and predicted time per step) and exit "
                 "without building the model");
    app.add_flag("--options-reference", reference, "Print this program's own run-config keys and flags (Markdown)")
        ->group("");
    app.add_flag("--common-options-reference", common_reference, "Print the common run-config keys (Markdown)")
        ->group("");
    for (auto t : this->tables) flags.add(app, t);
    flags.add(app, sparselm::common_options());
    flags.add_set(app);
  }

  std::string context() const { return config_path.empty() ? std::string("run config") : config_path; }

  // Tensor parallelism (trainer.tensor_parallel) splits GPT's, S1's and BERT's blocks, in every
  // training program; a program without it refuses a group of more than one rank here, before any
  // work, naming the option.
  void refuse_tensor_parallel(const nlohmann::json& j) const {
    if (program == "gpt_train" || program == "sparse_lm" || program == "bert_pretrain" || program == "bert_classify" ||
        program == "bert_squad")
      return;
    const nlohmann::json* t = sparselm::find_key(j, "trainer.tensor_parallel");
    if (!t || !t->is_number_unsigned() || t->get<std::size_t>() <= 1) return;  // absent, 1 or the reader's error
    throw sparselm::error(sparselm::detail::concat(
        context(), ": trainer.tensor_parallel (--tensor-parallel) ", t->get<std::size_t>(), ": ", program,
        " does not split its model over ranks yet; tensor parallelism is implemented in gpt_train (GPT models), "
        "sparse_lm, bert_pretrain, bert_classify and bert_squad"));
  }

  // The one output rule (io/output_rule.hpp): the run directory is not, does not contain, does
  // not lie inside and does not link to an input of the run: the run config, its model file, the
  // files of the input keys (data, vocabulary, --init-from). A resumed run rewrites its own
  // config.json and may have been started from it.
  void check_outputs(const nlohmann::json& j, bool resume) const {
    const nlohmann::json* out = sparselm::find_key(j, "out");
    if (!out || !out->is_string() || out->get<std::string>().empty()) return;
    const std::filesystem::path dir = out->get<std::string>();
    std::vector<sparselm::io::named_path> inputs;
    if (!config_path.empty()) inputs.push_back({config_path, "run config (-c)"});
    if (!model_file.empty()) inputs.push_back({model_file, "model file"});
    auto add = [&](const sparselm::option_entry& e) {
      if (e.kind != sparselm::option_kind::input || (resume && e.key == "init_from")) return;
      const nlohmann::json* v = sparselm::find_key(j, e.key);
      if (!v || !v->is_string()) return;
      const std::filesystem::path p = v->get<std::string>();
      const std::string what = e.flag.empty() ? "'" + std::string(e.key) + "'" : std::string(e.flag);
      inputs.push_back({p, what});
      if (p.is_relative() && !base.empty()) inputs.push_back({base / p, what});
    };
    for (auto t : tables)
      for (const auto& e : t) add(e);
    for (const auto& e : sparselm::common_options()) add(e);
    if (resume)
      std::erase_if(inputs, [&](const auto& in) {
        std::error_code ec;
        return std::filesystem::equivalent(in.path, dir / "config.json", ec);
      });
    sparselm::io::check_output(dir, inputs, "--out");
  }

  std::string program;
  CLI::App app;
  std::vector<std::span<const sparselm::option_entry>> tables;
  run_flags flags;
  std::string config_path, model_file;
  std::filesystem::path base;
  nlohmann::json defaults;
  bool reference = false, common_reference = false;
};

training_cli::training_cli(std::string program, std::string description,
                           std::initializer_list<std::span<const sparselm::option_entry>> tables, nlohmann::json defaults)
    : impl_(std::make_unique<impl>(*this, std::move(program), std::move(description), tables, std::move(defaults))) {}

training_cli::~training_cli() = default;

std::optional<int> training_cli::parse(int argc, char** argv) {
  if (auto status = examples::parse(impl_->app, argc, argv)) return status;
  if (impl_->reference) {
    std::printf("### %s\n", impl_->program.c_str());
    for (auto t : impl_->tables) std::printf("%s", sparselm::options_reference(t).c_str());
    std::printf("\nIts defaults (under the run config and the flags):\n\n```json\n%s\n```\n",
                impl_->defaults.dump(2).c_str());
    return 0;
  }
  if (impl_->common_reference) {
    std::printf("%s", sparselm::options_reference(sparselm::common_options()).c_str());
    return 0;
  }
  return std::nullopt;
}

nlohmann::json training_cli::overlay() const { return impl_->flags.overlay(); }

nlohmann::json training_cli::run_json() {
  // a model the flags give (--set model=FILE) replaces the config's: its file is not read
  const nlohmann::json over = impl_->flags.overlay();
  const bool model_given = over.contains("model") && !over["model"].is_object();
  auto [j, base] = sparselm::read_run_json(impl_->config_path, &impl_->model_file, !model_given);
  impl_->base = base;
  impl_->flags.apply(j, over);
  if (j.contains("program"))
    SPARSELM_CHECK(j["program"] == impl_->program, context(), ": this run config is for ", j["program"].dump(),
                   ", not ", impl_->program);
  sparselm::apply_defaults(j, impl_->defaults);
  impl_->check_outputs(j, resume);
  impl_->refuse_tensor_parallel(j);
  return j;
}

std::string training_cli::context() const { return impl_->context(); }
std::string training_cli::model_context() const {
  return impl_->model_file.empty() ? context() + " model" : impl_->model_file;
}
const std::filesystem::path& training_cli::base() const { return impl_->base; }
const std::string& training_cli::program() const { return impl_->program; }
bool training_cli::has_config() const { return !impl_->config_path.empty(); }

std::optional<int> training_cli::plan_gate(const sparselm::model_shape& m, const sparselm::plan_inputs& in,
                                           bool first_process) const {
  if (dry_run) {
    if (first_process) sparselm::print_run_plan(m, in);
    return 0;
  }
  sparselm::check_memory_budget(m, in, context());
  return std::nullopt;
}

}  // namespace examples
