#pragma once
// A two-layer BERT small enough for finite-difference tests (vocabulary 50, width 32, 2 heads,
// 16 positions, no dropout, init σ 0.2 so that gradients are well above float noise).
#include "sparselm/models/bert.hpp"

namespace sparselm::test {

inline bert_config tiny_bert_config() {
  return bert_config::from_json(json{{"vocab_size", 50},
                                     {"hidden_size", 32},
                                     {"num_hidden_layers", 2},
                                     {"num_attention_heads", 2},
                                     {"intermediate_size", 64},
                                     {"max_position_embeddings", 16},
                                     {"hidden_dropout_prob", 0.0},
                                     {"attention_probs_dropout_prob", 0.0},
                                     {"initializer_range", 0.2}},
                                "tiny bert");
}

}  // namespace sparselm::test
