// The plan's model of a run (train/plan.hpp, train/model_shape.hpp) against the model it describes,
// without a run: the parameters the plan counts are those the built model stores (dense, and
// block-sparse with uniform and ERK allocation), its tensors are the layout's, and its scratch is
// exactly what the model's scratch pool and residual streams hold after a training step; for the
// LLaMA family (grouped-query attention, tied and untied heads, biases) and GPT. The FLOPs of
// LLaMA's projections are checked against a count written out from its config.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../common/tiny_gpt.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/train/plan.hpp"

// Each test file is its own namespace: the area's files are compiled as one unity translation unit
// (tests/CMakeLists.txt), and their helpers must not meet.
namespace SPARSELM_UNITY_ID {

using namespace sparselm;

namespace {

// Four heads over two key/value heads, untied head; the variants change one thing each.
llama_config small_llama() {
  return {.vocab_size = 61, .max_position_embeddings = 16, .hidden_size = 32, .intermediate_size = 48,
          .num_hidden_layers = 2, .num_attention_heads = 4, .num_key_value_heads = 2};
}

std::vector<llama_config> llama_variants() {
  std::vector<llama_config> v(4, small_llama());
  v[1].num_key_value_heads = 1;  // multi-query
  v[1].tie_word_embeddings = true;
  v[2].attention_bias = v[2].mlp_bias = true;
  v[3].num_key_value_heads = 4;  // multi-head
  v[3].head_dim = 16;            // head_dim · heads (64) differs from hidden_size (32)
  return v;
}

// One training step's passes on a batch of B x T tokens (ids and targets from a small recipe).
template <class Model>
void one_step(Model& m, std::size_t B, std::size_t T) {
  std::vector<std::int32_t> ids(B * T), targets(B * T);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = std::int32_t((7 * i + 3) % m.vocab_size());
    targets[i] = std::int32_t((5 * i + 1) % m.vocab_size());
  }
  token_batch b{ids, targets, {}, B, T};
  m.grads().zero();
  m.forward_backward({}, b, 1.0f / float(b.weight_sum()));
}

// The bytes of the residual streams and their gradient (models/stack.hpp) under recompute none.
double stream_bytes(const model_shape& s, std::size_t N) {
  return double((s.layers + 2) * N * s.width) * 4.0;
}

}  // namespace

TEST_CASE("plan: a LLaMA model's parameters and tensors are those the model builds (dense, block-sparse uniform and ERK)") {
  for (const auto& c : llama_variants()) {
    CAPTURE(c.num_key_value_heads);
    CAPTURE(c.tie_word_embeddings);
    CAPTURE(c.attention_bias);
    const model_shape s = model_shape_of(c);
    CHECK(s.family == "llama");
    plan_inputs in;
    in.batch = 2;
    in.seq = 8;
    {
      llama<> m(c);
      const run_plan p = make_run_plan(s, in);
      CHECK(p.parameters == double(m.num_parameters()));
      CHECK(p.stored_parameters == double(m.num_parameters()));
      CHECK(s.tensors == m.layout()->count());
    }
    for (auto kind : {sparse::allocation::uniform, sparse::allocation::erk}) {
      CAPTURE(int(kind));
      using sparse_model = llama<float, block_sparse<4>>;
      const sparse_plan plan = allocate_plan(sparse_plan{.sparsity = 0.5}, 4, kind,
                                             [&](const sparse_plan& probe) { sparse_model survey(c, probe); });
      sparse_model m(c, plan);
      m.init(1);  // draws the patterns
      in.block = 4;
      in.sparsity = 0.5;
      in.allocation = kind;
      const run_plan p = make_run_plan(s, in);
      CHECK(p.stored_parameters == double(m.num_parameters()));
      CHECK(p.stored_parameters < p.parameters);  // the blocks' projections keep part of their blocks
      CHECK(s.tensors == m.layout()->count());
      double blocks = 0;
      for (const auto& w : m.sparse_weights()) blocks += double(w.pattern->nnz());
      CHECK(p.sparse_active_blocks == blocks);
      in.block = 0;
    }
  }
}

TEST_CASE("plan: LLaMA's FLOPs are those of its seven projections per block, its attention and its head") {
  const llama_config c = small_llama();
  plan_inputs in;
  in.batch = 3;
  in.seq = 16;
  const run_plan p = make_run_plan(model_shape_of(c), in);
  const double N = 48, C = 32, HD = 4 * 8, GD = 2 * 8, F = 48, V = 61, L = 2;
  const double per_block = C * HD + 2 * C * GD + HD * C + 3 * C * F;  // q, k, v, o, gate, up, down
  CHECK(p.dense_flops == doctest::Approx(3 * 2 * N * (L * per_block + C * V)));
  CHECK(p.head_flops == doctest::Approx(3 * 2 * N * C * V));
  // QKᵀ and PV over the causal half, for every query head (not the key/value heads)
  CHECK(p.attention_flops == doctest::Approx(3 * 4 * 3 * 4 * 8 * (16.0 * 17 / 2) * L));
  in.recompute_blocks = true;  // recompute re-runs the blocks' forward, not the head's
  const run_plan r = make_run_plan(model_shape_of(c), in);
  CHECK(r.dense_flops == doctest::Approx(p.dense_flops + 2 * N * L * per_block));
}

