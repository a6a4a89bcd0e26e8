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

template <class Model>
std::vector<float> param_snapshot(Model& m) {
  const auto& a = m.params();
  std::vector<float> v;
  for (std::size_t i = 0; i < a.layout().count(); ++i) v.insert(v.end(), a[i].begin(), a[i].end());
  return v;
}

}  // namespace sparselm::test
