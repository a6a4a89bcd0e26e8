// The model families of train/registry.hpp on checkpoints: with_checkpoint builds the model a
// checkpoint directory holds, with each block-sparse weight's block count from the file, so that
// a block-sparse BERT or GPT of a non-uniform allocation loads (with_model alone, from the
// config's uniform plan, cannot); a dense BERT loads as bert<>; a model type outside a program's
// family list, and a config whose block size is not the file's, are errors naming them.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../common/scratch.hpp"
#include "../common/tiny_bert.hpp"
#include "../common/tiny_gpt.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/train/registry.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

// Block counts that no uniform plan gives: the attention's QKV projection 6 blocks, the others 2.
sparse_plan uneven() {
  sparse_plan p{0.5};
  p.count = [](const std::string& name, std::size_t, std::size_t) -> std::size_t {
    return name.find("c_attn") != std::string::npos ? 6 : 2;
  };
  return p;
}

struct loaded {
  std::size_t block = 0;
  std::string family;
  std::vector<float> params;
};

// The model Family::make builds from spec, initialised and loaded from dir.
template <class Model, class Family, class Spec>
loaded load(const fs::path& dir, const Spec& spec) {
  Model m = Family::template make<Model>(spec);
  if constexpr (Model::sparsity::is_sparse) m.init(0);  // sizes the patterns that loading restores
  io::load_pretrained(dir, m, std::string(Family::name) == "bert" ? io::hf_bert_map() : io::hf_gpt2_map());
  return {m.plan().block, std::string(Family::name), test::param_snapshot(m)};
}

using bert_only = registry::type_list<registry::bert_family>;
using gpt_only = registry::type_list<registry::gpt_family>;

loaded bert_checkpoint(const fs::path& dir) {
  return registry::with_checkpoint<registry::all_activations, bert_only>(
      dir, [&]<class Model, class Family>(const auto& spec) { return load<Model, Family>(dir, spec); });
}

}  // namespace

TEST_CASE("BERT family: a block-sparse checkpoint of uneven block counts loads through with_checkpoint") {
  const fs::path dir = test::fresh_dir("train", "registry_bert_sparse");
  bert<float, block_sparse<4>> m(test::tiny_bert_config(), uneven());
  m.init(3);
  io::save_model(dir, m);
  const loaded got = bert_checkpoint(dir);
  CHECK(got.family == "bert");
  CHECK(got.block == 4);
  CHECK(got.params == test::param_snapshot(m));
  // The config alone gives every weight the uniform count of sparsity 0.5 (96 blocks for c_attn):
  // the file's do not fit.
  CHECK_THROWS_WITH_AS((registry::with_model<registry::all_activations, bert_only>(
                           io::read_model_config(dir), "cfg",
                           [&]<class Model, class Family>(const auto& spec) { return load<Model, Family>(dir, spec); })),
                       doctest::Contains("c_attn.weight.pattern' has shape [6, 2]"), error);
  // A config whose block size is not the file's.
  json j = io::read_model_config(dir);
  j["sparselm"]["block_size"] = 8;
  test::spit(dir / io::config_file, j.dump());
  CHECK_THROWS_WITH_AS(bert_checkpoint(dir), doctest::Contains("block size is 8"), error);
}

TEST_CASE("BERT family: a dense checkpoint loads as bert<>; a type outside the program's families is named") {
  const fs::path dir = test::fresh_dir("train", "registry_bert_dense");
  bert<> m(test::tiny_bert_config());
  m.init(4);
  io::save_model(dir, m);
  const loaded got = bert_checkpoint(dir);
  CHECK(got.block == 0);
  CHECK(got.params == test::param_snapshot(m));
  CHECK_THROWS_WITH_AS((registry::with_checkpoint<registry::all_activations, gpt_only>(
                           dir, [&]<class Model, class Family>(const auto& spec) { return load<Model, Family>(dir, spec); })),
                       doctest::Contains("model_type 'bert' is not one of: gpt2"), error);
}

TEST_CASE("GPT family: a block-sparse checkpoint of ERK allocation loads through with_checkpoint") {
  const fs::path dir = test::fresh_dir("train", "registry_gpt_erk");
  const gpt_config cfg = test::small_gpt_config();
  const sparse_plan erk = allocate_plan(sparse_plan{0.5}, 4, sparse::allocation::erk,
                                        [&](const sparse_plan& p) { gpt<float, block_sparse<4>> probe(cfg, p); });
  gpt<float, block_sparse<4>> m(cfg, erk);
  m.init(6);
  io::save_model(dir, m);
  const loaded got = registry::with_checkpoint<registry::training_activations, gpt_only>(
      dir, [&]<class Model, class Family>(const auto& spec) { return load<Model, Family>(dir, spec); });
  CHECK(got.family == "gpt2");
  CHECK(got.block == 4);
  CHECK(got.params == test::param_snapshot(m));
}

}  // namespace SPARSELM_UNITY_ID
