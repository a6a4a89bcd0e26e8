#pragma once
// The one option schema of the training programs (gpt_train, sparse_lm, bert_pretrain,
// bert_classify, bert_squad): the run-config keys every program reads with the same meaning —
// run length, batch and accumulation, optimiser, schedule, trainer (clipping, precision, recompute,
// pipeline, sharding, loss scaling), sparsity and its pattern updates, loop cadence, seed, threads,
// run directory — as a table (`common_options`, train/common_options.hpp) from which the programs make their flags
// (examples/cli.hpp), `--help` its text and docs/reference/options.md its reference
// (`options_reference`), and the reader (`run_settings::from_json`) that parses them strictly:
// an unknown key, or two keys that contradict each other, is an error naming the key.
//
//   json j = read_run_json("run.json").first;           // then flags, then --set key=value
//   apply_defaults(j, {{"optimizer", {{"type", "lamb"}}}});
//   auto s = run_settings::from_json(j, "run.json", {"model", "data", "seq_len"});   // task keys
//   s.resolve(data_replicas, train_examples, "bert_pretrain");   // steps, accumulation, schedule
//   trainer<Model, P> t(model, s.trainer, any_optimizer(s.optimizer), optim::make_schedule(s.schedule));
//
// The schema's machinery (option_entry, bounds, defaults, the reference): train/option_schema.hpp.
//
// A task's own keys (the model, the data files, sequence length, labels, ...) stay in `task` for
// the program to read; they have entries in the program's own table so that its flags and the
// reference come from one place too.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/optim/schedules.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/sparse/sparsity.hpp"
#include "sparselm/sparse/update.hpp"
#include "sparselm/train/common_options.hpp"
#include "sparselm/train/option_schema.hpp"
#include "sparselm/train/training_loop.hpp"
#include "sparselm/train/trainer_options.hpp"

namespace sparselm {

// --- the settings ----------------------------------------------------------------------------------

struct sparsity_settings {
  std::size_t block_size = 0;  // 0: dense
  double sparsity = 0.9;
  sparse::allocation allocation = sparse::allocation::uniform;
  bool lr_rescale = false;
  std::optional<sparse::update_config> update;  // dynamic sparsity; nullopt: static patterns
  bool block_given = false, sparsity_given = false;  // present in the config (fine-tuning: prune)
};

struct run_settings {
  std::string context;                // the config's name, for errors
  std::optional<std::size_t> steps;   // one of steps and epochs (resolve() makes steps)
  std::optional<double> epochs;
  std::size_t batch_size = 8;         // rows per micro-batch per process
  std::optional<std::size_t> global_batch;
  bool accumulation_given = false;
  json optimizer = json::object();    // registry::any_optimizer's config
  json schedule = json::object();     // optim::make_schedule's, resolved by resolve()
  trainer_options trainer{};
  sparsity_settings sparsity{};
  loop_options loop{};
  std::size_t keep_checkpoints = 2;
  std::uint64_t seed = 1234;
  std::size_t threads = 0;
  std::string out = "runs/run";
  std::string init_from;
  std::optional<double> dropout;      // every dropout rate of the model (the program applies it)
  double memory_budget = 0;           // GiB per process (0: none); train/plan.hpp, check_memory_budget
  std::string program;                // the program the config names ("": any)
  json about;                         // the preset's description (recorded)
  json task = json::object();         // the task's keys, for the program

