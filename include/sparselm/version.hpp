#pragma once
// The library's version, as macros (for #if) and as a string; CMake's project() version and the
// package's sparselmConfigVersion.cmake give the same number.
//
//   #if SPARSELM_VERSION_MAJOR == 0 && SPARSELM_VERSION_MINOR >= 1
//   std::puts(sparselm::version);   // "0.1.0"

#define SPARSELM_VERSION_MAJOR 0
#define SPARSELM_VERSION_MINOR 1
#define SPARSELM_VERSION_PATCH 0

namespace sparselm {
inline constexpr const char* version = "0.1.0";
}
