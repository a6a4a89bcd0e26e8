#pragma once
// Scratch files for tests: fresh directories under the build's test tmp directory, whole-file
// reads and writes.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace sparselm::test {

// SPARSELM_TEST_TMPDIR/<area>/<name>, emptied and created.
inline std::filesystem::path fresh_dir(const std::string& area, const std::string& name) {
  std::filesystem::path d = std::filesystem::path(SPARSELM_TEST_TMPDIR) / area / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline void spit(const std::filesystem::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace sparselm::test
