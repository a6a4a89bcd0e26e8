// Integrity guards of files and run directories: checked size arithmetic, CRC-32C checksums in
// safetensors (every single-byte mutant of the tensor data rejected), bytes that belong to no
// tensor, non-regular files refused, the run-directory lock and the removal of stale temporaries,
// and a failed rename that never loses a checkpoint.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/errors.hpp"
#include "../common/scratch.hpp"
#include "sparselm/core/arena.hpp"
#include "sparselm/core/checked.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/io/mapped_input.hpp"
#include "sparselm/io/run_dir.hpp"
#include "sparselm/io/safetensors.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
namespace fs = std::filesystem;

namespace {
using test::error_of;
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("checked size arithmetic and limits name the culprit") {
  CHECK(checked_mul(3, 4, "x") == 12);
  CHECK(checked_add(3, 4, "x") == 7);
  CHECK(has(error_of([] { checked_mul(std::size_t(1) << 40, std::size_t(1) << 40, "wte elements"); }),
            "wte elements: 1099511627776 x 1099511627776 overflows"));
  CHECK(has(error_of([] { checked_add(~std::size_t(0), 1, "total"); }), "total:"));
  CHECK(has(error_of([] { check_limit("cfg", "n_layer", 5000, limits::layers); }),
            "cfg: field 'n_layer' is 5000, above the limit 4096"));
  CHECK(has(error_of([] { check_model_limits(json{{"vocab_size", 1e30}}, "m"); }), "field 'vocab_size' is 1e+30"));
  CHECK(error_of([] { check_model_limits(json{{"n_layer", 12}, {"n_embd", 768}}, "m"); }).empty());
  CHECK(has(error_of([] { check_activation_limit(1 << 20, 1 << 20, 50257, "run"); }), "above the limit"));
  // the arena refuses shapes whose element count overflows or exceeds the limit
  arena_layout l;
  CHECK(has(error_of([&] { l.add("wte.weight", {~std::size_t(0), 32}); }), "arena: tensor 'wte.weight'"));
  CHECK(has(error_of([&] { l.add("big", {std::size_t(1) << 30, 1 << 11}); }), "the limit of one arena"));
  CHECK(l.count() == 0);
}

TEST_CASE("crc32c: the standard check value, incremental use") {
  CHECK(io::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(io::crc32c("", 0) == 0u);
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over and then some";
  CHECK(io::crc32c(s.data() + 10, s.size() - 10, io::crc32c(s.data(), 10)) == io::crc32c(s.data(), s.size()));
  CHECK(io::crc32c_hex(0xE3069283u) == "e3069283");
}

TEST_CASE("safetensors checksums reject every single-byte mutant of the tensor data") {
  const fs::path d = test::fresh_dir("io", "integrity");
  std::vector<float> a(40), b(24);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.25f - 3;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i * i);
  io::safetensors_writer w;
  w.add("a", {5, 8}, a);
  w.add("b", {24}, b);
  w.write(d / "m.safetensors");
  const std::string good = test::slurp(d / "m.safetensors");
  { io::safetensors_file ok(d / "m.safetensors"); CHECK(ok.metadata().contains(io::checksum_key)); }
  const std::size_t n = std::size_t(std::uint8_t(good[0])) | std::size_t(std::uint8_t(good[1])) << 8;
  const std::size_t data_start = 8 + n;
  REQUIRE(good.size() == data_start + 4 * (a.size() + b.size()));
  std::size_t rejected = 0, mutants = 0;
  for (std::size_t pos = data_start; pos < good.size(); ++pos)
    for (unsigned flip : {0x01u, 0x80u, 0xFFu}) {
      std::string m = good;
      m[pos] = char(std::uint8_t(m[pos]) ^ flip);
      ++mutants;
      const auto span = std::span(reinterpret_cast<const unsigned char*>(m.data()), m.size());
      const std::string e = error_of([&] { io::safetensors_file f(span, "mutant"); });
      rejected += has(e, "is damaged: its CRC-32C");
      // --no-verify reads it
      CHECK(error_of([&] { io::safetensors_file f(span, "mutant", /*verify=*/false); }).empty());
    }
  CHECK(mutants == 3 * 4 * 64);
  CHECK(rejected == mutants);

  // a checksum list that misses a tensor, bytes after the last tensor
  std::string trailing = good + "x";
  CHECK(has(error_of([&] { io::safetensors_file f({reinterpret_cast<const unsigned char*>(trailing.data()), trailing.size()}, "t"); }),
            "1 bytes after the last tensor belong to no tensor"));
  io::safetensors_writer plain;  // no checksums: read without verification (files of other tools)
  plain.set_checksums(false);
  plain.add("a", {5, 8}, a);
  plain.write(d / "plain.safetensors");
  io::safetensors_file p(d / "plain.safetensors");
  CHECK_FALSE(p.metadata().contains(io::checksum_key));
}

// A streamed tensor (another process's bytes, arriving in chunks: io/slot_stream.hpp) is
// written byte for byte as if added whole; a source that hands over other bytes or another count
// fails the write, naming the tensor, and leaves the previous file untouched.
TEST_CASE("safetensors: streamed tensors are written as added ones; a wrong stream leaves no file") {
  const fs::path d = test::fresh_dir("io", "streamed");
  std::vector<float> a(40), b(1000);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f - 7;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 13) - 6.25f;
  const auto b_crc = io::crc32c(b.data(), b.size() * sizeof(float));
  {
    io::safetensors_writer w;
    w.add("a", {5, 8}, a);
    w.add("b", {10, 100}, b);
    w.write(d / "whole.safetensors");
  }
  // b in three uneven pieces
  auto pieces = [&](std::size_t drop_last, unsigned flip) {
    return [&b, drop_last, flip](const io::safetensors_writer::byte_sink& sink) {
      std::vector<unsigned char> bytes(b.size() * sizeof(float));
      std::memcpy(bytes.data(), b.data(), bytes.size());
      bytes[1001] ^= static_cast<unsigned char>(flip);
      const std::size_t n = bytes.size() - drop_last;
      sink(bytes.data(), 7);
      sink(bytes.data() + 7, 2000);
      sink(bytes.data() + 2007, n - 2007);
    };
  };
  {
    io::safetensors_writer w;
    w.add("a", {5, 8}, a);
    w.add_streamed("b", io::st_dtype::f32, {10, 100}, b_crc, pieces(0, 0));
    w.write(d / "streamed.safetensors");
  }
  CHECK(test::slurp(d / "streamed.safetensors") == test::slurp(d / "whole.safetensors"));
  const std::string before = test::slurp(d / "streamed.safetensors");
  auto attempt = [&](std::size_t drop_last, unsigned flip) {
    io::safetensors_writer w;
    w.add("a", {5, 8}, a);
    w.add_streamed("b", io::st_dtype::f32, {10, 100}, b_crc, pieces(drop_last, flip));
    return error_of([&] { w.write(d / "streamed.safetensors"); });
  };
  const std::string flipped = attempt(0, 0x10);
  CHECK(has(flipped, "tensor 'b': the streamed bytes have CRC-32C"));
  CHECK(has(attempt(4, 0), "tensor 'b': its source handed over 3996 of its 4000 bytes"));
  CHECK(test::slurp(d / "streamed.safetensors") == before);  // the earlier file is kept whole
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++files;
  CHECK(files == 2);  // no temporary left behind
}

