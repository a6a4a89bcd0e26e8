#pragma once
// A plan before a run (`--dry-run` of the training programs): parameters, memory by part, FLOPs per
// step and a predicted step time, computed from the model's config and the run's settings without
// building the model (a GPT-3-sized plan costs nothing).
//
//   model_shape m = model_shape_of(gpt_cfg);       // or sparse_lm, bert, llama configs (train/model_shape.hpp)
//   run_plan p = make_run_plan(m, plan_inputs_of(settings, seq_len, processes));
//   p.measure_rates();                                            // the host's GEMM (and BSR) rate
//   std::fputs(describe_plan(p).c_str(), stderr);                 // train/plan_report.hpp: the report
//
// What is counted (docs/planning.md):
//   weights, gradients     4 bytes per stored parameter each (block-sparse: active blocks only)
//   optimiser slots        per slot (Adam/LAMB m and v, SGD momentum) the slot type's bytes per
//                          stored parameter; 1/D of it per rank under shard_optimizer
//   patterns               block-sparse metadata (16 bytes per active block), RigL's pooled scores
//   activations            what the layers keep for backward (layers/block.hpp, attention,
//                          feed_forward, the heads, the embeddings), per micro-batch in flight:
//                          every block's cache (recompute none) or one (blocks), the residual
//                          streams (models/stack.hpp), fp32 or bf16 copies as the precision keeps them
//   scratch                the model's temporaries (each layer type's workspace in the scratch pool,
//                          core/step_context.hpp; one pool per pipeline stage), the GEMM packing
//                          buffers per thread
// Every buffer of a step is grow-only, so the sum is the steady state, which a run reaches in its
// first step; the check (examples/check_plan.sh) compares it with measured peak RSS.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/memory_usage.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/train/model_shape.hpp"
#include "sparselm/train/plan_inputs.hpp"
#include "sparselm/train/plan_rates.hpp"

namespace sparselm {

// --- the plan --------------------------------------------------------------------------------------

struct run_plan {
  model_shape model;
  plan_inputs in;
  // parameters
  double parameters = 0, stored_parameters = 0, sparse_active_blocks = 0;
  // bytes per process (the largest stage's share when a pipeline over ranks shards by stage)
  double weights = 0, gradients = 0, optimizer = 0, patterns = 0;
  // trainer.offload: what lives on disk (the weights, gradients and optimiser slots; weights and
  // gradients above are then the part in memory at once: the embedding and head, two blocks)
  double offloaded = 0, weights_on_disk = 0, gradients_on_disk = 0;
  double activations = 0, activations_per_slot = 0, scratch = 0, workspace = 0;
  // tensor parallelism: the model is this rank's share (model_shape.hpp, tensor_parallel_share);
  // whole_parameters its whole count; a checkpoint (and a resume) assembles the whole model and
  // optimiser state on rank 0 (train/tensor_checkpoint.hpp): checkpoint_gather, included in the total
  double whole_parameters = 0, checkpoint_gather = 0, tensor_sum_bytes = 0;
  std::size_t slots_in_flight = 1, caches_per_slot = 0;
  std::size_t data_replicas = 1;
  // FLOPs per optimiser step of one process
  double dense_flops = 0, sparse_flops = 0, attention_flops = 0;
  double head_flops = 0;  // the part of dense_flops in the LM head's vocabulary product
  // measured rates (FLOP/s), 0 until measure_rates(): a dense layer's three products at the
  // blocks' shape and at the LM head's, the block-sparse product
  double dense_rate = 0, head_rate = 0, sparse_rate = 0;
  double bubble = 0;  // pipeline on threads: idle fraction of a stage

  double total_bytes() const {
    return weights + gradients + optimizer + patterns + activations + scratch + workspace + checkpoint_gather;
  }
  double flops() const { return dense_flops + sparse_flops + attention_flops; }
  double predicted_seconds() const {
    if (dense_rate <= 0) return 0;
    double t = (dense_flops - head_flops + attention_flops) / dense_rate;
    t += head_flops / (head_rate > 0 ? head_rate : dense_rate);
    if (sparse_flops > 0) t += sparse_flops / (sparse_rate > 0 ? sparse_rate : dense_rate);
    return t / (1.0 - bubble);
  }

