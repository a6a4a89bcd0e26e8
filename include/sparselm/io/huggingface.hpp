#pragma once
// HuggingFace checkpoints in and out: a directory with config.json + model.safetensors as
// transformers' save_pretrained writes it, mapped onto any model whose tensor names a name map
// knows (bert<>, gpt<>, and models built from the same parts with other heads).
//
//   auto cfg = bert_config::from_json(io::read_model_config(dir), dir / "config.json");  // HF keys
//   bert<> model(cfg);
//   model.init(seed);                                   // heads absent from the file keep these values
//   io::hf_load_report r = io::load_hf(dir, model, io::hf_bert_map());
//   if (!r.loaded("pooler")) ...;                       // head groups: pooler, mlm, nsp, classifier, qa
//   std::fprintf(stderr, "%s\n", r.summary().c_str());
//   io::save_hf("out/hf", model, io::hf_bert_map());    // bert.-prefixed, Linear (out, in), F32
//   io::load_pretrained(dir, model, io::hf_bert_map()); // our own checkpoint or an HF directory (io/pretrained.hpp)
//
// The name maps (hf_name_map, hf_bert_map, hf_gpt2_map, hf_llama_map): io/hf_name_map.hpp.
//
// Loading is strict by default:
//   - every tensor of the model's embeddings and blocks must be in the file (error naming it);
//   - a head (rules with a group name) is loaded when all its tensors are in the file, reported
//     absent when none is (the model keeps its initial values: fine-tuning starts it fresh), and an
//     error naming the missing tensors when only some are; `require_heads` makes absence an error;
//   - the file's tensors of heads the model does not have (a pre-training checkpoint loaded into a
//     classifier) are reported unused, as transformers does;
//   - buffers (`embeddings.position_ids`, GPT-2's `attn.bias` / `attn.masked_bias` causal masks, of
//     any dtype) are ignored; tied copies (`lm_head.weight`, `cls.predictions.decoder.weight`,
//     `cls.predictions.decoder.bias`) must equal the tensor they are tied to (an untied output
//     layer is a different model) and are not loaded twice;
//   - any other tensor is an error naming it, or with `skip_unexpected` is skipped and listed;
//   - shapes are checked (HF shape expected, error naming the tensor); F32, F16 and BF16 are read;
//   - `LayerNorm.gamma` / `LayerNorm.beta` (older BERT files, e.g. bert-base-uncased) stand for
//     `LayerNorm.weight` / `LayerNorm.bias`.
// HF files hold dense weights; a block-sparse model is refused on load and densified on save.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/error.hpp"
#include "sparselm/io/atomic_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/hf_name_map.hpp"
#include "sparselm/io/safetensors.hpp"
#include "sparselm/sparse/pattern_io.hpp"

namespace sparselm::io {

struct hf_load_options {
  bool skip_unexpected = false;  // skip (and list) tensors the map does not know instead of failing
  bool require_heads = false;    // a head of the model that is absent from the file is an error
  bool verify = true;            // our own checkpoints (load_pretrained): check CRC-32C
};

// What load_hf / load_pretrained (io/pretrained.hpp) did.
struct hf_load_report {
  std::filesystem::path file;
  std::string format;                    // "huggingface" or "sparselm" (our own checkpoint)
  std::string prefix;                    // the base-model prefix the file's names carry ("" if bare)
  std::size_t tensors = 0;               // our tensors loaded
  std::vector<std::string> loaded_groups, absent_groups;  // the model's heads found / not found
  std::vector<std::string> absent;       // our tensors left as they were (their head is absent)
  std::vector<std::string> unused;       // file tensors of heads this model does not have
  std::vector<std::string> ignored;      // buffers, and tied copies checked equal
  std::vector<std::string> skipped;      // unexpected tensors skipped (skip_unexpected)
  std::map<std::string, std::size_t> dtypes;  // dtypes of the file tensors read, counted

