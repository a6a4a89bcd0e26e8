#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.cpp): a loader may only answer a malformed
// input with sparselm::error; anything else (another exception, a crash, a leak, undefined
// behaviour) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <string_view>

#include "sparselm/core/error.hpp"

// A harness's entry point: libFuzzer's LLVMFuzzerTestOneInput when the harness is built on its own;
// in fuzz_all.cpp, which includes every harness into one binary (one compile for all, CMake's
// fuzz_all), a function fuzz_target_<name> that binary runs when it is called as fuzz_<name>.
#ifdef SPARSELM_FUZZ_ALL
#define SPARSELM_FUZZ_TARGET(name) int fuzz_target_##name(const std::uint8_t* data, std::size_t size)
#else
#define SPARSELM_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
#endif

namespace fuzz {
// Runs f(); sparselm::error is the expected answer to a bad input, every other exception aborts
// (so libFuzzer records the input).
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const sparselm::error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
}
inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
}  // namespace fuzz
