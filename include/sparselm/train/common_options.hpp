#pragma once
// The table of the run-config keys every training program reads (the one option schema;
// train/run_settings.hpp reads them): key, flag, kind, help, choices, default, section, bounds.
// The programs make their flags from it (examples/training_cli.hpp), `--help` its text and
// docs/reference/options.md its reference (train/option_schema.hpp's `options_reference`).
//
//   for (const auto& e : sparselm::common_options()) std::cout << e.key << "  " << e.help << "\n";

#include <span>
#include <string>

#include "sparselm/core/checked.hpp"
#include "sparselm/sparse/sparsity.hpp"
#include "sparselm/train/option_schema.hpp"

namespace sparselm {

// The keys every training program reads. Order: as --help and the reference list them.
inline std::span<const option_entry> common_options() {
  using k = option_kind;
  // 0 (dense) and sparselm::block_sizes, the kernels' list
  static const std::string block_choices = [] {
    std::string c = "0";
    for (std::size_t b : block_sizes) c += " " + std::to_string(b);
    return c;
  }();
  static const option_entry table[] = {
      // run length and batch
      {"steps", "--steps", k::count, "Optimiser steps in total (a resumed run continues up to it); not with epochs", "", "",
       "length and batch"},
      {"epochs", "--epochs", k::number,
       "Passes over the training data instead of steps: steps = ceil(epochs x examples / global batch)", "", "",
       "length and batch", 1e-9, 1e6},
      {"batch_size", "--batch-size", k::count, "Rows (sequences or examples) per micro-batch on each process", "", "",
       "length and batch"},
      {"global_batch", "--global-batch", k::count,
       "Rows per optimiser step over all processes: the accumulation is global_batch / (batch_size x data "
       "replicas), which must divide exactly; contradicts a different trainer.accumulation.steps",
       "", "", "length and batch"},
      {"trainer.accumulation.steps", "--accumulation", k::count,
       "Micro-batches per optimiser step on each process (gradient accumulation)", "", "1", "length and batch"},
      {"trainer.accumulation.mode", "--accumulation-mode", k::choice,
       "How micro-batch gradients combine: sum, or avg (divided by the count)", "sum avg", "avg", "length and batch"},
      {"trainer.accumulation.scale_before", "--pre-scale", k::boolean,
       "avg: scale each micro-batch's gradient before adding it (pre-scaling; fewer large partial sums)", "",
       "false", "length and batch"},
      // optimiser and schedule
      {"optimizer.type", "--optimizer", k::choice, "The optimiser (its other fields: docs/reference/options.md)",
       "adamw adam sgd lamb", "", "optimiser and schedule"},
      {"optimizer.slots", "--slots", k::choice,
       "Storage type of the optimiser's slots (Adam m and v, momentum); updates compute in fp32", "float bf16 half",
       "float", "optimiser and schedule"},
      {"optimizer.weight_decay", "--weight-decay", k::number, "Decoupled weight decay (not on norms and biases)", "", "",
       "optimiser and schedule", 0, limits::max_weight_decay},
      {"schedule.type", "--schedule", k::choice, "Learning-rate schedule",
       "constant warmup_cosine linear up_down bert_power", "", "optimiser and schedule"},
      {"schedule.max_lr", "--lr", k::number, "Peak learning rate (bert_power: its peak_lr; constant: its lr)", "", "",
       "optimiser and schedule", 0, limits::max_learning_rate},
      {"schedule.min_lr", "--min-lr", k::number, "Final (or floor) learning rate of the schedule; at most the peak", "",
       "", "optimiser and schedule", 0, limits::max_learning_rate},
      {"schedule.warmup_steps", "--warmup-steps", k::count, "Linear warm-up steps; not with warmup_frac", "", "",
       "optimiser and schedule"},
      {"schedule.warmup_frac", "--warmup-frac", k::number, "Linear warm-up as a fraction of the steps; not with warmup_steps",
       "", "", "optimiser and schedule", 0, 1},
      {"trainer.clip", "--clip", k::choice, "Gradient clipping", "global_norm per_tensor none", "global_norm",
       "optimiser and schedule"},
      {"trainer.max_norm", "--max-norm", k::number, "Clipping norm", "", "1", "optimiser and schedule", 0, 1e30},
      {"trainer.on_nonfinite", "--on-nonfinite", k::choice,
       "A step with a non-finite loss or gradient: stop the run, or skip the step (at most max_skipped_steps in a row)",
       "stop skip", "stop", "optimiser and schedule"},
      // precision and memory
      {"trainer.precision", "--precision", k::choice,
       "Compute type of the GEMMs: fp32, bf16 (AVX512-BF16 where the CPU has it) or fp16 (dynamic loss scaling); "
       "weights, gradients and optimiser state stay fp32",
       "fp32 bf16 fp16", "fp32", "precision and memory"},
      {"trainer.loss_scaling", "--loss-scaling", k::text,
       "Loss scaling: a static scale (a number), or {\"type\": \"dynamic\"} (--loss-scaling dynamic)", "", "1",
       "precision and memory"},
      {"trainer.recompute", "--recompute", k::choice,
       "Activation memory: none keeps every block's activations; blocks keeps each block's input and re-runs the "
       "block in backward (~1/3 more compute, one block's activations)",
       "none blocks", "none", "precision and memory"},
      {"trainer.offload", "--offload", k::text,
       "Keep the fp32 weights, gradients and optimiser slots (Adam m and v) in unnamed files in this directory on "
       "local disk, streamed a block at a time through forward and backward and a window at a time through the "
       "update: memory holds the embedding and head, two blocks and the activations (absent: in memory)",
       "", "", "precision and memory"},
      {"memory_budget", "--memory-budget", k::number,
       "GiB a process may hold: a run whose plan (--dry-run) needs more stops before its first step, saying what "
       "to offload; the summary reports the peak (absent or 0: no budget)",
       "", "", "precision and memory", 0, 1e6},
      {"dropout", "--dropout", k::number, "Every dropout rate of the model (absent: the model config's)", "", "",
       "precision and memory", 0, 1},
      // processes
      {"trainer.pipeline.stages", "--pipeline-stages", k::count,
       "Split the blocks over N pipeline stages fed by the accumulation's micro-batches", "", "1", "processes"},
      {"trainer.pipeline.schedule", "--pipeline-schedule", k::choice,
       "Order of a stage's work: 1f1b (at most N micro-batches in flight) or gpipe", "1f1b gpipe", "1f1b",
       "processes"},
      {"trainer.pipeline.placement", "--pipeline-placement", k::choice,
       "Where the stages run: threads of this process, or MPI ranks (one stage per rank; a multiple of the stages: "
       "data replicas of the pipeline)",
       "threads ranks", "threads", "processes"},
      {"trainer.shard_optimizer", "--shard-optimizer", k::boolean,
       "Under mpirun: each rank keeps and updates 1/P of the optimiser state (ZeRO stage 1)", "", "false",
       "processes"},
      {"trainer.tensor_parallel", "--tensor-parallel", k::count,
       "Under mpirun: split every block's attention heads and feed-forward hidden units over groups of N ranks "
       "(tensor parallelism; a multiple of N ranks: data replicas of the split model). gpt_train (GPT and LLaMA), "
       "sparse_lm, bert_pretrain, bert_classify and bert_squad (a block-sparse encoder when its checkpoint's "
       "patterns divide evenly over the group); checkpoints hold the whole "
       "model; "
       "dynamic sparsity updates each rank's slices; with offload each rank's slices go to its own files. Not with "
       "pipeline stages or shard_optimizer yet",
       "", "1", "processes", 1, 4096},
      {"threads", "--threads", k::count, "Threads per process (0: all cores)", "", "0", "processes", 0,
       double(limits::threads)},
      // sparsity
      {"sparsity.block_size", "--block-size", k::choice,
       "Block-sparse projections with B x B blocks (0: dense); fine-tuning a dense checkpoint: magnitude-prune it "
       "into this block size",
       block_choices, "0", "sparsity"},
      {"sparsity.sparsity", "--sparsity", k::number, "Fraction of zero blocks in the sparse projections", "", "0.9",
       "sparsity", 0, 1},
      {"sparsity.allocation", "--allocation", k::choice,
       "Blocks per projection: uniform (the same density) or erk (Erdos-Renyi-kernel: denser small projections)",
       "uniform erk", "uniform", "sparsity"},
      {"sparsity.lr_rescale", "--sparse-lr-rescale", k::boolean,
       "Scale every learning rate by eta(s) = exp(1.969 s^2 + 0.2905 s) for the sparsity s", "", "false",
       "sparsity"},
      {"sparsity.update.update_period", "--update-period", k::count,
       "Prune and regrow the patterns every N steps (dynamic sparsity; 0 or absent: static patterns)", "", "0",
       "sparsity"},
      {"sparsity.update.prune_ratio", "--prune-ratio", k::number,
       "Fraction of each projection's active blocks an update replaces, before the decay", "", "0.3", "sparsity", 0, 1},
      {"sparsity.update.period", "--prune-period", k::number,
       "Decay of the prune ratio: cosine periods over the run (0.5: from 1 to 0; 0: no decay)", "", "0.5",
       "sparsity"},
      {"sparsity.update.phase_delay", "--prune-phase-delay", k::number, "Phase added to the decay's cosine (radians)",
       "", "0", "sparsity"},
      {"sparsity.update.zero_steps", "--prune-zero-steps", k::count, "No pattern update before this step", "", "0",
       "sparsity"},
      {"sparsity.update.prune_metric", "--prune-metric", k::choice, "Which blocks are pruned: smallest l1, l2 or max",
       "l1 l2 max", "l1", "sparsity"},
      {"sparsity.update.regrow", "--regrow", k::choice,
       "Where blocks regrow: rigl (largest dense gradient) or random", "rigl random", "random", "sparsity"},
      {"sparsity.update.pooling", "--pooling", k::choice, "rigl: how a block's dense gradient becomes its score",
       "sum avg max", "avg", "sparsity"},
      // loop and outputs
      {"eval_every", "--eval-every", k::count, "Evaluate every N steps (0: only at the end)", "", "", "loop and outputs"},
      {"eval_batches", "--eval-batches", k::count, "Validation batches per evaluation (0: all)", "", "",
       "loop and outputs"},
      {"log_every", "--log-every", k::count, "A training metrics line every N steps", "", "10", "loop and outputs"},
      {"stop_at_loss", "--stop-at-loss", k::number,
       "Stop (with a checkpoint) at the first evaluation whose validation loss is at or below this: training to a "
       "target quality (0: run every step)", "", "0", "loop and outputs", 0, 1e6},
      {"checkpoint_every", "--checkpoint-every", k::count,
       "Checkpoint every N steps (0: at the end and on a stop signal)", "", "0", "loop and outputs"},
      {"checkpoints", "", k::boolean,
       "Write checkpoints (--set checkpoints=false: none at all, not even at the end; a measurement run whose state "
       "the disk cannot hold twice)", "", "true", "loop and outputs"},
      {"keep_checkpoints", "--keep-checkpoints", k::count, "Newest checkpoints kept (older ones are deleted)", "", "2",
       "loop and outputs"},
      {"seed", "--seed", k::count, "Seed of initialisation, data order, dropout and pattern updates", "", "1234",
       "loop and outputs"},
      {"out", "-o,--out", k::output, "Run directory: config.json, metrics.jsonl, checkpoints/", "", "", "loop and outputs"},
      {"init_from", "--init-from", k::input,
       "Start from these weights: a checkpoint or run directory of ours, or a HuggingFace directory", "", "",
       "loop and outputs"},
      // a preset's record (configs/recipes/)
      {"program", "", k::text, "The program the run config is for; another program refuses it", "", "",
       "about the run"},
      {"about", "", k::text,
       "What the run config is and how it adapts its source (e.g. a seed's recipe) to this project; recorded, no "
       "effect",
       "", "", "about the run"},
  };
  return table;
}

}  // namespace sparselm
