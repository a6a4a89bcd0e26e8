// The LLaMA family against the PyTorch reference (tests/reference/llama_reference.py): logits, loss
// and every parameter gradient for grouped-query attention with an untied head and multi-query
// attention with a tied head; HF LLaMA directories written by the reference load and give its
// logits; export and re-import; cached decoding; bf16 compute; block-sparse gradients.
//
// The committed reference (tests/reference/data/llama_tiny_parity.json) is used when torch is not
// importable; when it is, the script regenerates it first and the committed file must still match.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/parity.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/safetensors.hpp"
#include "sparselm/models/generation.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/testing/layer_check.hpp"

namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

const char* const variants[] = {"gqa_untied", "mqa_tied"};

// Made once per process (the script takes seconds).
const json& reference() {
  static const json r = test::parity_reference("llama_tiny_parity", "llama_reference.py", [](const json& f, const json& c) {
    for (const char* v : variants) {
      CHECK(f["variants"][v]["config"] == c["variants"][v]["config"]);
      CHECK(f["variants"][v]["ids"] == c["variants"][v]["ids"]);
      CHECK_MESSAGE(std::fabs(f["variants"][v]["loss"].get<double>() - c["variants"][v]["loss"].get<double>()) <= 1e-6,
                    "committed reference is stale (" << v << "): regenerate it with tests/reference/llama_reference.py");
    }
  });
  return r;
}

// Our tensor's HF name and whether its HF layout is the transpose of ours (the projections).
std::string hf_name(const std::string& ours) { return ours == "lm_head.weight" ? ours : "model." + ours; }
bool transposed(const tensor_info& t) {
  return t.shape.size() == 2 && t.name != "lm_head.weight" && t.name != "embed_tokens.weight";
}
// values (HF layout, flat) in our layout
template <class V>
std::vector<double> ours_from_hf(const tensor_info& t, const V& hf) {
  std::vector<double> r(hf.size());
  if (!transposed(t)) {
    for (std::size_t i = 0; i < hf.size(); ++i) r[i] = double(hf[i]);
    return r;
  }
  const std::size_t in = t.shape[0], out = t.shape[1];  // ours (in, out), HF (out, in)
  for (std::size_t i = 0; i < in; ++i)
    for (std::size_t o = 0; o < out; ++o) r[i * out + o] = double(hf[o * in + i]);
  return r;
}
template <class Model>
void load_hf_params(Model& m, const json& v) {
  for (const auto& t : *m.layout()) {
    const auto name = hf_name(t.name);
    REQUIRE_MESSAGE(v["params"].contains(name), "reference has no tensor " << name);
    const auto vals = ours_from_hf(t, v["params"][name].template get<std::vector<double>>());
    auto dst = m.params().at(t.name);
    REQUIRE(vals.size() == dst.size());
    for (std::size_t i = 0; i < vals.size(); ++i) dst[i] = float(vals[i]);
  }
  CHECK(v["params"].size() == m.layout()->count());
}
token_batch batch_of(const json& v, std::vector<std::int32_t>& ids, std::vector<std::int32_t>& tg) {
  ids = v["ids"].get<std::vector<std::int32_t>>();
  tg = v["targets"].get<std::vector<std::int32_t>>();
  return {ids, tg, {}, v["batch"].get<std::size_t>(), v["seq"].get<std::size_t>()};
}
template <class Model>
std::vector<float> logits_of(Model& m, const token_batch& b) {
  std::vector<float> out(b.batch * b.seq * m.vocab_size());
  m.logits(b.ids, b.batch, b.seq, matrix_view<float>(out.data(), b.batch * b.seq, m.vocab_size()));
  return out;
}

}  // namespace

