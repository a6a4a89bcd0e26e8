#pragma once
// The message of the sparselm::error a callable throws, for tests that check what an error names.
#include <string>

#include "sparselm/core/error.hpp"

namespace sparselm::test {

// The message of the sparselm::error that f throws ("" when it does not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace sparselm::test
