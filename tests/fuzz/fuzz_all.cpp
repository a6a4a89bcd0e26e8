// Every libFuzzer harness in one binary, compiled as one translation unit: the library code the
// harnesses share (JSON, safetensors, checkpoints, a tiny model and trainer) is compiled once
// instead of once per harness. The build links fuzz_<target> to this binary, which runs the harness
// its name says (or the one SPARSELM_FUZZ_TARGET names), so every fuzz_<target> command works as
// if it were its own program.
#define SPARSELM_FUZZ_ALL
#include "fuzz_email_text.cpp"
#include "fuzz_gpt2_encoder.cpp"
#include "fuzz_gpt2_files.cpp"
#include "fuzz_pattern.cpp"
#include "fuzz_run_config.cpp"
#include "fuzz_safetensors.cpp"
#include "fuzz_squad.cpp"
#include "fuzz_token_header.cpp"
#include "fuzz_training_state.cpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {
struct fuzz_entry {
  std::string_view name;
  int (*run)(const std::uint8_t*, std::size_t);
};
constexpr fuzz_entry fuzz_entries[] = {
    {"email_text", fuzz_target_email_text},   {"gpt2_encoder", fuzz_target_gpt2_encoder},
    {"gpt2_files", fuzz_target_gpt2_files},   {"pattern", fuzz_target_pattern},
    {"run_config", fuzz_target_run_config},   {"safetensors", fuzz_target_safetensors},
    {"squad", fuzz_target_squad},             {"token_header", fuzz_target_token_header},
    {"training_state", fuzz_target_training_state},
};
int (*fuzz_chosen)(const std::uint8_t*, std::size_t) = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  std::string name;
  if (const char* env = std::getenv("SPARSELM_FUZZ_TARGET")) name = env;
  if (name.empty() && argc && *argc > 0) {
    std::string_view prog = (*argv)[0];
    if (auto slash = prog.rfind('/'); slash != std::string_view::npos) prog.remove_prefix(slash + 1);
    if (prog.substr(0, 5) == "fuzz_") prog.remove_prefix(5);
    name = std::string(prog);
  }
  for (const auto& e : fuzz_entries)
    if (e.name == name) fuzz_chosen = e.run;
  if (!fuzz_chosen) {
    std::fprintf(stderr, "fuzz_all: no harness '%s'; call it as fuzz_<target> or set SPARSELM_FUZZ_TARGET to one of:",
                 name.c_str());
    for (const auto& e : fuzz_entries) std::fprintf(stderr, " %.*s", int(e.name.size()), e.name.data());
    std::fprintf(stderr, "\n");
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return fuzz_chosen(data, size); }
