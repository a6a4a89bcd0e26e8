// Offloaded optimiser state (trainer_options::offload): the optimiser keeps its slots in unnamed
// files in a directory and pages them in per segment of the update. The same steps give the same
// weights bit for bit as slots in memory; a training state saved from offloaded slots resumes a
// run in memory exactly, and the other way round; a directory that cannot hold them is refused by
// name before the first step.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/tiny_gpt.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/optim/adam.hpp"
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
  explicit run(const std::string& offload)
      : model(test::small_gpt_config(), sparse_plan{.sparsity = 0.5}),
        t(model, options(offload), optim::adamw<>(), optim::make_schedule({{"type", "constant"}, {"lr", 1e-2}})) {
    model.init(5);
  }
  static trainer_options options(const std::string& offload) {
    trainer_options o;
    o.offload = offload;
    return o;
  }
  void steps(std::size_t from, std::size_t to) {
    for (std::size_t s = from; s < to; ++s) {
      std::vector<std::int32_t> ids, targets;
      for (std::size_t i = 0; i < 2 * 16; ++i) {
        ids.push_back(std::int32_t((i * 7 + s * 3) % 64));
        targets.push_back(std::int32_t((i * 5 + s) % 64));
      }
      const std::vector<token_batch> micro{{ids, targets, {}, 2, 16}};
      t.train_step(micro);
    }
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

TEST_CASE("offload: a directory that cannot hold the slots is refused by name") {
  CHECK_THROWS_WITH_AS(run("/nonexistent-sparselm-dir"),
                       doctest::Contains("offloaded to '/nonexistent-sparselm-dir': cannot create a file there"), error);
  CHECK_THROWS_WITH_AS(trainer_options::from_json(nlohmann::json{{"offload", ""}}, "run.json trainer"),
                       doctest::Contains("run.json trainer: field 'offload' is empty"), error);
}

}  // namespace SPARSELM_UNITY_ID
