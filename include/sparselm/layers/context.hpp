#pragma once
// The step context and the layer concept for layers (core/step_context.hpp, core/layer.hpp), and
// the named scratch slots of the classic layers (block, fused attention, GELU feed-forward, LM
// head), which share one scratch pool per model. New layers keep their temporaries in their own
// cache instead of adding a slot here.

#include <cstddef>

#include "sparselm/core/layer.hpp"
#include "sparselm/core/step_context.hpp"

namespace sparselm {

// Named scratch slots, so nested layers never hand each other the same temporary.
enum scratch_slot : std::size_t {
  slot_block_a,      // block: branch output / branch gradient (N,C)
  slot_block_b,      // block: gradient w.r.t. a norm's output (N,C); forward under bf16 (pre-LN):
                     //   a norm's output, which the branch keeps in bf16 (N,C)
  slot_block_c,      // block (post-LN): gradient w.r.t. a norm's input (N,C)
  slot_ffn_hidden,   // feed-forward: hidden gradient (N,F); forward under bf16: the fp32
                     //   pre-activation, kept in bf16 (N,F)
  slot_attn_out,     // attention: gradient w.r.t. the heads' output (N,HD)
  slot_attn_qkv,     // attention: gradient w.r.t. fused qkv (N,3HD)
  slot_head,         // LM head: logits chunk (rows,V)
  slot_head_x,       // LM head: gradient w.r.t. the final norm output (N,C)
  slot_head_ce,      // LM head: per-row cross-entropy of a chunk (R)
  slot_model_a,      // model-level temporaries
  slot_model_b,
  slot_count
};

}  // namespace sparselm
