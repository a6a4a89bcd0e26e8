// The run configuration of a training job (train/run_config.hpp) and the job itself
// (train/lm_job.hpp): strict config reading with errors naming the field, overrides, and the job's
// guarantees: nothing saved is overwritten by a fresh run, resume refuses a different model,
// continues to more steps and keeps the metrics file consistent, bad data files are named.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "../common/scratch.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/run_config.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir(const std::string& name) { return test::fresh_dir("train_lm_job", name); }

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

json tiny_model() { return read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"); }

// A run config over token files in `dir` (written here: a repeating pattern the model can learn).
json run_json(const fs::path& dir, std::size_t steps) {
  std::vector<std::int32_t> ids(3000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 7 + i / 13) % 61);
  if (!fs::exists(dir / "train.tok")) {
    data::write_token_file(dir / "train.tok", ids, 61);
    data::write_token_file(dir / "valid.tok", std::span(ids).first(400), 61);
  }
  return json{{"model", tiny_model()},
              {"data", {{"train", (dir / "train.tok").string()}, {"valid", (dir / "valid.tok").string()}}},
              {"batch_size", 4},
              {"seq_len", 16},
              {"steps", steps},
              {"schedule", {{"type", "constant"}, {"lr", 3e-3}}},
              {"eval_every", 5},
              {"log_every", 1},
              {"checkpoint_every", 5},
              {"threads", 0},
              {"out", (dir / "out").string()}};
}

// Runs a whole job on the tiny dense GPT; returns the summary.
json run_job(const json& j, bool resume, json model_override = {}) {
  auto rc = lm_run_config::from_json(j, "test run");
  json m = rc.model;
  if (!model_override.is_null()) m.update(model_override);
  gpt<> model(gpt_config::from_json(m, "model"));
  model.init(rc.seed);
  trainer<gpt<>> t(model, rc.trainer, optim::adamw<>(rc.optimizer), optim::make_schedule(rc.schedule_json()));
  lm_job job(rc, j, "test_job");
  return job.run(model, t, {.resume = resume, .print_summary = false});
}

}  // namespace

TEST_CASE("run config: fields, defaults and errors that name the field") {
  json j = {{"batch_size", 2}, {"seq_len", 32}, {"steps", 50}, {"data", {{"train", "a.tok"}}}};
  auto rc = lm_run_config::from_json(j, "run.json");
  CHECK(rc.batch_size == 2);
  CHECK(rc.seq_len == 32);
  CHECK(rc.loop.steps == 50);
  CHECK(rc.train_data == "a.tok");
  CHECK(rc.optimizer.at("type") == "adamw");
  // the schedule's run-derived defaults: total steps = steps, warm-up 5 %
  const json s = rc.schedule_json();
  CHECK(s.at("total_steps") == 50);
  CHECK(s.at("warmup_steps") == 2);

  auto err = [](json bad) { return error_of([&] { lm_run_config::from_json(bad, "run.json"); }); };
  CHECK(err({{"batch_sise", 2}}).find("batch_sise") != std::string::npos);
  CHECK(err({{"batch_size", 0}}).find("batch_size") != std::string::npos);
  CHECK(err({{"steps", -3}}).find("steps") != std::string::npos);
  CHECK(err({{"seq_len", "long"}}).find("seq_len") != std::string::npos);
  CHECK(err({{"order", "random"}}).find("order") != std::string::npos);
  CHECK(err({{"data", {{"training", "x"}}}}).find("training") != std::string::npos);
  CHECK(err({{"model", 3}}).find("model") != std::string::npos);
  CHECK(err({{"threads", -1}}).find("threads") != std::string::npos);
}

