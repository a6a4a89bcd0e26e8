#pragma once
// What a run's plan (train/plan.hpp) needs of a model, from its config alone: its sizes, its linear
// layers (the projections, dense or block-sparse), its other parameters and tensors, and the kinds
// of its parts (layer norm or RMSNorm, fused or grouped-query attention, GELU or gated
// feed-forward), for GPT, the S1 sparse LM, BERT with its heads, and the LLaMA family.
//
//   model_shape m = model_shape_of(llama_config::from_json(read_json_file("configs/llama-1b.json")));

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "sparselm/core/checked.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/models/sparse_lm.hpp"

namespace sparselm {

// --- the model's shape -----------------------------------------------------------------------------

// One linear layer: weight (in, out) [+ bias]; `sparse`: block-sparse when the run's projections are.
struct projection_shape {
  std::string name;
  std::size_t in = 0, out = 0;
  bool bias = true, sparse = false;
  std::size_t rows_per_seq = 0;  // heads reading some rows of each sequence (0: every row)
  bool in_block = false;         // a projection of a transformer block (recompute re-runs it)
  // Under tensor parallelism (parallel/tensor_parallel.hpp): split by output columns (the first
  // projections, their biases too) or input rows (the output projections), or whole on every rank.
  enum class split { none, columns, rows } tensor = split::none;
};

enum class head_kind { causal_lm, bert_pretraining, classification, span };

// What a plan needs of a model: its sizes, its linear layers and its other parameters.
struct model_shape {
  std::string family;
  std::size_t layers = 0, width = 0, heads = 0, head_dim = 0, ff = 0, vocab = 0, positions = 0;
  bool post_ln = false, causal = true;
  // The LLaMA family's parts (layers/rms_norm.hpp, grouped_attention.hpp, gated_feed_forward.hpp):
  // RMSNorm (one statistic per row, not two), separate Q, K, V projections with kv_heads key/value
  // heads and rotary positions, a gated feed-forward (gate, up, down). false: layer norms, fused
  // QKV self-attention, the GELU feed-forward.
  bool llama_parts = false;
  std::size_t kv_heads = 0;         // grouped-query attention: key/value heads (0: heads)
  head_kind head = head_kind::causal_lm;
  std::size_t embed_width = 0;      // S1: the factorised embedding and head bottleneck width E (0: none)
  bool embed_gelu = false;          // S1: GELU after the embedding up-projection
  std::size_t mlm_per_seq = 0;      // BERT pre-training: masked positions per sequence
  double attention_density = 1.0;   // static block-sparse attention (S1): fraction of score blocks
  std::vector<projection_shape> projections;
  std::size_t other_parameters = 0;  // embeddings, norms, logit biases
  std::size_t tensors = 0;           // arena tensors (64-byte alignment)

