#pragma once
// What a run's plan (train/plan.hpp) needs of its settings: batch and sequence, processes and
// threads, precision, recompute, pipeline, sharding, offload, the optimiser's slots and the
// sparsity. A program fills it from its resolved settings and hands it to the plan (--dry-run) and
// to the memory-budget check, without compiling the plan itself (examples/support/training_cli.cpp
// does, once).
//
//   plan_inputs in = plan_inputs_of(settings, seq_len, processes);
//   run_plan p = make_run_plan(model_shape_of(cfg), in);      // train/plan.hpp

#include <algorithm>
#include <cstddef>
#include <string>

#include "sparselm/core/dtype.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/sparse/init.hpp"
#include "sparselm/train/run_settings.hpp"

namespace sparselm {

struct plan_inputs {
  std::size_t batch = 1, seq = 1, accumulation = 1;  // rows per micro-batch, sequence, micro-batches per step
  std::size_t processes = 1, threads = 1;
  dtype compute = dtype::f32;
  bool bf16_activations = true;
  bool recompute_blocks = false;
  pipeline::plan pipeline{};
  bool shard_optimizer = false;
  std::size_t tensor_parallel = 1;   // ranks splitting every block (trainer.tensor_parallel)
  bool checkpoints = true;           // the run writes checkpoints (a split run gathers them on rank 0)
  bool offload = false;              // weights, gradients and slots in files (trainer.offload)
  double memory_budget = 0;          // GiB per process (0: none)
  std::string optimizer = "adamw";
  std::size_t optimizer_slots = 2;   // slot arenas (SGD: 1 with momentum, else 0)
  std::size_t slot_bytes = 4;        // float 4, bf16 / half 2
  std::size_t block = 0;             // block-sparse projections: B (0 dense)
  double sparsity = 0.0;
  sparse::allocation allocation = sparse::allocation::uniform;
  bool rigl = false;                 // pattern updates that pool the dense gradient
  std::size_t update_period = 0;     // steps between pattern updates (0: static patterns)
  bool evaluation = true;            // the run evaluates (in fp32) on the model's buffers
};

// The inputs of a plan from resolved run settings; seq: the sequence length of the training batches.
inline plan_inputs plan_inputs_of(const run_settings& s, std::size_t seq, std::size_t processes) {
  plan_inputs in;
  in.batch = s.batch_size;
  in.seq = seq;
  in.accumulation = s.trainer.accumulation.steps;
  in.processes = std::max<std::size_t>(1, processes);
  in.threads = std::size_t(std::max(1, num_threads()));
  in.compute = s.trainer.precision.value_or(dtype::f32);
  in.bf16_activations = s.trainer.bf16_activations;
  in.recompute_blocks = s.trainer.recompute == "blocks";
  in.pipeline = s.trainer.pipeline;
  in.shard_optimizer = s.trainer.shard_optimizer;
  in.tensor_parallel = std::max<std::size_t>(1, s.trainer.tensor_parallel);
  in.checkpoints = s.loop.checkpoints;
  in.offload = !s.trainer.offload.empty();
  in.memory_budget = s.memory_budget;
  in.optimizer = s.optimizer.value("type", "adamw");
  in.optimizer_slots = in.optimizer == "sgd" ? (s.optimizer.value("momentum", 0.9) > 0 ? 1 : 0) : 2;
  const std::string slots = s.optimizer.value("slots", "float");
  in.slot_bytes = slots == "float" ? 4 : 2;
  in.block = s.sparsity.block_size;
  in.sparsity = s.sparsity.sparsity;
  in.allocation = s.sparsity.allocation;
  in.rigl = s.sparsity.update && s.sparsity.update->regrow == sparse::regrow_method::rigl;
  if (s.sparsity.update) in.update_period = s.sparsity.update->schedule.update_period;
  return in;
}

}  // namespace sparselm
