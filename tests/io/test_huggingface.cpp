// HuggingFace checkpoints (io/huggingface.hpp, the HF keys of bert_config / gpt_config) against
// files shaped as transformers' save_pretrained writes them, made by an independent script
// (tests/reference/hf_reference.py, PyTorch references): load → the reference's loss; export →
// reload equal, and the script reads our export and gets the same loss; bad files and configs are
// errors naming the tensor or key.
//
// The committed files (tests/reference/data/hf) are used when torch is not importable; when it is,
// the script writes them afresh first and the test also checks the committed losses are current.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../common/errors.hpp"
#include "../common/parity.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/sparse/sparsity.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

bool torch_available() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

// The directory of HF-shaped variants (fresh when torch is importable, else committed).
const fs::path& data_dir() {
  static const fs::path dir = [] {
    const fs::path committed = SPARSELM_SOURCE_DIR "/tests/reference/data/hf";
    if (!torch_available()) {
      MESSAGE("torch not importable by /usr/bin/python3: using the committed files in " << committed.string());
      return committed;
    }
    const fs::path fresh = SPARSELM_TEST_TMPDIR "/hf_reference";
    fs::remove_all(fresh);
    const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/hf_reference.py --out-dir " +
                            fresh.string();
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "reference script failed: " << cmd);
    const json f = test::load_reference((fresh / "expected.json").string());
    const json c = test::load_reference((committed / "expected.json").string());
    for (const char* k : {"bert_pretraining", "bert_legacy_f16", "gpt2_lmhead", "gpt2_legacy_f16", "gpt2_hub_bf16"})
      for (auto& [field, v] : f[k].items())
        CHECK_MESSAGE(std::fabs(v.get<double>() - c[k][field].get<double>()) <= 1e-6,
                      "committed tests/reference/data/hf is stale (" << k << "." << field
                                                                      << "): regenerate it with hf_reference.py");
    return fresh;
  }();
  return dir;
}
const json& expected() {
  static const json e = test::load_reference((data_dir() / "expected.json").string());
  return e;
}

struct bert_data {
  std::vector<std::int32_t> ids, types, lengths, positions, labels, nsp;
  std::size_t B = 0, T = 0;
  bert_batch view() const { return {ids, types, lengths, positions, labels, nsp, B, T}; }
};
bert_data bert_batch_of(const json& e) {
  const json& b = e["bert_batch"];
  auto v = [&](const char* k) { return b[k].get<std::vector<std::int32_t>>(); };
  return {v("ids"), v("token_types"), v("lengths"), v("masked_positions"), v("masked_labels"), v("nsp_labels"),
          e["bert_B"].get<std::size_t>(), e["bert_T"].get<std::size_t>()};
}
struct gpt_data {
  std::vector<std::int32_t> ids, targets;
  std::size_t B = 0, T = 0;
  token_batch view() const { return {ids, targets, {}, B, T}; }
};
gpt_data gpt_batch_of(const json& e) {
  return {e["gpt2_ids"].get<std::vector<std::int32_t>>(), e["gpt2_targets"].get<std::vector<std::int32_t>>(),
          e["gpt2_B"].get<std::size_t>(), e["gpt2_T"].get<std::size_t>()};
}

bert_config bert_config_of(const fs::path& dir) {
  return bert_config::from_json(io::read_model_config(dir), (dir / "config.json").string());
}
gpt_config gpt_config_of(const fs::path& dir) {
  return gpt_config::from_json(io::read_model_config(dir), (dir / "config.json").string());
}

void check_bert_loss(bert<>& m, const json& want, double tol = 1e-5) {
  const auto st = m.evaluate(bert_batch_of(expected()).view());
  CHECK(st.ce_sum / double(st.count) == doctest::Approx(want["mlm_loss"].get<double>()).epsilon(tol));
  CHECK(st.aux_mean_loss() == doctest::Approx(want["nsp_loss"].get<double>()).epsilon(tol));
}
double gpt_loss(gpt<>& m) { return m.evaluate(gpt_batch_of(expected()).view()).mean_loss(); }

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The file's tensors, edited, written as a new HF directory (the config copied).
void rewrite(const fs::path& from, const fs::path& to,
             const std::function<bool(const io::st_tensor_info&)>& keep,
             const std::function<void(io::safetensors_writer&)>& add = {}) {
  io::safetensors_file f(from / "model.safetensors");
  io::safetensors_writer w;
  w.set_checksums(false);
  for (auto& t : f.tensors())
    if (keep(t)) w.add(t.name, t.dtype, t.shape, f.bytes(t).data());
  if (add) add(w);
  fs::create_directories(to);
  w.write(to / "model.safetensors");
  fs::copy_file(from / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
}

// The loss the reference script computes for an HF directory (our export), or NaN without torch.
json python_loss_of(const fs::path& dir, const char* kind) {
  if (!torch_available()) return nullptr;
  const fs::path out = dir / "python_loss.json";
  const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/hf_reference.py --loss-of " +
                          dir.string() + " --kind " + kind + " --expected " + (data_dir() / "expected.json").string() +
                          " --out " + out.string();
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "reference script failed: " << cmd);
  return test::load_reference(out.string());
}

}  // namespace

