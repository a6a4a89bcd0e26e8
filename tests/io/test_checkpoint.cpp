// Checkpoints: the safetensors container (against hand-built bytes, and every kind of bad file),
// model save/load (dense, block-sparse, dense export), training state and exact resume (dense GPT
// with dropout; block-sparse GPT with RigL pattern updates on both sides of the checkpoint), and the
// numbered checkpoint directory of a run.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sparselm/data/lm_batches.hpp"
#include "sparselm/data/token_file.hpp"
#include "../common/scratch.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/lm_training.hpp"
#include "sparselm/train/trainer.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {
using test::slurp;
using test::spit;
fs::path io_dir(const std::string& name) { return test::fresh_dir("io", name); }

// A safetensors file built by hand: length prefix, header text, data bytes.
std::string st_bytes(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((std::uint64_t(header.size()) >> (8 * i)) & 0xff);
  return s + header + data;
}
std::string float_bytes(std::initializer_list<float> v) {
  std::string s;
  for (float x : v) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}

gpt_config tiny(float dropout = 0.0f) {
  auto c = gpt_config::from_json(read_json_file(SPARSELM_SOURCE_DIR "/configs/gpt-tiny.json"), "gpt-tiny");
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = dropout;
  return c;
}
}  // namespace

TEST_CASE("safetensors: reads a file built by hand, metadata and all dtypes") {
  auto d = io_dir("hand");
  // a (2,2) F32, an I32 (3), a BF16 (2): 1.0 = 0x3F80, -2.0 = 0xC000
  std::string data = float_bytes({1, 2, 3, 4});
  const std::int32_t ints[3] = {7, -1, 42};
  data.append(reinterpret_cast<const char*>(ints), 12);
  data += std::string("\x80\x3f\x00\xc0", 4);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("ids":{"dtype":"I32","shape":[3],"data_offsets":[16,28]},"h":{"dtype":"BF16","shape":[2],"data_offsets":[28,32]}})";
  spit(d / "a.safetensors", st_bytes(header, data));
  io::safetensors_file f(d / "a.safetensors");
  CHECK(f.metadata("format") == "pt");
  CHECK(f.tensors().size() == 3);
  std::vector<float> w(4), h(2);
  f.read_f32("w", {2, 2}, w);
  CHECK(w == std::vector<float>{1, 2, 3, 4});
  f.read_f32("h", {2}, h);
  CHECK(h == std::vector<float>{1.0f, -2.0f});
  CHECK(f.read_i32("ids", {3}) == std::vector<std::int32_t>{7, -1, 42});
  CHECK_THROWS_WITH_AS(f.read_f32("w", {4}, w), doctest::Contains("'w' has shape [2, 2], expected [4]"), error);
  CHECK_THROWS_WITH_AS(f.read_f32("nope", {}, w), doctest::Contains("no tensor named 'nope'"), error);
  CHECK_THROWS_WITH_AS(f.read_i32("w"), doctest::Contains("expected I32"), error);
  CHECK_THROWS_WITH_AS(f.metadata("missing"), doctest::Contains("'missing'"), error);
}

