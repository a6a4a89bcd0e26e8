// libFuzzer: a run config (train/run_config.hpp) and its model config (models/gpt.hpp) from
// arbitrary JSON text, through the depth-limited parser and the size limits the programs apply.
#include "fuzz_common.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/run_config.hpp"

SPARSELM_FUZZ_TARGET(run_config) {
  fuzz::expect_clean([&] {
    sparselm::json j = sparselm::parse_json(fuzz::text(data, size), "fuzz.json");
    if (!j.is_object()) return;
    if (j.contains("model")) {
      sparselm::check_model_limits(j["model"], "fuzz.json model");
      (void)sparselm::gpt_config::from_json(j["model"], "fuzz.json model");
    }
    (void)sparselm::lm_run_config::from_json(j, "fuzz.json", ".");
  });
  return 0;
}
