#pragma once
// The name maps between our tensors and HuggingFace transformers' (io/huggingface.hpp loads and saves
// through them): HF BERT, GPT-2 and LLaMA, and the builder a new family's map is written with.
//
// A name map (hf_name_map) lists, for each of our tensors, its HF tensor(s) and layout: copied,
// transposed (our linear weights are (in, out), torch.nn.Linear's (out, in)), or fused (our
// attention's c_attn (C, 3C) is HF BERT's query, key and value (C, C) each, transposed). Rules
// have a scope: "base" tensors (embeddings, pooler, final norm) and "block" tensors (one rule per
// sub-layer, for every block index) sit under HF's base-model prefix (`bert.`, `transformer.`) in
// a model with heads and without it in a bare base model; both are read, and written with it.
// "top" tensors (heads: `cls.*`, `classifier.*`, `qa_outputs.*`, `lm_head.*`) never carry it.
//
//   io::hf_name_map m = io::hf_gpt2_map();
//   m.add(io::hf_scope::top, {"score.weight", {"score.weight"}, io::hf_layout::transpose, "score"});  // a new head

#include <string>
#include <vector>

namespace sparselm::io {

enum class hf_layout {
  copy,       // same shape and order
  transpose,  // ours (in, out), HF (out, in)
  fused_qkv,  // ours c_attn (C, 3C) / (3C) = HF's three (C, C) (out, in) weights / (C) biases, in order
};

enum class hf_scope { base, block, top };

// One of our tensors and its HF counterpart(s); names relative to the scope (see the header).
struct hf_rule {
  std::string ours;
  std::vector<std::string> hf;  // one name, or three for fused_qkv
  hf_layout layout = hf_layout::copy;
  std::string group;            // "": required (embeddings, blocks); else the head it belongs to
};

// An HF tensor that is a copy of one of ours (a tied output layer): checked equal, not loaded.
struct hf_tie {
  std::string hf;     // top-scope HF name
  std::string ours;   // our tensor it must equal
  std::string group;  // checked when this head is loaded ("" always)
};

struct hf_name_map {
  std::string name;                  // "bert", "gpt2": names the map in messages
  std::string base_prefix;           // HF's base-model prefix ("bert.", "transformer.")
  std::string block_ours, block_hf;  // block name prefixes before the block index
  std::vector<hf_rule> base, block, top;
  std::vector<std::string> buffers, block_buffers;  // HF buffers, ignored (base scope / per block)
  std::vector<hf_tie> tied;

