#pragma once
// Checkpoints: the model (config.json + model.safetensors, readable by HuggingFace-style tools),
// the training state (optimiser slots, step, data position, sparsity state) and the directory of
// numbered checkpoints a training run keeps.
//
//   io::save_model(dir, model);                      // config.json + model.safetensors, atomic each
//   io::save_model(dir, model, {.dense_export = true});  // block-sparse weights written dense (in, out)
//   io::load_model(dir, model);                      // names, shapes, dtypes checked; patterns restored
//   io::save_training_state(dir / "training_state.safetensors", trainer, run_json, updater);
//   json run = io::load_training_state(dir / "training_state.safetensors", trainer, updater);
//
// The training-state functions take any trainer that satisfies io::checkpointable_trainer (below:
// the members they call, each stated; train/trainer.hpp has them all). A type missing one fails in a
// static_assert that names it.
//
// Tensor names are the parameter arena's names, which follow HF GPT-2 (`wte.weight`,
// `h.0.attn.c_attn.weight` in Conv1D (in, out) layout, `ln_f.bias`, ...). A block-sparse weight is
// stored as its values `(nnz, B, B)` under the weight's name plus `<name>.pattern`, an I32 `(nnz, 2)`
// tensor of (block row, block column) per slot; with dense_export it is one dense `(in, out)` tensor
// under the weight's name, loadable by the dense model of the same config.
//
// Run directories (checkpoint_dir, resolve_checkpoint) and the files' names: io/checkpoint_dir.hpp.

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/checkpoint_dir.hpp"
#include "sparselm/io/safetensors.hpp"
#include "sparselm/optim/loss_scaling.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "sparselm/sparse/update.hpp"
#include "sparselm/sparse/sparsity.hpp"
#include "sparselm/io/slot_stream.hpp"

