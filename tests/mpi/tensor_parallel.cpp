// Tensor parallelism (parallel/tensor_parallel.hpp) under mpirun: GPT's, S1's and LLaMA's blocks split
// over a group of ranks give one process's loss and gradients (S1 with its block-sparse embedding and
// head projections whole on every rank; LLaMA with grouped-query attention, each rank holding its
// query heads' key/value heads, and the gated feed-forward). Each rank builds its slice of the model
// (gpt(cfg, plan, {rank, P}), initialised from the shared seed), and, for the reference, every
// rank's slice locally (initialisation is deterministic) assembled into the whole model
// (models/tensor_shards.hpp). The group runs one forward and backward with the step's tensor_sum
// over its ranks; the ranks' gradients are gathered and assembled, and compared with the whole
// model's on the same rows, dense and block-sparse (B = 16, each slice with its own pattern). The
// assembled model's slices, taken back (take_slices, as a resume does), are each rank's own: values,
// block patterns and slot order.
//
// With 2 ranks: one group of 2. With 4 ranks: a grid of 2 tensor-parallel groups (ranks 2g, 2g + 1)
// x 2 data replicas, each replica on its own rows of the batch, its gradients summed over the data
// group; the reference runs the whole batch. Also checked: the loss is not the whole model's when
// the tensor sum does nothing, nor the gradients when backward leaves out its sums (so the
// comparisons can fail), a step makes 4 sums per block, a split model without a tensor_sum is
// an error naming it, and heads or hidden units that do not divide are errors naming them. The
// group's check of the tensors every rank holds whole (train/tensor_group_checks.hpp) passes on the
// slices and names the tensor and the rank after one value (or S1's whole pattern) changed on one rank.
// Exits 1 naming the first failure.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparselm/models/gpt.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/models/tensor_shards.hpp"
#include "sparselm/parallel/mpi.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"
#include "sparselm/sparse/pattern_io.hpp"
#include "sparselm/train/tensor_group_checks.hpp"

namespace {

using namespace sparselm;
using parallel::mpi_group;

int failures = 0;
int world_rank = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "tensor_parallel: rank %d: FAIL: %s\n", world_rank, what.c_str());
}

gpt_config tiny() {
  gpt_config c;
  c.vocab_size = 61;
  c.n_positions = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;  // head width 16: 2 heads per rank are 32 columns, whole blocks of 16
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0f;
  c.initializer_range = 0.2f;  // gradients well above float noise
  return c;
}

// Rows [first, first + rows) of a fixed batch of 4 sequences of 8 tokens.
struct rows_of {
  std::vector<std::int32_t> ids, targets;
  std::size_t rows = 0, seq = 8;
  rows_of(std::size_t first, std::size_t n) : rows(n) {
    for (std::size_t b = first; b < first + n; ++b)
      for (std::size_t t = 0; t < seq; ++t) {
        ids.push_back(std::int32_t((b * 17 + t * 5 + 3) % 61));
        targets.push_back(std::int32_t((b * 7 + t * 11 + 1) % 61));
      }
  }
  token_batch batch() const { return {ids, targets, {}, rows, seq}; }
};

// Every tensor of `got` within tol · (largest magnitude of the tensor in `want`) of `want`.
void expect_close(const arena<float>& got, const arena<float>& want, double tol, const std::string& what) {
  const auto& L = want.layout();
  double worst = 0;
  std::string worst_name;
  for (std::size_t i = 0; i < L.count(); ++i) {
    auto a = got[i], b = want[i];
    double scale = 0;
    for (float v : b) scale = std::max(scale, double(std::fabs(v)));
    expect(scale > 0, what + ": '" + L[i].name + "' is all zero in the reference (the test would be void)");
    for (std::size_t j = 0; j < b.size(); ++j) {
      const double d = std::fabs(double(a[j]) - double(b[j])) / scale;
      if (d > worst) worst = d, worst_name = L[i].name;
    }
  }
  if (world_rank == 0) std::printf("tensor_parallel: %s: largest difference %.3g of a tensor's largest value (%s)\n",
                                   what.c_str(), worst, worst_name.c_str());
  expect(worst <= tol, what + ": '" + worst_name + "' differs by " + std::to_string(worst) +
                           " of its largest value (tolerance " + std::to_string(tol) + ")");
}