TEST_CASE("llama matches PyTorch: logits, loss, every gradient (GQA untied, MQA tied)") {
  const json& r = reference();
  for (const char* vn : variants) {
    const std::string variant = vn;
    CAPTURE(variant);
    const json& v = r["variants"][vn];
    auto cfg = llama_config::from_json(v["config"], "reference config");
    llama<> m(cfg);
    CHECK(m.layout()->find("lm_head.weight").has_value() == !cfg.tie_word_embeddings);
    load_hf_params(m, v);
    std::vector<std::int32_t> ids, tg;
    auto b = batch_of(v, ids, tg);
    const double e_logits = test::rel_err(logits_of(m, b), v["logits"].get<std::vector<double>>());
    CHECK_MESSAGE(e_logits <= 1e-5, "logits relative error " << e_logits);
    m.grads().zero();
    auto st = m.forward_backward({}, b, float(1.0 / b.weight_sum()));
    CHECK(st.mean_loss() == doctest::Approx(v["loss"].get<double>()).epsilon(1e-5));
    double worst = 0;
    for (const auto& t : *m.layout()) {
      const auto ref = ours_from_hf(t, v["grads"][hf_name(t.name)].get<std::vector<double>>());
      const double e = test::rel_err(m.grads().at(t.name), ref);
      CHECK_MESSAGE(e <= 1e-4, t.name << ": gradient relative error " << e);
      worst = std::max(worst, e);
    }
    MESSAGE(variant << ": worst gradient relative error " << worst << ", logits " << e_logits);

    // bf16 compute: the same loss and gradients within bf16 rounding (8 bits of mantissa).
    m.grads().zero();
    step_context s16;
    s16.compute = dtype::bf16;
    auto st16 = m.forward_backward(s16, b, float(1.0 / b.weight_sum()));
    CHECK(st16.mean_loss() == doctest::Approx(v["loss"].get<double>()).epsilon(2e-2));
    for (const auto& t : *m.layout()) {
      const double e = test::rel_err(m.grads().at(t.name), ours_from_hf(t, v["grads"][hf_name(t.name)].get<std::vector<double>>()));
      CHECK_MESSAGE(e <= 0.1, t.name << ": bf16 gradient relative error " << e);
    }

    // cached decoding (4 positions, then 3) gives the logits of the whole sequence
    decoder<llama<>> d(m, b.batch);
    CHECK(d.cache().width() == cfg.kv_heads() * cfg.head_width());
    const auto full = logits_of(m, b);
    const std::size_t V = cfg.vocab_size, T = b.seq;
    for (auto [p0, n] : {std::pair{0ul, 4ul}, {4ul, 3ul}}) {
      std::vector<std::int32_t> chunk;
      for (std::size_t q = 0; q < b.batch; ++q) chunk.insert(chunk.end(), ids.begin() + q * T + p0, ids.begin() + q * T + p0 + n);
      std::vector<float> out(b.batch * n * V);
      d.forward(chunk, n, matrix_view<float>(out.data(), b.batch * n, V));
      for (std::size_t q = 0; q < b.batch; ++q)
        for (std::size_t i = 0; i < n * V; ++i)
          CHECK(out[q * n * V + i] == doctest::Approx(full[(q * T + p0) * V + i]).epsilon(1e-4).scale(1.0));
    }
  }
}