  // Reads the common keys of `j` strictly; `task_keys` are the top-level keys the program reads
  // itself (copied to `task`). Anything else is an error naming the key.
  static run_settings from_json(const json& j, const std::string& context, const std::vector<std::string_view>& task_keys) {
    SPARSELM_CHECK(j.is_object(), context, ": expected a JSON object, got ", j.type_name());
    check_option_bounds(j, common_options(), context);
    json common = json::object();
    std::set<std::string, std::less<>> own;
    for (const auto& e : common_options()) own.insert(std::string(e.key.substr(0, e.key.find('.'))));
    for (const auto& [key, value] : j.items()) {
      const bool is_task = std::find(task_keys.begin(), task_keys.end(), key) != task_keys.end();
      if (is_task)
        continue;
      else if (own.contains(key))
        common[key] = value;
      else
        fail(context, ": unknown field '", key, "' (the common fields: docs/reference/options.md; this program's own: ",
             join(task_keys), ")");
    }
    run_settings s;
    s.context = context;
    for (std::string_view k : task_keys)
      if (j.contains(k)) s.task[std::string(k)] = j.at(std::string(k));
    json_fields r(common, context);
    auto positive = at_least(1);
    if (r.has("steps")) s.steps = r.get("steps", std::size_t(1), positive);
    if (r.has("epochs")) s.epochs = r.get("epochs", 1.0, in_closed(1e-9, 1e6));
    SPARSELM_CHECK(!(s.steps && s.epochs), context, ": fields 'steps' and 'epochs' contradict each other (give one)");
    s.batch_size = r.get("batch_size", s.batch_size, positive);
    check_limit(context, "batch_size", s.batch_size, limits::batch);
    if (r.has("global_batch")) s.global_batch = r.get("global_batch", std::size_t(1), positive);
    if (r.has("optimizer")) s.optimizer = r.object("optimizer");
    if (r.has("schedule")) s.schedule = r.object("schedule");
    r.ignore({"optimizer", "schedule"});
    if (r.has("trainer")) {
      const json t = r.object("trainer");
      s.accumulation_given = t.contains("accumulation") && t["accumulation"].is_object() &&
                             t["accumulation"].contains("steps");
      s.trainer = trainer_options::from_json(t, context + " trainer");
    }
    r.ignore({"trainer"});
    if (r.has("sparsity")) s.sparsity = read_sparsity(r.object("sparsity"), context + " sparsity");
    r.ignore({"sparsity"});
    s.loop.eval_every = r.get("eval_every", s.loop.eval_every);
    s.loop.eval_batches = r.get("eval_batches", s.loop.eval_batches);
    s.loop.log_every = r.get("log_every", s.loop.log_every, positive);
    s.loop.stop_at_loss = r.get("stop_at_loss", s.loop.stop_at_loss, in_closed(0.0, 1e6));
    s.loop.checkpoint_every = r.get("checkpoint_every", s.loop.checkpoint_every);
    s.loop.checkpoints = r.get("checkpoints", s.loop.checkpoints);
    s.keep_checkpoints = r.get("keep_checkpoints", s.keep_checkpoints, positive);
    s.seed = r.get("seed", s.seed);
    s.threads = r.get("threads", s.threads, in_closed(0, double(limits::threads)));
    s.out = r.get("out", s.out);
    s.init_from = r.get("init_from", s.init_from);
    if (r.has("dropout")) s.dropout = r.get("dropout", 0.0, in_range(0.0, 1.0));
    s.memory_budget = r.get("memory_budget", 0.0, in_closed(0.0, 1e6));
    s.program = r.get("program", s.program);
    if (r.has("about")) s.about = common.at("about");
    r.ignore({"about"});
    r.finish();
    s.trainer.dropout_seed = s.seed;
    if (!s.optimizer.contains("type")) s.optimizer["type"] = "adamw";
    if (!s.schedule.contains("type")) s.schedule["type"] = "warmup_cosine";
    return s;
  }

  static sparsity_settings read_sparsity(const json& j, const std::string& context) {
    json_fields r(j, context);
    sparsity_settings sp;
    sp.block_given = r.has("block_size");
    sp.sparsity_given = r.has("sparsity");
    sp.block_size = r.get("block_size", sp.block_size);
    SPARSELM_CHECK(sp.block_size == 0 || is_block_size(sp.block_size), context, ": field 'block_size' is ",
                   sp.block_size, ", not 0 (dense) or one of ", join_sizes());
    sp.sparsity = r.get("sparsity", sp.sparsity, in_range(0.0, 0.999999));
    r.read_enum("allocation", sp.allocation, sparse::parse_allocation);
    sp.lr_rescale = r.get("lr_rescale", sp.lr_rescale);
    if (r.has("update")) {
      json u = r.object("update");
      // update_period 0: static patterns (the same as no "update").
      if (!(u.contains("update_period") && u["update_period"].is_number() && u["update_period"] == 0)) {
        sp.update = sparse::update_config::from_json(u, context + ".update");
        SPARSELM_CHECK(u.contains("update_period"), context, ".update: field 'update_period' is missing (the steps "
                       "between pattern updates; 0: static patterns)");
      } else {
        u.erase("update_period");
        sparse::update_config::from_json(u, context + ".update");  // still checked
      }
    }
    r.ignore({"update"});
    r.finish();
    SPARSELM_CHECK(!sp.update || sp.block_size != 0 || !sp.block_given, context,
                   ": field 'update' (dynamic sparsity) contradicts 'block_size' 0 (a dense model)");
    return sp;
  }