  bool loaded(const std::string& group) const {
    return std::find(loaded_groups.begin(), loaded_groups.end(), group) != loaded_groups.end();
  }
  bool absent_group(const std::string& group) const {
    return std::find(absent_groups.begin(), absent_groups.end(), group) != absent_groups.end();
  }
  std::string summary() const {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    std::string s = file.string() + ": " + std::to_string(tensors) + " tensors loaded (" + format;
    if (!prefix.empty()) s += ", prefix '" + prefix + "'";
    for (auto& [d, n] : dtypes) s += ", " + std::to_string(n) + " " + d;
    s += ")";
    if (!loaded_groups.empty()) s += "; heads loaded: " + list(loaded_groups);
    if (!absent_groups.empty()) s += "; heads absent (left as initialised): " + list(absent_groups);
    if (!unused.empty()) s += "; " + std::to_string(unused.size()) + " tensors of heads this model does not have";
    if (!ignored.empty()) s += "; " + std::to_string(ignored.size()) + " buffers / tied copies ignored";
    if (!skipped.empty()) s += "; " + std::to_string(skipped.size()) + " unexpected tensors skipped: " + list(skipped);
    return s;
  }
};

namespace detail {

// Our tensor bound to its rule, with the HF names (scope-relative names completed).
struct hf_binding {
  const hf_rule* rule = nullptr;
  std::vector<std::string> hf;  // canonical HF names: without the base prefix
  bool scoped = false;          // base or block scope (takes the base prefix when written)
};

// "<prefix><digits>.<rest>" → rest and the digits; false if `name` has another form.
inline bool split_block(const std::string& name, const std::string& prefix, std::string& index, std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  std::size_t i = prefix.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == prefix.size() || i >= name.size() || name[i] != '.') return false;
  index = name.substr(prefix.size(), i - prefix.size());
  rest = name.substr(i + 1);
  return true;
}

inline bool hf_bind(const hf_name_map& m, const std::string& ours, hf_binding& b) {
  for (auto& r : m.top)
    if (r.ours == ours) return b = {&r, r.hf, false}, true;
  for (auto& r : m.base)
    if (r.ours == ours) return b = {&r, r.hf, true}, true;
  std::string index, rest;
  if (!split_block(ours, m.block_ours, index, rest)) return false;
  for (auto& r : m.block)
    if (r.ours == rest) {
      b = {&r, {}, true};
      for (auto& h : r.hf) b.hf.push_back(m.block_hf + index + "." + h);
      return true;
    }
  return false;
}

// The binding of every tensor of the model; a tensor the map does not know is an error.
inline std::vector<hf_binding> hf_bindings(const hf_name_map& m, const arena_layout& layout) {
  std::vector<hf_binding> out(layout.count());
  for (std::size_t i = 0; i < layout.count(); ++i)
    SPARSELM_CHECK(hf_bind(m, layout[i].name, out[i]), "HF name map '", m.name, "': the model's tensor '",
                   layout[i].name, "' has no HuggingFace name (extend the map with hf_name_map::add)");
  return out;
}

// The HF shape of each HF tensor of a binding, from our tensor's shape.
inline std::vector<std::size_t> hf_shape(const hf_binding& b, const std::vector<std::size_t>& ours) {
  switch (b.rule->layout) {
    case hf_layout::copy: return ours;
    case hf_layout::transpose:
      return ours.size() == 2 ? std::vector<std::size_t>{ours[1], ours[0]} : ours;
    case hf_layout::fused_qkv:
      return ours.size() == 2 ? std::vector<std::size_t>{ours[0], ours[0]} : std::vector<std::size_t>{ours[0] / 3};
  }
  return ours;
}

// LayerNorm.gamma / LayerNorm.beta (older BERT files) are LayerNorm.weight / LayerNorm.bias.
inline std::string hf_canonical_suffix(std::string n) {
  auto ends = [&](std::string_view s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  if (ends("LayerNorm.gamma")) n.replace(n.size() - 5, 5, "weight");
  else if (ends("LayerNorm.beta")) n.replace(n.size() - 4, 4, "bias");
  return n;
}

template <class Model>
void hf_refuse_sparse(Model& model, const std::string& what) {
  auto ws = sparse_weights_of(model);
  SPARSELM_CHECK(ws.empty(), what, ": HuggingFace checkpoints hold dense weights, but the model's tensor '",
                 ws.empty() ? std::string() : ws.front().name,
                 "' is block-sparse; load into the dense model of the same config");
}

inline void transpose_into(std::span<const float> src, std::size_t rows, std::size_t cols, float* dst,
                           std::size_t ld, std::size_t col0 = 0) {
  // src (rows, cols) → dst[j][col0 + i] = src[i][j] with dst row length ld
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + col0 + i] = src[i * cols + j];
}

}  // namespace detail

