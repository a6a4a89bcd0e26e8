#include <doctest/doctest.h>

#include <algorithm>

#include <cstdint>
#include <memory>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "sparselm/core/arena.hpp"
#include "sparselm/core/tensor.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

TEST_CASE("arena layout aligns every tensor and finds names") {
  auto layout = std::make_shared<arena_layout>();
  auto a = layout->add("a", {3, 5});
  auto b = layout->add("b.bias", {7}, param_no_decay);
  auto c = layout->add("c", {2, 2, 2});
  CHECK(layout->count() == 3);
  CHECK(layout->parameters() == 15 + 7 + 8);
  CHECK((*layout)[a].offset == 0);
  CHECK((*layout)[b].offset == 16);
  CHECK((*layout)[c].offset == 32);
  CHECK(layout->total() == 48);
  CHECK(layout->at("b.bias") == b);
  CHECK(((*layout)[b].flags & param_no_decay) != 0);
  CHECK_FALSE(layout->find("nope").has_value());

  arena<float> p(layout), g(layout);
  for (std::size_t i = 0; i < layout->count(); ++i) {
    CHECK(reinterpret_cast<std::uintptr_t>(p[i].data()) % 64 == 0);
    for (float v : p[i]) CHECK(v == 0.0f);
  }
  p[a][4] = 1.5f;
  CHECK(p.matrix(a)(0, 4) == 1.5f);
  CHECK(p.matrix(c).rows == 4);
  CHECK(p.matrix(c).cols == 2);
  g.at("c")[7] = 2.0f;
  CHECK(g.all()[32 + 7] == 2.0f);
  auto q = p.clone();
  CHECK(q[a][4] == 1.5f);
  q[a][4] = 0;
  CHECK(p[a][4] == 1.5f);
  CHECK(p.layout().same_as(q.layout()));
}

TEST_CASE("arena layout rejects bad tensors with the name in the message") {
  arena_layout layout;
  layout.add("w", {4, 4});
  CHECK_THROWS_WITH_AS(layout.add("w", {2}), doctest::Contains("duplicate tensor name 'w'"), error);
  CHECK_THROWS_WITH_AS(layout.add("z", {4, 0}), doctest::Contains("'z' has a zero dimension"), error);
  CHECK_THROWS_WITH_AS(layout.add("", {1}), doctest::Contains("name is empty"), error);
  CHECK_THROWS_WITH_AS(layout.add("e", {}), doctest::Contains("'e' has an empty shape"), error);
  CHECK_THROWS_WITH_AS(layout.at("missing"), doctest::Contains("no tensor named 'missing'"), error);
  CHECK_THROWS_AS(layout[5], error);
}

TEST_CASE_TEMPLATE("arena works for every storage type", T, float, bf16, half) {
  auto layout = std::make_shared<arena_layout>();
  auto w = layout->add("w", {33});
  arena<T> s(layout);
  s[w][32] = from_float<T>(0.5f);
  CHECK(to_float(s[w][32]) == 0.5f);
}

TEST_CASE("aligned vectors are 64-byte aligned and zero-initialised") {
  for (std::size_t n : {1, 7, 33, 1000}) {
    aligned_vector<float> v(n);
    CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % 64 == 0);
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    aligned_vector<bf16> h(n);
    CHECK(reinterpret_cast<std::uintptr_t>(h.data()) % 64 == 0);
  }
}

TEST_CASE("view checks name the argument and the shape") {
  float buf[16];
  matrix_view<float> ok(buf, 2, 8);
  CHECK_NOTHROW(check_view(ok, "A"));
  CHECK_THROWS_WITH_AS(check_view(matrix_view<float>(nullptr, 3, 4), "gemm: A"),
                       doctest::Contains("gemm: A: null data for a (3x4) view"), error);
  CHECK_THROWS_WITH_AS(check_view(matrix_view<float>(buf, 2, 8, 4), "B"), doctest::Contains("leading dimension 4"), error);
  auto* mis = reinterpret_cast<float*>(reinterpret_cast<char*>(buf) + 1);
  CHECK_THROWS_WITH_AS(check_view(matrix_view<float>(mis, 1, 1), "C"), doctest::Contains("not aligned"), error);
  CHECK_THROWS_WITH_AS(as_matrix(std::span<float>(buf, 16), 3, 5), doctest::Contains("cannot be viewed as (3x5)"), error);
}

// release(first, last): the elements read as zero afterwards (the pages inside given back to the
// system, partial pages at the ends zeroed in place), the rest of the arena keeps its values, and
// a released part can be written again. For an arena from aligned_alloc (1.2 MB) and a mapped one
// (12 MB, detail::arena_map_bytes), which starts as zero pages.
TEST_CASE("arena release zeroes a range and gives its whole pages back") {
  for (std::size_t n : {100000u, 1000000u}) {
    CAPTURE(n);
    auto layout = std::make_shared<arena_layout>();
    const auto a = layout->add("a", {1000});
    const auto b = layout->add("b", {3, n});
    const auto c = layout->add("c", {777});
    CHECK((layout->total() * sizeof(float) >= detail::arena_map_bytes) == (n == 1000000u));
    arena<float> p(layout);
    std::size_t wrong = 0;
    for (float x : p.all()) wrong += x != 0.0f;
    CHECK(wrong == 0);
    for (float& x : p.all()) x = 1.5f;
    const std::size_t first = (*layout)[b].offset + 5, last = (*layout)[c].offset - 7;
    p.release(first, last);
#if defined(__linux__)
    // the whole pages of the range are no longer resident (mincore; before anything reads them)
    const auto page = std::uintptr_t(sysconf(_SC_PAGESIZE));
    const auto lo = (reinterpret_cast<std::uintptr_t>(p.all().data() + first) + page - 1) / page * page;
    const auto hi = reinterpret_cast<std::uintptr_t>(p.all().data() + last) / page * page;
    REQUIRE(hi > lo + 16 * page);
    std::vector<unsigned char> resident((hi - lo) / page);
    REQUIRE(mincore(reinterpret_cast<void*>(lo), hi - lo, resident.data()) == 0);
    std::size_t in_memory = 0;
    for (unsigned char r : resident) in_memory += r & 1u;
    CHECK(in_memory == 0);
#endif
    for (std::size_t e = 0; e < layout->total(); ++e) wrong += p.all()[e] != (e >= first && e < last ? 0.0f : 1.5f);
    CHECK(wrong == 0);
    CHECK(p[a][999] == 1.5f);
    CHECK(p[c][0] == 1.5f);
    p[b][2 * n] = 2.0f;  // written again: an ordinary page
    CHECK(p[b][2 * n] == 2.0f);
    p.release(last, first);               // an empty range: nothing
    p.release(0, layout->total() + 100);  // clamped to the arena
    for (float x : p.all()) wrong += x != 0.0f;
    CHECK(wrong == 0);
    auto q = p.clone();  // a copy of a mapped arena is one too
    CHECK(q.all().size() == p.all().size());
  }
}

}  // namespace SPARSELM_UNITY_ID