TEST_CASE("run config files: model by relative name, malformed JSON named") {
  const fs::path d = scratch_dir("files");
  {
    std::ofstream(d / "m.json") << tiny_model().dump();
    std::ofstream(d / "run.json") << R"({"model": "m.json", "steps": 3})";
    std::ofstream(d / "broken.json") << R"({"steps": 3,)";
  }
  auto [j, base] = read_run_json((d / "run.json").string());
  CHECK(base == d);
  CHECK(j.at("model").at("n_embd") == 16);  // inlined from m.json, found next to run.json
  CHECK(error_of([&] { read_run_json((d / "broken.json").string()); }).find("broken.json") != std::string::npos);
  CHECK(error_of([&] { read_run_json((d / "missing.json").string()); }).find("missing.json") != std::string::npos);
  std::ofstream(d / "run2.json") << R"({"model": "nowhere.json"})";
  CHECK(error_of([&] { read_run_json((d / "run2.json").string()); }).find("nowhere.json") != std::string::npos);
}

TEST_CASE("overrides: key.path=value sets nested fields with JSON or string values") {
  json j = {{"schedule", {{"type", "constant"}}}};
  apply_override(j, "schedule.lr=0.01");
  apply_override(j, "trainer.accumulation.steps=4");
  apply_override(j, "out=runs/x");
  apply_override(j, "data.train=\"a b.tok\"");
  CHECK(j["schedule"]["lr"].get<double>() == doctest::Approx(0.01));
  CHECK(j["trainer"]["accumulation"]["steps"] == 4);
  CHECK(j["out"] == "runs/x");
  CHECK(j["data"]["train"] == "a b.tok");
  CHECK(error_of([&] { apply_override(j, "no_equals_sign"); }).find("no_equals_sign") != std::string::npos);
  CHECK(error_of([&] { apply_override(j, "out.sub=1"); }).find("not an object") != std::string::npos);
  CHECK(error_of([&] { apply_override(j, "a..b=1"); }).find("empty key") != std::string::npos);
}

TEST_CASE("lm_job: a fresh run, refusal to overwrite, resume to more steps, model mismatch") {
  const fs::path d = scratch_dir("job");
  json j = run_json(d, 10);
  const json first = run_job(j, false);
  CHECK(first.at("steps") == 10);
  CHECK(first.at("valid").at("perplexity").get<double>() < 61.0);  // learned something of the pattern
  const fs::path out = d / "out";
  REQUIRE(fs::exists(out / "checkpoints" / "latest"));
  const auto ckpt = io::resolve_checkpoint(out);
  CHECK(ckpt.filename() == "step-000010");
  const auto model_bytes = fs::file_size(ckpt / io::model_file);
  const auto metrics_before = lines_of(out / "metrics.jsonl");

  // A fresh run into the same directory is refused, naming it, and changes nothing on disk.
  const std::string refused = error_of([&] { run_job(j, false); });
  CHECK(refused.find(out.string()) != std::string::npos);
  CHECK(refused.find("--resume") != std::string::npos);
  CHECK(lines_of(out / "metrics.jsonl") == metrics_before);
  CHECK(fs::file_size(ckpt / io::model_file) == model_bytes);

  // Resuming with another model is refused and names the checkpoint's config.
  const std::string mismatch = error_of([&] { run_job(j, true, json{{"n_layer", 3}}); });
  CHECK(mismatch.find("config.json") != std::string::npos);
  CHECK(mismatch.find("differs") != std::string::npos);

  // Resume to 15 steps: continues from step 10, the metrics file keeps one line per step.
  j["steps"] = 15;
  const json second = run_job(j, true);
  CHECK(second.at("resumed_from") == 10);
  CHECK(second.at("steps") == 15);
  std::vector<std::size_t> train_steps;
  std::size_t runs = 0;
  for (const auto& l : lines_of(out / "metrics.jsonl")) {
    const json m = json::parse(l);
    if (m.at("kind") == "train") train_steps.push_back(m.at("step"));
    if (m.at("kind") == "run") ++runs;
  }
  CHECK(runs == 2);  // the fresh run's line and the resumed run's line
  REQUIRE(train_steps.size() == 15);
  for (std::size_t i = 0; i < train_steps.size(); ++i) CHECK(train_steps[i] == i + 1);
  CHECK(io::resolve_checkpoint(out).filename() == "step-000015");
  CHECK(fs::exists(out / "checkpoints" / "step-000010"));  // keep = 2
}

