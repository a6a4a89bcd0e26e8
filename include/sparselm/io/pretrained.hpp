#pragma once
// Starting a model from a pretrained checkpoint, ours or HuggingFace's:
//
//   auto r = io::load_pretrained(dir, model, io::hf_bert_map());   // our checkpoint or an HF directory
//   std::fprintf(stderr, "%s\n", r.summary().c_str());              // what was loaded, absent, unused
//
// HF directories go through io::load_hf (io/huggingface.hpp, which also defines the name maps and
// the report); our own checkpoints load whole when they are of the same model, or by head when
// they are of another model on the same encoder (below).

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sparselm/core/error.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/safetensors.hpp"

namespace sparselm::io {

// True when the safetensors file was written by this library (io::save_model records the layout).
inline bool is_sparselm_checkpoint(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  safetensors_file f(file, /*verify=*/false);
  return f.metadata().contains("sparselm.layout");
}

// Our own checkpoint or an HF directory (load_hf through `map`), told apart by the file's
// metadata. `path`: a checkpoint directory or its model.safetensors. Our checkpoint of the same
// model loads whole (io::load_model: every tensor, block-sparse patterns); one of another model on
// the same encoder (bert_pretrain's checkpoint into a bert_classifier) loads by our tensor names
// under the map's head rules, as an HF file does: every embedding and block tensor must be there,
// a head of the model is loaded when all its tensors are, left as initialised when none is (an
// error naming the missing ones when only some are), and the file's tensors of heads the model
// lacks are reported unused; any other tensor is an error naming it.
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
  {
    safetensors_file f(file, /*verify=*/false);
    for (const auto& t : f.tensors()) in_file.insert(t.name);
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
  for (const auto& n : in_file)
    SPARSELM_CHECK(!n.ends_with(".pattern"), file.string(), ": a block-sparse checkpoint ('", n,
                   "') loads only into the block-sparse model it was saved from; export it dense (export_hf) to "
                   "start another model from it");
  SPARSELM_CHECK(detail::sparse_weights_of(model).empty(), file.string(),
                 ": a checkpoint of another model loads into dense models only (this one is block-sparse); "
                 "load it into the dense model, or save this model's own checkpoint");
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
    if (!group(n).empty()) rep.unused.push_back(n);
    else if (o.skip_unexpected) rep.skipped.push_back(n);
    else extra += (extra.empty() ? "'" : ", '") + n + "'";
  }
  SPARSELM_CHECK(extra.empty(), file.string(), ": tensors that are neither the model's nor a known head's: ", extra,
                 " (a checkpoint of a different model?)");
  safetensors_file f(file, o.verify);
  auto& params = model.params();
  for (std::size_t i = 0; i < layout.count(); ++i)
    if (in_file.contains(layout[i].name)) {
      f.read_f32(layout[i].name, layout[i].shape, params[i]);
      ++rep.tensors;
    }
  return rep;
}

}  // namespace sparselm::io
