#pragma once
// The data position of the tasks that train on a set of examples (BERT pre-training,
// fine-tuning): a seeded shuffled order of the N examples, a new one each epoch. Each micro-batch
// draws the global batch of G = ranks x B examples, the same on every rank, of which rank r
// takes [r·B, (r+1)·B); so P ranks train what one process does with the global batch.
//
//   example_order order(N, seed, B, rank, ranks);
//   auto mine = order.draw();                 // this rank's B example indices of the next global batch
//   json state = order.state();               // {"data": {"epoch": e, "next": i}} for the checkpoint

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sparselm/core/checked.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"

namespace sparselm {

class example_order {
 public:
  example_order(std::size_t examples, std::uint64_t seed, std::size_t batch, std::size_t rank, std::size_t ranks,
                const std::string& program)
      : n_(examples), seed_(seed), batch_(batch), rank_(rank),
        global_(checked_mul(batch, ranks, program + ": batch_size x ranks")), pick_(batch) {
    shuffle();
  }

  std::size_t global_batch() const noexcept { return global_; }
  std::size_t epoch() const noexcept { return epoch_; }
  std::size_t next() const noexcept { return next_; }

  // The next global batch's examples for this rank (valid until the next call).
  std::span<const std::size_t> draw() {
    for (std::size_t i = 0; i < global_; ++i) {
      if (next_ == n_) ++epoch_, next_ = 0, shuffle();
      const std::size_t e = order_[next_++];
      if (i >= rank_ * batch_ && i < (rank_ + 1) * batch_) pick_[i - rank_ * batch_] = e;
    }
    return pick_;
  }

  // The position as a training state's "data" record, and back (`where` names the checkpoint).
  nlohmann::json state() const { return {{"data", {{"epoch", epoch_}, {"next", next_}}}}; }
  void restore(const nlohmann::json& run, const std::string& where) {
    SPARSELM_CHECK(run.contains("data") && run["data"].is_object(), where, ": training state has no data position");
    epoch_ = run["data"].at("epoch").template get<std::size_t>();
    next_ = run["data"].at("next").template get<std::size_t>();
    SPARSELM_CHECK(next_ <= n_, where, ": data position ", next_, " is past the ", n_,
                   " training examples: the checkpoint belongs to other data");
    shuffle();
  }

 private:
  // The order of epoch_: a Fisher-Yates shuffle keyed by (seed, epoch).
  void shuffle() {
    order_.resize(n_);
    for (std::size_t i = 0; i < n_; ++i) order_[i] = i;
    const counter_rng rng(seed_);
    for (std::size_t i = n_; i > 1; --i) std::swap(order_[i - 1], order_[rng.below(epoch_, i, i)]);
  }

  std::size_t n_;
  std::uint64_t seed_;
  std::size_t batch_, rank_, global_;
  std::size_t epoch_ = 0, next_ = 0;
  std::vector<std::size_t> order_, pick_;
};

}  // namespace sparselm