TEST_CASE("HF BERT (BertForPreTraining, current transformers) loads and gives the reference's losses") {
  const fs::path dir = data_dir() / "bert_pretraining";
  bert<> m(bert_config_of(dir));
  m.init(3);
  const auto r = io::load_hf(dir, m, io::hf_bert_map());
  MESSAGE(r.summary());
  CHECK(r.prefix == "bert.");
  CHECK(r.tensors == m.layout()->count());
  CHECK(r.absent_groups.empty());
  CHECK((r.loaded("pooler") && r.loaded("mlm") && r.loaded("nsp")));
  CHECK(r.dtypes.at("F32") > 0);
  check_bert_loss(m, expected()["bert_pretraining"]);
  // load_pretrained tells an HF directory from ours
  bert<> again(bert_config_of(dir));
  CHECK(io::load_pretrained(dir, again, io::hf_bert_map()).format == "huggingface");
}

TEST_CASE("HF BERT in the older layout (gamma/beta, position_ids, tied decoder copies), F16") {
  const fs::path dir = data_dir() / "bert_legacy_f16";
  bert<> m(bert_config_of(dir));
  m.init(3);
  const auto r = io::load_hf(dir, m, io::hf_bert_map());
  MESSAGE(r.summary());
  CHECK(r.dtypes.size() == 1);
  CHECK(r.dtypes.count("F16") == 1);
  CHECK(has(r.ignored, "bert.embeddings.position_ids"));
  CHECK(has(r.ignored, "cls.predictions.decoder.weight"));
  CHECK(has(r.ignored, "cls.predictions.decoder.bias"));
  check_bert_loss(m, expected()["bert_legacy_f16"]);
}

TEST_CASE("HF BertModel alone (no prefix, BF16): encoder loaded, pre-training heads reported absent") {
  const fs::path dir = data_dir() / "bert_model_bf16";
  bert<> m(bert_config_of(dir));
  m.init(3);
  const auto before = m.params().clone();
  const auto r = io::load_hf(dir, m, io::hf_bert_map());
  MESSAGE(r.summary());
  CHECK(r.prefix.empty());
  CHECK(r.loaded("pooler"));
  CHECK(r.absent_group("mlm"));
  CHECK(r.absent_group("nsp"));
  CHECK(has(r.absent, "cls.predictions.bias"));
  CHECK(has(r.absent, "cls.seq_relationship.weight"));
  // absent heads keep their initial values
  for (const char* n : {"cls.predictions.transform.dense.weight", "cls.seq_relationship.weight"}) {
    std::span<const float> a = m.params().at(n), b = before.at(n);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
  }
  // the encoder is the reference's: its output at every position
  const auto b = bert_batch_of(expected());
  const auto x = m.hidden(b.view());
  double sum = 0;  // over the valid (unpadded) positions
  for (std::size_t i = 0; i < x.rows; ++i)
    if (std::int32_t(i % b.T) < b.lengths[i / b.T])
      for (std::size_t j = 0; j < x.cols; ++j) sum += x.row(i)[j];
  const json& want = expected()["bert_model_bf16"];
  CHECK(sum == doctest::Approx(want["sequence_output_sum"].get<double>()).epsilon(1e-4));
  const auto cls = want["cls_output"].get<std::vector<double>>();
  REQUIRE(cls.size() == x.cols);
  for (std::size_t j = 0; j < x.cols; ++j) CHECK(x.row(0)[j] == doctest::Approx(cls[j]).epsilon(1e-4));
  // heads required: absence is an error naming the head
  bert<> strict(bert_config_of(dir));
  CHECK_THROWS_WITH_AS(io::load_hf(dir, strict, io::hf_bert_map(), {.require_heads = true}),
                       doctest::Contains("head 'mlm' is not in the file"), error);
}