// Loads an HF model.safetensors (`path`: the file or its directory) into `model` through `map`.
// Throws sparselm::error naming the file and tensor for every problem listed in the header; on
// error the model may be partly loaded.
template <class Model>
hf_load_report load_hf(const std::filesystem::path& path, Model& model, const hf_name_map& map,
                       const hf_load_options& o = {}) {
  const auto file = std::filesystem::is_directory(path) ? path / model_file : path;
  const std::string fs = file.string();
  detail::hf_refuse_sparse(model, fs);
  safetensors_file f(file, o.verify);
  const arena_layout& layout = *model.layout();
  auto& params = model.params();
  const auto bind = detail::hf_bindings(map, layout);

  hf_load_report rep;
  rep.file = file;
  rep.format = "huggingface";
  bool prefixed = false;
  for (auto& t : f.tensors()) prefixed |= !map.base_prefix.empty() && t.name.rfind(map.base_prefix, 0) == 0;
  if (prefixed) rep.prefix = map.base_prefix;
  // canonical name (no base prefix, LayerNorm.weight/bias) → the file's name
  std::map<std::string, std::string> names;
  for (auto& t : f.tensors()) {
    std::string c = t.name;
    if (prefixed && c.rfind(map.base_prefix, 0) == 0) c = c.substr(map.base_prefix.size());
    c = detail::hf_canonical_suffix(c);
    auto [it, fresh] = names.emplace(c, t.name);
    SPARSELM_CHECK(fresh, fs, ": tensors '", it->second, "' and '", t.name, "' both stand for '", c, "'");
  }
  std::set<std::string> used;  // canonical names consumed

  // Head groups of the model: all present, none present, or an error naming the missing ones.
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> groups;  // present, missing
  for (std::size_t i = 0; i < layout.count(); ++i)
    for (auto& h : bind[i].hf) {
      auto& g = groups[bind[i].rule->group];
      (names.contains(h) ? g.first : g.second).push_back(h);
    }
  for (auto& [g, pm] : groups) {
    auto& [present, missing] = pm;
    if (missing.empty()) {
      if (!g.empty()) rep.loaded_groups.push_back(g);
      continue;
    }
    const bool partial = !present.empty();
    std::string list;
    for (std::size_t k = 0; k < missing.size() && k < 6; ++k) list += (k ? ", '" : "'") + missing[k] + "'";
    if (missing.size() > 6) list += " and " + std::to_string(missing.size() - 6) + " more";
    SPARSELM_CHECK(!g.empty(), fs, ": missing tensor", missing.size() > 1 ? "s " : " ", list,
                   " (names without the '", map.base_prefix, "' prefix; not an HF ", map.name,
                   " checkpoint, or a different number of layers?)");
    SPARSELM_CHECK(!partial, fs, ": head '", g, "' is incomplete: missing ", list);
    SPARSELM_CHECK(!o.require_heads, fs, ": head '", g, "' is not in the file (missing ", list, ")");
    rep.absent_groups.push_back(g);
  }

  std::vector<float> tmp;
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& b = bind[i];
    const auto& t = layout[i];
    if (rep.absent_group(b.rule->group)) {
      rep.absent.push_back(t.name);
      continue;
    }
    const auto shape = detail::hf_shape(b, t.shape);
    std::span<float> dst = params[i];
    for (std::size_t k = 0; k < b.hf.size(); ++k) {
      const std::string& fname = names.at(b.hf[k]);
      used.insert(b.hf[k]);
      rep.dtypes[to_string(f.info(fname).dtype)]++;
      switch (b.rule->layout) {
        case hf_layout::copy: f.read_f32(fname, shape, dst); break;
        case hf_layout::transpose:
          if (t.shape.size() != 2) {
            f.read_f32(fname, shape, dst);
            break;
          }
          tmp.resize(dst.size());
          f.read_f32(fname, shape, tmp);
          detail::transpose_into(tmp, shape[0], shape[1], dst.data(), shape[0]);
          break;
        case hf_layout::fused_qkv: {  // HF k (query, key, value) is our column block k
          const std::size_t C = shape[0];
          tmp.resize(element_count(shape));
          f.read_f32(fname, shape, tmp);
          if (t.shape.size() == 2) detail::transpose_into(tmp, C, C, dst.data(), 3 * C, k * C);
          else std::copy(tmp.begin(), tmp.end(), dst.begin() + std::ptrdiff_t(k * C));
          break;
        }
      }
    }
    ++rep.tensors;
  }

  // Tied copies: equal to the tensor they are tied to; of a head the model lacks: unused.
  for (auto& tie : map.tied) {
    auto it = names.find(tie.hf);
    if (it == names.end()) continue;
    used.insert(tie.hf);
    const bool checked = layout.find(tie.ours).has_value() && (tie.group.empty() || rep.loaded(tie.group));
    if (!checked) {
      rep.unused.push_back(it->second);
      continue;
    }
    auto ours = params.at(tie.ours);
    tmp.resize(ours.size());
    f.read_f32(it->second, {}, tmp);
    double worst = 0;
    for (std::size_t k = 0; k < tmp.size(); ++k) worst = std::max(worst, double(std::fabs(tmp[k] - ours[k])));
    SPARSELM_CHECK(worst == 0, fs, ": tensor '", it->second, "' differs from '", tie.ours,
                   "' it is tied to (largest difference ", worst,
                   "); an untied output layer is a different model, not supported here");
    rep.ignored.push_back(it->second);
  }
  // Buffers, heads the model does not have, and the rest.
  std::map<std::string, std::string> head_names;  // canonical HF name of every head rule → group
  for (const auto* rules : {&map.base, &map.top})
    for (auto& r : *rules)
      if (!r.group.empty())
        for (auto& h : r.hf) head_names[h] = r.group;
  std::string unexpected;
  std::size_t n_unexpected = 0;
  for (auto& [c, fname] : names) {
    if (used.contains(c)) continue;
    std::string index, rest;
    const bool buffer = std::find(map.buffers.begin(), map.buffers.end(), c) != map.buffers.end() ||
                        (detail::split_block(c, map.block_hf, index, rest) &&
                         std::find(map.block_buffers.begin(), map.block_buffers.end(), rest) != map.block_buffers.end());
    if (buffer) {
      rep.ignored.push_back(fname);
    } else if (auto h = head_names.find(c); h != head_names.end() && !groups.contains(h->second)) {
      rep.unused.push_back(fname);
    } else if (o.skip_unexpected) {
      rep.skipped.push_back(fname);
    } else if (n_unexpected++ < 8) {
      unexpected += (unexpected.empty() ? "'" : ", '") + fname + "'";
    }
  }
  if (n_unexpected > 8) unexpected += " and " + std::to_string(n_unexpected - 8) + " more";
  SPARSELM_CHECK(n_unexpected == 0, fs, ": tensor", n_unexpected > 1 ? "s " : " ", unexpected,
                 " not part of this model (HF ", map.name, " names; a different model or config? "
                 "skip_unexpected skips them)");
  return rep;
}

