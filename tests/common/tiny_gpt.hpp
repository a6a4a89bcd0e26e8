#pragma once
// A one-layer GPT small enough for step-by-step trainer tests (vocabulary 16, 8 positions,
// 2 heads of 4 channels), and a flat copy of a model's parameters for exact comparisons.
#include <vector>

#include "sparselm/models/gpt.hpp"

namespace sparselm::test {

inline gpt_config tiny_gpt_config() {
  gpt_config c;
  c.vocab_size = 16;
  c.n_positions = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// Two layers of width 32 over a 64-token vocabulary, 16 positions, no dropout: big enough for
// trainer behaviour (precision, replicas), small enough for many steps in a test.
inline gpt_config small_gpt_config() {
  gpt_config c = tiny_gpt_config();
  c.vocab_size = 64;
  c.n_positions = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0f;
  return c;
}

template <class Model>
std::vector<float> param_snapshot(Model& m) {
  const auto& a = m.params();
  std::vector<float> v;
  for (std::size_t i = 0; i < a.layout().count(); ++i) v.insert(v.end(), a[i].begin(), a[i].end());
  return v;
}

}  // namespace sparselm::test