  // Times the library's own kernels (train/plan_rates.hpp) at the model's sizes (shrunk to at most 4M elements per
  // matrix and 4 GFLOP per call; about 0.2 s each): a dense layer's forward and backward products (NN, NT, TN) in the
  // run's compute type at the feed-forward's shape (every row of a micro-batch) and at the LM head's (a 1024-row chunk
  // against the vocabulary), and with block-sparse projections the block-sparse product at the run's density. Attention
  // runs at the dense rate in the prediction.
  void measure_rates(double seconds = 0.2) {
    const std::size_t N = in.batch * in.seq;
    std::size_t m = std::min<std::size_t>(N, 4096), k = model.width, n = std::max(model.ff, 3 * model.hd());
    plan_rates::fit(m, k, n);
    dense_rate = plan_rates::linear(in.compute, m, k, n, seconds);
    if (head_flops > 0) {
      std::size_t hm = std::min<std::size_t>(N, 1024), hk = model.embed_width ? model.embed_width : model.width,
                  hn = model.vocab;
      plan_rates::fit(hm, hk, hn);
      head_rate = plan_rates::linear(in.compute, hm, hk, hn, seconds);
    }
    if (in.block > 0 && sparse_flops > 0)
      sparse_rate = plan_rates::block_sparse(in.compute, in.block, in.sparsity, m, k, n, seconds);
  }
};

// The plan of a run of model m under the inputs (no measurement: measure_rates() adds the rates).
// A model's parameters: every projection's whole count, and the count stored (a block-sparse
// projection keeps its active blocks, nnz of them, under the plan's allocation), biases and the
// other parameters included.
struct parameter_count {
  std::vector<std::size_t> nnz;  // active blocks per projection (0: dense)
  double parameters = 0, stored = 0;
};
inline parameter_count count_parameters(const model_shape& m, const plan_inputs& in) {
  parameter_count c;
  c.nnz.assign(m.projections.size(), 0);
  if (in.block > 0) {
    std::vector<sparse::weight_shape> shapes;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < m.projections.size(); ++i)
      if (m.projections[i].sparse) {
        shapes.push_back({m.projections[i].name, m.projections[i].in, m.projections[i].out});
        which.push_back(i);
      }
    const auto counts = sparse::allocate_blocks(shapes, in.block, in.sparsity, in.allocation);
    for (std::size_t k = 0; k < which.size(); ++k) c.nnz[which[k]] = counts[k];
  }
  double bias = 0;
  for (std::size_t i = 0; i < m.projections.size(); ++i) {
    const auto& q = m.projections[i];
    const double full = double(q.in) * double(q.out);
    c.parameters += full;
    c.stored += c.nnz[i] ? double(c.nnz[i]) * double(in.block * in.block) : full;
    if (q.bias) bias += double(q.out);
  }
  c.parameters += bias + double(m.other_parameters);
  c.stored += bias + double(m.other_parameters);
  return c;
}

