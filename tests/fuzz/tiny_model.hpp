#pragma once
// The tiny GPT + AdamW trainer of the training-state harness and the seed maker.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"

namespace fuzz {
struct tiny_job {
  using model_type = sparselm::gpt<>;
  std::unique_ptr<model_type> model;
  std::unique_ptr<sparselm::trainer<model_type>> trainer;
  tiny_job() {
    sparselm::gpt_config c;
    c.vocab_size = 16;
    c.n_positions = 8;
    c.n_layer = 1;
    c.n_head = 1;
    c.n_embd = 8;
    model = std::make_unique<model_type>(c);
    model->init(1);
    trainer = std::make_unique<sparselm::trainer<model_type>>(*model, sparselm::trainer_options{},
                                                              sparselm::optim::adamw<>(),
                                                              sparselm::optim::make_schedule({{"type", "constant"}, {"lr", 1e-3}}));
  }
};
// A per-process file on a memory file system when there is one.
inline std::string scratch_file(const std::string& tag) {
  const std::string dir = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
  return dir + "/sparselm-fuzz-" + tag + "-" + std::to_string(::getpid());
}
}  // namespace fuzz
