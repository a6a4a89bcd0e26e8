// The scratch pool (core/step_context.hpp): one workspace object per type and pool, the same object
// on every call (its buffers keep their capacity and contents), distinct objects for distinct types
// and for distinct pools (pipeline stages), and bytes() summing every workspace's buffers.
#include <doctest/doctest.h>

#include <cstddef>
#include <utility>

#include "sparselm/core/step_context.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {
struct first_workspace {
  buffer a, b;
  std::size_t bytes() const noexcept { return buffers_bytes(a, b); }
};
struct second_workspace {
  buffer_bf16 h;
  std::size_t bytes() const noexcept { return h.bytes(); }
};
}  // namespace

TEST_CASE("scratch: one workspace per type and pool, kept between calls, counted by bytes()") {
  scratch pool;
  CHECK(pool.bytes() == 0);
  auto& w1 = pool.get<first_workspace>();
  CHECK(&pool.get<first_workspace>() == &w1);
  auto m = w1.a.matrix(3, 4);
  m(2, 3) = 7.0f;
  w1.b.get(5);
  // A second type is another object; asking for it does not move the first.
  auto& w2 = pool.get<second_workspace>();
  w2.h.get(10);
  CHECK(static_cast<void*>(&w2) != static_cast<void*>(&w1));
  CHECK(&pool.get<first_workspace>() == &w1);
  CHECK(pool.get<first_workspace>().a.matrix(3, 4)(2, 3) == 7.0f);
  CHECK(pool.bytes() == 12 * sizeof(float) + 5 * sizeof(float) + 10 * sizeof(bf16));
  // Capacity only grows: a smaller request keeps it.
  w1.a.get(2);
  CHECK(pool.bytes() == 12 * sizeof(float) + 5 * sizeof(float) + 10 * sizeof(bf16));

  // Another pool (a pipeline stage's) has its own objects.
  scratch other;
  CHECK(&other.get<first_workspace>() != &w1);
  CHECK(other.bytes() == 0);
  // A moved pool keeps its objects.
  scratch moved = std::move(pool);
  CHECK(&moved.get<first_workspace>() == &w1);
  CHECK(moved.bytes() == 12 * sizeof(float) + 5 * sizeof(float) + 10 * sizeof(bf16));
}

}  // namespace SPARSELM_UNITY_ID