namespace sparselm::io {

namespace detail {
// Names and shapes of a layout as JSON, stored in checkpoints to detect a mismatched model.
inline std::string layout_fingerprint(const arena_layout& l) {
  nlohmann::json j = nlohmann::json::array();
  for (auto& t : l) j.push_back({t.name, t.shape});
  return j.dump();
}

// The sparse weights of a model (none for dense models or models without sparse_weights()).
template <class Model>
std::vector<sparse::sparse_weight> sparse_weights_of(Model& m) {
  if constexpr (requires { m.sparse_weights(); })
    return m.sparse_weights();
  else
    return {};
}

inline const sparse::sparse_weight* find_weight(const std::vector<sparse::sparse_weight>& ws, std::size_t tensor) {
  for (auto& w : ws)
    if (w.tensor == tensor) return &w;
  return nullptr;
}

// HF GPT-2 files may prefix names with "transformer." and carry tensors that are not parameters
// here: the causal-mask buffers and the tied lm_head.
inline std::string strip_hf_prefix(const std::string& n) {
  constexpr std::string_view p = "transformer.";
  return n.rfind(p, 0) == 0 ? n.substr(p.size()) : n;
}
inline bool is_hf_extra(const std::string& n) {
  auto ends = [&](std::string_view s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  return n == "lm_head.weight" || ends(".attn.bias") || ends(".attn.masked_bias");
}
}  // namespace detail

struct save_options {
  bool dense_export = false;  // write block-sparse weights as dense (in, out) matrices
};

// The model's config JSON (config.json). For a block-sparse GPT the block size and sparsity are
// recorded under "sparselm" (the dense config ignores that key).
template <class Model>
nlohmann::json model_config_json(Model& model, const save_options& o = {}) {
  static_assert(requires { { model.config().to_json() } -> std::convertible_to<nlohmann::json>; },
                "save_model: the model needs 'config()' returning a config with 'to_json()' (its config.json)");
  nlohmann::json j = model.config().to_json();
  if constexpr (requires { model.plan(); }) {
    static_assert(requires { Model::sparsity::is_sparse; },
                  "save_model: a model with plan() needs a nested type 'sparsity' (dense or block_sparse<B>)");
    if constexpr (Model::sparsity::is_sparse) {
      // block_sparse<runtime_block>: the block size is the plan's
      const std::size_t block = Model::sparsity::block != runtime_block ? Model::sparsity::block : model.plan().block;
      if (!o.dense_export && !j.contains("block_size"))
        j["sparselm"] = {{"block_size", block}, {"sparsity", model.plan().sparsity}};
    }
  }
  return j;
}

// Writes model.safetensors (and config.json unless write_config is false) into dir.
template <class Model>
void save_model(const std::filesystem::path& dir, Model& model, const save_options& o = {}) {
  static_assert(requires { *model.layout(); model.params(); },
                "save_model: the model needs 'layout()' (shared_ptr to its arena_layout) and 'params()'");
  const arena_layout& layout = *model.layout();
  const auto& params = model.params();
  auto weights = detail::sparse_weights_of(model);
  safetensors_writer w;
  std::vector<std::vector<float>> dense;  // dense exports, alive until write()
  dense.reserve(weights.size());
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& t = layout[i];
    if (const auto* sw = detail::find_weight(weights, i)) {
      const auto& p = *sw->pattern;
      if (o.dense_export) {
        dense.emplace_back(p.in() * p.out());
        sparse::pattern_to_dense(t.name, p, params[i], dense.back());
        w.add(t.name, {p.in(), p.out()}, std::span<const float>(dense.back()));
        continue;
      }
      w.add_owned(t.name + ".pattern", sparse::pattern_shape(p), sparse::pattern_to_i32(p));
    }
    w.add(t.name, t.shape, params[i]);
  }
  w.set_metadata("format", "pt");  // what HF loaders expect
  w.set_metadata("sparselm.layout", o.dense_export ? std::string() : detail::layout_fingerprint(layout));
  std::filesystem::create_directories(dir);
  w.write(dir / model_file);
  atomic_write_text(dir / config_file, model_config_json(model, o).dump(2) + "\n");
}

// Reads <dir>/config.json.
inline nlohmann::json read_model_config(const std::filesystem::path& dir) {
  const auto path = dir / config_file;
  SPARSELM_CHECK(std::filesystem::exists(path), path.string(), ": no model config (is '", dir.string(),
                 "' a checkpoint directory?)");
  nlohmann::json j = parse_json(read_text_file(path, "config file"), path.string());
  SPARSELM_CHECK(j.is_object(), path.string(), ": expected a JSON object (a model config), got ", j.type_name());
  return j;
}

struct load_options {
  bool allow_hf_extras = true;  // ignore HF GPT-2's mask buffers and tied lm_head.weight
  bool verify = true;           // check the tensors' CRC-32C when the file records them
};

// Loads <dir>/model.safetensors (or the file `path` itself) into model.params(). Every parameter
// must be present with its shape; float tensors may be F32, F16 or BF16. Block-sparse weights take
// their pattern from `<name>.pattern`. Tensors in the file that the model does not have are an
// error (except HF extras). On error the model may be partly loaded; nothing on disk changes.
template <class Model>
void load_model(const std::filesystem::path& path, Model& model, const load_options& o = {}) {
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  safetensors_file f(file, o.verify);
  const arena_layout& layout = *model.layout();
  auto& params = model.params();
  auto weights = detail::sparse_weights_of(model);
  // Map stripped names to file names.
  std::map<std::string, std::string> names;
  for (auto& t : f.tensors()) names[detail::strip_hf_prefix(t.name)] = t.name;
  std::set<std::string> used;
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& t = layout[i];
    auto it = names.find(t.name);
    SPARSELM_CHECK(it != names.end(), file.string(), ": missing tensor '", t.name, "' (shape ", dims_string(t.shape),
                   ")");
    used.insert(it->second);
    if (const auto* sw = detail::find_weight(weights, i)) {
      auto& p = *sw->pattern;
      const auto& info = f.info(it->second);
      SPARSELM_CHECK(!(info.shape.size() == 2 && info.shape[0] == p.in() && info.shape[1] == p.out()), file.string(),
                     ": tensor '", t.name, "' is dense ", dims_string(info.shape), " but the model is block-sparse (",
                     p.nnz(), " blocks of ", p.block, "x", p.block,
                     "); a dense export loads into the dense model of the same config");
      const std::string pname = it->second + ".pattern";
      SPARSELM_CHECK(f.contains(pname), file.string(), ": block-sparse tensor '", t.name, "' has no '", pname, "'");
      used.insert(pname);
      sparse::pattern_from_i32(t.name, p, f.read_i32(pname, sparse::pattern_shape(p)));
    }
    f.read_f32(it->second, t.shape, params[i]);
  }
  std::string extra;
  for (auto& t : f.tensors())
    if (!used.contains(t.name) && !(o.allow_hf_extras && detail::is_hf_extra(detail::strip_hf_prefix(t.name))))
      extra += (extra.empty() ? "'" : ", '") + t.name + "'";
  SPARSELM_CHECK(extra.empty(), file.string(), ": tensors the model does not have: ", extra,
                 " (a checkpoint of a different model or config?)");
}

