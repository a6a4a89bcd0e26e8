#pragma once
// Starting a model from a pretrained checkpoint, ours or HuggingFace's:
//
//   auto r = io::load_pretrained(dir, model, io::hf_bert_map());   // our checkpoint or an HF directory
//   std::fprintf(stderr, "%s\n", r.summary().c_str());              // what was loaded, absent, unused
//
// HF directories go through io::load_hf (io/huggingface.hpp, which also defines the name maps and
// the report); our own checkpoints load whole when they are of the same model, or by head when
// they are of another model on the same encoder (below). A block-sparse checkpoint starts a
// block-sparse model of the same block size, which keeps its patterns: read_checkpoint_sparsity
// gives the block size and each weight's active blocks (how many, and where), to build that model
// before loading.

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/safetensors.hpp"
#include "sparselm/layers/linear.hpp"

namespace sparselm::io {

// True when the safetensors file was written by this library (io::save_model records the layout).
inline bool is_sparselm_checkpoint(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  safetensors_file f(file, /*verify=*/false);
  return f.metadata().contains("sparselm.layout");
}

// The block-sparse weights of a checkpoint: for each "<name>.pattern" tensor, <name>'s active
// blocks (its values are (nnz, B, B)) and where they are. block: their block size, 0 when there is
// none (a dense checkpoint of ours or an HF directory).
struct checkpoint_sparsity {
  std::filesystem::path file;
  std::size_t block = 0;
  std::map<std::string, std::size_t> blocks;  // weight name -> active blocks
  // weight name -> its blocks' (row, col) pairs in slot order, as stored: what a tensor-parallel
  // slice needs to know how many of a weight's blocks are its own before it is built
  // (models/tensor_shards.hpp, even_slice_plan)
  std::map<std::string, std::vector<std::int32_t>> patterns;
  double sparsity = 0.9;                      // the config's "sparselm.sparsity" (as saved), if any
  std::size_t active_blocks() const {
    std::size_t n = 0;
    for (const auto& [name, k] : blocks) n += k;
    return n;
  }
  // A plan that gives each block-sparse weight of a model its count in the file (an error naming
  // a weight the file has no pattern for), so that the model's patterns fit the file's.
  sparse_plan plan() const {
    sparse_plan p;
    p.sparsity = sparsity;
    p.block = block;
    p.count = [b = blocks, f = file.string()](const std::string& name, std::size_t, std::size_t) {
      const auto it = b.find(name);
      SPARSELM_CHECK(it != b.end(), f, ": no block-sparse pattern for the model's weight '", name,
                     "' (a checkpoint of another model?)");
      return it->second;
    };
    return p;
  }
};

inline checkpoint_sparsity read_checkpoint_sparsity(const std::filesystem::path& path) {
  checkpoint_sparsity r;
  if (!is_sparselm_checkpoint(path)) return r;
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  r.file = file;
  safetensors_file f(file, /*verify=*/false);
  std::string first;  // the weight that set r.block
  for (const auto& t : f.tensors()) {
    if (!t.name.ends_with(".pattern")) continue;
    const std::string w = t.name.substr(0, t.name.size() - 8);
    SPARSELM_CHECK(t.shape.size() == 2 && t.shape[1] == 2, file.string(), ": pattern '", t.name, "' has shape ",
                   dims_string(t.shape), ", expected (nnz, 2)");
    SPARSELM_CHECK(f.contains(w), file.string(), ": pattern '", t.name, "' without its values '", w, "'");
    const auto& v = f.info(w).shape;
    SPARSELM_CHECK(v.size() == 3 && v[0] == t.shape[0] && v[1] == v[2] && v[1] > 0, file.string(),
                   ": block-sparse values '", w, "' have shape ", dims_string(v), ", expected (", t.shape[0],
                   ", B, B) for its pattern of ", t.shape[0], " blocks");
    SPARSELM_CHECK(r.block == 0 || r.block == v[1], file.string(), ": block-sparse weights of two block sizes: '",
                   first, "' has ", r.block, ", '", w, "' ", v[1]);
    if (r.block == 0) first = w;
    r.block = v[1];
    r.blocks[w] = t.shape[0];
    r.patterns[w] = f.read_i32(t.name, t.shape);
  }
  const auto cfg = file.parent_path() / config_file;
  if (r.block != 0 && std::filesystem::exists(cfg)) {
    const json j = parse_json(read_text_file(cfg, "config file"), cfg.string());
    if (j.contains("sparselm") && j["sparselm"].is_object() && j["sparselm"].contains("sparsity") &&
        j["sparselm"]["sparsity"].is_number()) {
      const double s = j["sparselm"]["sparsity"].get<double>();
      SPARSELM_CHECK(s >= 0.0 && s < 1.0, cfg.string(), ": sparselm.sparsity ", s, " is not in [0, 1)");
      r.sparsity = s;
    }
  }
  return r;
}

namespace detail {
// The file's values of block-sparse weight `name` (shape v) fit the model's (shape m = (nnz, B, B),
// pattern p, which init() made).
inline void block_pattern_check(const std::filesystem::path& file, const std::string& name,
                                const std::vector<std::size_t>& v, const std::vector<std::size_t>& m,
                                const sparse::block_pattern& p) {
  SPARSELM_CHECK(v.size() == 3 && v[1] == m[1] && v[2] == m[2], file.string(), ": block-sparse weight '", name,
                 "' has blocks of shape ", dims_string(v), " in the file; the model's are ", m[1], "x", m[2]);
  SPARSELM_CHECK(v[0] == m[0], file.string(), ": block-sparse weight '", name, "' has ", v[0],
                 " active blocks in the file, the model ", m[0],
                 " (build the model with read_checkpoint_sparsity's counts)");
  SPARSELM_CHECK(p.block == m[1] && p.nnz() == m[0], "block-sparse weight '", name,
                 "' has no pattern yet: initialise the model (init) before loading into it");
}
}  // namespace detail

// Our own checkpoint or an HF directory (load_hf through `map`), told apart by the file's
// metadata. `path`: a checkpoint directory or its model.safetensors. Our checkpoint of the same
// model loads whole (io::load_model: every tensor, block-sparse patterns); one of another model on
// the same encoder (bert_pretrain's checkpoint into a bert_classifier) loads by our tensor names
// under the map's head rules, as an HF file does: every embedding and block tensor must be there,
// a head of the model is loaded when all its tensors are, left as initialised when none is (an
// error naming the missing ones when only some are), and the file's tensors of heads the model
// lacks are reported unused; any other tensor is an error naming it. A block-sparse model loads
// by head only from a block-sparse checkpoint: each of its block-sparse weights takes the file's
// values and pattern (same block size and block count: build the model with
// read_checkpoint_sparsity's counts); a dense model does not load a block-sparse checkpoint
// (export it dense first), nor a block-sparse model a dense one.
template <class Model>
hf_load_report load_pretrained(const std::filesystem::path& path, Model& model, const hf_name_map& map,
                               const hf_load_options& o = {}) {
  if (!is_sparselm_checkpoint(path)) return load_hf(path, model, map, o);
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  hf_load_report rep;
  rep.file = file;
  rep.format = "sparselm";
  const arena_layout& layout = *model.layout();
  std::set<std::string> in_file;
  std::map<std::string, std::vector<std::size_t>> shape_in_file;
  {
    safetensors_file f(file, /*verify=*/false);
    for (const auto& t : f.tensors()) {
      in_file.insert(t.name);
      shape_in_file[t.name] = t.shape;
    }
  }
  std::set<std::string> ours;
  for (const auto& t : layout) ours.insert(t.name);
  bool same = true;  // the file holds exactly the model's tensors (and block-sparse patterns)
  for (const auto& n : ours) same = same && in_file.contains(n);
  for (const auto& n : in_file)
    same = same && (ours.contains(n) || (n.ends_with(".pattern") && ours.contains(n.substr(0, n.size() - 8))));
  if (same) {
    load_model(path, model, {.verify = o.verify});
    rep.tensors = layout.count();
    return rep;
  }
  const auto weights = detail::sparse_weights_of(model);
  std::set<std::string> sparse_names;  // the model's block-sparse weights
  for (const auto& w : weights) sparse_names.insert(layout[w.tensor].name);
  for (const auto& n : in_file)
    SPARSELM_CHECK(!n.ends_with(".pattern") || !weights.empty(), file.string(), ": a block-sparse checkpoint ('", n,
                   "') loads into a block-sparse model of its block size, not into this dense one; export it dense "
                   "(export_hf) to start a dense model from it");
  for (const auto& w : weights) {
    const std::string& n = layout[w.tensor].name;
    SPARSELM_CHECK(in_file.contains(n + ".pattern"), file.string(), ": the model's block-sparse weight '", n,
                   "' has no pattern in the file ('", n,
                   ".pattern'): a block-sparse model starts from a "
                   "block-sparse checkpoint (e.g. bert_pretrain --block ",
                   w.pattern->block, ")");
    if (in_file.contains(n)) detail::block_pattern_check(file, n, shape_in_file[n], layout[w.tensor].shape, *w.pattern);
  }
  std::map<std::string, std::string> group_of;  // our head tensors -> head
  for (const auto* rules : {&map.base, &map.top})
    for (const hf_rule& r : *rules)
      if (!r.group.empty()) group_of[r.ours] = r.group;
  auto group = [&](const std::string& n) {
    auto it = group_of.find(n);
    return it == group_of.end() ? std::string() : it->second;
  };
  std::map<std::string, std::vector<std::string>> present, missing;  // head -> our tensors
  for (const auto& t : layout) {
    const std::string g = group(t.name);
    SPARSELM_CHECK(!g.empty() || in_file.contains(t.name), file.string(), ": missing tensor '", t.name, "' (shape ",
                   dims_string(t.shape), "): the encoder must be complete");
    (in_file.contains(t.name) ? present : missing)[g].push_back(t.name);
  }
  for (const auto& [g, names] : missing) {
    if (present.contains(g)) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
      fail(file.string(), ": head '", g, "' is incomplete: missing ", list);
    }
    SPARSELM_CHECK(!o.require_heads, file.string(), ": head '", g, "' is absent (require_heads)");
    rep.absent_groups.push_back(g);
    rep.absent.insert(rep.absent.end(), names.begin(), names.end());
  }
  for (const auto& [g, names] : present)
    if (!g.empty()) rep.loaded_groups.push_back(g);
  std::string extra;
  for (const auto& n : in_file) {
    if (ours.contains(n)) continue;
    // a pattern goes with its values: the model's, or those of a head it lacks
    const std::string base = n.ends_with(".pattern") ? n.substr(0, n.size() - 8) : n;
    if (base != n && sparse_names.contains(base)) continue;
    if (!group(base).empty())
      rep.unused.push_back(n);
    else if (o.skip_unexpected)
      rep.skipped.push_back(n);
    else
      extra += (extra.empty() ? "'" : ", '") + n + "'";
  }
  SPARSELM_CHECK(extra.empty(), file.string(), ": tensors that are neither the model's nor a known head's: ", extra,
                 " (a checkpoint of a different model?)");
  safetensors_file f(file, o.verify);
  auto& params = model.params();
  for (std::size_t i = 0; i < layout.count(); ++i)
    if (in_file.contains(layout[i].name)) {
      if (const auto* sw = detail::find_weight(weights, i)) {
        const std::string& n = layout[i].name;
        sparse::pattern_from_i32(n, *sw->pattern, f.read_i32(n + ".pattern", sparse::pattern_shape(*sw->pattern)));
      }
      f.read_f32(layout[i].name, layout[i].shape, params[i]);
      ++rep.tensors;
    }
  return rep;
}

}  // namespace sparselm::io