// train/tensor_group_checks.hpp on a group's slices: quiet while the tensors every rank holds whole
// agree; a change of one value (or of a whole block-sparse layer's pattern) on the last rank of the
// group fails on every rank, naming the tensor and the rank.
template <class Model>
void check_replicated_check(parallel::replica_group& tp, Model& mine, const std::string& what) {
  try {
    check_group_replicated(tp, mine, "at the start");
  } catch (const error& e) {
    expect(false, what + ": the slices' replicated tensors differ: " + e.what());
  }
  const std::size_t last = tp.size() - 1;
  const auto sliced = sliced_tensors(mine, mine.params().layout().count());
  const auto& L = mine.params().layout();
  std::size_t i = 0;
  while (i < sliced.size() && (sliced[i] || L[i].name.find("ln") == std::string::npos)) ++i;
  if (i == sliced.size())  // S1 names its norms otherwise: the last replicated tensor
    for (std::size_t k = 0; k < sliced.size(); ++k)
      if (!sliced[k]) i = k;
  expect(i < sliced.size(), what + ": no replicated tensor to change");
  if (i == sliced.size()) return;
  auto expect_named = [&](const std::string& culprit, const char* change) {
    try {
      check_group_replicated(tp, mine, "at the checkpoint of step 3");
      expect(false, what + ": " + change + " on rank " + std::to_string(last) + " went unnoticed");
    } catch (const error& e) {
      const std::string m = e.what();
      expect(m.find(culprit) != std::string::npos && m.find("rank " + std::to_string(last)) != std::string::npos &&
                 m.find("step 3") != std::string::npos,
             what + ": " + change + ": the message does not name " + culprit + " and the rank: " + m);
    }
  };
  float& v = mine.params()[i][0];
  const float kept = v;
  if (tp.rank() == last) v += 1e-3f;
  expect_named("'" + L[i].name + "'", "a changed replicated value");
  v = kept;
  using S = typename Model::sparsity;
  if constexpr (S::is_sparse) {
    bool changed = false;
    detail::for_sparse_layers(mine, false, [&](const auto& n) {
      if (changed) return;
      changed = true;
      auto& col = n.state().pattern.col;
      const auto old = col[0];
      if (tp.rank() == last) col[0] = old + 1;
      expect_named("the block pattern of '" + n.weight().name + "'", "a changed replicated pattern");
      col[0] = old;
    });
    expect(changed || !std::is_same_v<Model, sparse_lm<float, S>>, what + ": S1 has no replicated block-sparse layer");
  }
  try {
    check_group_replicated(tp, mine, "after the changes were undone");
  } catch (const error& e) {
    expect(false, what + ": " + e.what());
  }
}

std::string what_of(const char* name, std::size_t P, std::size_t R) {
  return std::string(name) + ", " + std::to_string(P) + " tensor ranks x " + std::to_string(R) + " replicas";
}

