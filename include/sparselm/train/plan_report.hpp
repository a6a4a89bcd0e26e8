#pragma once
// A run's plan (train/plan.hpp) as a report: one JSON object (the `--dry-run` line on stdout, the
// keys docs/planning.md lists) and a readable summary (stderr), and the two printed together.
//
//   run_plan p = make_run_plan(m, in);
//   p.measure_rates();
//   std::fputs(describe_plan(p).c_str(), stderr);  std::puts(plan_json(p).dump().c_str());
//   print_run_plan(m, in);                               // the same, what --dry-run prints

#include <cstdio>
#include <string>

#include "sparselm/core/json.hpp"
#include "sparselm/core/memory_usage.hpp"
#include "sparselm/policies/pipeline.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/train/plan.hpp"

namespace sparselm {

inline json plan_json(const run_plan& p) {
  auto gib = [](double b) { return b / double(1 << 30); };
  json j = {{"dry_run", true},
            {"family", p.model.family},
            {"kv_heads", p.model.kv_heads ? p.model.kv_heads : p.model.heads},
            {"parameters", p.parameters},
            {"stored_parameters", p.stored_parameters},
            {"memory_bytes",
             {{"weights", p.weights},
              {"gradients", p.gradients},
              {"optimizer", p.optimizer},
              {"optimizer_offloaded", p.offloaded},
              {"weights_offloaded", p.weights_on_disk},
              {"gradients_offloaded", p.gradients_on_disk},
              {"patterns", p.patterns},
              {"activations", p.activations},
              {"scratch", p.scratch},
              {"workspace", p.workspace},
              {"checkpoint_gather", p.checkpoint_gather},
              {"total", p.total_bytes()}}},
            {"memory_gib_total", gib(p.total_bytes())},
            {"disk_bytes_offloaded", p.offloaded + p.weights_on_disk + p.gradients_on_disk},
            {"activations_per_micro_batch_bytes", p.activations_per_slot},
            {"micro_batches_in_flight", p.slots_in_flight},
            {"block_caches_per_micro_batch", p.caches_per_slot},
            {"flops_per_step",
             {{"dense", p.dense_flops},
              {"block_sparse", p.sparse_flops},
              {"attention", p.attention_flops},
              {"total", p.flops()}}},
            {"rates_flops_per_s", {{"dense", p.dense_rate}, {"lm_head", p.head_rate}, {"block_sparse", p.sparse_rate}}},
            {"predicted_step_seconds", p.predicted_seconds()},
            {"run",
             {{"batch_size", p.in.batch},
              {"seq_len", p.in.seq},
              {"accumulation", p.in.accumulation},
              {"processes", p.in.processes},
              {"data_replicas", p.data_replicas},
              {"threads", p.in.threads},
              {"precision", std::string(precision::name(p.in.compute))},
              {"recompute", p.in.recompute_blocks ? "blocks" : "none"},
              {"pipeline_stages", p.in.pipeline.stages},
              {"pipeline_placement", p.in.pipeline.where == pipeline::placement::ranks ? "ranks" : "threads"},
              {"shard_optimizer", p.in.shard_optimizer},
              {"tensor_parallel", p.in.tensor_parallel},
              {"offload", p.in.offload},
              {"optimizer", p.in.optimizer},
              {"slot_bytes", p.in.slot_bytes},
              {"block_size", p.in.block},
              {"sparsity", p.in.block ? p.in.sparsity : 0.0}}}};
  if (p.in.block) j["active_blocks"] = p.sparse_active_blocks;
  if (p.in.tensor_parallel > 1) {
    j["whole_parameters"] = p.whole_parameters;
    j["tensor_sum_bytes_per_step"] = p.tensor_sum_bytes;
  }
  return j;
}

inline std::string describe_plan(const run_plan& p) {
  auto size = [](double b) {
    char s[32];
    if (b >= double(1ull << 30))
      std::snprintf(s, sizeof s, "%.2f GiB", b / double(1ull << 30));
    else
      std::snprintf(s, sizeof s, "%.1f MiB", b / double(1 << 20));
    return std::string(s);
  };
  std::string o;
  char line[256];
  auto put = [&](const char* fmt, auto... a) {
    std::snprintf(line, sizeof line, fmt, a...);
    o += line;
  };
  const std::string kv = p.model.kv_heads && p.model.kv_heads != p.model.heads
                             ? " (" + std::to_string(p.model.kv_heads) + " key/value)"
                             : std::string();
  put("plan: %s, %zu layers, width %zu, %zu heads%s, ff %zu, vocab %zu; batch %zu x seq %zu, %zu micro-batch(es) "
      "per step, %zu process(es), %zu thread(s)\n",
      p.model.family.c_str(), p.model.layers, p.model.width, p.model.heads, kv.c_str(), p.model.ff, p.model.vocab,
      p.in.batch, p.in.seq, p.in.accumulation, p.in.processes, p.in.threads);
  put("  parameters        %.4g (stored %.4g%s)\n", p.parameters, p.stored_parameters,
      p.in.block ? (", block-sparse B = " + std::to_string(p.in.block)).c_str() : "");
  if (p.in.tensor_parallel > 1)
    put("  tensor parallel   %zu ranks split every block: %zu heads and ff %zu per rank, %.4g of the whole model's "
        "%.4g parameters; %.3g MB summed over the group per step\n",
        p.in.tensor_parallel, p.model.heads, p.model.ff, p.stored_parameters, p.whole_parameters,
        p.tensor_sum_bytes * 1e-6);
  put("  precision %s, recompute %s, pipeline stages %zu (%s), optimiser %s with %zu-byte slots%s\n",
      std::string(precision::name(p.in.compute)).c_str(), p.in.recompute_blocks ? "blocks" : "none",
      p.in.pipeline.stages, p.in.pipeline.where == pipeline::placement::ranks ? "ranks" : "threads",
      p.in.optimizer.c_str(), p.in.slot_bytes, p.in.shard_optimizer ? ", sharded" : "");
  put("  memory per process:\n");
  if (p.in.offload) {
    put("    weights         %s in memory (embedding, head, two blocks streamed); %s on disk\n",
        size(p.weights).c_str(), size(p.weights_on_disk).c_str());
    put("    gradients       %s in memory (embedding, head, two blocks streamed); %s on disk\n",
        size(p.gradients).c_str(), size(p.gradients_on_disk).c_str());
    put("    optimiser slots %s on disk (the update streams them with the weights and gradients: %s in memory)\n",
        size(p.offloaded).c_str(), size(p.optimizer).c_str());
  } else {
    put("    weights         %s\n", size(p.weights).c_str());
    put("    gradients       %s\n", size(p.gradients).c_str());
  }
  if (!p.in.offload) put("    optimiser slots %s\n", size(p.optimizer).c_str());
  if (p.patterns > 0) put("    sparse patterns %s\n", size(p.patterns).c_str());
  put("    activations     %s (%s per micro-batch in flight x %zu; %zu block cache(s) each)\n",
      size(p.activations).c_str(), size(p.activations_per_slot).c_str(), p.slots_in_flight, p.caches_per_slot);
  put("    scratch         %s (+ %s GEMM packing buffers)\n", size(p.scratch).c_str(), size(p.workspace).c_str());
  if (p.checkpoint_gather > 0)
    put("    checkpoints     %s (rank 0 assembles the whole model and optimiser state to save it)\n",
        size(p.checkpoint_gather).c_str());
  put("    total           %s%s\n", size(p.total_bytes()).c_str(),
      p.in.offload ? " (the predicted peak; offloaded parts not counted)" : "");
  if (p.in.offload)
    put("  on disk           %s in --offload DIR (unnamed files, removed with the process)\n",
        size(p.offloaded + p.weights_on_disk + p.gradients_on_disk).c_str());
  put("  FLOPs per step    %.4g (dense %.4g, block-sparse %.4g, attention %.4g)\n", p.flops(), p.dense_flops,
      p.sparse_flops, p.attention_flops);
  if (p.dense_rate > 0)
    put("  predicted step    %.3g s (measured: dense layer %.1f GFLOP/s, LM head %.1f, block-sparse %.1f)\n",
        p.predicted_seconds(), p.dense_rate * 1e-9, p.head_rate * 1e-9, p.sparse_rate * 1e-9);
  return o;
}

// --dry-run: the plan on stderr (readable) and stdout (one JSON line, with the process's peak
// resident memory before the rate measurement: the baseline a run adds its memory to).
inline void print_run_plan(const model_shape& m, const plan_inputs& in, bool measure = true) {
  run_plan p = make_run_plan(m, in);
  const double baseline = peak_rss_bytes();
  if (measure) p.measure_rates();
  std::fputs(describe_plan(p).c_str(), stderr);
  json j = plan_json(p);
  j["baseline_rss_bytes"] = baseline;
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace sparselm