TEST_CASE("non-regular files are refused before anything is read") {
  const fs::path d = test::fresh_dir("io", "fifo");
  REQUIRE(::mkfifo((d / "pipe").c_str(), 0600) == 0);
  CHECK(has(error_of([&] { io::safetensors_file f(d / "pipe"); }), "is not a regular file (a FIFO)"));
  CHECK(has(error_of([&] { data::token_file f(d / "pipe"); }), "token file is not a regular file (a FIFO)"));
  CHECK(has(error_of([&] { io::read_text_file(d / "pipe"); }), "not a regular file"));
  CHECK(has(error_of([&] { data::token_file f(d); }), "a directory"));
}

// Issue 60, defect 2: example files were mapped without the SIGBUS guard of token files (a bare
// SIGBUS, no message). Every guarded mapping (io::mapped_input: token and example files) now ends
// the process with one line naming the file and exit status 1 when a read faults.
TEST_CASE("a read that faults on a truncated mapping ends the process with one line naming the file") {
  const fs::path d = test::fresh_dir("io", "sigbus");
  const fs::path file = d / "train.bex";
  test::spit(file, std::string(3 * 4096, 'x'));
  const io::mapped_input m(file, "example file");  // mapped and guarded before the fork
  const fs::path err = d / "stderr.txt";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // the child: only system calls, then the read that faults
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0 || ::truncate(file.c_str(), 0) != 0) ::_exit(3);
    volatile unsigned char c = m.bytes()[2 * 4096];  // past the end now: SIGBUS
    (void)c;
    ::_exit(2);  // not reached when the guard works
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(has(test::slurp(err), "error: example file '" + file.string() + "' was truncated or overwritten while in use "
                              "(SIGBUS reading it)"));
}

