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
