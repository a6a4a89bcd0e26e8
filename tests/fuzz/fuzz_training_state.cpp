// libFuzzer: the training-state file (io/checkpoint.hpp, load_training_state) of a tiny GPT with
// AdamW, with float slots and with bf16 ones (slot tensors read in their storage type): the input is
// the file's bytes.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "fuzz_common.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/optim/slot_choice.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"
#include "tiny_model.hpp"

namespace {
struct bf16_slots : sparselm::default_policies {
  using optimizer = sparselm::optim::slot_choice<sparselm::optim::adamw>;
};
}  // namespace

SPARSELM_FUZZ_TARGET(training_state) {
  static fuzz::tiny_job job;
  static fuzz::tiny_job::model_type model16(job.model->config());
  static sparselm::trainer<fuzz::tiny_job::model_type, bf16_slots> trainer16(
      model16, sparselm::trainer_options{}, sparselm::optim::slot_choice<sparselm::optim::adamw>(nlohmann::json{{"slots", "bf16"}}),
      sparselm::optim::make_schedule({{"type", "constant"}, {"lr", 1e-3}}));
  static const std::string path = fuzz::scratch_file("state");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  fuzz::expect_clean([&] { (void)sparselm::io::load_training_state(path, *job.trainer); });
  fuzz::expect_clean([&] { (void)sparselm::io::load_training_state(path, trainer16); });
  return 0;
}