// The config.json of an HF export: the model's config (HF keys) unless given.
template <class Model>
nlohmann::json hf_config_json(Model& model) {
  if constexpr (requires { model.config().to_json(); })
    return model.config().to_json();
  else
    return nlohmann::json::object();
}

// Writes <dir>/model.safetensors with HF names and layouts (base tensors under the map's base
// prefix, as BertForPreTraining / GPT2LMHeadModel write them; linear weights (out, in); F32;
// tied copies and buffers left out, as save_pretrained does) and <dir>/config.json (`config`, or
// the model's own). Block-sparse weights are written dense.
template <class Model>
void save_hf(const std::filesystem::path& dir, Model& model, const hf_name_map& map,
             nlohmann::json config = nullptr) {
  const arena_layout& layout = *model.layout();
  const auto& params = model.params();
  const auto bind = detail::hf_bindings(map, layout);
  auto weights = detail::sparse_weights_of(model);
  safetensors_writer w;
  std::deque<std::vector<float>> store;  // converted tensors, alive until write()
  for (std::size_t i = 0; i < layout.count(); ++i) {
    const auto& b = bind[i];
    const auto& t = layout[i];
    std::span<const float> src = params[i];
    std::vector<std::size_t> shape = t.shape;
    if (const auto* sw = detail::find_weight(weights, i)) {
      const auto& p = *sw->pattern;
      store.emplace_back(p.in() * p.out());
      sparse::pattern_to_dense(t.name, p, params[i], store.back());
      src = store.back();
      shape = {p.in(), p.out()};
    }
    const auto hs = detail::hf_shape(b, shape);
    auto name = [&](std::size_t k) { return (b.scoped ? map.base_prefix : "") + b.hf[k]; };
    switch (b.rule->layout) {
      case hf_layout::copy: w.add(name(0), shape, src); break;
      case hf_layout::transpose:
        if (shape.size() != 2) {
          w.add(name(0), shape, src);
          break;
        }
        store.emplace_back(src.size());
        detail::transpose_into(src, shape[0], shape[1], store.back().data(), shape[0]);
        w.add(name(0), hs, std::span<const float>(store.back()));
        break;
      case hf_layout::fused_qkv: {
        const std::size_t C = hs[0];
        for (std::size_t k = 0; k < 3; ++k) {
          if (shape.size() == 2) {
            store.emplace_back(C * C);
            for (std::size_t r = 0; r < C; ++r)  // HF row r (output) = our column k·C + r
              for (std::size_t c = 0; c < C; ++c) store.back()[r * C + c] = src[c * 3 * C + k * C + r];
          } else {
            store.emplace_back(src.begin() + std::ptrdiff_t(k * C), src.begin() + std::ptrdiff_t((k + 1) * C));
          }
          w.add(name(k), hs, std::span<const float>(store.back()));
        }
        break;
      }
    }
  }
  w.set_metadata("format", "pt");
  std::filesystem::create_directories(dir);
  w.write(dir / model_file);
  if (config.is_null()) config = hf_config_json(model);
  if (config.is_object() && !config.contains("torch_dtype")) config["torch_dtype"] = "float32";
  atomic_write_text(dir / config_file, config.dump(2) + "\n");
}

}  // namespace sparselm::io