// even_slice_plan (models/tensor_shards.hpp) from the whole model's patterns, as a checkpoint stores
// them: the plan gives each of this rank's block-sparse weights its slice's blocks; one block more
// in the last slice of a row-split weight is an error naming the weight and the slices' counts.
template <class Model>
void check_slice_plan(const Model& whole, const Model& mine, const typename Model::config_type& cfg,
                      const sparse_plan& plan, const std::string& what) {
  std::map<std::string, std::vector<std::int32_t>> pats;
  std::map<std::string, std::size_t> rows_b;
  visit_tree(whole, [&](const auto& n) {
    if constexpr (is_linear_v<std::decay_t<decltype(n)>>)
      if constexpr (std::decay_t<decltype(n)>::sparsity::is_sparse) {
        pats[n.weight().name] = sparse::pattern_to_i32(n.state().pattern);
        rows_b[n.weight().name] = n.state().pattern.rows_b;
      }
  });
  sparse_plan one = plan;
  one.count = [](const std::string&, std::size_t, std::size_t) { return std::size_t(1); };
  const Model probe(cfg, one, mine.tensor_split());
  const sparse_plan got = even_slice_plan(probe, pats, plan, "the whole model");
  std::string row_split;
  visit_tree(mine, [&](const auto& n) {
    if constexpr (is_linear_v<std::decay_t<decltype(n)>>)
      if constexpr (std::decay_t<decltype(n)>::sparsity::is_sparse) {
        expect(got.count(n.weight().name, n.in(), n.out()) == n.nnz_blocks(),
               what + ": even_slice_plan gives '" + n.weight().name + "' " +
                   std::to_string(got.count(n.weight().name, n.in(), n.out())) + " blocks, the slice holds " +
                   std::to_string(n.nnz_blocks()));
        if (row_split.empty() && n.split().kind == parallel::split_kind::rows) row_split = n.weight().name;
      }
  });
  expect(!row_split.empty(), what + ": no row-split block-sparse weight");
  if (row_split.empty()) return;
  auto& q = pats.at(row_split);
  q.push_back(std::int32_t(rows_b.at(row_split) - 1));  // a block in the last slice's rows
  q.push_back(0);
  try {
    even_slice_plan(probe, pats, plan, "the changed patterns");
    expect(false, what + ": an uneven pattern of '" + row_split + "' was accepted");
  } catch (const error& e) {
    const std::string m = e.what();
    expect(m.find("the changed patterns") != std::string::npos && m.find("'" + row_split + "'") != std::string::npos &&
               m.find("must divide evenly") != std::string::npos,
           what + ": the uneven pattern's message does not name the weight: " + m);
  }
}

// S1 (models/sparse_lm.hpp) of the same size: its block-sparse embedding up-projection and head
// down-projection stay whole on every rank; attention biases on, so that the block's column-split
// projections have biases (sliced) and its row-split ones too (replicated).
sparse_lm_config tiny_s1(std::size_t block) {
  sparse_lm_config c;
  c.vocab_size = 61;
  c.sequence_length = 16;
  c.layers = 2;
  c.hidden_length = 64;
  c.ff_length = 128;
  c.attention_heads = 4;
  c.qkv_length = 16;
  c.embedding_length = 32;
  c.block_size = block;
  c.sparsity = 0.5;
  c.attention_bias = true;
  c.projection_bias = true;
  c.layer_norm_gamma = 1.0f;
  c.loss.autoregression_offset = 2;  // S1's weighted repeated-token loss, scoring 6 of the 8 positions
  return c;
}

// LLaMA of the same size: 4 query heads over 2 key/value heads (2 and 1 per rank of a group of 2), an
// untied head, biases on every projection (so that column-split biases are sliced and row-split
// ones replicated).
llama_config tiny_llama() {
  llama_config c;
  c.vocab_size = 61;
  c.max_position_embeddings = 16;
  c.num_hidden_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.attention_bias = c.mlp_bias = true;
  c.initializer_range = 0.2f;
  return c;
}