TEST_CASE("run directories: one process at a time, stale temporaries removed") {
  const fs::path d = test::fresh_dir("io", "rundir");
  {
    io::run_lock first(d / "run");
    const std::string e = error_of([&] { io::run_lock second(d / "run"); });
    CHECK(has(e, "in use by another process (pid "));
  }
  io::run_lock again(d / "run");  // released with its holder
  fs::create_directories(d / "run" / "checkpoints" / "step-000004.tmp.123.0");
  test::spit(d / "run" / "latest.tmp.77.3", "x");
  test::spit(d / "run" / "notes.tmp.txt", "kept");  // not a temporary of ours
  const auto removed = io::remove_stale_temporaries(d / "run");
  CHECK(removed.size() == 1);
  CHECK(io::remove_stale_temporaries(d / "run" / "checkpoints").size() == 1);
  CHECK(fs::exists(d / "run" / "notes.tmp.txt"));
  CHECK_FALSE(fs::exists(d / "run" / "latest.tmp.77.3"));
  CHECK(io::is_temporary_name("step-000010.tmp.4242.17"));
  CHECK_FALSE(io::is_temporary_name("x.tmp.12"));
  CHECK_FALSE(io::is_temporary_name(".tmp.1.2"));
}

TEST_CASE("a save whose rename fails keeps the previous checkpoint") {
  const fs::path d = test::fresh_dir("io", "rename");
  io::checkpoint_dir cd(d / "ck", 2);
  auto fill = [](const std::string& text) {
    return [text](const fs::path& dir) {
      io::atomic_write_text(dir / io::model_file, text);
      io::atomic_write_text(dir / io::config_file, "{}");
      io::atomic_write_text(dir / io::state_file, "s");
    };
  };
  cd.save(2, fill("first"));
  // the same step again, while the new directory cannot be created: the first one stays
  ::chmod((d / "ck").c_str(), 0500);
  const std::string e = error_of([&] { cd.save(2, fill("second")); });
  ::chmod((d / "ck").c_str(), 0700);
  if (::geteuid() != 0) CHECK_FALSE(e.empty());  // root ignores the permission bits
  CHECK(test::slurp(d / "ck" / "step-000002" / io::model_file) == (e.empty() ? "second" : "first"));
  CHECK(cd.latest() == d / "ck" / "step-000002");
}

TEST_CASE("a number too large for a double is a parse error naming the file (found by fuzz_run_config)") {
  CHECK(has(error_of([] { parse_json(R"({"steps": 1e99999})", "cfg.json"); }), "cfg.json is not valid JSON"));
  const auto span = [](const std::string& s) {
    return std::span(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  std::string header = R"({"a": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}})";
  std::string file(8, '\0');
  file[0] = char(header.size());
  file += header + "abcd";
  CHECK(has(error_of([&] { io::safetensors_file f(span(file), "x.safetensors"); }), "x.safetensors: header"));
}

}  // namespace SPARSELM_UNITY_ID
