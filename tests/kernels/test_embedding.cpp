#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "sparselm/testing/gradcheck.hpp"
#include "pointwise_reference.hpp"
#include "sparselm/kernels/embedding.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;
using namespace sparselm::test;
using namespace sparselm::testing;

namespace {
std::vector<std::int32_t> random_ids(std::size_t N, std::size_t V, std::uint64_t stream) {
  counter_rng rng(11);
  std::vector<std::int32_t> ids(N);
  for (std::size_t n = 0; n < N; ++n) ids[n] = std::int32_t(rng.below(stream, n, V));
  return ids;
}
}  // namespace

TEST_CASE_TEMPLATE("embedding forward/backward match the reference", Arch, SPARSELM_TEST_ARCHS) {
  for (std::size_t C : {1, 7, 33, 129}) {
    for (std::size_t T : {1, 7}) {
      for (std::size_t off : {0, 2}) {
        for (bool with_pos : {true, false}) {
          CAPTURE(C);
          CAPTURE(T);
          CAPTURE(off);
          CAPTURE(with_pos);
          const std::size_t B = 3, N = B * T, V = 11, P = 10;
          auto ids = random_ids(N, V, C + T);
          fvec wte = random_vector(V * C, 1), wpe = random_vector(P * C, 2), out(N * C);
          const_matrix_view<float> pv = with_pos ? const_matrix_view<float>(wpe.data(), P, C) : const_matrix_view<float>{};
          kernels::embedding_forward<Arch>(ids, {wte.data(), V, C}, pv, T, {out.data(), N, C}, off);
          for (std::size_t n = 0; n < N; ++n)
            for (std::size_t c = 0; c < C; ++c) {
              float e = wte[ids[n] * C + c] + (with_pos ? wpe[(off + n % T) * C + c] : 0.0f);
              REQUIRE(out[n * C + c] == e);
            }
          fvec dout = random_vector(N * C, 3), dwte = random_vector(V * C, 4), dwpe = random_vector(P * C, 5);
          dvec rwte = to_double(dwte), rwpe = to_double(dwpe);
          for (std::size_t n = 0; n < N; ++n)
            for (std::size_t c = 0; c < C; ++c) {
              rwte[ids[n] * C + c] += dout[n * C + c];
              if (with_pos) rwpe[(off + n % T) * C + c] += dout[n * C + c];
            }
          matrix_view<float> dpv = with_pos ? matrix_view<float>(dwpe.data(), P, C) : matrix_view<float>{};
          const fvec dwpe0 = dwpe;
          kernels::embedding_backward<Arch>(ids, {dout.data(), N, C}, T, {dwte.data(), V, C}, dpv, off);
          CHECK(max_abs_err(dwte, rwte) < 1e-6);
          if (with_pos)
            CHECK(max_abs_err(dwpe, rwpe) < 1e-6);
          else
            CHECK(dwpe == dwpe0);
        }
      }
    }
  }
}

TEST_CASE("embedding backward is bit-identical to the sequential loop for 1, 2 and 3 threads") {
  const std::size_t B = 16, T = 64, N = B * T, V = 50, C = 40;
  auto ids = random_ids(N, V, 99);
  for (std::size_t n = 0; n < N; n += 3) ids[n] = 7;  // a very frequent token
  fvec dout = random_vector(N * C, 6, -100, 100);
  fvec seq(V * C, 0.0f), seqp(T * C, 0.0f);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) {
      seq[ids[n] * C + c] += dout[n * C + c];
      seqp[(n % T) * C + c] += dout[n * C + c];
    }
  int old = num_threads();
  for (int th : {1, 2, 3}) {
    set_num_threads(th);
    fvec dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
    kernels::embedding_backward(ids, {dout.data(), N, C}, T, {dwte.data(), V, C}, {dwpe.data(), T, C});
    CHECK(dwte == seq);
    CHECK(dwpe == seqp);
  }
  set_num_threads(old);
}

TEST_CASE("embedding gradients pass a finite-difference check") {
  const std::size_t T = 3, N = 6, V = 5, P = 4, C = 3;
  std::vector<std::int32_t> ids{1, 4, 1, 0, 1, 2};
  fvec tables = random_vector(V * C + P * C, 7), w = random_vector(N * C, 8);
  auto f = [&](std::span<const float> v) {
    fvec out(N * C);
    kernels::embedding_forward(ids, {v.data(), V, C}, {v.data() + V * C, P, C}, T, {out.data(), N, C}, 1);
    return dot(out, w);
  };
  fvec g(V * C + P * C, 0.0f);
  kernels::embedding_backward(ids, {w.data(), N, C}, T, {g.data(), V, C}, {g.data() + V * C, P, C}, 1);
  auto r = gradcheck(f, tables, g);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("embedding rejects bad ids and shapes") {
  fvec wte(5 * 3), wpe(4 * 3), out(4 * 3);
  std::vector<std::int32_t> ids{0, 1, 5, 2};
  CHECK_THROWS_WITH_AS(kernels::embedding_forward(ids, {wte.data(), 5, 3}, {wpe.data(), 4, 3}, 2, {out.data(), 4, 3}),
                       "embedding_forward: token id 5 at position 2 is outside the vocabulary [0, 5)", sparselm::error);
  ids = {0, -1, 1, 2};
  CHECK_THROWS_WITH_AS(kernels::embedding_backward(ids, {out.data(), 4, 3}, 2, {wte.data(), 5, 3}, {wpe.data(), 4, 3}),
                       "embedding_backward: token id -1 at position 1 is outside the vocabulary [0, 5)", sparselm::error);
  ids = {0, 1, 1, 2};
  CHECK_THROWS_WITH_AS(kernels::embedding_forward(ids, {wte.data(), 5, 3}, {wpe.data(), 4, 3}, 2, {out.data(), 3, 3}),
                       "embedding_forward: out (3x3) does not match 4 ids and wte (5x3)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::embedding_forward(ids, {wte.data(), 5, 3}, {wpe.data(), 4, 3}, 2, {out.data(), 4, 3}, 3),
                       "embedding_forward: positions up to 5 (offset 3, T 2) exceed the 4 rows of wpe (4x3)",
                       sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::embedding_forward(ids, {wte.data(), 5, 3}, {wpe.data(), 6, 2}, 2, {out.data(), 4, 3}),
                       "embedding_forward: wpe (6x2) has a different width than wte (5x3)", sparselm::error);
  CHECK_THROWS_WITH_AS(kernels::embedding_backward(ids, {out.data(), 4, 3}, 0, {wte.data(), 5, 3}, {wpe.data(), 4, 3}),
                       "embedding_backward: sequence length T must be >= 1 with position embeddings", sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