TEST_CASE("HF GPT-2 files (current, 4.2x with BOOL masks and lm_head, hub layout; F32/F16/BF16) load") {
  for (const char* name : {"gpt2_lmhead", "gpt2_legacy_f16", "gpt2_hub_bf16"}) {
    CAPTURE(name);
    const fs::path dir = data_dir() / name;
    const auto cfg = gpt_config_of(dir);
    CHECK(cfg.vocab_size == 64);  // padded past the ids in use
    gpt<> m(cfg);
    m.init(3);
    const auto r = io::load_pretrained(dir, m, io::hf_gpt2_map());
    MESSAGE(r.summary());
    CHECK(r.format == "huggingface");
    CHECK(r.tensors == m.layout()->count());
    CHECK(gpt_loss(m) == doctest::Approx(expected()[name]["loss"].get<double>()).epsilon(1e-5));
  }
  gpt<> m(gpt_config_of(data_dir() / "gpt2_legacy_f16"));
  const auto r = io::load_hf(data_dir() / "gpt2_legacy_f16", m, io::hf_gpt2_map());
  CHECK(r.prefix == "transformer.");
  CHECK(has(r.ignored, "lm_head.weight"));
  CHECK(has(r.ignored, "transformer.h.1.attn.bias"));
  CHECK(has(r.ignored, "transformer.h.0.attn.masked_bias"));
}

TEST_CASE("BERT export in HF layout: reloads bit for bit, and the reference reads it") {
  const fs::path dir = data_dir() / "bert_pretraining", out = SPARSELM_TEST_TMPDIR "/hf_export_bert";
  fs::remove_all(out);
  bert<> m(bert_config_of(dir));
  io::load_hf(dir, m, io::hf_bert_map());
  io::save_hf(out, m, io::hf_bert_map());
  {  // the names, shapes and dtypes BertForPreTraining writes
    io::safetensors_file f(out / "model.safetensors");
    CHECK(f.info("bert.encoder.layer.1.attention.self.value.weight").shape == std::vector<std::size_t>{16, 16});
    CHECK(f.info("bert.encoder.layer.0.intermediate.dense.weight").shape == std::vector<std::size_t>{24, 16});
    CHECK(f.info("cls.seq_relationship.weight").shape == std::vector<std::size_t>{2, 16});
    CHECK(f.info("bert.embeddings.word_embeddings.weight").dtype == io::st_dtype::f32);
    CHECK(!f.contains("cls.predictions.decoder.weight"));
    // byte-identical tensors to the file they came from
    io::safetensors_file src(dir / "model.safetensors");
    CHECK(f.tensors().size() == src.tensors().size());
    for (auto& t : src.tensors()) {
      CAPTURE(t.name);
      REQUIRE(f.contains(t.name));
      const auto a = f.bytes(f.info(t.name)), b = src.bytes(t);
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
  }
  const json cfg = io::read_model_config(out);
  CHECK(cfg["model_type"] == "bert");
  bert<> back(bert_config_of(out));
  const auto r = io::load_pretrained(out, back, io::hf_bert_map());
  CHECK(r.format == "huggingface");
  for (std::size_t i = 0; i < m.layout()->count(); ++i) {
    auto a = m.params()[i], b = back.params()[i];
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin()), (*m.layout())[i].name);
  }
  check_bert_loss(back, expected()["bert_pretraining"]);
  if (const json p = python_loss_of(out, "bert"); !p.is_null()) {
    CHECK(p["mlm_loss"].get<double>() == doctest::Approx(expected()["bert_pretraining"]["mlm_loss"].get<double>()).epsilon(1e-6));
    CHECK(p["nsp_loss"].get<double>() == doctest::Approx(expected()["bert_pretraining"]["nsp_loss"].get<double>()).epsilon(1e-6));
  }
}