TEST_CASE("safetensors: writer output is the documented layout and round-trips") {
  auto d = io_dir("write");
  std::vector<float> a = {1.5f, -2.0f, 0.25f, 8.0f, 9.0f, 10.0f};
  std::vector<std::int32_t> b = {3, 1, 4};
  std::vector<bf16> c = {bf16(1.0f), bf16(-0.5f)};
  io::safetensors_writer w;
  w.add("a", {2, 3}, std::span<const float>(a));
  w.add("b", {3}, std::span<const std::int32_t>(b));
  w.add("c", io::st_dtype::bf16, {2}, c.data());
  w.set_metadata("k", "v");
  w.write(d / "x.safetensors");
  const std::string bytes = slurp(d / "x.safetensors");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  CHECK(n % 8 == 0);  // data section 8-byte aligned
  CHECK(bytes.size() == 8 + n + 24 + 12 + 4);
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(h["a"]["dtype"] == "F32");
  CHECK(h["a"]["data_offsets"] == nlohmann::json({0, 24}));
  CHECK(h["c"]["dtype"] == "BF16");
  CHECK(h["__metadata__"]["k"] == "v");
  CHECK(std::memcmp(bytes.data() + 8 + n, a.data(), 24) == 0);
  io::safetensors_file f(d / "x.safetensors");
  std::vector<float> a2(6);
  f.read_f32("a", {2, 3}, a2);
  CHECK(a2 == a);
  std::vector<bf16> c2(2);
  f.read_as<bf16>("c", {2}, c2);
  CHECK(float(c2[1]) == -0.5f);
  std::vector<half> h2(2);
  CHECK_THROWS_WITH_AS(f.read_as<half>("c", {2}, h2), doctest::Contains("'c' has dtype BF16, expected F16 or F32"),
                       error);
  CHECK_THROWS_WITH_AS(f.read_f32("c", {3}, std::span<float>(a2).subspan(0, 3)),
                       doctest::Contains("'c' has shape [2], expected [3]"), error);
  CHECK_THROWS_WITH_AS(w.add("a", {1}, std::span<const float>(a).subspan(0, 1)), doctest::Contains("added twice"),
                       error);
  // no temporary files left behind
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("safetensors: bad files are errors naming the file and the problem") {
  auto d = io_dir("bad");
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = st_bytes(good_header, float_bytes({1, 2}));
  auto expect = [&](const std::string& bytes, const char* what) {
    spit(d / "f.safetensors", bytes);
    CHECK_THROWS_WITH_AS(io::safetensors_file(d / "f.safetensors"), doctest::Contains(what), error);
  };
  expect("", "truncated");
  expect(good.substr(0, 5), "truncated");
  expect(good.substr(0, 20), "truncated");                    // header cut
  expect(good.substr(0, good.size() - 3), "outside the");     // data cut
  expect(st_bytes("{not json", ""), "not valid JSON");
  expect(st_bytes("[1,2]", ""), "not a JSON object");
  expect(st_bytes(R"({"w":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", float_bytes({1, 2})), "unsupported dtype");
  expect(st_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", float_bytes({1, 2})), "8 bytes for shape [3]");
  expect(st_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", float_bytes({1, 2})), "non-integer");
  expect(st_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", float_bytes({1, 2})), "needs dtype, shape and data_offsets");
  expect(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  float_bytes({1, 2})),
         "overlap");
  std::string huge(8, '\xff');
  expect(huge + "xxxx", "implausible");
  CHECK_THROWS_WITH_AS(io::safetensors_file(d / "does-not-exist.safetensors"), doctest::Contains("does-not-exist"),
                       error);
}

TEST_CASE("atomic_write: a failing writer leaves the old file untouched") {
  auto d = io_dir("atomic");
  io::atomic_write_text(d / "f.txt", "old\n");
  CHECK_THROWS_AS(io::atomic_write(d / "f.txt", [](std::FILE* f) {
                    std::fputs("half of the new", f);
                    fail("disk full (simulated)");
                  }),
                  error);
  CHECK(slurp(d / "f.txt") == "old\n");
  std::size_t files = 0;
  for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("checkpoint: dense GPT save/load round trip and mismatch errors") {
  auto d = io_dir("gpt");
  gpt<> a(tiny());
  a.init(11);
  io::save_model(d / "ck", a);
  CHECK(fs::exists(d / "ck" / "config.json"));
  auto cfg = gpt_config::from_json(io::read_model_config(d / "ck"), "config.json");
  CHECK(cfg.n_embd == 16);
  gpt<> b(cfg);
  b.init(99);
  io::load_model(d / "ck", b);
  CHECK(std::memcmp(a.params().all().data(), b.params().all().data(), a.params().all().size() * 4) == 0);

  // HF names in the file
  io::safetensors_file f(d / "ck" / "model.safetensors");
  for (const char* n : {"wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_proj.bias", "ln_f.weight"})
    CHECK_MESSAGE(f.contains(n), n);
  CHECK(f.info("h.0.attn.c_attn.weight").shape == std::vector<std::size_t>{16, 48});  // Conv1D (in, out)

  auto other = tiny();
  other.n_embd = 32;
  gpt<> c(other);
  CHECK_THROWS_WITH_AS(io::load_model(d / "ck", c), doctest::Contains("'wte.weight' has shape [61, 16], expected [61, 32]"),
                       error);
  auto deeper = tiny();
  deeper.n_layer = 3;
  gpt<> e(deeper);
  CHECK_THROWS_WITH_AS(io::load_model(d / "ck", e), doctest::Contains("missing tensor 'h.2."), error);
  auto shallower = tiny();
  shallower.n_layer = 1;
  gpt<> g(shallower);
  CHECK_THROWS_WITH_AS(io::load_model(d / "ck", g), doctest::Contains("tensors the model does not have: 'h.1."), error);
  CHECK_THROWS_WITH_AS(io::load_model(d / "nowhere", b), doctest::Contains("nowhere"), error);
}

TEST_CASE("checkpoint: block-sparse GPT keeps its patterns; dense export loads into the dense model") {
  auto d = io_dir("sparse");
  using sparse_gpt = gpt<float, block_sparse<4>>;
  sparse_gpt a(tiny(), sparse_plan{0.5});
  a.init(3);
  io::save_model(d / "ck", a);
  auto j = io::read_model_config(d / "ck");
  CHECK(j["sparselm"]["block_size"] == 4);
  sparse_gpt b(gpt_config::from_json(j), sparse_plan{0.5});
  b.init(77);  // other patterns, other values
  io::load_model(d / "ck", b);
  auto wa = a.sparse_weights(), wb = b.sparse_weights();
  REQUIRE(wa.size() == wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) {
    CHECK(wa[i].pattern->row == wb[i].pattern->row);
    CHECK(wa[i].pattern->col == wb[i].pattern->col);
  }
  CHECK(std::memcmp(a.params().all().data(), b.params().all().data(), a.params().all().size() * 4) == 0);

  // dense export: a dense gpt<> of the same config gives the same logits
  io::save_model(d / "dense", a, {.dense_export = true});
  gpt<> dense(gpt_config::from_json(io::read_model_config(d / "dense")));
  io::load_model(d / "dense", dense);
  std::vector<std::int32_t> ids = {1, 5, 9, 2, 60, 33, 7, 0};
  std::vector<float> la(8 * 61), ld(8 * 61);
  a.logits(ids, 2, 4, {la.data(), 8, 61});
  dense.logits(ids, 2, 4, {ld.data(), 8, 61});
  for (std::size_t i = 0; i < la.size(); ++i) REQUIRE(ld[i] == doctest::Approx(la[i]).epsilon(1e-5));
  // a dense export does not load into the sparse model, and says why
  CHECK_THROWS_WITH_AS(io::load_model(d / "dense", b), doctest::Contains("is dense [16, 48] but the model is block-sparse"),
                       error);
  // a pattern that is out of the grid
  {
    io::safetensors_file f(d / "ck" / "model.safetensors");
    io::safetensors_writer w;
    std::vector<std::vector<float>> keep;
    for (auto& t : f.tensors()) {
      if (t.dtype == io::st_dtype::i32) {
        auto v = f.read_i32(t.name);
        if (t.name == "h.0.attn.c_proj.weight.pattern") v[0] = 1000;
        w.add_owned(t.name, t.shape, v);
      } else {
        keep.emplace_back(t.elements());
        f.read_f32(t.name, t.shape, keep.back());
        w.add(t.name, t.shape, std::span<const float>(keep.back()));
      }
    }
    fs::create_directories(d / "broken");
    w.write(d / "broken" / "model.safetensors");
  }
  CHECK_THROWS_WITH_AS(io::load_model(d / "broken", b), doctest::Contains("h.0.attn.c_proj.weight: slot 0 at block (1000"),
                       error);
}

namespace {
// A small token stream and the full training set-up around a model type, rebuilt from scratch
// for each segment of a run so that nothing but the checkpoint carries state across.
template <class Model, class Policies = default_policies>
struct run_fixture {
  fs::path dir;
  data::token_file file;
  gpt_config cfg;
  sparse_plan plan;
  bool dynamic;
  json optimizer = {{"weight_decay", 0.1}};
  run_fixture(fs::path d, float dropout, double sparsity, bool dyn)
      : dir(std::move(d)), file(make_tokens(dir)), cfg(tiny(dropout)), plan{sparsity}, dynamic(dyn) {}

  static data::token_file make_tokens(const fs::path& dir) {
    std::vector<std::int32_t> ids(3000);
    counter_rng rng(5);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 7 + rng.below(0, i, 5)) % 61);
    data::write_token_file(dir / "train.tok", ids, 61);
    return data::token_file(dir / "train.tok");
  }

  // Trains from `from` (0 = fresh, else the checkpoint in dir/ck) to step `to`; returns the losses
  // of those steps, and saves a checkpoint at `to`.
  std::vector<double> train(std::size_t from, std::size_t to, std::vector<std::vector<std::uint32_t>>* patterns = nullptr) {
    Model m(cfg, plan);
    m.init(21);
    trainer_options o;
    o.dropout_seed = 4;
    using trainer_t = trainer<Model, Policies>;
    trainer_t t(m, o, typename Policies::optimizer(optimizer),
                optim::make_schedule({{"type", "warmup_cosine"}, {"max_lr", 3e-3}, {"warmup_steps", 2}, {"total_steps", 12}}));
    std::optional<dynamic_sparsity<Model, trainer_t>> ds;
    if (dynamic)
      ds.emplace(m, t,
                 sparse::update_config::from_json(
                     {{"prune_ratio", 0.5}, {"update_period", 2}, {"total_steps", 12}, {"regrow", "rigl"}}),
                 9);
    data::lm_sampler s(file, {.batch_size = 3, .windows = {.seq_len = 8}, .seed = 13});
    if (from > 0) {
      io::load_model(dir / "ck", m);
      auto run = io::load_training_state(dir / "ck" / io::state_file, t, ds ? &ds->updater() : nullptr);
      s.restore(run.at("sampler").template get<data::lm_sampler_state>());
      REQUIRE(t.step() == from);
    }
    std::vector<double> losses;
    data::lm_batch b;
    while (t.step() < to) {
      s.next(b);
      token_batch tb = as_token_batch(b);
      losses.push_back(t.train_step(std::span<const token_batch>(&tb, 1)).loss.mean_loss());
    }
    io::save_model(dir / "ck", m);
    io::save_training_state(dir / "ck" / io::state_file, t, {{"sampler", s.state()}}, ds ? &ds->updater() : nullptr);
    if (patterns)
      for (auto& w : m.sparse_weights()) patterns->push_back(w.pattern->row), patterns->push_back(w.pattern->col);
    return losses;
  }
};

template <class Model>
void check_exact_resume(const std::string& name, float dropout, double sparsity, bool dynamic) {
  run_fixture<Model> f(io_dir(name), dropout, sparsity, dynamic);
  std::vector<std::vector<std::uint32_t>> p_full, p_resumed;
  const auto full = f.train(0, 12, &p_full);
  auto first = f.train(0, 5);
  const auto second = f.train(5, 12, &p_resumed);
  first.insert(first.end(), second.begin(), second.end());
  REQUIRE(first.size() == full.size());
  for (std::size_t i = 0; i < full.size(); ++i) CHECK_MESSAGE(first[i] == full[i], "step ", i + 1);  // bit-identical
  CHECK(p_full == p_resumed);
  CHECK(full.back() < full.front());
}
}  // namespace

TEST_CASE("resume: dense GPT with dropout continues bit-identically") {
  check_exact_resume<gpt<>>("resume-dense", 0.1f, 0.0, false);
}

TEST_CASE("resume: block-sparse GPT with RigL updates before and after the checkpoint") {
  check_exact_resume<gpt<float, block_sparse<4>>>("resume-sparse", 0.0f, 0.6, true);
}

// The optimiser slots' storage type from the config ("optimizer.slots", optim/slot_choice.hpp):
// bf16 and half slots resume bit-identically; the checkpoint holds them in their own type (BF16,
// F16; float slots F32) and names the type; a run resumes bf16 slots as float ones (widened), and
// refuses half <-> the others naming both.
TEST_CASE("resume: optimiser slots stored as bf16 or half (optimizer.slots)") {
  struct chosen_slots : default_policies {
    using optimizer = optim::slot_choice<optim::adamw>;
  };
  std::vector<double> last;
  for (const char* slots : {"float", "bf16", "half"}) {
    INFO("slots ", slots);
    run_fixture<gpt<>, chosen_slots> f(io_dir(std::string("resume-slots-") + slots), 0.0f, 0.0, false);
    f.optimizer["slots"] = slots;
    const auto full = f.train(0, 12);
    auto first = f.train(0, 5);
    const auto second = f.train(5, 12);
    first.insert(first.end(), second.begin(), second.end());
    REQUIRE(first.size() == full.size());
    for (std::size_t i = 0; i < full.size(); ++i) CHECK_MESSAGE(first[i] == full[i], "step ", i + 1);
    last.push_back(full.back());
    io::safetensors_file st(f.dir / "ck" / io::state_file);
    const auto meta = json::parse(st.metadata("sparselm.training_state"));
    CHECK(meta.at("optimizer_slots") == slots);
    CHECK(st.contains(std::string("optimizer.") + (std::string(slots) == "half" ? "sqrt_v" : "v") + ".wte.weight"));
    const auto stored = std::string(slots) == "float" ? io::st_dtype::f32
                        : std::string(slots) == "bf16"  ? io::st_dtype::bf16
                                                        : io::st_dtype::f16;
    for (const auto& t : st.tensors())
      if (t.name.rfind("optimizer.", 0) == 0) CHECK(t.dtype == stored);
  }
  CHECK(last[1] != last[0]);  // the storage type is used: 16-bit moments change the run
  CHECK(last[2] != last[0]);
  // Across types: bf16 -> float resumes (the saved values widen), bf16 -> half is refused.
  run_fixture<gpt<>, chosen_slots> f(io_dir("resume-slots-across"), 0.0f, 0.0, false);
  f.optimizer["slots"] = "bf16";
  f.train(0, 4);
  f.optimizer["slots"] = "float";
  const auto more = f.train(4, 6);
  CHECK(more.size() == 2);
  CHECK(std::isfinite(more.back()));
  f.optimizer["slots"] = "half";
  CHECK_THROWS_WITH_AS(f.train(6, 7), doctest::Contains("the optimiser slots were saved as float and this run keeps them as half"),
                       error);
}

// A resume reads the slots straight into the optimiser's own arenas in their storage type (no
// float copies): bf16 slots from F32 tensors rounded to nearest even. Every slot tensor is checked
// before any slot changes: a file with one damaged tensor (the last one read) is refused naming
// it, and the optimiser keeps the state it had.
TEST_CASE("resume: slots read in their storage type; a damaged slot tensor changes nothing") {
  struct chosen_slots : default_policies {
    using optimizer = optim::slot_choice<optim::adamw>;
  };
  run_fixture<gpt<>, chosen_slots> f(io_dir("resume-slots-direct"), 0.0f, 0.0, false);
  f.optimizer["slots"] = "float";
  f.train(0, 3);
  const fs::path at3 = f.dir / "at3.safetensors";
  fs::copy_file(f.dir / "ck" / io::state_file, at3);
  f.train(0, 5);
  const fs::path at5 = f.dir / "ck" / io::state_file;

  gpt<> m(tiny());
  trainer<gpt<>, chosen_slots> t(m, {}, optim::slot_choice<optim::adamw>(json{{"slots", "bf16"}}),
                                 optim::schedule(optim::constant_schedule(1e-3f)));
  io::load_training_state(at3, t);
  CHECK(t.optimizer().step_count() == 3);
  CHECK(t.step() == 3);
  const arena_layout& layout = *m.layout();
  io::safetensors_file saved(at3);
  std::size_t equal = 0, total = 0;
  std::vector<std::uint16_t> bits3;  // the bf16 slots after loading step 3
  t.optimizer().visit([&]<class O>(O& o) {
    if constexpr (std::is_same_v<typename O::slot_type, bf16>) {
      for (auto& s : o.state().slots)
        for (std::size_t i = 0; i < layout.count(); ++i) {
          std::vector<float> want(layout[i].size);
          saved.read_f32("optimizer." + s.name + "." + layout[i].name, layout[i].shape, want);
          const auto got = (*s.slots)[i];
          for (std::size_t e = 0; e < want.size(); ++e) {
            equal += got[e].bits == bf16(want[e]).bits;
            bits3.push_back(got[e].bits);
          }
          total += want.size();
        }
    }
  });
  std::size_t params = 0;
  for (std::size_t i = 0; i < layout.count(); ++i) params += layout[i].size;
  CHECK(total == 2 * params);  // adamw: m and v
  CHECK(equal == total);

  // The step-5 state with its last slot tensor stored as F16 (no type a bf16 slot reads).
  const fs::path bad = f.dir / "bad.safetensors";
  {
    io::safetensors_file good(at5);
    const std::string last = "optimizer.v." + layout[layout.count() - 1].name;
    REQUIRE(good.contains(last));
    io::safetensors_writer w;
    std::vector<std::vector<float>> keep;
    std::vector<half> damaged;
    for (const auto& ti : good.tensors()) {
      if (ti.dtype == io::st_dtype::i32) continue;
      keep.emplace_back(ti.elements());
      good.read_f32(ti.name, ti.shape, keep.back());
      if (ti.name == last) {
        for (float x : keep.back()) damaged.push_back(half(x));
        w.add(ti.name, io::st_dtype::f16, ti.shape, damaged.data());
      } else {
        w.add(ti.name, ti.shape, std::span<const float>(keep.back()));
      }
    }
    for (const char* k : {"sparselm.training_state", "sparselm.layout", io::training_state_checksum_key})
      w.set_metadata(k, good.metadata(k));
    w.write(bad);
  }
  const std::string why = "optimizer.v." + layout[layout.count() - 1].name + "' has dtype F16, expected BF16 or F32";
  CHECK_THROWS_WITH_AS(io::load_training_state(bad, t), doctest::Contains(why.c_str()), error);
  CHECK(t.optimizer().step_count() == 3);
  CHECK(t.step() == 3);
  std::vector<std::uint16_t> bits3_flat;  // the bf16 slots after the refused load
  t.optimizer().visit([&]<class O>(O& o) {
    if constexpr (std::is_same_v<typename O::slot_type, bf16>)
      for (auto& s : o.state().slots)
        for (std::size_t i = 0; i < layout.count(); ++i)
          for (const auto& v : (*s.slots)[i]) bits3_flat.push_back(v.bits);
  });
  CHECK(bits3_flat == bits3);  // the optimiser kept the step-3 state
  // and the good step-5 file still loads
  io::load_training_state(at5, t);
  CHECK(t.optimizer().step_count() == 5);
}

TEST_CASE("training state: mismatches are errors naming the cause") {
  run_fixture<gpt<>> f(io_dir("state-bad"), 0.0f, 0.0, false);
  f.train(0, 2);
  auto other = tiny();
  other.n_layer = 1;
  gpt<> m(other);
  trainer<gpt<>> t(m, {}, optim::adamw<>(json::object()), optim::schedule(optim::constant_schedule(1e-3f)));
  CHECK_THROWS_WITH_AS(io::load_training_state(f.dir / "ck" / io::state_file, t), doctest::Contains("different model"),
                       error);
  struct sgd_policies : default_policies {
    using optimizer = optim::sgd<>;
  };
  gpt<> m2(tiny());
  trainer<gpt<>, sgd_policies> t2(m2, {}, optim::sgd<>(json{{"momentum", 0.9}}),
                                  optim::schedule(optim::constant_schedule(1e-3f)));
  CHECK_THROWS_WITH_AS(io::load_training_state(f.dir / "ck" / io::state_file, t2), doctest::Contains("optimiser"), error);
}

// Issue 60, defect 7: single-bit flips of optimizer_step, the sampler's position or epoch in the
// training state's metadata were accepted, and the resumed run differed. The metadata is now
// checksummed like the tensors.
TEST_CASE("training state: a bit flip in its metadata (steps, data position, epoch) is refused on load") {
  run_fixture<gpt<>> f(io_dir("state-meta-flip"), 0.0f, 0.0, false);
  f.train(0, 2);
  const fs::path good = f.dir / "ck" / io::state_file;
  const std::string bytes = slurp(good);
  auto fresh_trainer = [](gpt<>& m) {
    return trainer<gpt<>>(m, {}, optim::adamw<>(json{{"weight_decay", 0.1}}),
                          optim::schedule(optim::constant_schedule(1e-3f)));
  };
  for (const std::string field : {"optimizer_step", "position", "epoch", "\\\"step"}) {
    CAPTURE(field);
    // the first digit of the field's value in the header (the metadata is JSON inside a JSON string)
    const std::size_t at = bytes.find(field + "\\\":");
    REQUIRE(at != std::string::npos);
    const std::size_t digit = bytes.find_first_of("0123456789", at + field.size());
    REQUIRE(digit != std::string::npos);
    std::string flipped = bytes;
    flipped[digit] = char(flipped[digit] ^ 1);  // another digit: still a well-formed file
    const fs::path bad = f.dir / "flipped.safetensors";
    spit(bad, flipped);
    gpt<> m(tiny());
    auto t = fresh_trainer(m);
    CHECK_THROWS_WITH_AS(io::load_training_state(bad, t), doctest::Contains("flipped.safetensors: the training state's "
                                                                           "metadata (steps, data position, ...) has "
                                                                           "CRC-32C"),
                         error);
    CHECK(t.step() == 0);
    auto unchecked = fresh_trainer(m);
    io::load_training_state(bad, unchecked, nullptr, false);  // --no-verify reads what the file says
  }
  gpt<> m(tiny());
  auto t = fresh_trainer(m);
  io::load_training_state(good, t);
  CHECK(t.step() == 2);
}

TEST_CASE("checkpoint_dir: numbered checkpoints, latest, pruning, and nothing lost on failure") {
  auto d = io_dir("dir");
  io::checkpoint_dir cd(d / "checkpoints", 2);
  CHECK(!cd.latest());
  auto fill = [](const fs::path& p) {
    for (const char* n : {io::model_file, io::config_file, io::state_file}) io::atomic_write_text(p / n, "x");
  };
  cd.save(10, fill);
  cd.save(20, fill);
  CHECK(cd.latest() == d / "checkpoints" / "step-000020");
  CHECK_THROWS_AS(cd.save(30, [](const fs::path& p) {
                    io::atomic_write_text(p / io::model_file, "x");
                    fail("interrupted (simulated)");
                  }),
                  error);
  CHECK(cd.latest() == d / "checkpoints" / "step-000020");
  CHECK(cd.steps() == std::vector<std::size_t>{10, 20});
  cd.save(30, fill);
  CHECK(cd.steps() == std::vector<std::size_t>{20, 30});  // keep 2
  // latest names a checkpoint that is gone: fall back to the newest complete one
  io::atomic_write_text(d / "checkpoints" / "latest", "step-000040\n");
  CHECK(cd.latest() == d / "checkpoints" / "step-000030");
  CHECK(io::resolve_checkpoint(d) == d / "checkpoints" / "step-000030");
  CHECK(io::resolve_checkpoint(d / "checkpoints" / "step-000020") == d / "checkpoints" / "step-000020");
  CHECK_THROWS_WITH_AS(io::resolve_checkpoint(d / "missing"), doctest::Contains("missing"), error);
}

TEST_CASE("checkpoint: an independent PyTorch GPT-2 loading our files gives our loss") {
  const bool torch = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  if (!torch) {
    MESSAGE("torch not importable by /usr/bin/python3: PyTorch loading check not run");
    return;
  }
  auto d = io_dir("torch");
  auto cfg = tiny();
  // trained a few steps, so the weights are not the initial ones
  gpt<float, block_sparse<4>> m(cfg, sparse_plan{0.5});
  m.init(8);
  trainer<gpt<float, block_sparse<4>>> t(m, {}, optim::adamw<>(json::object()),
                                         optim::schedule(optim::constant_schedule(3e-3f)));
  std::vector<std::int32_t> ids, targets;
  counter_rng rng(2);
  for (std::size_t i = 0; i < 3 * 9; ++i) ids.push_back(std::int32_t(rng.below(0, i, 61)));
  targets.assign(ids.begin() + 1, ids.end());
  targets.push_back(ids[0]);
  token_batch b{ids, targets, {}, 3, 9};
  for (int s = 0; s < 3; ++s) t.train_step(std::span<const token_batch>(&b, 1));
  const double ours = m.evaluate(b).mean_loss();
  io::save_model(d / "dense", m, {.dense_export = true});
  std::ofstream(d / "tokens.json") << json{{"batch", 3}, {"seq", 9}, {"ids", ids}, {"targets", targets}}.dump();
  const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/load_checkpoint.py " +
                          (d / "dense").string() + " " + (d / "tokens.json").string() + " > " + (d / "out.json").string();
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " << cmd);
  const double theirs = json::parse(slurp(d / "out.json"))["loss"].get<double>();
  CHECK(theirs == doctest::Approx(ours).epsilon(1e-5));
  // the dense model's own checkpoint too (no export step)
  gpt<> dense(cfg);
  io::load_model(d / "dense", dense);
  io::save_model(d / "plain", dense);
  const std::string cmd2 = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/load_checkpoint.py " +
                           (d / "plain").string() + " " + (d / "tokens.json").string() + " > " + (d / "out2.json").string();
  REQUIRE(std::system(cmd2.c_str()) == 0);
  CHECK(json::parse(slurp(d / "out2.json"))["loss"].get<double>() == doctest::Approx(dense.evaluate(b).mean_loss()).epsilon(1e-5));
}

}  // namespace SPARSELM_UNITY_ID