TEST_CASE("plan: the scratch it counts is what a training step's workspaces and residual streams hold (LLaMA, GPT)") {
  const std::size_t B = 2, T = 8, N = B * T;
  plan_inputs in;
  in.batch = B;
  in.seq = T;
  for (const auto& c : llama_variants()) {
    CAPTURE(c.num_key_value_heads);
    llama<> m(c);
    m.init(1);
    one_step(m, B, T);
    const model_shape s = model_shape_of(c);
    const run_plan p = make_run_plan(s, in);
    CHECK(double(m.activation_bytes()) == p.scratch + stream_bytes(s, N));
  }
  gpt<> g(test::small_gpt_config());
  g.init(1);
  one_step(g, B, T);
  const model_shape s = model_shape_of(test::small_gpt_config());
  const run_plan p = make_run_plan(s, in);
  CHECK(double(g.activation_bytes()) == p.scratch + stream_bytes(s, N));
  // The check can fail: a plan of twice the rows counts more than the step holds.
  in.batch = 2 * B;
  CHECK(double(g.activation_bytes()) < make_run_plan(s, in).scratch + stream_bytes(s, N));
}

TEST_CASE("plan: a tensor-parallel rank's share holds what the rank's model slice registers") {
  gpt_config c = test::small_gpt_config();  // 2 layers
  c.n_embd = 64;  // 4 heads of 16: 2 per rank, one 16-block of width each
  c.n_head = 4;
  const model_shape whole = model_shape_of(c);
  plan_inputs in;
  in.batch = 2;
  in.seq = 16;
  in.tensor_parallel = 2;
  for (std::size_t block : {std::size_t(0), std::size_t(16)}) {
    CAPTURE(block);
    in.block = block;
    in.sparsity = block ? 0.5 : 0.0;
    const run_plan p = make_run_plan(whole, in);
    if (block == 0) {
      gpt<float> slice(c, {}, parallel::tensor_split{.rank = 1, .size = 2});
      CHECK(p.stored_parameters == double(slice.num_parameters()));
    } else {
      gpt<float, block_sparse<16>> slice(c, {.sparsity = 0.5, .block = 16}, parallel::tensor_split{.rank = 1, .size = 2});
      CHECK(p.stored_parameters == double(slice.num_parameters()));
    }
    plan_inputs one = in;
    one.tensor_parallel = 1;
    CHECK(p.whole_parameters == make_run_plan(whole, one).parameters);
    CHECK(p.model.heads == 2);
    CHECK(p.model.ff == 128);
    // rank 0 assembles the whole model's weights and its two Adam slots at a save (12 bytes per
    // parameter), and receives one arena of every rank at a time (4 bytes per parameter of a share)
    const double w = make_run_plan(whole, one).stored_parameters;
    CHECK(p.checkpoint_gather > 12.0 * w + 2 * 4.0 * p.stored_parameters);
    CHECK(p.checkpoint_gather < 12.0 * w + 2 * 4.0 * p.stored_parameters + 1e4);  // + the tensors' alignment
    CHECK(p.total_bytes() > p.checkpoint_gather);
  }
  in.checkpoints = false;
  in.block = 0;
  CHECK(make_run_plan(whole, in).checkpoint_gather == 0);
  c.n_head = 2;
  c.n_embd = 48;  // 2 heads of 24 over 4 ranks
  in.tensor_parallel = 4;
  CHECK_THROWS_WITH_AS(make_run_plan(model_shape_of(c), in), doctest::Contains("2 attention heads do not split over 4"),
                       sparselm::error);
}

TEST_CASE("plan: a tensor-parallel rank's share of a LLaMA holds what its slice registers (grouped heads split)") {
  plan_inputs in;
  in.batch = 2;
  in.seq = 8;
  in.tensor_parallel = 2;
  for (const auto& c : llama_variants()) {
    if (c.kv_heads() % 2 != 0) continue;  // multi-query: one key/value head does not split (below)
    CAPTURE(c.num_key_value_heads);
    CAPTURE(c.attention_bias);
    const run_plan p = make_run_plan(model_shape_of(c), in);
    llama<float> slice(c, {}, parallel::tensor_split{.rank = 1, .size = 2});
    CHECK(p.stored_parameters == double(slice.num_parameters()));
    CHECK(p.model.heads == c.num_attention_heads / 2);
    CHECK(p.model.kv_heads == c.kv_heads() / 2);
    CHECK(p.model.ff == c.intermediate_size / 2);
    // the comparison can fail: the slice holds fewer parameters than the whole model
    plan_inputs one = in;
    one.tensor_parallel = 1;
    CHECK(make_run_plan(model_shape_of(c), one).stored_parameters > p.stored_parameters);
  }
  llama_config mq = small_llama();
  mq.num_key_value_heads = 1;
  CHECK_THROWS_WITH_AS(make_run_plan(model_shape_of(mq), in), doctest::Contains("1 key/value heads do not split over 2"),
                       sparselm::error);
  CHECK_THROWS_WITH_AS(llama<float>(mq, {}, parallel::tensor_split{.rank = 0, .size = 2}),
                       doctest::Contains("key/value heads (1) do not split over a tensor-parallel group of 2"),
                       sparselm::error);
}

}  // namespace SPARSELM_UNITY_ID