// ---- training state -----------------------------------------------------------------------

// What save_training_state and load_training_state use of a trainer, and nothing else:
//   model()                  the model: layout() (shared_ptr to its arena_layout), params(), and
//                            sparse_weights() when it has block-sparse weights
//   optimizer()              its state() (named slot arenas), step_count() and, for a run-time slot
//                            choice, visit(f) over the optimiser inside (optim/slot_choice.hpp)
//   step(), set_step(n)      the trainer's step counter
//   scaler()                 the loss scaler (optim/loss_scaling.hpp)
//   sharded()                whether the optimiser state is sharded over ranks; then
//   checkpoint_state()       the whole-layout state gathered on rank 0 (gather_optimizer_state),
//   visit_gathered16(f)      or the gathered 16-bit slots in their own type (false: none),
//   streamed_slots()         or the slots streamed from the other ranks (io/slot_stream.hpp; null:
//                            not streaming), received over shard_group()
//   release_gathered_state() frees what a save gathered (called after a load too)
template <class T>
concept checkpointable_trainer = requires(T& t, std::size_t n) {
  *t.model().layout();
  t.model().params();
  t.optimizer().state();
  { t.optimizer().step_count() } -> std::convertible_to<std::size_t>;
  { t.step() } -> std::convertible_to<std::size_t>;
  t.set_step(n);
  { t.scaler() } -> std::convertible_to<optim::loss_scaler&>;
  { t.sharded() } -> std::convertible_to<bool>;
  t.checkpoint_state();
  { t.visit_gathered16([](const auto&) {}) } -> std::convertible_to<bool>;
  { t.streamed_slots() } -> std::convertible_to<slot_stream*>;
  t.shard_group();
  t.release_gathered_state();
};

