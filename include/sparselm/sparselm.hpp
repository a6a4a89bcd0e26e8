#pragma once
// Umbrella header for users: the models, the trainer, the optimisers, data, checkpoints and
// HuggingFace interop in one include. Library headers include what they use, never this file.
//
//   #include <sparselm/sparselm.hpp>
//   auto cfg = sparselm::gpt_config::from_json(sparselm::read_json_file("configs/gpt-mini.json"));
//   sparselm::gpt<float, sparselm::block_sparse<16>> model(cfg, {.sparsity = 0.9});
//   model.init(1234);
//   sparselm::trainer t(model, {}, sparselm::optim::adamw<>(sparselm::json{{"weight_decay", 0.1}}),
//                       sparselm::optim::make_schedule({{"type", "constant"}, {"lr", 4e-3}}));
//   auto m = t.train_step(micro_batches);     // std::vector<sparselm::token_batch>; m.loss.mean_loss()
//   sparselm::io::save_model("ckpt", model);  // config.json + model.safetensors + block patterns
//
// The whole program: README.md, "The library in 15 lines"; a downstream project: docs/guide/own-model.md.

#include "sparselm/version.hpp"
#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
#include "sparselm/data/bert_examples.hpp"
#include "sparselm/data/gpt2_bpe.hpp"
#include "sparselm/data/lm_batches.hpp"
#include "sparselm/data/token_file.hpp"
#include "sparselm/data/wordpiece.hpp"
#include "sparselm/interop/xtensor.hpp"
#include "sparselm/io/checkpoint.hpp"
#include "sparselm/io/huggingface.hpp"
#include "sparselm/io/pretrained.hpp"
#include "sparselm/models/bert.hpp"
#include "sparselm/models/bert_finetune.hpp"
#include "sparselm/models/generation.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/models/llama.hpp"
#include "sparselm/models/sparse_lm.hpp"
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/schedules.hpp"
#include "sparselm/optim/sgd.hpp"
#include "sparselm/train/dynamic_sparsity.hpp"
#include "sparselm/train/precompiled.hpp"
#include "sparselm/train/registry.hpp"
#include "sparselm/train/trainer.hpp"