TEST_CASE("GPT-2 export in HF layout: transformer.-prefixed, reloads equal, the reference reads it") {
  const fs::path dir = data_dir() / "gpt2_lmhead", out = SPARSELM_TEST_TMPDIR "/hf_export_gpt2";
  fs::remove_all(out);
  gpt<> m(gpt_config_of(dir));
  io::load_hf(dir, m, io::hf_gpt2_map());
  io::save_hf(out, m, io::hf_gpt2_map());
  io::safetensors_file f(out / "model.safetensors");
  CHECK(f.contains("transformer.h.0.attn.c_attn.weight"));
  CHECK(f.info("transformer.h.0.mlp.c_fc.weight").shape == std::vector<std::size_t>{16, 64});  // Conv1D (in, out)
  CHECK(!f.contains("lm_head.weight"));
  gpt<> back(gpt_config_of(out));
  io::load_pretrained(out, back, io::hf_gpt2_map());
  for (std::size_t i = 0; i < m.layout()->count(); ++i) {
    auto a = m.params()[i], b = back.params()[i];
    CHECK_MESSAGE(std::equal(a.begin(), a.end(), b.begin()), (*m.layout())[i].name);
  }
  CHECK(gpt_loss(back) == doctest::Approx(expected()["gpt2_lmhead"]["loss"].get<double>()).epsilon(1e-5));
  if (const json p = python_loss_of(out, "gpt2"); !p.is_null())
    CHECK(p["loss"].get<double>() == doctest::Approx(expected()["gpt2_lmhead"]["loss"].get<double>()).epsilon(1e-6));
  // our own checkpoint of the same model loads through load_pretrained too
  io::save_model(SPARSELM_TEST_TMPDIR "/hf_ours_gpt2", m);
  gpt<> ours(gpt_config_of(out));
  CHECK(io::load_pretrained(SPARSELM_TEST_TMPDIR "/hf_ours_gpt2", ours, io::hf_gpt2_map()).format == "sparselm");
}

TEST_CASE("HF files with missing, unexpected, misshapen or untied tensors are errors naming them") {
  const fs::path src = data_dir() / "bert_pretraining", tmp = SPARSELM_TEST_TMPDIR "/hf_bad";
  fs::remove_all(tmp);
  const auto cfg = bert_config_of(src);
  auto named = [](std::string n) { return [n](const io::st_tensor_info& t) { return t.name != n; }; };

  rewrite(src, tmp / "missing", named("bert.encoder.layer.1.attention.self.key.weight"));
  bert<> m(cfg);
  CHECK_THROWS_WITH_AS(io::load_hf(tmp / "missing", m, io::hf_bert_map()),
                       doctest::Contains("missing tensor 'encoder.layer.1.attention.self.key.weight'"), error);

  rewrite(src, tmp / "partial_head", named("cls.seq_relationship.bias"));
  CHECK_THROWS_WITH_AS(io::load_hf(tmp / "partial_head", m, io::hf_bert_map()),
                       doctest::Contains("head 'nsp' is incomplete: missing 'cls.seq_relationship.bias'"), error);

  std::vector<float> extra(16, 0.5f);
  rewrite(src, tmp / "unexpected", [](auto&) { return true; }, [&](io::safetensors_writer& w) {
    w.add("bert.encoder.layer.0.attention.self.rotary.weight", {16}, std::span<const float>(extra));
  });
  CHECK_THROWS_WITH_AS(io::load_hf(tmp / "unexpected", m, io::hf_bert_map()),
                       doctest::Contains("'bert.encoder.layer.0.attention.self.rotary.weight' not part of this model"),
                       error);
  const auto r = io::load_hf(tmp / "unexpected", m, io::hf_bert_map(), {.skip_unexpected = true});
  CHECK(r.skipped == std::vector<std::string>{"bert.encoder.layer.0.attention.self.rotary.weight"});
  CHECK(r.summary().find("1 unexpected tensors skipped") != std::string::npos);

  std::vector<float> narrow(16 * 8, 0.1f);
  rewrite(src, tmp / "shape", named("bert.encoder.layer.0.attention.self.query.weight"), [&](io::safetensors_writer& w) {
    w.add("bert.encoder.layer.0.attention.self.query.weight", {16, 8}, std::span<const float>(narrow));
  });
  CHECK_THROWS_WITH_AS(io::load_hf(tmp / "shape", m, io::hf_bert_map()),
                       doctest::Contains("'bert.encoder.layer.0.attention.self.query.weight' has shape [16, 8], "
                                         "expected [16, 16]"),
                       error);

  // a sequence classifier's head is not part of bert<>: reported unused, as transformers does
  std::vector<float> cw(3 * 16, 0.1f), cb(3, 0.0f);
  rewrite(src, tmp / "classifier", [](auto&) { return true; }, [&](io::safetensors_writer& w) {
    w.add("classifier.weight", {3, 16}, std::span<const float>(cw));
    w.add("classifier.bias", {3}, std::span<const float>(cb));
  });
  const auto rc = io::load_hf(tmp / "classifier", m, io::hf_bert_map());
  CHECK(has(rc.unused, "classifier.weight"));
  CHECK(has(rc.unused, "classifier.bias"));

  // a model with more layers than the file
  auto deeper = cfg;
  deeper.num_hidden_layers = 3;
  bert<> d(deeper);
  CHECK_THROWS_WITH_AS(io::load_hf(src, d, io::hf_bert_map()), doctest::Contains("encoder.layer.2."), error);

  // an untied GPT-2 output layer
  const fs::path g = data_dir() / "gpt2_lmhead";
  std::vector<float> head(64 * 16, 0.25f);
  rewrite(g, tmp / "untied", [](auto&) { return true; }, [&](io::safetensors_writer& w) {
    w.add("lm_head.weight", {64, 16}, std::span<const float>(head));
  });
  gpt<> gm(gpt_config_of(g));
  CHECK_THROWS_WITH_AS(io::load_hf(tmp / "untied", gm, io::hf_gpt2_map()),
                       doctest::Contains("'lm_head.weight' differs from 'wte.weight'"), error);

  // HF files are dense: a block-sparse model is refused
  gpt<float, block_sparse<8>> sparse(gpt_config_of(g), sparse_plan{.sparsity = 0.5});
  CHECK_THROWS_WITH_AS(io::load_hf(g, sparse, io::hf_gpt2_map()), doctest::Contains("is block-sparse"), error);
}

