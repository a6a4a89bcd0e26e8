// libFuzzer: the training-state file (io/checkpoint.hpp, load_training_state) of a tiny GPT with
// AdamW: the input is the file's bytes; a state that loads must leave the trainer at its step.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "fuzz_common.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/train/trainer.hpp"
#include "tiny_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::tiny_job job;
  static const std::string path = fuzz::scratch_file("state");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  fuzz::expect_clean([&] { (void)sparselm::io::load_training_state(path, *job.trainer); });
  return 0;
}