  // Adds a rule. A linear layer of a new head: add(hf_scope::top, {"qa_outputs.weight",
  // {"qa_outputs.weight"}, hf_layout::transpose, "qa"}).
  hf_name_map& add(hf_scope s, hf_rule r) {
    (s == hf_scope::base ? base : s == hf_scope::block ? block : top).push_back(std::move(r));
    return *this;
  }
  // A linear layer `<ours>.weight/.bias` ↔ `<hf>.weight/.bias` (weight transposed).
  hf_name_map& add_linear(hf_scope s, const std::string& ours, const std::string& hf, const std::string& group) {
    add(s, {ours + ".weight", {hf + ".weight"}, hf_layout::transpose, group});
    return add(s, {ours + ".bias", {hf + ".bias"}, hf_layout::copy, group});
  }
  // A layer norm (or any weight + bias pair copied as is).
  hf_name_map& add_norm(hf_scope s, const std::string& ours, const std::string& hf, const std::string& group) {
    add(s, {ours + ".weight", {hf + ".weight"}, hf_layout::copy, group});
    return add(s, {ours + ".bias", {hf + ".bias"}, hf_layout::copy, group});
  }
};

// HF BERT (BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
// BertForQuestionAnswering) ↔ bert<> and models sharing its embedding and block names. Head groups:
// "pooler" (bert.pooler.dense), "mlm" (cls.predictions.*), "nsp" (cls.seq_relationship),
// "classifier" (classifier, (num_labels, C) in HF), "qa" (qa_outputs, (2, C) in HF).
inline hf_name_map hf_bert_map() {
  hf_name_map m;
  m.name = "bert";
  m.base_prefix = "bert.";
  m.block_ours = m.block_hf = "encoder.layer.";
  for (const char* e : {"word_embeddings", "position_embeddings", "token_type_embeddings"})
    m.add(hf_scope::base, {std::string("embeddings.") + e + ".weight", {std::string("embeddings.") + e + ".weight"}});
  m.add_norm(hf_scope::base, "embeddings.LayerNorm", "embeddings.LayerNorm", "");
  m.add_linear(hf_scope::base, "pooler.dense", "pooler.dense", "pooler");
  for (const char* k : {"weight", "bias"}) {
    std::vector<std::string> qkv;
    for (const char* n : {"query", "key", "value"}) qkv.push_back(std::string("attention.self.") + n + "." + k);
    m.add(hf_scope::block, {std::string("attn.c_attn.") + k, qkv, hf_layout::fused_qkv, ""});
  }
  m.add_linear(hf_scope::block, "attn.c_proj", "attention.output.dense", "");
  m.add_norm(hf_scope::block, "ln_1", "attention.output.LayerNorm", "");
  m.add_linear(hf_scope::block, "mlp.c_fc", "intermediate.dense", "");
  m.add_linear(hf_scope::block, "mlp.c_proj", "output.dense", "");
  m.add_norm(hf_scope::block, "ln_2", "output.LayerNorm", "");
  m.add_linear(hf_scope::top, "cls.predictions.transform.dense", "cls.predictions.transform.dense", "mlm");
  m.add_norm(hf_scope::top, "cls.predictions.transform.LayerNorm", "cls.predictions.transform.LayerNorm", "mlm");
  m.add(hf_scope::top, {"cls.predictions.bias", {"cls.predictions.bias"}, hf_layout::copy, "mlm"});
  m.add_linear(hf_scope::top, "cls.seq_relationship", "cls.seq_relationship", "nsp");
  m.add_linear(hf_scope::top, "classifier", "classifier", "classifier");
  m.add_linear(hf_scope::top, "qa_outputs", "qa_outputs", "qa");
  m.buffers = {"embeddings.position_ids", "embeddings.token_type_ids"};
  m.tied = {{"cls.predictions.decoder.weight", "embeddings.word_embeddings.weight", "mlm"},
            {"cls.predictions.decoder.bias", "cls.predictions.bias", "mlm"}};
  return m;
}

// HF GPT-2 (GPT2Model, GPT2LMHeadModel) ↔ gpt<>: the same names and (Conv1D) layouts; the
// `transformer.` prefix, the causal-mask buffers and the tied lm_head.weight are handled here.
inline hf_name_map hf_gpt2_map() {
  hf_name_map m;
  m.name = "gpt2";
  m.base_prefix = "transformer.";
  m.block_ours = m.block_hf = "h.";
  for (const char* n : {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"}) m.add(hf_scope::base, {n, {n}});
  for (const char* s : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"})
    for (const char* k : {".weight", ".bias"}) m.add(hf_scope::block, {std::string(s) + k, {std::string(s) + k}});
  m.block_buffers = {"attn.bias", "attn.masked_bias"};
  m.tied = {{"lm_head.weight", "wte.weight", ""}};
  return m;
}

// HF LLaMA (LlamaModel, LlamaForCausalLM) ↔ llama<>: our names are HF's without the "model."
// prefix; the projections are transposed (ours (in, out), torch.nn.Linear (out, in)). Tied
// (tie_word_embeddings): lm_head.weight, if the file has it, must equal the embedding; untied: it is
// the head's own table, (V, C) in both.
inline hf_name_map hf_llama_map(bool tied) {
  hf_name_map m;
  m.name = "llama";
  m.base_prefix = "model.";
  m.block_ours = m.block_hf = "layers.";
  for (const char* n : {"embed_tokens.weight", "norm.weight"}) m.add(hf_scope::base, {n, {n}});
  for (const char* s : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                        "mlp.up_proj", "mlp.down_proj"})
    m.add_linear(hf_scope::block, s, s, "");
  for (const char* s : {"input_layernorm.weight", "post_attention_layernorm.weight"}) m.add(hf_scope::block, {s, {s}});
  m.block_buffers = {"self_attn.rotary_emb.inv_freq"};
  m.buffers = {"rotary_emb.inv_freq"};
  if (tied) m.tied = {{"lm_head.weight", "embed_tokens.weight", ""}};
  else m.add(hf_scope::top, {"lm_head.weight", {"lm_head.weight"}});
  return m;
}

}  // namespace sparselm::io
