#pragma once
// What this process holds in memory: its peak resident set so far (Linux VmHWM), the figure a run
// reports beside its plan and checks against its memory budget.
//
//   const double peak = sparselm::peak_rss_bytes();   // 0 where /proc is absent

#include <fstream>
#include <string>

namespace sparselm {

// Peak resident memory of this process so far (VmHWM, bytes; 0 where /proc is absent).
inline double peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  return 0;
}

}  // namespace sparselm
