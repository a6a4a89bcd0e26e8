#pragma once
// Helpers of the PyTorch parity tests (tests/models/test_*_parity.cpp): loading a reference file,
// the relative error of a tensor, and the committed-or-regenerated reference.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/json.hpp"

namespace sparselm::test {

inline json load_reference(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return json::parse(in);
}

// max |a − b| / max |b| over a tensor.
inline double rel_err(std::span<const float> a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return den > 0 ? num / den : num;
}

// Copies the reference's "params" (name -> flat values) into every tensor of the model.
template <class Model>
void load_reference_params(Model& m, const json& r) {
  for (const auto& t : *m.layout()) {
    REQUIRE_MESSAGE(r["params"].contains(t.name), "reference has no tensor " << t.name);
    auto v = r["params"][t.name].template get<std::vector<float>>();
    auto dst = m.params().at(t.name);
    REQUIRE_MESSAGE(v.size() == dst.size(), t.name << ": reference has " << v.size() << " values, model " << dst.size());
    std::copy(v.begin(), v.end(), dst.begin());
  }
  CHECK(r["params"].size() == m.layout()->count());
}

// The reference: the committed file (tests/reference/data/<name>.json) when torch is not
// importable by /usr/bin/python3; else a fresh one from tests/reference/<script>, after
// same_as_committed(fresh, committed) has checked that the committed file is not stale.
inline json parity_reference(const std::string& name, const std::string& script,
                             const std::function<void(const json&, const json&)>& same_as_committed) {
  const std::string committed = SPARSELM_SOURCE_DIR "/tests/reference/data/" + name + ".json";
  const bool torch = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  if (!torch) {
    MESSAGE("torch not importable by /usr/bin/python3: using the committed reference " << committed);
    return load_reference(committed);
  }
  const std::string fresh = SPARSELM_TEST_TMPDIR "/" + name + ".json";
  const std::string cmd = "/usr/bin/python3 " SPARSELM_SOURCE_DIR "/tests/reference/" + script + " --out " + fresh;
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "reference script failed: " << cmd);
  json f = load_reference(fresh), c = load_reference(committed);
  same_as_committed(f, c);
  return f;
}

}  // namespace sparselm::test
