#pragma once
// The run configuration of a language-model training job (examples/gpt_train, examples/sparse_lm):
// the common keys of every training program (train/run_settings.hpp: length, batch, optimiser,
// schedule, trainer, sparsity, loop, seed, out) plus the language-modelling task's own keys
// (`lm_task_options`): the model, the token files, the sequence length and the window order.
// Read strictly from JSON (unknown keys are errors naming them); flags override fields.
//
//   {
//     "model": "gpt-mini.json"  or  { ...model config... },
//     "data": {"train": "runs/data/train.tok", "valid": "runs/data/valid.tok"},
//     "batch_size": 8, "seq_len": 128, "steps": 1000,
//     "optimizer": {"type": "adamw", "weight_decay": 0.1},
//     "schedule": {"type": "warmup_cosine", "max_lr": 6e-4, "warmup_steps": 50},
//     "trainer": {"clip": "global_norm", "max_norm": 1.0, "accumulation": {"steps": 1}},
//     "eval_every": 100, "eval_batches": 0, "log_every": 10, "checkpoint_every": 0,
//     "seed": 1234, "threads": 0, "out": "runs/gpt-mini"
//   }
// A relative "model" path is resolved against the run config's directory. Schedule fields that are
// missing default from the run: total_steps = steps (and bert_power's cooldown); "epochs" instead of
// "steps" counts passes over the training file's windows.

#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sparselm/core/json.hpp"
#include "sparselm/data/lm_batches.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/train/run_settings.hpp"
#include "sparselm/train/training_loop.hpp"
#include "sparselm/train/trainer.hpp"

namespace sparselm {

// The language-modelling task's keys (beside the model's, which each program lists).
inline std::span<const option_entry> lm_task_options() {
  using k = option_kind;
  static const option_entry table[] = {
      {"data.train", "--train", k::input, "Training token file (encode_dataset)", "", "", "data"},
      {"data.valid", "--valid", k::input, "Validation token file (absent: no evaluation)", "", "", "data"},
      {"seq_len", "--seq-len", k::count, "Input positions per sequence (a window holds seq_len + 1 tokens)", "",
       "128", "data"},
      {"order", "--order", k::choice, "Training windows: shuffled (seeded) or sequential", "shuffled sequential",
       "shuffled", "data"},
  };
  return table;
}

struct lm_run_config {
  json model = json::object();
  std::string train_data, valid_data;
  std::size_t batch_size = 8, seq_len = 128;
  json optimizer = {{"type", "adamw"}};
  json schedule = json::object();
  trainer_options trainer{};
  loop_options loop{};
  std::uint64_t seed = 1234;  // initialisation, data order and dropout
  int threads = 0;            // 0: OpenMP default
  std::string out = "runs/run";
  std::string order = "shuffled";
  run_settings settings;      // every common setting (sparsity, keep_checkpoints, init_from, ...)

  // The defaults of a language-modelling run (under the program's own).
  static json defaults() {
    return {{"optimizer", {{"type", "adamw"}}}, {"schedule", {{"type", "warmup_cosine"}, {"max_lr", 6e-4}}}};
  }

  // extra_keys: further top-level keys the program reads itself (left in settings.task);
  // processes: the run's processes (data replicas x pipeline ranks), for the global batch.
  static lm_run_config from_json(const json& j0, const std::string& context,
                                 const std::filesystem::path& base_dir = {},
                                 std::initializer_list<std::string_view> extra_keys = {}, std::size_t processes = 1) {
    json j = j0;
    SPARSELM_CHECK(j.is_object(), context, ": expected a JSON object, got ", j.type_name());
    apply_defaults(j, defaults());
    std::vector<std::string_view> keys = {"model", "data", "seq_len", "order"};
    keys.insert(keys.end(), extra_keys.begin(), extra_keys.end());
    lm_run_config c;
    c.settings = run_settings::from_json(j, context, keys);
    const json& task = c.settings.task;
    if (task.contains("model")) {
      const json& m = task.at("model");
      if (m.is_string()) {
        std::filesystem::path p = m.get<std::string>();
        if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
        c.model = read_json_file(p.string());
      } else {
        SPARSELM_CHECK(m.is_object(), context, ": field 'model' must be a file name or an object");
        c.model = m;
      }
    }
    json lm = json::object();
    for (const char* key : {"data", "seq_len", "order"})
      if (task.contains(key)) lm[key] = task[key];
    json_fields r(lm, context);
    const json data = r.object("data");
    {
      json_fields d(data, context + " data");
      c.train_data = d.get("train", c.train_data);
      c.valid_data = d.get("valid", c.valid_data);
      d.finish();
    }
    c.seq_len = r.get("seq_len", c.seq_len, at_least(1));
    c.order = r.get("order", c.order, one_of({"shuffled", "sequential"}));
    r.finish();
    run_settings& s = c.settings;
    const std::size_t stages = s.trainer.pipeline.where == pipeline::placement::ranks ? s.trainer.pipeline.stages : 1;
    // tensor-parallel ranks split one model: the data replicas are the groups
    const std::size_t split = std::max<std::size_t>(1, stages) * std::max<std::size_t>(1, s.trainer.tensor_parallel);
    const std::size_t replicas = std::max<std::size_t>(1, processes / split);
    std::optional<std::size_t> windows;
    if (s.epochs) {
      SPARSELM_CHECK(!c.train_data.empty(), context, ": field 'epochs' needs the training data (data.train)");
      data::token_file f(c.train_data);
      windows = data::lm_windows(f.size(), f.sequence_length(), {.seq_len = c.seq_len}, c.train_data).count();
    }
    s.resolve(replicas, windows);
    c.batch_size = s.batch_size;
    c.optimizer = s.optimizer;
    c.schedule = s.schedule;
    c.trainer = s.trainer;
    c.loop = s.loop;
    c.seed = s.seed;
    c.threads = int(s.threads);
    c.out = s.out;
    return c;
  }

  // The schedule with the run-derived fields filled in (run_settings::resolve did it).
  json schedule_json() const { return schedule; }

  // The resolved run config (config.json, the "run" line): the common settings and the task's.
  json resolved() const {
    json j = settings.to_json();
    j["model"] = model;
    j["data"] = {{"train", train_data}, {"valid", valid_data}};
    j["seq_len"] = seq_len;
    j["order"] = order;
    return j;
  }
};

// Reads a run-config file (or starts from {} when path is empty) and inlines a "model" given as a
// file name, resolved against the config's directory. Returns the JSON and that directory.
// read_model false: the "model" key is left as the config has it (a flag or --set replaces it, so
// a file it names need not exist).
inline std::pair<json, std::filesystem::path> read_run_json(const std::string& path, std::string* model_file = nullptr,
                                                            bool read_model = true) {
  json j = json::object();
  std::filesystem::path base;
  if (!path.empty()) {
    j = read_json_file(path);
    SPARSELM_CHECK(j.is_object(), path, ": expected a JSON object");
    base = std::filesystem::path(path).parent_path();
  }
  if (read_model && j.contains("model") && j["model"].is_string()) {
    std::filesystem::path p = j["model"].get<std::string>();
    if (p.is_relative() && !base.empty()) p = base / p;
    j["model"] = read_json_file(p.string(), "model file");
    if (model_file) *model_file = p.string();
  }
  return {std::move(j), std::move(base)};
}

}  // namespace sparselm