TEST_CASE("lm_job: resume without checkpoints, bad data files") {
  const fs::path d = scratch_dir("bad");
  json j = run_json(d, 3);
  CHECK(error_of([&] { run_job(j, true); }).find("no checkpoint") != std::string::npos);

  // token ids beyond the model's vocabulary
  std::vector<std::int32_t> big(100, 70);
  data::write_token_file(d / "big.tok", big, 100);
  json jb = j;
  jb["data"]["train"] = (d / "big.tok").string();
  const std::string vocab_err = error_of([&] { run_job(jb, false); });
  CHECK(vocab_err.find("big.tok") != std::string::npos);
  CHECK(vocab_err.find("vocab") != std::string::npos);

  // an empty dataset (the writer refuses it; a file built by hand: the header with N = 0) and a
  // truncated token file
  CHECK(error_of([&] { data::write_token_file(d / "never.tok", std::vector<std::int32_t>{}, 61); })
            .find("empty dataset") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "never.tok"));
  const std::string bytes = test::slurp(d / "train.tok");
  std::string empty = bytes.substr(0, 64);
  std::fill(empty.begin() + 16, empty.begin() + 24, '\0');  // token count 0
  test::spit(d / "empty.tok", empty);
  jb["data"]["train"] = (d / "empty.tok").string();
  const std::string empty_err = error_of([&] { run_job(jb, false); });
  CHECK(empty_err.find("empty.tok") != std::string::npos);
  CHECK(empty_err.find("empty") != std::string::npos);
  test::spit(d / "cut.tok", bytes.substr(0, bytes.size() / 2 + 1));
  jb["data"]["train"] = (d / "cut.tok").string();
  CHECK(error_of([&] { run_job(jb, false); }).find("cut.tok") != std::string::npos);
  jb["data"]["train"] = (d / "absent.tok").string();
  CHECK(error_of([&] { run_job(jb, false); }).find("absent.tok") != std::string::npos);
  // none of the failed runs wrote checkpoints
  CHECK_FALSE(fs::exists(d / "out" / "checkpoints" / "latest"));
}

// Issue 60, defect 3: with a finite gradient norm, Adam's v = g² overflowed; the guard checked only
// the loss, the gradient norm and the parameters, so checkpoints with infinite optimizer.v were
// saved and pushed the good ones out. The optimiser now reports what its update wrote.
TEST_CASE("lm_job: non-finite optimiser state is never saved; the run stops naming the last good checkpoint") {
  const fs::path d = scratch_dir("nonfinite_state");
  const json j = run_json(d, 15);
  auto rc = lm_run_config::from_json(j, "test run");
  gpt<> model(gpt_config::from_json(rc.model, "model"));
  model.init(rc.seed);
  trainer<gpt<>> t(model, rc.trainer, optim::adamw<>(rc.optimizer), optim::make_schedule(rc.schedule_json()));
  // After step 7 one second moment is infinite, as v = g² is for |g| > 1.8e19; every later update
  // keeps it so (v = β2·v + ...), while the parameters stay finite (m / sqrt(v) = 0).
  t.set_hooks({.after_update = [&](std::size_t step) {
    if (step == 7) t.optimizer().state().slot("v").all()[0] = std::numeric_limits<float>::infinity();
  }});
  lm_job job(rc, j, "test_job");
  const std::string e = error_of([&] { job.run(model, t, {.resume = false, .print_summary = false}); });
  CHECK_MESSAGE(e.find("step 10: the parameters or the optimiser state are not finite and are not saved") !=
                    std::string::npos,
                e);
  const fs::path ck = d / "out" / "checkpoints";
  CHECK(e.find((ck / "step-000005").string()) != std::string::npos);  // the last good checkpoint, named
  CHECK(fs::exists(ck / "step-000005"));                             // and kept
  CHECK_FALSE(fs::exists(ck / "step-000010"));
  CHECK(io::resolve_checkpoint(d / "out").filename() == "step-000005");
  bool params_finite = true;  // what the old guard looked at
  for (float x : model.params().all()) params_finite = params_finite && std::isfinite(x);
  CHECK(params_finite);
}

}  // namespace SPARSELM_UNITY_ID