  std::size_t hd() const noexcept { return heads * head_dim; }
  std::size_t gd() const noexcept { return (kv_heads ? kv_heads : heads) * head_dim; }
};

namespace detail {
inline void add_blocks(model_shape& m, const std::string& prefix, bool qkv_bias, bool proj_bias) {
  const std::size_t C = m.width, HD = m.hd(), F = m.ff;
  for (std::size_t l = 0; l < m.layers; ++l) {
    const std::string p = prefix + std::to_string(l);
    using split = projection_shape::split;
    m.projections.push_back({p + ".attn.c_attn.weight", C, 3 * HD, qkv_bias, true, 0, true, split::columns});
    m.projections.push_back({p + ".attn.c_proj.weight", HD, C, proj_bias, true, 0, true, split::rows});
    m.projections.push_back({p + ".mlp.c_fc.weight", C, F, true, true, 0, true, split::columns});
    m.projections.push_back({p + ".mlp.c_proj.weight", F, C, true, true, 0, true, split::rows});
    m.other_parameters += 4 * C;  // two norms
    m.tensors += 10 + (qkv_bias ? 1 : 0) + (proj_bias ? 1 : 0);  // norms 4, weights 4, mlp biases 2
  }
}
}  // namespace detail

inline model_shape model_shape_of(const gpt_config& c) {
  model_shape m{.family = "gpt", .layers = c.n_layer, .width = c.n_embd, .heads = c.n_head,
                .head_dim = c.head_dim(), .ff = c.hidden(), .vocab = c.vocab_size, .positions = c.n_positions};
  m.other_parameters = (c.vocab_size + c.n_positions) * c.n_embd + 2 * c.n_embd;  // wte, wpe, ln_f
  m.tensors = 4;
  detail::add_blocks(m, "h.", true, true);
  return m;
}

inline model_shape model_shape_of(const sparse_lm_config& c) {
  const std::size_t E = c.embedding_length, H = c.hidden_length;
  model_shape m{.family = "sparse_lm", .layers = c.layers, .width = H, .heads = c.attention_heads,
                .head_dim = c.qkv_length, .ff = c.ff_length, .vocab = c.vocab_size, .positions = c.sequence_length};
  m.embed_width = E;
  m.embed_gelu = c.embedding_gelu;
  if (c.block_sparse_attention) m.attention_density = std::min(1.0, c.block_sparse_attention->density);
  // lut, three embedding norms (token, position, input), ln_f, the head's norm, logit bias
  m.other_parameters = c.vocab_size * E + 3 * 2 * E + 2 * H + 2 * E + (c.projection_bias ? c.vocab_size : 0);
  m.tensors = 1 + 6 + 2 + 2 + (c.projection_bias ? 1 : 0);
  m.projections.push_back({"embedding.up.weight", E, H, true, true});
  detail::add_blocks(m, "h.", c.attention_bias, c.attention_bias);
  m.projections.push_back({"head.down.weight", H, E, true, true});
  m.tensors += 4;
  return m;
}

// The LLaMA family (models/llama.hpp): per block two RMSNorms, q/k/v/o projections (k and v of
// kv_heads · head_dim outputs) and gate/up/down, in the order the model builds them (ERK allocation
// sees the same shapes); the embedding, the final norm and an untied head's table.
inline model_shape model_shape_of(const llama_config& c) {
  const std::size_t C = c.hidden_size, F = c.intermediate_size;
  model_shape m{.family = "llama", .layers = c.num_hidden_layers, .width = C, .heads = c.num_attention_heads,
                .head_dim = c.head_width(), .ff = F, .vocab = c.vocab_size, .positions = c.max_position_embeddings};
  m.llama_parts = true;
  m.kv_heads = c.kv_heads();
  const std::size_t HD = m.hd(), GD = m.gd();
  const bool untied = !c.tie_word_embeddings;
  m.other_parameters = c.vocab_size * C + C + (untied ? c.vocab_size * C : 0);  // embed_tokens, norm, lm_head
  m.tensors = 2 + (untied ? 1 : 0);
  const bool ab = c.attention_bias, mb = c.mlp_bias;
  for (std::size_t l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    using split = projection_shape::split;
    m.projections.push_back({p + ".self_attn.q_proj.weight", C, HD, ab, true, 0, true, split::columns});
    m.projections.push_back({p + ".self_attn.k_proj.weight", C, GD, ab, true, 0, true, split::columns});
    m.projections.push_back({p + ".self_attn.v_proj.weight", C, GD, ab, true, 0, true, split::columns});
    m.projections.push_back({p + ".self_attn.o_proj.weight", HD, C, ab, true, 0, true, split::rows});
    m.projections.push_back({p + ".mlp.gate_proj.weight", C, F, mb, true, 0, true, split::columns});
    m.projections.push_back({p + ".mlp.up_proj.weight", C, F, mb, true, 0, true, split::columns});
    m.projections.push_back({p + ".mlp.down_proj.weight", F, C, mb, true, 0, true, split::rows});
    m.other_parameters += 2 * C;  // input_layernorm, post_attention_layernorm
    m.tensors += 2 + 7 + (ab ? 4 : 0) + (mb ? 3 : 0);
  }
  return m;
}

// BERT with one of its heads: pre-training (mlm_per_seq masked positions per sequence), sequence
// classification (labels) or SQuAD spans.
inline model_shape model_shape_of(const bert_config& c, head_kind head, std::size_t mlm_per_seq = 0,
                                  std::size_t labels = 2) {
  const std::size_t C = c.hidden_size;
  model_shape m{.family = "bert", .layers = c.num_hidden_layers, .width = C, .heads = c.num_attention_heads,
                .head_dim = c.head_dim(), .ff = c.intermediate_size, .vocab = c.vocab_size,
                .positions = c.max_position_embeddings, .post_ln = true, .causal = false, .head = head};
  m.mlm_per_seq = mlm_per_seq;
  m.other_parameters = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * C + 2 * C;
  m.tensors = 5;
  detail::add_blocks(m, "encoder.layer.", true, true);
  auto dense_head = [&](std::string name, std::size_t in, std::size_t out, std::size_t rows_per_seq) {
    m.projections.push_back({std::move(name), in, out, true, false, rows_per_seq});
    m.tensors += 2;
  };
  switch (head) {
    case head_kind::bert_pretraining:
      dense_head("cls.predictions.transform.dense.weight", C, C, mlm_per_seq);
      dense_head("pooler.dense.weight", C, C, 1);
      dense_head("cls.seq_relationship.weight", C, 2, 1);
      m.other_parameters += 2 * C + c.vocab_size;  // transform norm, decoder bias
      m.tensors += 3;
      break;
    case head_kind::classification:
      dense_head("pooler.dense.weight", C, C, 1);
      dense_head("classifier.weight", C, labels, 1);
      break;
    case head_kind::span:
      m.projections.push_back({"qa_outputs.weight", C, 2, true, false});
      m.tensors += 2;
      break;
    case head_kind::causal_lm: break;
  }
  return m;
}

// One rank's share of m split over a tensor-parallel group of n ranks (parallel/tensor_parallel.hpp):
// H/n heads (and G/n key/value heads) and F/n hidden units per block, the split projections'
// slices (a column-split bias with its columns); the embedding, norms, head and the output
// projections' biases whole. An error names the heads or hidden units n does not divide.
inline model_shape tensor_parallel_share(model_shape m, std::size_t n) {
  if (n <= 1) return m;
  SPARSELM_CHECK(m.heads % n == 0, "tensor parallelism: ", m.heads, " attention heads do not split over ", n, " ranks");
  SPARSELM_CHECK(m.kv_heads % n == 0, "tensor parallelism: ", m.kv_heads, " key/value heads do not split over ", n,
                 " ranks");
  SPARSELM_CHECK(m.ff % n == 0, "tensor parallelism: ", m.ff, " hidden units do not split over ", n, " ranks");
  m.heads /= n;
  m.kv_heads /= n;
  m.ff /= n;
  for (auto& q : m.projections) {
    if (q.tensor == projection_shape::split::columns) q.out /= n;
    if (q.tensor == projection_shape::split::rows) q.in /= n;
  }
  return m;
}

}  // namespace sparselm