TEST_CASE("llama: HF LLaMA directories written by the reference load and give its logits; export and re-import") {
  const json& r = reference();
  const fs::path dir = SPARSELM_TEST_TMPDIR "/llama_hf";
  const bool torch = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  if (!torch) {
    MESSAGE("torch not importable by /usr/bin/python3: the HF directories are not written; skipping");
    return;
  }
  fs::remove_all(dir);
  const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/llama_reference.py --out " +
                          (dir / "ref.json").string() + " --hf-dir " + dir.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  for (const char* vn : variants) {
    const std::string variant = vn;
    CAPTURE(variant);
    const json& v = r["variants"][vn];
    const auto cfg = llama_config::from_json(read_json_file(dir / vn / "config.json"), "config.json");
    CHECK(cfg.kv_heads() == v["config"]["num_key_value_heads"].get<std::size_t>());
    llama<> m(cfg);
    const auto map = io::hf_llama_map(cfg.tie_word_embeddings);
    const auto rep = io::load_hf(dir / vn, m, map);
    CHECK(rep.tensors == m.layout()->count());
    std::vector<std::int32_t> ids, tg;
    auto b = batch_of(v, ids, tg);
    const auto logits = logits_of(m, b);
    const double e = test::rel_err(logits, v["logits"].get<std::vector<double>>());
    CHECK_MESSAGE(e <= 1e-5, "logits relative error " << e);

    // export: HF names and (out, in) shapes, then a fresh model re-imports the same values
    const fs::path out = dir / (std::string(vn) + "-export");
    io::save_hf(out, m, map);
    io::safetensors_file f(out / "model.safetensors");
    const std::size_t C = cfg.hidden_size, G = cfg.kv_heads() * cfg.head_width();
    CHECK(f.info("model.layers.1.self_attn.k_proj.weight").shape == std::vector<std::size_t>{G, C});
    CHECK(f.info("model.layers.0.mlp.down_proj.weight").shape == std::vector<std::size_t>{C, cfg.intermediate_size});
    CHECK(f.contains("model.norm.weight"));
    CHECK(f.contains("lm_head.weight") == !cfg.tie_word_embeddings);
    const json written = read_json_file(out / "config.json");
    CHECK(written["num_key_value_heads"] == cfg.kv_heads());
    CHECK(written["tie_word_embeddings"] == cfg.tie_word_embeddings);
    // PyTorch computes the same logits from our export
    const fs::path got = dir / (std::string(vn) + "-torch.json");
    const std::string py = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/llama_reference.py --out " +
                           got.string() + " --logits-of " + out.string() + " --variant " + vn + " --ids-from " +
                           (dir / "ref.json").string();
    REQUIRE(std::system(py.c_str()) == 0);
    const double et = test::rel_err(logits, read_json_file(got)["logits"].get<std::vector<double>>());
    CHECK_MESSAGE(et <= 1e-5, "PyTorch on our export: logits relative error " << et);
    llama<> back(llama_config::from_json(written, "exported config.json"));
    io::load_hf(out, back, map);
    for (const auto& t : *m.layout()) {
      auto a = m.params().at(t.name), bb = back.params().at(t.name);
      CHECK_MESSAGE(std::equal(a.begin(), a.end(), bb.begin()), t.name);
    }
  }
}

TEST_CASE("llama: block-sparse projections, gradients by finite differences; bad configs name the field") {
  auto j = read_json_file(SPARSELM_SOURCE_DIR "/configs/llama-tiny.json");
  auto cfg = llama_config::from_json(j, "llama-tiny");
  cfg.initializer_range = 0.3f;  // inputs of the norms well above the finite-difference step
  llama<float, block_sparse<4>> m(cfg, sparse_plan{.sparsity = 0.5});
  m.init(3);
  std::size_t sparse = 0;
  for (auto& w : m.sparse_weights()) sparse += w.name.find("proj") != std::string::npos;
  CHECK(sparse == 7 * cfg.num_hidden_layers);
  std::vector<std::int32_t> ids{1, 5, 9, 2, 33, 60, 7, 8}, tg{5, 9, 2, 33, 60, 7, 8, 1};
  token_batch b{ids, tg, {}, 2, 4};
  auto res = testing::check_model(m, b, {.max_checks = 120});
  CHECK_MESSAGE(res.ok, res.message);

  auto bad = [&](const char* key, json value, const char* want) {
    json k = j;
    k[key] = value;
    CHECK_THROWS_WITH_AS(llama_config::from_json(k, "cfg"), doctest::Contains(want), sparselm::error);
  };
  bad("num_key_value_heads", 3, "'num_attention_heads' (4) is not divisible by 'num_key_value_heads' (3)");
  bad("hidden_size", 12, "'head_dim' (3");
  bad("hidden_act", "gelu", "'hidden_act'");
  bad("rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}, "'rope_scaling'");
  bad("pretraining_tp", 2, "'pretraining_tp'");
}

}  // namespace SPARSELM_UNITY_ID
