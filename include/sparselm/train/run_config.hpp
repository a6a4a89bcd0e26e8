#pragma once
// The run configuration of a language-model training job (examples/gpt_train, examples/sparse_lm):
// data, batch shape, steps, optimiser, schedule, trainer and loop options, seeds, output. Read
// strictly from JSON (unknown keys are errors naming them); CLI flags override fields.
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
// missing default from the run: total_steps = steps (and bert_power's cooldown).

#include <filesystem>
#include <string>
#include <utility>

#include "sparselm/core/json.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/train/training_loop.hpp"
#include "sparselm/train/trainer.hpp"

namespace sparselm {

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

  static lm_run_config from_json(const json& j, const std::string& context,
                                 const std::filesystem::path& base_dir = {}) {
    json_fields r(j, context);
    lm_run_config c;
    if (r.has("model")) {
      const json& m = j.at("model");
      if (m.is_string()) {
        std::filesystem::path p = m.get<std::string>();
        if (p.is_relative() && !base_dir.empty()) p = base_dir / p;
        c.model = read_json_file(p.string());
      } else {
        SPARSELM_CHECK(m.is_object(), context, ": field 'model' must be a file name or an object");
        c.model = m;
      }
    }
    r.ignore({"model"});
    const json data = r.object("data");
    {
      json_fields d(data, context + " data");
      c.train_data = d.get("train", c.train_data);
      c.valid_data = d.get("valid", c.valid_data);
      d.finish();
    }
    auto positive = at_least(1);
    c.batch_size = r.get("batch_size", c.batch_size, positive);
    c.seq_len = r.get("seq_len", c.seq_len, positive);
    c.loop.steps = r.get("steps", c.loop.steps, positive);
    if (r.has("optimizer")) c.optimizer = r.object("optimizer");
    if (r.has("schedule")) c.schedule = r.object("schedule");
    r.ignore({"optimizer", "schedule"});
    if (r.has("trainer")) c.trainer = trainer_options::from_json(r.object("trainer"), context + " trainer");
    r.ignore({"trainer"});
    c.loop.eval_every = r.get("eval_every", c.loop.eval_every);
    c.loop.eval_batches = r.get("eval_batches", c.loop.eval_batches);
    c.loop.log_every = r.get("log_every", c.loop.log_every, positive);
    c.loop.checkpoint_every = r.get("checkpoint_every", c.loop.checkpoint_every);
    c.seed = r.get("seed", c.seed);
    c.threads = r.get("threads", c.threads, at_least(0));
    c.out = r.get("out", c.out);
    c.order = r.get("order", c.order, one_of({"shuffled", "sequential"}));
    r.finish();
    if (!c.optimizer.contains("type")) c.optimizer["type"] = "adamw";
    if (c.schedule.empty()) c.schedule = {{"type", "warmup_cosine"}, {"max_lr", 6e-4}};
    c.trainer.dropout_seed = c.seed;
    return c;
  }

  // The schedule JSON with run-derived defaults filled in.
  json schedule_json() const {
    json s = schedule;
    const std::string type = s.value("type", "");
    if (type == "bert_power") {
      if (!s.contains("cooldown_steps")) s["cooldown_steps"] = loop.steps;
    } else if (type != "constant" && !s.contains("total_steps")) {
      s["total_steps"] = loop.steps;
    }
    if (type == "warmup_cosine" && !s.contains("warmup_steps")) s["warmup_steps"] = loop.steps / 20;
    return s;
  }
};

// Reads a run-config file (or starts from {} when path is empty) and inlines a "model" given as a
// file name, resolved against the config's directory. Returns the JSON and that directory.
inline std::pair<json, std::filesystem::path> read_run_json(const std::string& path) {
  json j = json::object();
  std::filesystem::path base;
  if (!path.empty()) {
    j = read_json_file(path);
    SPARSELM_CHECK(j.is_object(), path, ": expected a JSON object");
    base = std::filesystem::path(path).parent_path();
  }
  if (j.contains("model") && j["model"].is_string()) {
    std::filesystem::path p = j["model"].get<std::string>();
    if (p.is_relative() && !base.empty()) p = base / p;
    j["model"] = read_json_file(p.string());
  }
  return {std::move(j), std::move(base)};
}

}  // namespace sparselm