  // The accumulation, steps and schedule of the run: data_replicas processes train data-parallel
  // (each batch_size rows per micro-batch); train_examples (rows of one pass over the training
  // data) is needed when the run is given in epochs. `default_steps` when neither is given.
  void resolve(std::size_t data_replicas, std::optional<std::size_t> train_examples, std::size_t default_steps = 1000) {
    SPARSELM_CHECK(data_replicas > 0, context, ": no data replicas");
    if (global_batch) {
      const std::size_t per = checked_mul(batch_size, data_replicas, context + ": batch_size x data replicas");
      SPARSELM_CHECK(*global_batch % per == 0, context, ": field 'global_batch' (", *global_batch,
                     ") is not a multiple of batch_size x data replicas (", batch_size, " x ", data_replicas, " = ",
                     per, ")");
      const std::size_t acc = *global_batch / per;
      SPARSELM_CHECK(!accumulation_given || trainer.accumulation.steps == acc, context, ": field 'global_batch' ",
                     *global_batch, " means ", acc, " micro-batches per step, but 'trainer.accumulation.steps' is ",
                     trainer.accumulation.steps, " (give one of them)");
      trainer.accumulation.steps = acc;
    }
    check_limit(context, "trainer.accumulation.steps", trainer.accumulation.steps, limits::accumulation);
    const std::size_t rows = checked_mul(checked_mul(batch_size, trainer.accumulation.steps, context + ": global batch"),
                                         data_replicas, context + ": global batch");
    if (epochs) {
      SPARSELM_CHECK(train_examples.has_value(), context, ": field 'epochs' needs the size of the training data");
      SPARSELM_CHECK(*train_examples > 0, context, ": field 'epochs': the training data is empty");
      const double s = std::ceil(*epochs * double(*train_examples) / double(rows) - 1e-9);
      SPARSELM_CHECK(s < double(limits::steps), context, ": field 'epochs' ", *epochs, " means ", s,
                     " steps, above the limit ", limits::steps);
      steps = std::max<std::size_t>(1, std::size_t(s));
    }
    if (!steps) steps = default_steps;
    check_limit(context, "steps", *steps, limits::steps);
    loop.steps = *steps;
    schedule = resolved_schedule();
    if (sparsity.update && sparsity.update->schedule.total_steps == 0) sparsity.update->schedule.total_steps = *steps;
    if (sparsity.update) sparsity.update->schedule.validate(context + " sparsity.update");
  }

  // The global batch after resolve(): rows per optimiser step over all data replicas.
  std::size_t rows_per_step(std::size_t data_replicas) const {
    return batch_size * trainer.accumulation.steps * data_replicas;
  }

  // The schedule for make_schedule: the run's length filled in, the common keys (max_lr,
  // warmup_frac, warmup_steps) in the type's own terms, eta(s) when asked.
  json resolved_schedule() const {
    json s = schedule;
    const std::string type = s.value("type", "warmup_cosine");
    const std::size_t T = loop.steps;
    const bool has_frac = s.contains("warmup_frac"), has_steps = s.contains("warmup_steps");
    SPARSELM_CHECK(!(has_frac && has_steps), context,
                   ": fields 'schedule.warmup_frac' and 'schedule.warmup_steps' contradict each other (give one)");
    auto rename = [&](const char* from, const char* to) {
      if (!s.contains(from)) return;
      SPARSELM_CHECK(!s.contains(to), context, ": fields 'schedule.", from, "' and 'schedule.", to,
                     "' contradict each other (the same quantity for schedule '", type, "'; give one)");
      s[to] = s[from];
      s.erase(from);
    };
    auto frac_to_steps = [&] {
      if (!has_frac) return;
      const json f = s["warmup_frac"];
      SPARSELM_CHECK(f.is_number() && f.get<double>() >= 0 && f.get<double>() < 1, context,
                     ": field 'schedule.warmup_frac' must be a number in [0, 1), got ", f.dump());
      s["warmup_steps"] = std::size_t(f.get<double>() * double(T));
      s.erase("warmup_frac");
    };
    if (type == "constant") {
      rename("max_lr", "lr");
    } else if (type == "bert_power") {
      rename("max_lr", "peak_lr");
      frac_to_steps();
      if (!s.contains("cooldown_steps")) s["cooldown_steps"] = T;
    } else if (type == "warmup_cosine") {
      frac_to_steps();
      if (!s.contains("warmup_steps")) s["warmup_steps"] = T / 20;
    } else if (type == "linear") {
      SPARSELM_CHECK(!has_steps || !s.contains("warmup_proportion"), context,
                     ": fields 'schedule.warmup_steps' and 'schedule.warmup_proportion' contradict each other");
      if (has_steps) {
        const json w = s["warmup_steps"];
        SPARSELM_CHECK(w.is_number_unsigned() || (w.is_number_integer() && w.get<std::int64_t>() >= 0), context,
                       ": field 'schedule.warmup_steps' must be a whole number, got ", w.dump());
        s["warmup_proportion"] = T ? double(w.get<std::size_t>()) / double(T) : 0.0;
        s.erase("warmup_steps");
      }
      rename("warmup_frac", "warmup_proportion");
    } else if (type == "up_down") {
      if (has_steps) {
        const json w = s["warmup_steps"];
        SPARSELM_CHECK(w.is_number_unsigned() || (w.is_number_integer() && w.get<std::int64_t>() >= 0), context,
                       ": field 'schedule.warmup_steps' must be a whole number, got ", w.dump());
        s["warmup_frac"] = T ? double(w.get<std::size_t>()) / double(T) : 0.0;
        s.erase("warmup_steps");
      }
    }
    if (type != "constant" && type != "bert_power" && !s.contains("total_steps")) s["total_steps"] = T;
    if (sparsity.lr_rescale) {
      SPARSELM_CHECK(sparsity.block_size != 0, context,
                     ": field 'sparsity.lr_rescale' needs block-sparse projections (sparsity.block_size)");
      SPARSELM_CHECK(!s.contains("sparse_lr_rescale"), context,
                     ": fields 'sparsity.lr_rescale' and 'schedule.sparse_lr_rescale' contradict each other");
      s["sparse_lr_rescale"] = sparsity.sparsity;
    }
    optim::make_schedule(s);  // checked here, naming the config
    return s;
  }

