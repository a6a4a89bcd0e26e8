// Every public header in one translation unit, compiled by the ctest syntax.clang with clang's
// -fsyntax-only: the fuzz harnesses (tests/fuzz) are built with clang while the main build may use
// GCC, so a construct only GCC accepts must fail here, in a second, rather than in the fuzz build.
#include "sparselm/sparselm.hpp"

#include "sparselm/kernels/block_sparse_attention.hpp"
#include "sparselm/kernels/bsr_bf16.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
#include "sparselm/optim/shard.hpp"
#include "sparselm/parallel/replica_group.hpp"
#include "sparselm/policies/data_parallel.hpp"
#include "sparselm/policies/precision.hpp"
#include "sparselm/train/bert_job.hpp"
#include "sparselm/train/finetune_job.hpp"
#include "sparselm/train/lm_job.hpp"
#include "sparselm/train/plan_report.hpp"
#include "sparselm/train/trainer.hpp"

int main() { return 0; }
