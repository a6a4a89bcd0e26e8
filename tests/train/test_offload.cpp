// Offloaded state (trainer_options::offload): the optimiser keeps its slots, and the model its
// weights and gradients, in unnamed files in a directory; the passes stream them block by block
// and the update segment by segment. The same steps give the same weights bit for bit as state in
// memory (accumulation, recompute, global-norm clipping and evaluation too); a training state saved
// from offloaded state resumes a run in memory exactly, and the other way round; a directory that
// cannot hold them is refused by name before the first step; the plan of a GPT-3 2.7B-shaped run
// with offload fits a 12 GiB budget.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/tiny_gpt.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/train/plan.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
using model_t = gpt<float, block_sparse<4>>;

struct run {
  model_t model;
  trainer<model_t> t;
  explicit run(const std::string& offload, trainer_options o = {})
      : model(test::small_gpt_config(), sparse_plan{.sparsity = 0.5}),
        t(model, with_offload(std::move(o), offload), optim::adamw<>(),
          optim::make_schedule({{"type", "constant"}, {"lr", 1e-2}})) {
    model.init(5);
  }
  static trainer_options with_offload(trainer_options o, const std::string& offload) {
    o.offload = offload;
    return o;
  }
  static std::vector<std::int32_t> tokens(std::size_t s, std::size_t k, std::size_t mul, std::size_t add) {
    std::vector<std::int32_t> v;
    for (std::size_t i = 0; i < 2 * 16; ++i) v.push_back(std::int32_t((i * mul + s * add + k) % 64));
    return v;
  }
  void steps(std::size_t from, std::size_t to) {
    const std::size_t M = t.options().accumulation.steps;
    for (std::size_t s = from; s < to; ++s) {
      std::vector<std::vector<std::int32_t>> ids, targets;
      std::vector<token_batch> micro;
      for (std::size_t k = 0; k < M; ++k) {
        ids.push_back(tokens(s, k, 7, 3));
        targets.push_back(tokens(s, 3 * k, 5, 1));
      }
      for (std::size_t k = 0; k < M; ++k) micro.push_back({ids[k], targets[k], {}, 2, 16});
      t.train_step(micro);
    }
  }
  double eval_loss() {
    const auto ids = tokens(99, 0, 3, 0), targets = tokens(99, 1, 11, 0);
    return model.evaluate(token_batch{ids, targets, {}, 2, 16}).loss_sum;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct temp_dir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("sparselm-test-offload-" + std::to_string(::getpid()));
  temp_dir() { std::filesystem::create_directories(path / "slots"); }
  ~temp_dir() { std::filesystem::remove_all(path); }
};
}  // namespace

TEST_CASE("offload: slots in files train bit for bit as slots in memory, and resume either way") {
  temp_dir dir;
  const std::string slots = (dir.path / "slots").string();
  run mem(""), off(slots);
  CHECK(off.t.optimizer().state().slots.at(0).slots->file_backed());
  CHECK_FALSE(mem.t.optimizer().state().slots.at(0).slots->file_backed());
  CHECK(off.model.offloaded());  // the weights and gradients too
  CHECK(off.model.params().file_backed());
  CHECK(off.model.grads().file_backed());
  CHECK_FALSE(mem.model.params().file_backed());
  mem.steps(0, 3);
  off.steps(0, 3);
  CHECK(same_bits(test::param_snapshot(mem.model), test::param_snapshot(off.model)));

  // offloaded -> in memory, and in memory -> offloaded, through a saved training state
  io::save_training_state(dir.path / "off.safetensors", off.t, {{"k", 1}});
  io::save_training_state(dir.path / "mem.safetensors", mem.t, {{"k", 1}});
  run from_off(""), from_mem(slots);
  std::memcpy(from_off.model.params().all().data(), off.model.params().all().data(),
              off.model.params().all().size() * sizeof(float));
  std::memcpy(from_mem.model.params().all().data(), mem.model.params().all().data(),
              mem.model.params().all().size() * sizeof(float));
  io::load_training_state(dir.path / "off.safetensors", from_off.t);
  io::load_training_state(dir.path / "mem.safetensors", from_mem.t);
  mem.steps(3, 5);
  from_off.steps(3, 5);
  from_mem.steps(3, 5);
  const auto want = test::param_snapshot(mem.model);
  CHECK(same_bits(want, test::param_snapshot(from_off.model)));
  CHECK(same_bits(want, test::param_snapshot(from_mem.model)));
  // the slot files have no names
  CHECK(std::filesystem::is_empty(slots));
}

TEST_CASE("offload: weights, gradients and slots in files: accumulation, recompute, clipping, evaluation bit for bit") {
  temp_dir dir;
  const std::string where = (dir.path / "slots").string();
  for (const char* recompute : {"none", "blocks"}) {
    CAPTURE(recompute);
    trainer_options o;
    o.accumulation = optim::grad_accumulation(2, optim::accumulation_mode::avg);
    o.recompute = recompute;
    o.clip = clip_mode::global_norm;
    o.max_norm = 0.05f;  // small: the streamed norm's clip factor changes every update
    run mem("", o), off(where, o);
    REQUIRE(off.model.offloaded());
    CHECK(same_bits(test::param_snapshot(mem.model), test::param_snapshot(off.model)));  // init wrote the file
    const auto before = offload_snapshot();
    mem.steps(0, 3);
    off.steps(0, 3);
    CHECK(offload_snapshot().wait_seconds > before.wait_seconds);  // the blocks were streamed in
    CHECK(offload_snapshot().writeback_seconds > before.writeback_seconds);  // and their gradients out
    CHECK(same_bits(test::param_snapshot(mem.model), test::param_snapshot(off.model)));
    const auto gm = mem.model.grads().all(), go = off.model.grads().all();
    CHECK(std::memcmp(gm.data(), go.data(), gm.size_bytes()) == 0);
    const double lm = mem.eval_loss(), lo = off.eval_loss();
    CHECK(std::memcmp(&lm, &lo, sizeof lm) == 0);
    CHECK(std::filesystem::is_empty(where));
  }
}

