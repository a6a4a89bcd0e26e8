#pragma once
// What a residual block (layers/block.hpp) tells the parts it builds: sizes, norm settings,
// dropout, biases, the sparse plan and the sub-layer names. One struct for every part type, so a
// block can build any norm, attention and feed-forward from the same arguments (make_part,
// layers/branch.hpp); a part reads the fields it needs and ignores the rest.

#include <cstddef>
#include <memory>
#include <string>

#include "sparselm/layers/layer_norm.hpp"
#include "sparselm/layers/linear.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

namespace sparselm {
namespace kernels {
class block_causal_pattern;
}

// The names of a block's four parts under its prefix (GPT-2's by default; LLaMA's in models/llama.hpp).
struct block_names {
  std::string norm1 = "ln_1", attn = "attn", norm2 = "ln_2", ffn = "mlp";
};

struct block_options {
  std::size_t channels = 0, heads = 0, head_dim = 0, hidden = 0;
  norm_options norm{};  // both norms (the S1 sparse LM starts gamma at 0.1, BERT uses eps 1e-12)
  float attn_dropout = 0.0f, resid_dropout = 0.0f;
  bool qkv_bias = true, proj_bias = true;
  bool ffn_bias = true;                     // the feed-forward's projections
  std::size_t kv_heads = 0;                 // grouped-query attention: key/value heads (0: heads)
  float rope_theta = 10000.0f;              // rotary position embedding base (attention with rotary positions)
  const sparse_plan* plan = nullptr;  // block-sparse projections: how many blocks each gets
  std::shared_ptr<const kernels::block_causal_pattern> attn_pattern;  // static block-sparse attention, or null
  std::uint64_t site = 0;                   // dropout streams of the block's parts (set by the block)
  // Tensor parallelism: this rank's part of the group its attention heads and feed-forward hidden
  // units are split over (parallel/tensor_parallel.hpp; self_attention, grouped_query_attention,
  // feed_forward and gated_feed_forward). Parts that cannot be split refuse an active split.
  parallel::tensor_split tensor{};
  block_names names{};
};

}  // namespace sparselm
