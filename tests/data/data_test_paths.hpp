#pragma once
// Paths shared by the data tests: the bundled data and a per-test-file scratch directory.

#include <filesystem>
#include <string>

namespace sparselm::data::test {

inline const std::filesystem::path source_dir{SPARSELM_SOURCE_DIR};
inline const std::filesystem::path gpt2_dir = source_dir / "data" / "gpt2";
inline const std::filesystem::path corpus_dir = source_dir / "data" / "corpus";

// SPARSELM_TEST_TMPDIR/<area>/<name>, creating the directory.
inline std::filesystem::path tmp_path(const std::string& area, const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(SPARSELM_TEST_TMPDIR) / area;
  std::filesystem::create_directories(dir);
  return dir / name;
}

}  // namespace sparselm::data::test