TEST_CASE("HF configs: every key transformers writes is accepted; keys that change the model are refused") {
  const json bert_j = io::read_model_config(data_dir() / "bert_model_bf16");  // labels, task, generic keys
  CHECK_NOTHROW(bert_config::from_json(bert_j, "bert"));
  auto refuses_bert = [&](const char* key, json v, const char* msg) {
    json j = bert_j;
    j[key] = v;
    CHECK_THROWS_WITH_AS(bert_config::from_json(j, "cfg"), doctest::Contains(msg), error);
  };
  refuses_bert("position_embedding_type", "relative_key", "field 'position_embedding_type' must be 'absolute'");
  refuses_bert("hidden_act", "relu", "field 'hidden_act' must be one of gelu, got 'relu'");
  refuses_bert("is_decoder", true, "field 'is_decoder' must be false");
  refuses_bert("add_cross_attention", true, "field 'add_cross_attention' must be false");
  refuses_bert("tie_word_embeddings", false, "field 'tie_word_embeddings' must be true");
  refuses_bert("pruned_heads", json{{"0", {1}}}, "field 'pruned_heads' must be empty");
  refuses_bert("rotary_dim", 4, "unknown field 'rotary_dim'");

  const json gpt_j = io::read_model_config(data_dir() / "gpt2_lmhead");
  CHECK_NOTHROW(gpt_config::from_json(gpt_j, "gpt2"));
  auto with = [&](const char* key, json v) {
    json j = gpt_j;
    j[key] = v;
    return j;
  };
  CHECK(gpt_config::from_json(with("reorder_and_upcast_attn", true), "g").n_layer == 2);  // same maths in fp32
  CHECK(gpt_config::from_json(with("activation_function", "gelu_pytorch_tanh"), "g").activation_function == "gelu_new");
  CHECK(gpt_config::from_json(with("n_inner", 48), "g").hidden() == 48);
  auto refuses_gpt = [&](const char* key, json v, const char* msg) {
    CHECK_THROWS_WITH_AS(gpt_config::from_json(with(key, v), "cfg"), doctest::Contains(msg), error);
  };
  refuses_gpt("scale_attn_by_inverse_layer_idx", true, "field 'scale_attn_by_inverse_layer_idx' must be false");
  refuses_gpt("scale_attn_weights", false, "field 'scale_attn_weights' must be true");
  refuses_gpt("activation_function", "relu", "field 'activation_function' must be one of");
  refuses_gpt("add_cross_attention", true, "field 'add_cross_attention' must be false");
  refuses_gpt("n_ctx", 32, "field 'n_ctx' (32) differs from 'n_positions'");
}

}  // namespace SPARSELM_UNITY_ID