inline run_plan make_run_plan(const model_shape& whole, const plan_inputs& in) {
  const std::size_t TP = std::max<std::size_t>(1, in.tensor_parallel);
  const model_shape m = tensor_parallel_share(whole, TP);  // this rank's share (the model itself when TP = 1)
  run_plan p;
  p.model = m;
  p.in = in;
  const double f = 4.0;  // bytes of an fp32 value
  const std::size_t L = m.layers, C = m.width, HD = m.hd(), F = m.ff, Bt = in.batch, T = in.seq, N = Bt * T;
  const std::size_t S = std::max<std::size_t>(1, in.pipeline.stages);
  const bool ranks = S > 1 && in.pipeline.where == pipeline::placement::ranks;
  p.data_replicas = std::max<std::size_t>(1, (ranks ? in.processes / S : in.processes) / TP);

  // Parameters: block-sparse projections keep their active blocks (uniform or ERK allocation).
  const parameter_count counted = count_parameters(m, in);
  const std::vector<std::size_t>& nnz = counted.nnz;
  p.parameters = counted.parameters;
  p.stored_parameters = counted.stored;
  double dense_fwd = 0, sparse_fwd = 0, pooled = 0;
  for (std::size_t i = 0; i < m.projections.size(); ++i) {
    const auto& q = m.projections[i];
    const double full = double(q.in) * double(q.out);
    const double kept = nnz[i] ? double(nnz[i]) * double(in.block * in.block) : full;
    p.sparse_active_blocks += double(nnz[i]);
    if (nnz[i]) pooled += full / double(in.block * in.block);
    const double rows = q.rows_per_seq ? double(Bt * q.rows_per_seq) : double(N);
    (nnz[i] ? sparse_fwd : dense_fwd) += 2.0 * rows * kept;
  }
  const double padding = double(m.tensors) * 8;  // 64-byte aligned tensors: half a line each on average

  // The share of the largest pipeline stage (a pipeline over ranks that shards by stage keeps only it).
  double share = 1.0;
  if (ranks && in.shard_optimizer) {
    const double per_block = (p.stored_parameters - double(m.other_parameters)) / double(std::max<std::size_t>(1, L));
    const double blocks = std::ceil(double(L) / double(S));
    share = std::min(1.0, (blocks * per_block + double(m.other_parameters)) / p.stored_parameters);
  }
  const double stored = (p.stored_parameters + padding) * share;
  p.weights = stored * f;
  p.gradients = stored * f;
  double slots = stored * double(in.optimizer_slots * in.slot_bytes);
  if (in.shard_optimizer && p.data_replicas > 1) slots /= double(p.data_replicas);
  if (in.offload) {
    // On disk: every weight, gradient and slot. In memory at once: the embedding and head (the tied
    // projection reads and writes the whole table every step), every block's norms, and two
    // blocks' weights and gradients (the one running and the one read ahead); the update streams a
    // window of segments of the slots, weights and gradients at a time (models/offload_stream.hpp,
    // optim/engine.hpp).
    p.offloaded = slots;
    p.weights_on_disk = p.weights;
    p.gradients_on_disk = p.gradients;
    const double per_block = (p.stored_parameters - double(m.other_parameters)) / double(std::max<std::size_t>(1, L));
    const double resident = std::min(stored, (double(m.other_parameters) + 2.0 * per_block) * share + padding);
    p.weights = resident * f;
    p.gradients = resident * f;
    // the update's window of segments and the next one read ahead (optim/engine.hpp, stream_window)
    p.optimizer = 2.0 * 256.0 * 16384.0 * double(in.optimizer_slots * in.slot_bytes + 2 * 4);
  } else {
    p.optimizer = slots;
  }
  if (in.block) p.patterns = (p.sparse_active_blocks * 16.0 + (in.rigl ? pooled * f : 0.0)) * share;

  // Activations per micro-batch in flight (bytes); layers/block.hpp and the layers it holds.
  const bool dense_compact = in.compute == dtype::bf16 && in.bf16_activations;
  const bool sparse_bf16 = in.compute == dtype::bf16 && in.block != 1 && in.block != 0 &&
                           (kernels::bsr_bf16_pays() || (in.block == 16 && kernels::bsr_bf16_amx_chosen()));
  const bool compact = !m.llama_parts && (in.block ? (in.bf16_activations && sparse_bf16) : dense_compact);
  const double lse = double(Bt * m.heads * T) * f, stats = (m.llama_parts ? 2.0 : 4.0) * double(N) * f;
  // LLaMA's parts (no bf16 copies: their projections keep views of the block's fp32 buffers): the
  // attention's q, k, v, qkv, heads' output and rotary table; the gated feed-forward's g, u, a.
  const double fp32_cache = m.llama_parts ? 3.0 * N * C * f + double(N) * double(5 * HD + 2 * m.gd()) * f +
                                                double(T * m.head_dim) * f + 3.0 * N * F * f + lse + stats
                                          : 3.0 * N * C * f + 4.0 * N * HD * f + 2.0 * N * F * f + lse + stats;
  double compact_cache = 0;
  if (m.post_ln)  // t1, x1, t2 stay fp32; qkv, the heads' output, h and a in bf16
    compact_cache = 3.0 * N * C * f + 4.0 * N * HD * 2 + 2.0 * N * F * 2 + lse + stats;
  else  // x1 fp32; the norms' outputs (kept by the branches), qkv, heads' output, h and a in bf16
    compact_cache = 1.0 * N * C * f + 2.0 * N * C * 2 + 4.0 * N * HD * 2 + 2.0 * N * F * 2 + lse + stats;
  double cache = compact ? compact_cache : fp32_cache;
  // The fp32 buffers a compact cache lacks. RigL update steps keep x in fp32 (the pooled dense
  // gradient reads it), so every cache gets them too; evaluation (fp32) gives them to the one cache
  // it runs in. Buffers only grow: both sets stay.
  const double fp32_extra = fp32_cache - ((m.post_ln ? 3.0 : 1.0) * N * C * f + lse + stats);
  const bool every_cache_fp32 = compact && in.block && in.rigl;
  if (every_cache_fp32) cache += fp32_extra;
  p.caches_per_slot = in.recompute_blocks ? 1 : (ranks ? (L + S - 1) / S : L);
  const double stream =
      double((L + 1) * N * C) * f + double(N * C) * f + (in.recompute_blocks || S > 1 ? N * C * f : 0.0);
  // The embedding's and the head's caches.
  double emb = 0, head = 0;
  const std::size_t E = m.embed_width;
  if (m.family == "bert") emb = double(N * C) * f + 2.0 * N * f;
  if (E) emb = 4.0 * N * E * f + (m.embed_gelu ? double(N * C) * f : 0.0) + 6.0 * N * f;
  switch (m.head) {
    case head_kind::causal_lm:
      // the final norm's output and statistics (RMSNorm: one per row), targets and weights
      head = double(N * C) * f + (m.llama_parts ? 1.0 : 2.0) * N * f + double(N) * 8;
      if (E) head += double(N * C) * f + 4.0 * N * E * f;  // S1: dxf, the bottleneck's z, dz, h, a
      break;
    case head_kind::bert_pretraining:
      head = 6.0 * double(Bt * m.mlm_per_seq * C) * f;
      break;
    case head_kind::classification:
      head = 6.0 * double(Bt * C) * f;
      break;
    case head_kind::span:
      head = 2.0 * N * f + 2.0 * N * f;
      break;
  }
  p.activations_per_slot = stream + double(p.caches_per_slot) * cache;
  p.slots_in_flight = S > 1 ? pipeline::in_flight(in.pipeline.schedule, S, in.accumulation) : 1;
  const double emb_caches = S > 1 ? double(in.accumulation) : 1.0;  // staged: per micro-batch
  p.activations = double(p.slots_in_flight) * p.activations_per_slot + emb_caches * emb + head +
                  (compact && !every_cache_fp32 && in.evaluation ? fp32_extra : 0.0) +
                  (S > 1 ? double(in.accumulation * N * C) * f : 0.0);  // staged: the embedding's dx per micro-batch

  // Scratch: the workspaces (scratch::get) of the block and its parts per pool (one per stage on
  // threads: the block's branch and norm gradients, the attention's heads' output and qkv gradients,
  // the feed-forward's hidden gradient; LLaMA's parts the same sizes), the head's once.
  const double block_tmp = (m.post_ln ? 3.0 : 2.0) * N * C * f + double(N * F) * f + 4.0 * N * HD * f;
  double head_tmp = 0;
  const std::size_t chunk = 1024;
  switch (m.head) {
    case head_kind::causal_lm:
      head_tmp =
          double(std::min(N, chunk) * m.vocab) * f + (E ? 0.0 : double(N * C) * f) + double(std::min(N, chunk)) * f;
      break;
    case head_kind::bert_pretraining:
      head_tmp = double(std::min(Bt * m.mlm_per_seq, chunk) * m.vocab) * f + double(N * C) * f;
      break;
    default:
      head_tmp = double(N * C) * f;
      break;
  }
  if (E) head_tmp += 2.0 * N * E * f;
  // Stages on threads: a pool per stage (the last one also the head's), and the model's own pool,
  // which evaluation (a branch output and the head) and the embedding's backward use.
  const bool staged = S > 1 && !ranks;
  p.scratch = staged ? double(S) * block_tmp + head_tmp + (in.evaluation ? double(N * C) * f + head_tmp : 0.0)
                     : block_tmp + head_tmp;
  p.workspace = double(in.threads) * 3.0 * double(1 << 20);  // kernels/gemm.hpp: at most ~3 MiB per thread

  // FLOPs: forward products of the projections, the attention (QKᵀ and PV; causal: the lower
  // half), the tied LM head; backward twice the forward; recompute adds the blocks' forward again.
  const double attn_pairs = m.causal ? double(T) * double(T + 1) / 2.0 : double(T) * double(T);
  const double attn_fwd = 4.0 * double(Bt * m.heads * m.head_dim) * attn_pairs * m.attention_density * double(L);
  double lm_fwd = 0;
  if (m.head == head_kind::causal_lm) lm_fwd = 2.0 * double(N) * double(E ? E : C) * double(m.vocab);
  if (m.head == head_kind::bert_pretraining) lm_fwd = 2.0 * double(Bt * m.mlm_per_seq) * double(C) * double(m.vocab);
  dense_fwd += lm_fwd;
  // The share of the blocks in the forward products (recompute re-runs them).
  double block_dense = 0, block_sparse = 0;
  for (std::size_t i = 0; i < m.projections.size(); ++i) {
    const auto& q = m.projections[i];
    if (!q.in_block) continue;
    const double kept = nnz[i] ? double(nnz[i]) * double(in.block * in.block) : double(q.in) * double(q.out);
    (nnz[i] ? block_sparse : block_dense) += 2.0 * double(N) * kept;
  }
  const double M = double(in.accumulation), re = in.recompute_blocks ? 1.0 : 0.0;
  p.dense_flops = M * (3.0 * dense_fwd + re * block_dense);
  // RigL: an update step also computes each sparse weight's dense gradient (2 x rows x in x out),
  // spread here over the steps between updates.
  if (in.rigl && in.block && in.update_period)
    p.dense_flops += M * 2.0 * double(N) * pooled * double(in.block * in.block) / double(in.update_period);
  p.head_flops = M * 3.0 * lm_fwd;
  p.sparse_flops = M * (3.0 * sparse_fwd + re * block_sparse);
  p.attention_flops = M * (3.0 + re) * attn_fwd;
  if (staged) p.bubble = pipeline::predicted_bubble(S, in.accumulation);

  if (TP > 1) {
    const parameter_count w = count_parameters(whole, in);
    p.whole_parameters = w.parameters;
    // At a save rank 0 assembles the whole model's weights and the optimiser's slots (its gradients
    // are allocated but never written: no memory), receiving one arena of every rank at a time
    // (train/tensor_checkpoint.hpp; every rank holds the whole model while it resumes or starts a
    // dense group from one seed). Measured once for GPT-2 small on 2 ranks: +2.15 GB, this 2.14.
    if (in.checkpoints)
      p.checkpoint_gather = (w.stored + padding) * (f + double(in.optimizer_slots * in.slot_bytes)) +
                            double(TP) * (p.stored_parameters + padding) * std::max<double>(f, double(in.slot_bytes));
    // Four sums of a (rows, C) block per block and micro-batch (two forward, two backward), two more
    // with recompute; the embedding, norms and head are computed whole on every rank.
    p.tensor_sum_bytes = M * (4.0 + 2.0 * re) * double(L) * double(N * C) * f;
  }
  return p;
}

