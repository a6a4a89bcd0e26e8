// A GPT forward + backward step split over the ranks of mpirun by tensor parallelism
// (parallel/tensor_parallel.hpp), or whole in one process (run without mpirun): the median step
// time, and under mpirun the median time the step spends in its tensor-parallel sums (two per block
// in forward, two in backward: each an all-reduce of the (B·T, C) activations over the ranks) and
// its share of the step. No optimiser update and no data parallelism: the step's compute and the
// sums only. Compare `mpirun -np 2 ... --threads 1` with one process `--threads 2` on the same
// cores (docs/design/distribution.md, "Tensor parallelism").
//
//   mpirun -np 2 --bind-to none ./build/benchmarks/tensor_parallel --config configs/gpt2-small.json
//       --batch 4 --seq 128 --steps 6 --threads 1                      (one command)
//   ./build/benchmarks/tensor_parallel --config configs/gpt2-small.json --batch 4 --seq 128 --steps 6 --threads 2
//
// --block B (16) with --sparsity s runs the block-sparse model (B = 16) instead of the dense one.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/json.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/models/gpt.hpp"
#include "sparselm/parallel/mpi.hpp"
#include "sparselm/parallel/tensor_parallel.hpp"

using namespace sparselm;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class S>
int run(parallel::mpi_group& world, const gpt_config& cfg, std::size_t B, std::size_t T, std::size_t steps,
        double sparsity) {
  const std::size_t P = world.size(), r = world.rank();
  gpt<float, S> model(cfg, sparse_plan{sparsity}, parallel::tensor_split{r, P});
  model.init(1);
  std::vector<std::int32_t> ids(B * T), targets(B * T);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = std::int32_t((i * 7919 + 13) % cfg.vocab_size);
    targets[i] = std::int32_t((i * 104729 + 5) % cfg.vocab_size);
  }
  const token_batch batch{ids, targets, {}, B, T};
  double in_sums = 0;
  std::size_t sums = 0;
  const parallel::tensor_sum_fn timed = [&](std::span<float> x) {
    const auto t0 = clock_type::now();
    world.all_reduce(x, parallel::reduce_op::sum);
    in_sums += seconds_since(t0);
    ++sums;
  };
  pipeline::pass_context ctx;
  ctx.training = true;
  if (P > 1) ctx.tensor_sum = &timed;
  std::vector<double> step_s, sum_s;
  double loss = 0;
  for (std::size_t k = 0; k <= steps; ++k) {  // step 0 warms up (buffers, pages)
    world.barrier();
    in_sums = 0;
    sums = 0;
    model.grads().zero();
    const auto t0 = clock_type::now();
    const auto st = model.forward_backward(ctx, batch, float(1.0 / double(B * T)));
    const double t = seconds_since(t0);
    loss = st.loss_sum / double(st.count);
    if (k == 0) continue;
    step_s.push_back(t);
    sum_s.push_back(in_sums);
  }
  // The slowest rank's times set the group's pace.
  double mine[2] = {median(step_s), median(sum_s)};
  world.all_reduce(std::span<double>(mine, 2), parallel::reduce_op::max);
  if (r == 0) {
    std::printf(
        "{\"benchmark\": \"tensor_parallel\", \"ranks\": %zu, \"threads\": %d, \"layers\": %zu, \"n_embd\": %zu, "
        "\"batch\": %zu, \"seq\": %zu, \"sparsity\": %g, \"steps\": %zu, \"median_step_s\": %.4f, "
        "\"median_sum_s\": %.4f, \"sum_share\": %.3f, \"sums_per_step\": %zu, \"tokens_per_s\": %.1f, \"loss\": %.4f}\n",
        P, num_threads(), cfg.n_layer, cfg.n_embd, B, T, sparsity, steps, mine[0], mine[1], mine[1] / mine[0], sums,
        double(B * T) / mine[0], loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    parallel::mpi_group world(MPI_COMM_WORLD);
    std::string config = "configs/gpt2-small.json";
    std::size_t B = 4, T = 128, steps = 6, block = 0;
    double sparsity = 0.9;
    int threads = 0;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        SPARSELM_CHECK(i + 1 < argc, "tensor_parallel: ", a, " needs a value");
        return argv[++i];
      };
      if (a == "--config") config = value();
      else if (a == "--batch") B = std::stoul(value());
      else if (a == "--seq") T = std::stoul(value());
      else if (a == "--steps") steps = std::stoul(value());
      else if (a == "--threads") threads = std::stoi(value());
      else if (a == "--block") block = std::stoul(value());
      else if (a == "--sparsity") sparsity = std::stod(value());
      else SPARSELM_CHECK(false, "tensor_parallel: unknown option ", a);
    }
    SPARSELM_CHECK(B >= 1 && T >= 1 && steps >= 1, "tensor_parallel: --batch, --seq and --steps must be positive");
    SPARSELM_CHECK(block == 0 || block == 16, "tensor_parallel: --block must be 0 (dense) or 16, not ", block);
    if (threads > 0) set_num_threads(threads);
    auto cfg = gpt_config::from_json(read_json_file(config), config);
    cfg.embd_pdrop = cfg.attn_pdrop = cfg.resid_pdrop = 0.0f;
    status = block ? run<block_sparse<16>>(world, cfg, B, T, steps, sparsity) : run<dense>(world, cfg, B, T, steps, 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensor_parallel: %s\n", e.what());
    status = 1;
  }
  if (status) MPI_Abort(MPI_COMM_WORLD, status);
  MPI_Finalize();
  return status;
}
