#pragma once

#define SPARSELM_VERSION_MAJOR 0
#define SPARSELM_VERSION_MINOR 1
#define SPARSELM_VERSION_PATCH 0

namespace sparselm {
inline constexpr const char* version = "0.1.0";
}