  // The resolved common settings, as the run records them (config.json, the "run" line).
  json to_json() const {
    json j = {{"steps", loop.steps},
              {"batch_size", batch_size},
              {"optimizer", optimizer},
              {"schedule", schedule},
              {"eval_every", loop.eval_every},
              {"eval_batches", loop.eval_batches},
              {"log_every", loop.log_every},
              {"checkpoint_every", loop.checkpoint_every},
              {"keep_checkpoints", keep_checkpoints},
              {"seed", seed},
              {"threads", threads},
              {"out", out}};
    if (epochs) j["epochs"] = *epochs;
    if (global_batch) j["global_batch"] = *global_batch;
    if (!loop.checkpoints) j["checkpoints"] = false;
    if (loop.stop_at_loss > 0) j["stop_at_loss"] = loop.stop_at_loss;
    if (!init_from.empty()) j["init_from"] = init_from;
    if (dropout) j["dropout"] = *dropout;
    if (memory_budget > 0) j["memory_budget"] = memory_budget;
    if (!program.empty()) j["program"] = program;
    if (!about.is_null()) j["about"] = about;
    json& t = j["trainer"];
    t["accumulation"] = {{"steps", trainer.accumulation.steps},
                         {"mode", trainer.accumulation.mode == optim::accumulation_mode::sum ? "sum" : "avg"},
                         {"scale_before", trainer.accumulation.scale_before}};
    t["clip"] = trainer.clip == clip_mode::none ? "none" : trainer.clip == clip_mode::per_tensor ? "per_tensor" : "global_norm";
    t["max_norm"] = trainer.max_norm;
    t["on_nonfinite"] = trainer.on_nonfinite == nonfinite_action::skip ? "skip" : "stop";
    if (trainer.precision) t["precision"] = precision::name(*trainer.precision);
    t["recompute"] = trainer.recompute;
    if (!trainer.offload.empty()) t["offload"] = trainer.offload;
    t["shard_optimizer"] = trainer.shard_optimizer;
    if (trainer.tensor_parallel > 1) t["tensor_parallel"] = trainer.tensor_parallel;
    t["pipeline"] = {{"stages", trainer.pipeline.stages},
                     {"schedule", trainer.pipeline.schedule == pipeline::order::gpipe ? "gpipe" : "1f1b"},
                     {"placement", trainer.pipeline.where == pipeline::placement::ranks ? "ranks" : "threads"}};
    if (!trainer.pipeline.split.empty()) t["pipeline"]["split"] = trainer.pipeline.split;
    json& sp = j["sparsity"];
    sp = {{"block_size", sparsity.block_size}, {"allocation", sparse::to_string(sparsity.allocation)},
          {"lr_rescale", sparsity.lr_rescale}};
    if (sparsity.block_size) sp["sparsity"] = sparsity.sparsity;
    if (sparsity.update) sp["update"] = *sparsity.update;
    return j;
  }

 private:
  static std::string join(const std::vector<std::string_view>& keys) {
    std::string s;
    for (auto k : keys) s += (s.empty() ? "" : ", ") + std::string(k);
    return s.empty() ? "none" : s;
  }
  static std::string join_sizes() {
    std::string s;
    for (auto b : block_sizes) s += (s.empty() ? "" : ", ") + std::to_string(b);
    return s;
  }
};

}  // namespace sparselm