TEST_CASE("offload: zeroing a file-backed arena punches its blocks out and keeps them reserved") {
  temp_dir dir;
  auto layout = std::make_shared<arena_layout>();
  layout->add("a", {3, 100000});
  layout->add("b", {7});
  arena<float> a(layout, file_backing{dir.path / "slots", "test arena"});
  REQUIRE(a.file_backed());
  for (std::size_t i = 0; i < a.all().size(); ++i) a.all()[i] = float(i % 17) + 1.0f;
  a.write_behind(0, a.all().size());
  CHECK(a.all()[12345] == float(12345 % 17) + 1.0f);  // read back from the file
  a.zero();
  bool zero = true;
  for (float x : a.all()) zero = zero && x == 0.0f;
  CHECK(zero);
  a.all()[5] = 2.5f;  // still writable after the blocks were reserved again
  a.page_out_all();
  CHECK(a.all()[5] == 2.5f);
}

TEST_CASE("offload: a copy into files skips the pages of an arena in memory that were never touched") {
  auto layout = std::make_shared<arena_layout>();
  layout->add("a", {4, 1 << 20});  // 16 MiB: mapped, not allocated
  arena<float> a(layout);
  CHECK_FALSE(a.any_resident(0, a.all().size()));
  a.all()[3 << 20] = 1.0f;
  CHECK(a.any_resident(0, a.all().size()));
  CHECK(a.any_resident(3 << 20, (3 << 20) + 1));
  CHECK_FALSE(a.any_resident(0, 1 << 20));
}

TEST_CASE("offload: a file that cannot be reserved (disk full, file too large) is refused by name") {
  temp_dir dir;
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);  // the failure, not the signal
  rlimit small = old;
  small.rlim_cur = 1 << 20;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  auto layout = std::make_shared<arena_layout>();
  layout->add("big", {1 << 20});  // 4 MiB > 1 MiB
  std::string message;
  try {
    arena<float> a(layout, file_backing{dir.path / "slots", "gpt weights"});
  } catch (const error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  CHECK(message.find("gpt weights offloaded to '" + (dir.path / "slots").string() + "': cannot reserve 4194304 bytes") !=
        std::string::npos);
}

TEST_CASE("offload: the plan of a GPT-3 2.7B-shaped run with offload fits 12 GiB, without it does not") {
  const std::string file = std::string(SPARSELM_SOURCE_DIR) + "/configs/gpt3-2.7b.json";
  const gpt_config c = gpt_config::from_json(read_json_file(file), file);
  REQUIRE(c.n_layer == 32);
  REQUIRE(c.n_embd == 2560);
  const model_shape m = model_shape_of(c);
  plan_inputs in;
  in.batch = 1;
  in.seq = 128;
  in.threads = 2;
  in.recompute_blocks = true;
  const run_plan mem = make_run_plan(m, in);
  in.offload = true;
  const run_plan off = make_run_plan(m, in);
  const double gib = double(1 << 30);
  CHECK(mem.total_bytes() > 24 * gib);  // weights, gradients, Adam's two slots: ~43 GB
  CHECK(off.total_bytes() < 12 * gib);
  // on disk: everything the run in memory holds of them
  CHECK(off.weights_on_disk == doctest::Approx(mem.weights));
  CHECK(off.gradients_on_disk == doctest::Approx(mem.gradients));
  CHECK(off.offloaded == doctest::Approx(mem.optimizer));
  // in memory: the embedding and head, and two of the 32 blocks
  const double per_block = 12.0 * 2560 * 2560 * 4;
  CHECK(off.weights > double(c.vocab_size) * 2560 * 4);
  CHECK(off.weights < double(c.vocab_size + c.n_positions) * 2560 * 4 + 2.5 * per_block);
  in.memory_budget = 12;
  CHECK_NOTHROW(check_memory_budget(m, in, "2.7b"));
  in.offload = false;
  CHECK_THROWS_WITH_AS(check_memory_budget(m, in, "2.7b"), doctest::Contains("--offload DIR keeps the weights"), error);
}

TEST_CASE("offload: a directory that cannot hold the slots is refused by name") {
  CHECK_THROWS_WITH_AS(run("/nonexistent-sparselm-dir"),
                       doctest::Contains("offloaded to '/nonexistent-sparselm-dir': cannot create a file there"), error);
  CHECK_THROWS_WITH_AS(trainer_options::from_json(nlohmann::json{{"offload", ""}}, "run.json trainer"),
                       doctest::Contains("run.json trainer: field 'offload' is empty"), error);
}

}  // namespace SPARSELM_UNITY_ID