// A run with a memory budget (plan_inputs::memory_budget, GiB per process): its plan plus what the
// process already holds (the program, its data) must fit, or the run stops before its first step
// with an error that says what the plan needs and what would free it. Nothing without a budget.
inline void check_memory_budget(const model_shape& m, const plan_inputs& in, const std::string& context) {
  if (in.memory_budget <= 0) return;
  const run_plan p = make_run_plan(m, in);
  const double gib = double(1 << 30), held = peak_rss_bytes(), need = p.total_bytes() + held;
  if (need <= in.memory_budget * gib) return;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: memory budget %.3g GiB (memory_budget, --memory-budget): the run needs %.3g GiB per process "
                "(held now %.3g, weights %.3g, gradients %.3g, optimiser slots %.3g, activations %.3g, scratch %.3g; "
                "--dry-run shows the plan)",
                context.c_str(), in.memory_budget, need / gib, held / gib, p.weights / gib, p.gradients / gib,
                p.optimizer / gib, p.activations / gib, (p.scratch + p.workspace) / gib);
  std::string advice;
  if (!in.offload) advice += "; --offload DIR keeps the weights, gradients and optimiser slots on disk";
  if (!in.recompute_blocks) advice += "; --recompute blocks keeps one block's activations";
  advice += "; a smaller --batch-size with --accumulation keeps the global batch";
  fail(buf, advice);
}

}  // namespace sparselm
