#pragma once
// Streaming a transformer's offloaded weights and gradients block by block (trainer_options::offload,
// core/arena.hpp file_backing): a block's weights are read in just before its forward pass, the
// next block's asked for ahead (read-ahead), and dropped after; before its backward pass its
// weights and gradients are read in (the block below asked for ahead), and after it the weights
// are dropped and the gradients' write-back started (write-behind). So the process holds one or
// two blocks' weights and gradients at a time, besides the embedding and head, which stay in
// memory for the whole step (the optimiser's update then streams everything segment by segment).
//
// Nothing here changes a value: the pages only move between the process and the files, and the
// arithmetic is the same as in memory, so an offloaded run trains bit for bit as one in memory.
//
//   block_stream bs(parts);              // gradient_part_ranges: embedding, blocks, head
//   bs.before_forward(params, l);  ... block l's forward ...  bs.after_forward(params, l);
//   bs.before_backward(params, grads, l);  ... backward ...   bs.after_backward(params, grads, l);

#include <cstddef>
#include <utility>
#include <vector>

#include "sparselm/core/arena.hpp"

namespace sparselm {

class block_stream {
 public:
  block_stream() = default;
  // parts: the flat element ranges of the embedding, each block, the head (models/grad_parts.hpp);
  // empty (a layout not in that order): nothing is streamed.
  explicit block_stream(std::vector<std::pair<std::size_t, std::size_t>> parts) : parts_(std::move(parts)) {}

  // Whether block l's weights and gradients move between memory and the files around its passes.
  bool streams(const arena<float>& params) const noexcept { return params.file_backed() && parts_.size() >= 3; }
  std::size_t blocks() const noexcept { return parts_.size() >= 2 ? parts_.size() - 2 : 0; }

  void before_forward(const arena<float>& p, std::size_t l) const noexcept {
    if (!streams(p)) return;
    if (l + 1 < blocks()) prefetch(p, l + 1);
    p.populate(first(l), last(l));
  }
  void after_forward(const arena<float>& p, std::size_t l) const noexcept {
    if (streams(p)) p.page_out(first(l), last(l));
  }
  void before_backward(const arena<float>& p, const arena<float>& g, std::size_t l) const noexcept {
    if (!streams(p)) return;
    if (l > 0) {
      prefetch(p, l - 1);
      prefetch(g, l - 1);
    }
    p.populate(first(l), last(l));
    g.populate(first(l), last(l), true);
  }
  void after_backward(const arena<float>& p, const arena<float>& g, std::size_t l) const noexcept {
    if (!streams(p)) return;
    p.page_out(first(l), last(l));
    g.write_behind(first(l), last(l));
  }

 private:
  std::size_t first(std::size_t l) const noexcept { return parts_[1 + l].first; }
  std::size_t last(std::size_t l) const noexcept { return parts_[1 + l].second; }
  void prefetch(const arena<float>& a, std::size_t l) const noexcept { a.prefetch(first(l), last(l)); }

  std::vector<std::pair<std::size_t, std::size_t>> parts_;
};

}  // namespace sparselm
