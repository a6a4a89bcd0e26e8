#pragma once
// What a rank of a pipeline over ranks keeps of the model's parameter and gradient arenas when the
// optimiser state is sharded by stage (train/trainer.hpp, "stage-local"): its own stage's tensors
// (stage 0: the embedding and its blocks; the last stage: its blocks and the head) and, on the last
// stage, the tensors the head shares with the embedding (a tied projection). Everything else of the
// arenas is zeroed and its memory pages are given back (arena::release), so a rank's weights and
// gradients take its stage's share of memory instead of the whole model's.
//
// Each step then zeroes only the kept gradients, and after the update stage 0 sends the tied
// tensors' new values to the last stage (instead of an all-gather of every stage's parameters).
// A save gathers the stages' parameters on the pipeline's rank 0 (gather), which releases the
// others' parts again afterwards (release_gathered).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

class stage_params {
 public:
  // Stage s of S keeps the flat elements [bounds[s], bounds[s + 1]) and, when it is the last stage,
  // the tied tensors (layout indices).
  void assign(const arena_layout& L, std::span<const std::size_t> bounds, std::size_t s, std::size_t S,
              const std::vector<std::size_t>& tied) {
    bounds_.assign(bounds.begin(), bounds.end());
    stage_ = s;
    kept_.assign(1, {bounds[s], bounds[s + 1]});
    if (s + 1 == S)
      for (std::size_t k : tied) kept_.emplace_back(L[k].offset, L[k].offset + L[k].size);
    std::sort(kept_.begin(), kept_.end());
  }
  bool active() const noexcept { return !kept_.empty(); }
  std::size_t stage() const noexcept { return stage_; }

  // Flat elements [first, last) of this stage's own tensors (the whole arena when not active()).
  std::pair<std::size_t, std::size_t> own_elements() const noexcept {
    if (!active()) return {0, std::numeric_limits<std::size_t>::max()};
    return {bounds_[stage_], bounds_[stage_ + 1]};
  }
  // Elements of the arenas this rank keeps.
  std::size_t kept_elements() const noexcept {
    std::size_t n = 0;
    for (const auto& [lo, hi] : kept_) n += hi - lo;
    return n;
  }

  // Zeroes everything but the kept ranges and gives those pages back.
  void release_others(arena<float>& a) const {
    std::size_t at = 0;
    for (const auto& [lo, hi] : kept_) {
      a.release(at, lo);
      at = std::max(at, hi);
    }
    a.release(at, a.all().size());
  }

  // Zeroes the kept gradients (the ones this rank's stage writes).
  void zero(arena<float>& grads) const {
    auto all = grads.all();
    for (const auto& [lo, hi] : kept_)
      std::fill(all.begin() + std::ptrdiff_t(lo), all.begin() + std::ptrdiff_t(hi), 0.0f);
  }

  // What check_same_parameters (train/replica_checks.hpp) compares: the CRC-32C of the whole
  // arena, or when active() of this stage's own parameters, with the stage in the high 32 bits.
  std::uint64_t fingerprint(const arena<float>& params) const {
    if (!active()) return io::crc32c(params.all().data(), params.all().size() * sizeof(float));
    const auto mine = own(params);
    return io::crc32c(mine.data(), mine.size() * sizeof(float)) | std::uint64_t(stage_) << 32;
  }

  // Collective over the pipeline's ranks g: its rank 0 receives every stage's parameters.
  void gather(parallel::replica_group& g, arena<float>& params) {
    std::vector<std::size_t> bytes(bounds_.size());
    for (std::size_t r = 0; r < bytes.size(); ++r) bytes[r] = bounds_[r] * sizeof(float);
    g.gather_bytes(std::as_bytes(own(params)),
                   g.rank() == 0 ? std::as_writable_bytes(params.all()) : std::span<std::byte>(), bytes);
    gathered_ = g.rank() == 0;
  }
  // After the save that needed the gather: rank 0 gives the other stages' parameters back.
  void release_gathered(arena<float>& params) {
    if (gathered_) release_others(params);
    gathered_ = false;
  }

 private:
  std::span<const float> own(const arena<float>& params) const {
    return params.all().subspan(bounds_[stage_], bounds_[stage_ + 1] - bounds_[stage_]);
  }
  std::vector<std::size_t> bounds_;                        // every stage's flat range, and total()
  std::vector<std::pair<std::size_t, std::size_t>> kept_;  // flat [begin, end) ranges kept, in order
  std::size_t stage_ = 0;
  bool gathered_ = false;  // rank 0 holds every stage's parameters (gather)
};

}  // namespace sparselm