// Model: gpt, sparse_lm or llama, over cfg (layers blocks, sliced tensors per block); the slices
// and the whole model are built from a plan of 50 % blocks.
template <class Model>
void check_group(mpi_group& world, parallel::replica_group& tp, parallel::replica_group* dp, const char* name,
                 const typename Model::config_type& cfg, std::size_t layers, std::size_t sliced_per_block = 6) {
  using S = typename Model::sparsity;
  const std::size_t P = tp.size(), R = dp ? dp->size() : 1, replica = dp ? dp->rank() : 0;
  sparse_plan plan;
  plan.sparsity = 0.5;
  if constexpr (S::is_sparse) plan.block = 16;
  // Every rank's slice, built and initialised here (each rank's initialisation is its own).
  std::vector<std::unique_ptr<Model>> slices;
  for (std::size_t r = 0; r < P; ++r) {
    slices.push_back(std::make_unique<Model>(cfg, plan, parallel::tensor_split{r, P}));
    slices.back()->init(42);
  }
  auto& mine = *slices[tp.rank()];
  // The whole model: as many blocks per split weight as the slices together (a weight every rank
  // holds whole: the slice's own), their values and patterns.
  std::map<std::string, std::size_t> blocks;
  for (auto& s : slices)
    visit_tree(*s, [&](const auto& n) {
      if constexpr (is_linear_v<std::decay_t<decltype(n)>>) {
        if constexpr (std::decay_t<decltype(n)>::sparsity::is_sparse) {
          if (n.split().active()) blocks[n.weight().name] += n.nnz_blocks();
          else blocks[n.weight().name] = n.nnz_blocks();
        }
      }
    });
  sparse_plan whole_plan = plan;
  whole_plan.count = [&](const std::string& w, std::size_t, std::size_t) { return blocks.at(w); };
  Model whole(cfg, whole_plan);
  std::vector<const Model*> shard_ptrs;
  std::vector<const arena<float>*> shard_params;
  for (auto& s : slices) shard_ptrs.push_back(s.get()), shard_params.push_back(&s->params());
  assemble_shards<Model>(shard_ptrs, shard_params, whole, whole.params(), true);
  {  // and back: the whole model's slices are the ranks' own, bit for bit, patterns and slot order included
    Model back(cfg, plan, parallel::tensor_split{tp.rank(), P});
    back.init(7);  // another pattern and other values, which take_slices must replace
    take_slices(whole, whole.params(), back, back.params());
    expect(std::memcmp(back.params().all().data(), mine.params().all().data(), mine.params().all().size_bytes()) == 0,
           std::string(name) + ": take_slices of the assembled model is not the rank's slice");
    const auto a = split_patterns(back), b = split_patterns(mine);
    expect(a.size() == b.size(), std::string(name) + ": take_slices gave another number of split patterns");
    for (std::size_t k = 0; k < a.size() && k < b.size(); ++k)
      expect(a[k]->row == b[k]->row && a[k]->col == b[k]->col,
             std::string(name) + ": take_slices gave pattern " + std::to_string(k) + " other blocks or another order");
    if constexpr (S::is_sparse) expect(!a.empty(), std::string(name) + ": no split block-sparse weight to compare");
  }

  if constexpr (S::is_sparse) check_slice_plan(whole, mine, cfg, plan, what_of(name, P, R));

  // The reference: the whole batch (R replicas' rows) in one process.
  const rows_of all(0, 2 * R), own(2 * replica, 2);
  const double norm = whole.loss_normaliser(all.batch());
  whole.grads().zero();
  const auto want = whole.forward_backward({}, all.batch(), float(1.0 / norm));

  // The group: this replica's rows, the tensor sums over tp, the gradients over dp.
  const parallel::tensor_sum_fn sum = parallel::tensor_sum_over(tp);
  pipeline::pass_context ctx;
  ctx.tensor_sum = &sum;
  mine.grads().zero();
  auto got = mine.forward_backward(ctx, own.batch(), float(1.0 / norm));
  double loss[2] = {got.loss_sum, double(got.count)};
  if (dp) dp->all_reduce(std::span<double>(loss, 2));
  const std::string what = what_of(name, P, R);
  if (world_rank == 0)
    std::printf("tensor_parallel: %s: loss %.9g, one process %.9g\n", what.c_str(), loss[0] / norm,
                want.loss_sum / norm);
  // Summed in another order than one process's GEMMs sum: float rounding of a sum of ~100 terms.
  expect(std::fabs(loss[0] - want.loss_sum) <= 1e-5 * std::fabs(want.loss_sum), what + ": loss differs");
  expect(std::size_t(loss[1]) == want.count, what + ": token count differs");

  // Gradients: summed over the replicas, gathered over the group (every rank's arena, same layout).
  auto g = mine.grads().all();
  if (dp) dp->all_reduce(g);
  const std::size_t n = g.size();  // a multiple of 16 floats (arena offsets are 64-byte aligned)
  std::vector<float> gathered(n * P);
  std::copy(g.begin(), g.end(), gathered.begin() + std::ptrdiff_t(tp.rank() * n));
  std::vector<std::size_t> bounds;
  for (std::size_t r = 0; r <= P; ++r) bounds.push_back(r * n * sizeof(float));
  tp.all_gather_bytes(std::as_writable_bytes(std::span<float>(gathered)), bounds);
  std::vector<arena<float>> rank_grads;
  std::vector<const arena<float>*> rank_grad_ptrs;
  for (std::size_t r = 0; r < P; ++r) {
    rank_grads.emplace_back(mine.params().layout_ptr());
    std::memcpy(rank_grads.back().all().data(), gathered.data() + r * n, n * sizeof(float));
  }
  for (auto& a : rank_grads) rank_grad_ptrs.push_back(&a);
  // Replicated tensors: every rank of the group holds the same gradient, bit for bit (the sums give
  // every rank the same bits, and what follows them is the same arithmetic).
  const auto& L = mine.params().layout();
  const auto sliced = sliced_tensors(mine, L.count());
  // GPT, S1: c_attn's and c_fc's weights and biases, the c_proj weights; LLaMA: the 7 weights, the
  // q, k, v, gate and up biases
  expect(std::size_t(std::count(sliced.begin(), sliced.end(), true)) == layers * sliced_per_block,
         what + ": not " + std::to_string(sliced_per_block) + " sliced tensors per block");
  for (std::size_t i = 0; i < L.count(); ++i)
    if (!sliced[i])
      for (std::size_t r = 1; r < P; ++r)
        expect(std::memcmp(rank_grads[r][i].data(), rank_grads[0][i].data(), L[i].size * sizeof(float)) == 0,
               what + ": replicated '" + L[i].name + "' has another gradient on rank " + std::to_string(r));
  arena<float> assembled(whole.params().layout_ptr());
  assemble_shards<Model>(shard_ptrs, rank_grad_ptrs, whole, assembled, false);
  // Float rounding: the sums run in another order (the group's partial products, then the sum;
  // the replicas' rows, then their sum); Adam-free, so 1e-5 of a tensor's largest gradient is
  // ample for sums of ~100 terms in float (eps 6e-8).
  expect_close(assembled, whole.grads(), 1e-5, what + " gradients");

  // The gradient comparison can fail: with the forward's sums but none in backward (a sum that
  // stops after the first 2 per block), the gradients are not the group's.
  {
    std::vector<float> right(g.begin(), g.end());
    std::size_t calls = 0;
    const parallel::tensor_sum_fn forward_only = [&](std::span<float> x) {
      if (calls++ < 2 * layers) tp.all_reduce(x, parallel::reduce_op::sum);
    };
    pipeline::pass_context broken;
    broken.tensor_sum = &forward_only;
    mine.grads().zero();
    mine.forward_backward(broken, own.batch(), float(1.0 / norm));
    auto b = mine.grads().all();
    if (dp) dp->all_reduce(b);
    double scale = 0, diff = 0;
    for (std::size_t i = 0; i < b.size(); ++i)
      scale = std::max(scale, double(std::fabs(right[i]))), diff = std::max(diff, double(std::fabs(b[i] - right[i])));
    expect(calls == 4 * layers, what + ": " + std::to_string(calls) + " tensor sums in a step, not 4 per block");
    expect(diff > 1e-3 * scale, what + ": gradients without the backward sums are the group's (the test would be void)");
  }
  // The comparison can fail: without the sums (each rank alone) the loss is not the whole model's.
  const parallel::tensor_sum_fn none = [](std::span<float>) {};
  pipeline::pass_context alone;
  alone.tensor_sum = &none;
  auto solo = mine.evaluate(own.batch(), alone);
  double solo_loss = solo.loss_sum;
  const auto whole_own = whole.evaluate(own.batch());
  expect(std::fabs(solo_loss - whole_own.loss_sum) > 1e-3 * std::fabs(whole_own.loss_sum),
         what + ": a rank without the tensor sums computes the whole model's loss (the test would be void)");
  check_replicated_check(tp, mine, what);
  world.barrier();
}

