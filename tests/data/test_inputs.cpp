// Issue 60, defect 4 and deliverable 1: every reader of the data library opens its file one way
// (core/input_file.hpp): a FIFO, a device, a directory or a socket is refused by name before
// anything is read (a FIFO never blocks the open), and a file over the reader's limit is refused
// naming the file and the limit.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data_test_paths.hpp"
#include "sparselm/core/input_file.hpp"
#include "sparselm/core/json.hpp"
#include "sparselm/data/bert_examples.hpp"
#include "sparselm/data/gpt2_bpe.hpp"
#include "sparselm/data/squad.hpp"
#include "sparselm/data/text_classification.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/data/wordpiece.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = data::test::tmp_path("data_inputs", name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every library reader of a file, by the name it gives the file in messages.
std::vector<std::pair<std::string, std::function<void(const fs::path&)>>> readers() {
  std::vector<std::string> names;
  return {
      {"config file", [](const fs::path& p) { read_json_file(p.string()); }},
      {"JSON lines file", [names](const fs::path& p) mutable { data::read_labelled_jsonl(p, names, true); }},
      {"SQuAD file", [](const fs::path& p) { data::read_squad(p); }},
      {"predictions file", [](const fs::path& p) { data::read_squad_predictions(p); }},
      {"vocabulary", [](const fs::path& p) { data::wordpiece::from_file(p); }},
      {"GPT-2 encoder.json", [](const fs::path& p) { data::gpt2_bpe::from_files(p, p); }},
      {"text file", [](const fs::path& p) { data::read_file_bytes(p); }},
      {"token file", [](const fs::path& p) { data::token_file f(p); }},
      {"example file", [](const fs::path& p) { data::bert_example_file f(p); }},
  };
}

}  // namespace

TEST_CASE("every data reader refuses a FIFO, a device, a directory and a socket by name, without blocking") {
  const fs::path d = fresh_dir("kinds");
  REQUIRE(::mkfifo((d / "pipe").c_str(), 0600) == 0);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (d / "sock").string();
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  REQUIRE(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  const std::pair<fs::path, std::string> kinds[] = {
      {d / "pipe", "(a FIFO)"}, {"/dev/zero", "(a character device)"}, {d, "(a directory)"}, {d / "sock", "(a socket)"}};
  for (const auto& reader : readers())
    for (const auto& kind : kinds) {  // (no structured bindings: a lambda captures them only from clang 16)
      const std::string e = error_of([&] { reader.second(kind.first); });
      CAPTURE(reader.first);
      CAPTURE(e);
      CHECK(e.find(kind.first.string() + ": " + reader.first + " is not a regular file " + kind.second) == 0);
    }
  ::close(s);
}

TEST_CASE("a file over the reader's limit is refused naming the file and the limit; read_input reads the rest") {
  const fs::path d = fresh_dir("limits");
  std::ofstream(d / "ten.txt", std::ios::binary) << "0123456789";
  CHECK(read_input(d / "ten.txt", "text file", 10) == "0123456789");
  CHECK(error_of([&] { read_input(d / "ten.txt", "text file", 9); }) ==
        (d / "ten.txt").string() + ": text file is 10 bytes, more than the limit of 9 bytes");
  std::vector<std::string> names;
  CHECK(error_of([&] { data::read_labelled_jsonl(d / "ten.txt", names, true, 4); })
            .find("JSON lines file is 10 bytes, more than the limit of 4 bytes") != std::string::npos);
  CHECK(error_of([&] { read_json_file((d / "ten.txt").string(), "config file", 5); })
            .find("ten.txt: config file is 10 bytes, more than the limit of 5 bytes") != std::string::npos);
  CHECK(error_of([&] { open_input(d / "absent", "token file", 1); }).find((d / "absent").string() +
                                                                         ": cannot open token file") == 0);
}

}  // namespace SPARSELM_UNITY_ID
