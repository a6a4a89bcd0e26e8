// AdamW, Adam, SGD (momentum, Nesterov) against torch.optim, and LAMB against a torch version
// written from the formula (tests/reference/optim_reference.py). Skipped, with a message, when
// /usr/bin/python3 cannot import torch.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
#include "test_helpers.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace optim_test;
using nlohmann::json;

namespace {

constexpr std::size_t steps = 5;
float lr_of(std::size_t t) { return 0.01f * (1.0f + 0.25f * float(t)); }

bool torch_available() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

// One optimiser run: the inputs for the reference and our results.
struct parity_case {
  std::string name, kind;
  json config;
  std::function<void(model&, json& result)> run;  // runs our optimiser, stores params and slots
};

template <class Opt>
parity_case make_case(std::string name, std::string kind, json config) {
  parity_case c{name, kind, config, {}};
  c.run = [config](model& md, json& result) {
    Opt opt{typename Opt::config_type(config)};
    opt.attach(md.layout);
    for (std::size_t t = 1; t <= steps; ++t) {
      md.fill_grads(t);
      opt.step(md.params, md.grads, lr_of(t));
    }
    auto st = opt.state();
    for (std::size_t i = 0; i < md.layout->count(); ++i) {
      result["params"].push_back(std::vector<float>(md.params[i].begin(), md.params[i].end()));
      for (auto& s : st.slots)
        result["slots"][s.name].push_back(std::vector<float>((*s.slots)[i].begin(), (*s.slots)[i].end()));
    }
  };
  return c;
}

json case_input(const parity_case& c) {
  model md(3000);
  json j{{"name", c.name}, {"optimizer", c.kind}, {"config", c.config}};
  for (const auto& t : *md.layout) {
    auto v = md.params[md.layout->at(t.name)];
    j["tensors"].push_back({{"name", t.name},
                            {"no_decay", (t.flags & param_no_decay) != 0},
                            {"no_trust", (t.flags & param_no_trust) != 0},
                            {"frozen", (t.flags & param_frozen) != 0},
                            {"values", std::vector<float>(v.begin(), v.end())}});
  }
  for (std::size_t t = 1; t <= steps; ++t) {
    md.fill_grads(t);
    json step{{"lr", lr_of(t)}};
    for (std::size_t i = 0; i < md.layout->count(); ++i)
      step["grads"].push_back(std::vector<float>(md.grads[i].begin(), md.grads[i].end()));
    j["steps"].push_back(step);
  }
  return j;
}

}  // namespace

TEST_CASE("optimisers match PyTorch (rel err <= 1e-5 after 5 steps)") {
  if (!torch_available()) {
    MESSAGE("SKIPPED: /usr/bin/python3 cannot import torch; PyTorch parity of the optimisers not checked");
    return;
  }
  const std::vector<parity_case> cases = {
      make_case<optim::adamw<>>("adamw", "adamw", {{"weight_decay", 0.1}, {"eps", 1e-6}}),
      make_case<optim::adam<>>("adam", "adam", {{"eps", 1e-2}}),
      make_case<optim::sgd<>>("sgd_nesterov", "sgd", {{"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}}),
      make_case<optim::sgd<>>("sgd_momentum", "sgd", {{"momentum", 0.8}, {"nesterov", false}, {"weight_decay", 0.0}}),
      make_case<optim::lamb<>>("lamb", "lamb", {{"weight_decay", 0.01}, {"eps", 1e-6}}),
      make_case<optim::lamb<>>("lamb_no_bias_correction", "lamb",
                               {{"weight_decay", 0.01}, {"eps", 1e-6}, {"bias_correction", false}}),
  };

  const std::string dir = SPARSELM_TEST_TMPDIR;
  const std::string in = dir + "/optim_parity_in.json", out = dir + "/optim_parity_out.json";
  {
    json input;
    for (const auto& c : cases) input["cases"].push_back(case_input(c));
    std::ofstream(in) << input.dump();
  }
  const std::string cmd =
      "/usr/bin/python3 " + std::string(SPARSELM_SOURCE_DIR) + "/tests/reference/optim_reference.py " + in + " " + out;
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "reference script failed: ", cmd);
  json ref;
  std::ifstream(out) >> ref;

  for (const auto& c : cases) {
    CAPTURE(c.name);
    model md(3000);
    json ours;
    c.run(md, ours);
    const json& r = ref.at(c.name);
    for (std::size_t i = 0; i < md.layout->count(); ++i) {
      const std::string tname = (*md.layout)[i].name;
      auto want = r.at("params").at(i).get<std::vector<double>>();
      auto got = ours.at("params").at(i).get<std::vector<float>>();
      check_close<float>(got, want, 1e-5, c.name + " param " + tname);
      if ((*md.layout)[i].flags & param_frozen) continue;
      for (auto& [slot, values] : r.at("slots").items()) {
        auto sw = values.at(i).get<std::vector<double>>();
        auto sg = ours.at("slots").at(slot).at(i).get<std::vector<float>>();
        check_close<float>(sg, sw, 1e-5, c.name + " slot " + slot + " of " + tname);
      }
    }
  }
}

}  // namespace SPARSELM_UNITY_ID