void check_errors(mpi_group& tp) {
  const auto cfg = tiny();
  // A split model with no tensor_sum in its step.
  gpt<float, dense> m(cfg, {}, parallel::tensor_split{0, 2});
  m.init(1);
  const rows_of r(0, 1);
  try {
    m.evaluate(r.batch());
    expect(false, "a split model ran without a tensor_sum");
  } catch (const error& e) {
    expect(std::string(e.what()).find("tensor_sum") != std::string::npos,
           std::string("no tensor_sum: the message does not name it: ") + e.what());
  }
  // Heads and hidden units that do not divide.
  try {
    gpt<float, dense> bad(cfg, {}, parallel::tensor_split{0, 3});
    expect(false, "4 heads split over 3 ranks");
  } catch (const error& e) {
    expect(std::string(e.what()).find("heads (4)") != std::string::npos &&
               std::string(e.what()).find("3 ranks") != std::string::npos,
           std::string("4 heads over 3 ranks: the message does not name them: ") + e.what());
  }
  auto odd = cfg;
  odd.n_inner = 130;
  try {
    gpt<float, dense> bad(odd, {}, parallel::tensor_split{1, 4});
    expect(false, "130 hidden units split over 4 ranks");
  } catch (const error& e) {
    expect(std::string(e.what()).find("hidden units (130)") != std::string::npos,
           std::string("130 hidden units over 4 ranks: the message does not name them: ") + e.what());
  }
  (void)tp;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    mpi_group world(MPI_COMM_WORLD);
    world_rank = int(world.rank());
    const std::size_t W = world.size();
    expect(W == 2 || W == 4, "run me under mpirun with 2 ranks (one group) or 4 (2 groups x 2 replicas)");
    if (W == 2 || W == 4) {
      std::unique_ptr<parallel::replica_group> tp, dp;
      parallel::replica_group* tp_group = &world;
      if (W == 4) {
        const std::size_t w = world.rank();
        tp = world.split(w / 2, w % 2);  // ranks 2g, 2g + 1: a tensor-parallel group
        dp = world.split(w % 2, w / 2);  // the same slice of every group: a data group
        tp_group = tp.get();
      }
      try {
        check_group<gpt<float, dense>>(world, *tp_group, dp.get(), "dense", tiny(), 2);
        check_group<gpt<float, block_sparse<16>>>(world, *tp_group, dp.get(), "block-sparse 16", tiny(), 2);
        check_group<sparse_lm<float, dense>>(world, *tp_group, dp.get(), "S1 dense", tiny_s1(0), 2);
        check_group<sparse_lm<float, block_sparse<16>>>(world, *tp_group, dp.get(), "S1 block-sparse 16", tiny_s1(16),
                                                        2);
        check_group<llama<float, dense>>(world, *tp_group, dp.get(), "LLaMA dense", tiny_llama(), 2, 12);
        check_group<llama<float, block_sparse<16>>>(world, *tp_group, dp.get(), "LLaMA block-sparse 16", tiny_llama(),
                                                    2, 12);
        check_errors(world);
      } catch (const std::exception& e) {
        expect(false, std::string("error: ") + e.what());
      }
    }
    int local = failures, total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures = total;
  }
  MPI_Finalize();
  if (world_rank == 0) std::printf("tensor_parallel: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
