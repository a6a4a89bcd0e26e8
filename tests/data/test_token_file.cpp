#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data_test_paths.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/data/vocab_limit.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::data;
namespace fs = std::filesystem;

namespace {

fs::path tmp_path(const std::string& name) { return sparselm::data::test::tmp_path("data_token_file", name); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string error_of(const fs::path& p, token_check c = token_check::full) {
  try {
    token_file f(p, c);
  } catch (const sparselm::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("token file: round trip, uint16 and uint32, header fields") {
  std::vector<std::int32_t> ids{0, 1, 50256, 7, 65535, 42};
  auto p16 = tmp_path("rt16.tok");
  auto info = write_token_file(p16, ids, 65536, 0, 3);
  CHECK(info.dtype == token_dtype::uint16);
  CHECK(fs::file_size(p16) == 64 + 2 * ids.size());
  token_file f(p16);
  CHECK(f.size() == ids.size());
  CHECK(f.vocab_size() == 65536);
  CHECK(f.dtype() == token_dtype::uint16);
  CHECK(f.sequence_length() == 0);
  CHECK(f.documents() == 3);
  CHECK(f.validated());
  CHECK(f.read_all() == ids);
  CHECK(f[2] == 50256u);
  CHECK(f.at(4) == 65535);
  std::vector<std::int32_t> mid(3);
  f.read(2, mid);
  CHECK(mid == std::vector<std::int32_t>{50256, 7, 65535});
  CHECK_THROWS_AS(f.at(6), sparselm::error);
  std::vector<std::int32_t> too_many(5);
  CHECK_THROWS_WITH_AS(f.read(2, too_many), doctest::Contains("rt16.tok"), sparselm::error);

  std::vector<std::int32_t> big{0, 70000, 100000, 3};
  auto p32 = tmp_path("rt32.tok");
  write_token_file(p32, big, 100001);
  token_file g(p32);
  CHECK(g.dtype() == token_dtype::uint32);
  CHECK(g.read_all() == big);
  CHECK(fs::file_size(p32) == 64 + 4 * big.size());

  // The header is little-endian at fixed offsets.
  std::string raw = slurp(p16);
  CHECK(raw.substr(0, 8) == std::string("SPLMTOK\0", 8));
  CHECK(static_cast<unsigned char>(raw[8]) == 1);   // version
  CHECK(static_cast<unsigned char>(raw[12]) == 2);  // bytes per token
  CHECK(static_cast<unsigned char>(raw[16]) == 6);  // count
  CHECK(static_cast<unsigned char>(raw[64 + 4]) == 0x50);  // id 50256 = 0xC450 at token 2
  CHECK(static_cast<unsigned char>(raw[64 + 5]) == 0xC4);

  // Moving keeps the mapping valid.
  token_file moved = std::move(f);
  CHECK(moved.at(2) == 50256);
}

TEST_CASE("token file: the writer is atomic and streams") {
  auto p = tmp_path("stream.tok");
  fs::remove(p);
  {
    token_file_writer w(p, 50257, 4);
    std::vector<std::int32_t> a{1, 2, 3, 4}, b{5, 6, 7, 8};
    w.append(a);
    CHECK_FALSE(fs::exists(p));  // nothing visible before commit
    w.append(b);
    w.add_documents(2);
    auto info = w.commit();
    CHECK(info.tokens == 8);
    CHECK(info.sequence_length == 4);
  }
  token_file f(p);
  CHECK(f.sequence_length() == 4);
  CHECK(f.read_all() == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  // An abandoned writer leaves neither the target nor a temporary behind.
  auto q = tmp_path("abandoned.tok");
  fs::remove(q);
  {
    token_file_writer w(q, 10);
    std::vector<std::int32_t> a{1};
    w.append(a);
  }
  CHECK_FALSE(fs::exists(q));
  for (const auto& e : fs::directory_iterator(q.parent_path()))
    CHECK_MESSAGE(e.path().string().find("abandoned.tok.tmp") == std::string::npos, e.path().string());
  // Sequences must be whole.
  token_file_writer w(tmp_path("partial_seq.tok"), 10, 4);
  std::vector<std::int32_t> three{1, 2, 3};
  w.append(three);
  CHECK_THROWS_WITH_AS(w.commit(), doctest::Contains("not a whole number of 4-token sequences"), sparselm::error);
}

TEST_CASE("token file: writer rejects ids outside the vocabulary and empty datasets") {
  auto p = tmp_path("bad_ids.tok");
  std::vector<std::int32_t> ids{1, 2, 10};
  CHECK_THROWS_WITH_AS(write_token_file(p, ids, 10), doctest::Contains("token id 10 at position 2"), sparselm::error);
  ids = {-5};
  CHECK_THROWS_WITH_AS(write_token_file(p, ids, 10), doctest::Contains("token id -5"), sparselm::error);
  std::vector<std::int32_t> none;
  CHECK_THROWS_WITH_AS(write_token_file(tmp_path("empty.tok"), none, 10), doctest::Contains("empty dataset"),
                       sparselm::error);
  CHECK_FALSE(fs::exists(tmp_path("empty.tok")));
  CHECK_THROWS_WITH_AS(token_file_writer(tmp_path("x.tok"), 70000, token_dtype::uint16, 0),
                       doctest::Contains("does not fit 16-bit"), sparselm::error);
}

TEST_CASE("token file: truncated, foreign, wrong-version, out-of-range and empty files are rejected by name") {
  auto good = tmp_path("good.tok");
  std::vector<std::int32_t> ids{3, 1, 4, 1, 5, 9, 2, 6};
  write_token_file(good, ids, 10);
  const std::string raw = slurp(good);

  auto truncated = tmp_path("truncated.tok");
  spit(truncated, raw.substr(0, raw.size() - 3));
  std::string e = error_of(truncated);
  CHECK_MESSAGE(e.find("truncated.tok") != std::string::npos, e);
  CHECK_MESSAGE(e.find("truncated token file: header says 8 tokens") != std::string::npos, e);

  auto short_header = tmp_path("short_header.tok");
  spit(short_header, raw.substr(0, 20));
  e = error_of(short_header);
  CHECK_MESSAGE(e.find("short_header.tok: truncated token file: 20 bytes") != std::string::npos, e);

  auto zero = tmp_path("zero_bytes.tok");
  spit(zero, "");
  CHECK(error_of(zero).find("zero_bytes.tok: truncated") != std::string::npos);

  auto trailing = tmp_path("trailing.tok");
  spit(trailing, raw + "xx");
  CHECK(error_of(trailing).find("trailing.tok: 2 trailing bytes") != std::string::npos);

  auto foreign = tmp_path("foreign.tok");
  spit(foreign, "PK\x03\x04 this is a zip file, not tokens" + std::string(80, 'z'));
  e = error_of(foreign);
  CHECK_MESSAGE(e.find("foreign.tok: not a sparselm token file (bad magic") != std::string::npos, e);

  auto version = tmp_path("version2.tok");
  std::string v2 = raw;
  v2[8] = 2;
  spit(version, v2);
  e = error_of(version);
  CHECK_MESSAGE(e.find("version2.tok: unsupported token file version 2") != std::string::npos, e);

  auto width = tmp_path("width3.tok");
  std::string w3 = raw;
  w3[12] = 3;
  spit(width, w3);
  CHECK(error_of(width).find("width3.tok: unknown token width 3") != std::string::npos);

  // An id >= vocab: the header says vocab 10, the data holds 12 at position 5.
  auto oor = tmp_path("out_of_range.tok");
  std::string bad = raw;
  bad[64 + 2 * 5] = 12;
  spit(oor, bad);
  e = error_of(oor);
  CHECK_MESSAGE(e.find("out_of_range.tok: token id 12 at position 5 is not below the vocab size 10") != std::string::npos,
                e);
  // ... or on demand, when only the header is checked on open.
  token_file lazy(oor, token_check::header);
  CHECK_FALSE(lazy.validated());
  std::vector<std::int32_t> head(5);
  lazy.read(0, head);  // positions 0..4 are fine
  std::vector<std::int32_t> all(8);
  CHECK_THROWS_WITH_AS(lazy.read(0, all), doctest::Contains("token id 12 at position 5"), sparselm::error);
  CHECK_THROWS_WITH_AS(lazy.at(5), doctest::Contains("out_of_range.tok"), sparselm::error);
  CHECK_THROWS_AS(lazy.validate(), sparselm::error);

  // Empty dataset: a valid header with zero tokens.
  auto empty = tmp_path("no_tokens.tok");
  std::string h0 = raw.substr(0, 64);
  h0[16] = 0;
  spit(empty, h0);
  CHECK(error_of(empty).find("no_tokens.tok: empty dataset") != std::string::npos);

  CHECK(error_of(tmp_path("does_not_exist.tok")).find("does_not_exist.tok: cannot open token file") != std::string::npos);
}

// Issue 60, defect 1: a validation file truncated while a job reads it gave evaluations over zeros
// (reads inside the last mapped page return zeros, no SIGBUS). Every read now checks the file's
// size against its header first.
TEST_CASE("token file: truncated while in use, also within the last page, is an error naming it") {
  std::vector<std::int32_t> ids(5000);  // 64 + 10000 bytes: three pages, the last one partly used
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(1 + i % 97);
  for (const std::uint64_t cut : {std::uint64_t(9000), std::uint64_t(64)}) {
    const auto p = tmp_path("shrinking.tok");
    write_token_file(p, ids, 100);
    token_file f(p);
    std::vector<std::int32_t> tail(8);
    f.read(ids.size() - tail.size(), tail);  // intact: read normally
    CHECK(tail[7] == ids.back());
    fs::resize_file(p, cut);  // in the last page (9000), or to the header alone (64: page 0 still exists)
    const std::uint64_t first = cut == 64 ? 0 : (cut - 64) / 2 - 4;  // tokens around the new end, same page
    std::vector<std::int32_t> out(8);
    CHECK_THROWS_WITH_AS(f.read(first, out),
                         doctest::Contains(("token file '" + p.string() + "' was truncated or overwritten while in use").c_str()),
                         sparselm::error);
    CHECK_THROWS_WITH_AS(f.at(first), doctest::Contains("its header says 10064"), sparselm::error);
  }
  // replaced in place by a longer file: also refused (the header no longer describes it)
  const auto p = tmp_path("growing.tok");
  write_token_file(p, ids, 100);
  token_file f(p);
  fs::resize_file(p, 20000);
  std::vector<std::int32_t> out(4);
  CHECK_THROWS_WITH_AS(f.read(0, out), doctest::Contains("it is now 20000 bytes"), sparselm::error);
}

TEST_CASE("vocabulary limit: ids renumbered by training frequency, the rest merged into the last id") {
  const auto train_p = tmp_path("vl_train.tok"), valid_p = tmp_path("vl_valid.tok");
  // counts in the training file: 7 x5, 3 x4, 9 x3, 1 x2 (ties: 0 and 4 once each, the smaller id first)
  write_token_file(train_p, std::vector<std::int32_t>{7, 3, 9, 7, 1, 3, 7, 9, 0, 7, 3, 9, 4, 1, 7, 3}, 10, 0, 2);
  write_token_file(valid_p, std::vector<std::int32_t>{9, 8, 7, 2, 3, 1, 0}, 10);
  const token_file train(train_p), valid(valid_p);
  const auto m = frequency_ranked_ids(train, 5);
  CHECK(m.limit == 5);
  CHECK(m(7) == 0);
  CHECK(m(3) == 1);
  CHECK(m(9) == 2);
  CHECK(m(1) == 3);
  for (std::uint64_t other : {0, 2, 4, 5, 6, 8, 12}) CHECK(m(other) == 4);  // merged, also past the vocabulary
  const auto out_p = tmp_path("vl_train_5.tok"), outv_p = tmp_path("vl_valid_5.tok");
  m.write(train, out_p);
  m.write(valid, outv_p);
  const token_file limited(out_p), limited_v(outv_p);
  CHECK(limited.vocab_size() == 5);
  CHECK(limited.documents() == 2);
  CHECK(limited.read_all() == std::vector<std::int32_t>{0, 1, 2, 0, 3, 1, 0, 2, 4, 0, 1, 2, 4, 3, 0, 1});
  CHECK(limited_v.read_all() == std::vector<std::int32_t>{2, 4, 0, 4, 1, 3, 4});
  // a limit at or above the vocabulary, or below 2, is refused naming the file
  CHECK_THROWS_WITH_AS(frequency_ranked_ids(train, 11), doctest::Contains("vl_train.tok"), std::exception);
  CHECK_THROWS_WITH_AS(frequency_ranked_ids(train, 1), doctest::Contains("at least 2"), std::exception);
  for (const auto& p : {train_p, valid_p, out_p, outv_p}) fs::remove(p);
}

}  // namespace SPARSELM_UNITY_ID