namespace detail {
// checkpointable_trainer member by member, so a violation names what is missing.
template <class T>
constexpr bool check_checkpointable() {
  static_assert(requires(T& t) { *t.model().layout(); t.model().params(); },
                "io training state: the trainer needs 'model()', a model with 'layout()' and 'params()'");
  static_assert(requires(T& t) { t.optimizer().state(); t.optimizer().step_count(); },
                "io training state: the trainer needs 'optimizer()' with 'state()' and 'step_count()'");
  static_assert(requires(T& t, std::size_t n) { { t.step() } -> std::convertible_to<std::size_t>; t.set_step(n); },
                "io training state: the trainer needs 'step()' and 'set_step(n)'");
  static_assert(requires(T& t) { { t.scaler() } -> std::convertible_to<optim::loss_scaler&>; },
                "io training state: the trainer needs 'scaler()' returning its optim::loss_scaler&");
  static_assert(requires(T& t) { { t.sharded() } -> std::convertible_to<bool>; t.checkpoint_state(); },
                "io training state: the trainer needs 'sharded()' and 'checkpoint_state()'");
  static_assert(requires(T& t) { { t.visit_gathered16([](const auto&) {}) } -> std::convertible_to<bool>; },
                "io training state: the trainer needs 'visit_gathered16(f)' returning bool");
  static_assert(requires(T& t) { { t.streamed_slots() } -> std::convertible_to<slot_stream*>; t.shard_group(); },
                "io training state: the trainer needs 'streamed_slots()' (io::slot_stream*) and 'shard_group()'");
  static_assert(requires(T& t) { t.release_gathered_state(); },
                "io training state: the trainer needs 'release_gathered_state()'");
  return checkpointable_trainer<T>;
}

// A run-time choice of optimisers (optim/slot_choice.hpp) reaches the one it holds through visit.
template <class O>
concept optimizer_visitor = requires(O& o) { o.visit([](auto&) {}); };
}  // namespace detail

// Writes the optimiser slots ("optimizer.<slot>.<tensor>"), the trainer and optimiser step
// counters, the loss scaler's state (a dynamic scale is restored on resume into a dynamic scaler;
// a static one comes from the config, and a run resumed under fp16 after a run without dynamic
// scaling starts from its configured initial scale), the explored maps of a pattern updater ("explored.<weight>") and `run` (any JSON
// the caller needs to resume, e.g. the data sampler's state) to one safetensors file, atomically.
template <class Trainer>
void save_training_state(const std::filesystem::path& path, Trainer& t, const nlohmann::json& run,
                         const sparse::pattern_updater* updater = nullptr) {
  static_assert(detail::check_checkpointable<Trainer>());
  auto& model = t.model();
  const arena_layout& layout = *model.layout();
  safetensors_writer w;
  // Slot tensors "optimizer.<slot>.<tensor>" in the slots' own storage type, straight from the
  // optimiser's arenas (written before this function returns).
  auto add_slots = [&]<class S>(const optim::optimizer_state<S>& st) {
    for (auto& s : st.slots)
      for (std::size_t i = 0; i < layout.count(); ++i) {
        const auto& ti = layout[i];
        if (ti.flags & param_frozen) continue;
        w.add("optimizer." + s.name + "." + ti.name, dtype_of<S>(), ti.shape, (*s.slots)[i].data());
        if (s.slots->file_backed())  // offloaded slots go back to their file once written
          w.after_reading_last([a = s.slots, i] { a->page_out(a->layout()[i].offset, a->layout()[i].offset + a->layout()[i].size); });
      }
    return st.step;
  };
  // A run-time slot choice (optim/slot_choice.hpp) hands out float copies of 16-bit slots; an
  // unsharded one writes the 16-bit arenas inside it instead (no copy: the save's peak memory
  // stays that of the run), a sharded one the 16-bit slots gathered in their own type
  // (trainer::gather_optimizer_state).
  std::size_t optimizer_step = 0;
  bool written = false;
  // Sharded state streamed from the other ranks while the file is written
  // (trainer::stream_optimizer_state): rank 0's own slots from its arenas, the others' in chunks
  // as they arrive, in the same order and bytes as a gathered state.
  slot_stream* streamed = t.streamed_slots();
  if (streamed) {
    for (const auto& p : streamed->pieces()) {
      const auto& ti = layout[p.tensor];
      const auto& sl = streamed->slots()[p.slot];
      std::string name = "optimizer." + sl.name + "." + ti.name;
      if (p.local)
        w.add(std::move(name), dtype_of(sl.type), ti.shape, p.local);
      else
        w.add_streamed(std::move(name), dtype_of(sl.type), ti.shape, p.crc,
                       [&t, streamed, &p](const safetensors_writer::byte_sink& sink) {
                         streamed->receive(t.shard_group(), p, sink);
                       });
    }
    optimizer_step = t.optimizer().step_count();
    written = true;
  }
  if (!written && t.sharded()) written = t.visit_gathered16([&](const auto& st) { optimizer_step = add_slots(st); });
  if constexpr (detail::optimizer_visitor<std::remove_reference_t<decltype(t.optimizer())>>) {
    if (!written && !t.sharded() && optim::slot_storage_of(t.optimizer()) != dtype::f32) {
      t.optimizer().visit([&]<class O>(O& o) {
        if constexpr (requires { o.state(); }) {
          optimizer_step = add_slots(o.state());
          written = true;
        }
      });
    }
  }
  if (!written) {
    // the whole state (a sharded trainer's gathered one: trainer::gather_optimizer_state)
    optimizer_step = add_slots(t.checkpoint_state());
  }
  nlohmann::json meta = {{"step", t.step()},
                         {"optimizer_step", optimizer_step},
                         {"optimizer_slots", optim::slot_dtype_name(optim::slot_storage_of(t.optimizer()))},
                         {"run", run}};
  meta["loss_scaler"] = t.scaler().state();
  if (updater) {
    auto ws = detail::sparse_weights_of(model);
    for (auto& sw : ws)
      if (const auto* ex = updater->explored(sw.name))
        w.add_owned("explored." + sw.name, {sw.pattern->rows_b, sw.pattern->cols_b}, sparse::explored_to_i32(*ex));
  }
  const std::string state_text = meta.dump();
  w.set_metadata("sparselm.training_state", state_text);
  // the steps, sampler position, epoch, loss scale ... are checksummed like the tensors
  w.set_metadata(training_state_checksum_key, crc32c_hex(crc32c(state_text.data(), state_text.size())));
  w.set_metadata("sparselm.layout", detail::layout_fingerprint(layout));
  w.write(path);
  if (streamed) streamed->done();
}

// Restores what save_training_state wrote into the trainer (its step and optimiser) and the
// updater's explored maps; returns the `run` JSON. The model's parameters must be loaded separately
// (load_model). Throws, naming the file, when the state belongs to a different model layout or
// optimiser.
template <class Trainer>
nlohmann::json load_training_state(const std::filesystem::path& path, Trainer& t,
                                   sparse::pattern_updater* updater = nullptr, bool verify = true) {
  static_assert(detail::check_checkpointable<Trainer>());
  safetensors_file f(path, verify);
  auto& model = t.model();
  const arena_layout& layout = *model.layout();
  SPARSELM_CHECK(f.metadata("sparselm.layout") == detail::layout_fingerprint(layout), path.string(),
                 ": the training state is for a different model (parameter names or shapes differ)");
  const std::string& state_text = f.metadata("sparselm.training_state");
  if (verify) {
    // The metadata's own CRC-32C, required whenever the tensors have theirs (a file written by this
    // library with checksums): a bit flip in a step count or a data position is refused.
    const auto sum = f.metadata().find(training_state_checksum_key);
    SPARSELM_CHECK(sum != f.metadata().end() || !f.metadata().contains(checksum_key), path.string(),
                   ": the training state's metadata has no checksum ('", training_state_checksum_key,
                   "') although its tensors have theirs: damaged, or written by an older sparselm (--no-verify "
                   "loads it unchecked)");
    if (sum != f.metadata().end()) {
      const std::string have = crc32c_hex(crc32c(state_text.data(), state_text.size()));
      SPARSELM_CHECK(have == sum->second, path.string(), ": the training state's metadata (steps, data position, ...) "
                     "has CRC-32C ", have, ", its checksum says ", sum->second, ": the file is damaged");
    }
  }
  const nlohmann::json meta = parse_json(state_text, path.string() + ": metadata 'sparselm.training_state'");
  SPARSELM_CHECK(meta.is_object(), path.string(), ": metadata 'sparselm.training_state' is not a JSON object");
  for (const char* k : {"step", "optimizer_step"})
    SPARSELM_CHECK(meta.contains(k) && meta[k].is_number_unsigned(), path.string(), ": training state has no '", k,
                   "'");
  // Slots saved as another storage type: float and bf16 convert (the file holds their values),
  // half holds sqrt(v) under another name (optim/slot_choice.hpp) and is refused.
  if (meta.contains("optimizer_slots")) {
    SPARSELM_CHECK(meta["optimizer_slots"].is_string(), path.string(), ": training state field 'optimizer_slots' is not a string");
    const std::string theirs = meta["optimizer_slots"].get<std::string>();
    const std::string ours(optim::slot_dtype_name(optim::slot_storage_of(t.optimizer())));
    SPARSELM_CHECK(theirs == ours || (theirs != "half" && ours != "half"), path.string(),
                   ": the optimiser slots were saved as ", theirs, " and this run keeps them as ", ours,
                   " (half slots hold sqrt(v), the others v); resume with optimizer.slots = ", theirs, " (--slots ",
                   theirs, ")");
  }
  // Each slot tensor is read straight into the optimiser's own arenas in their storage type (for a
  // run-time slot choice, the 16-bit arenas inside it; F32 tensors rounded, BF16 / F16 ones bit for
  // bit), and sharded, only the tensors this rank keeps: a resume allocates no float copies and no
  // whole-layout arenas (docs/design/precision.md, "Resuming 16-bit slots").
  auto read_slots = [&]<class O>(O& o) {
    using S = typename O::slot_type;
    std::size_t expected = 0;
    auto st = o.state();
    const auto own = o.owned();
    // every tensor checked before any slot changes, then read
    for (const bool read : {false, true})
      for (auto& s : st.slots)
        for (std::size_t i = 0; i < layout.count(); ++i) {
          const auto& ti = layout[i];
          if (ti.flags & param_frozen) continue;
          const std::string name = "optimizer." + s.name + "." + ti.name;
          if (read) {
            if (own.contains(i)) {
              f.read_as<S>(name, ti.shape, (*s.slots)[i - own.begin]);
              const auto& to = s.slots->layout()[i - own.begin];
              s.slots->page_out(to.offset, to.offset + to.size);  // offloaded slots: to their file
            }
            continue;
          }
          SPARSELM_CHECK(f.contains(name), path.string(), ": no optimiser slot '", name,
                         "' (saved with a different optimiser?)");
          f.check_as<S>(name, ti.shape, ti.size);
          ++expected;
        }
    std::size_t have = 0;
    for (auto& ti : f.tensors()) have += ti.name.rfind("optimizer.", 0) == 0;
    SPARSELM_CHECK(have == expected, path.string(), ": ", have, " optimiser slot tensors, this optimiser has ",
                   expected, " (saved with a different optimiser?)");
    st.step = meta["optimizer_step"].get<std::size_t>();
    o.restore(st);  // the arenas are its own: sets the step counter
  };
  if constexpr (detail::optimizer_visitor<std::remove_reference_t<decltype(t.optimizer())>>)
    t.optimizer().visit(read_slots);
  else
    read_slots(t.optimizer());
  t.release_gathered_state();
  if (meta.contains("loss_scaler") && t.scaler().is_dynamic() && meta["loss_scaler"].value("dynamic", true))
    t.scaler().restore(meta["loss_scaler"]);
  if (updater) {
    for (auto& sw : detail::sparse_weights_of(model)) {
      const std::string name = "explored." + sw.name;
      if (!f.contains(name)) {  // saved before the weight's first update
        updater->untrack(sw.name);
        continue;
      }
      const auto& p = *sw.pattern;
      updater->restore_explored(sw.name,
                                sparse::explored_from_i32(name, p.rows_b, p.cols_b, f.read_i32(name, {p.rows_b, p.cols_b})));
    }
  }
  t.set_step(meta["step"].get<std::size_t>());
  return meta.value("run", nlohmann::json::object());
}

}  // namespace sparselm::io
