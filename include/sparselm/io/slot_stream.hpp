#pragma once
// Sharded optimiser state streamed to rank 0 while it writes a checkpoint, instead of gathered
// into whole-layout arenas first: rank 0 never holds more than one chunk (4 MiB) of the other
// ranks' slots, so a save no longer raises its peak memory by the whole state.
//
//   every rank    slot_stream::prepare   collective: which rank owns each (slot, tensor) piece of
//                                        the save and the CRC-32C of its bytes (computed by the owner)
//   ranks 1..P-1  slot_stream::send_own  sends each of its pieces, in the save's order, in chunks
//   rank 0        slot_stream::pieces    the save's pieces: its own point at its slots, the others'
//                 slot_stream::receive   come in chunks handed to a sink as the file is written
//
// The save's order is every slot, then every tensor of the layout that is not frozen
// (io::save_training_state); all ranks walk it identically, so the messages from one rank
// arrive in the order rank 0 asks for them (MPI keeps a pair's messages of one tag in order).
// Used by train/trainer.hpp (stream_optimizer_state) and io/checkpoint.hpp; it lives in io/ because
// the checkpoint writer reads it and io/ comes before train/ in the include order.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/io/crc32c.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm::io {

class slot_stream {
 public:
  // One slot arena of this rank: its name, storage type and bytes (the rank's own tensors only,
  // starting at its first tensor's flat offset).
  struct own_slot {
    std::string name;
    dtype type = dtype::f32;
    std::span<const std::byte> bytes;
  };
  // One tensor of one slot, as the save writes it.
  struct piece {
    std::size_t slot = 0, tensor = 0, owner = 0, bytes = 0;
    std::uint32_t crc = 0;
    const std::byte* local = nullptr;  // this rank's own piece (null for another rank's)
  };
  static constexpr std::size_t chunk_floats = std::size_t(1) << 20;  // 4 MiB per message
  static constexpr std::uint64_t tag = 31000;  // above the tied gradients' 30000 + k

  // Collective over g. bounds: P + 1 flat element offsets, rank r keeping the slots of the tensors
  // that start in [bounds[r], bounds[r+1]) (its slot arenas start at bounds[r]). Every rank
  // passes its own slots, the same names and types in the same order.
  void prepare(parallel::replica_group& g, const arena_layout& L, std::span<const std::size_t> bounds,
               std::vector<own_slot> slots) {
    SPARSELM_CHECK(bounds.size() == g.size() + 1, "slot_stream: ", bounds.size(), " bounds for ", g.size(), " ranks");
    const auto first = bounds.first(g.size());
    auto owner_of = [&](std::size_t i) {
      return std::size_t(std::upper_bound(first.begin(), first.end(), L[i].offset) - first.begin()) - 1;
    };
    slots_ = std::move(slots);
    pieces_.clear();
    const std::size_t me = g.rank();
    std::vector<std::uint64_t> crcs(g.size());
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      const std::size_t elem = element_size(slots_[k].type);
      for (std::size_t i = 0; i < L.count(); ++i) {
        if (L[i].flags & param_frozen) continue;
        piece p{k, i, owner_of(i), L[i].size * elem, 0, nullptr};
        if (p.owner == me) {
          const std::size_t at = (L[i].offset - first[me]) * elem;
          SPARSELM_CHECK(at + p.bytes <= slots_[k].bytes.size(), "slot_stream: tensor '", L[i].name,
                         "' lies outside rank ", me, "'s slots '", slots_[k].name, "'");
          p.local = slots_[k].bytes.data() + at;
          p.crc = io::crc32c(p.local, p.bytes);
        }
        g.all_gather(std::uint64_t(p.crc), crcs);
        p.crc = std::uint32_t(crcs[p.owner]);
        pieces_.push_back(p);
      }
    }
    armed_ = true;
  }

  bool armed() const noexcept { return armed_; }
  const std::vector<piece>& pieces() const noexcept { return pieces_; }
  const std::vector<own_slot>& slots() const noexcept { return slots_; }

  // Ranks other than 0: sends this rank's pieces to rank 0, in order, one chunk at a time (each
  // send completes before the next starts, so no more than one chunk is copied).
  void send_own(parallel::replica_group& g) {
    if (g.rank() == 0) return;
    for (const piece& p : pieces_) {
      if (p.owner != g.rank()) continue;
      for_chunks(p.bytes, [&](std::size_t at, std::size_t n) {
        buf_.assign((n + 3) / 4, 0.0f);
        std::memcpy(buf_.data(), p.local + at, n);
        g.send(buf_, 0, tag);
        g.flush_sends();
      });
    }
    done();
  }

  // Rank 0: receives piece p from its owner, chunk by chunk, handing each chunk's bytes to sink.
  void receive(parallel::replica_group& g, const piece& p, const std::function<void(const void*, std::size_t)>& sink) {
    SPARSELM_CHECK(g.rank() == 0 && p.owner != 0, "slot_stream: receive() of rank ", p.owner,
                   "'s piece on rank ", g.rank());
    for_chunks(p.bytes, [&](std::size_t, std::size_t n) {
      buf_.resize((n + 3) / 4);
      g.recv(buf_, p.owner, tag);
      sink(buf_.data(), n);
    });
  }

  // Rank 0, when a save did not take the pieces: receives and drops the other ranks' messages so
  // that they are not left waiting.
  void drain(parallel::replica_group& g) {
    if (g.rank() == 0 && armed_)
      for (const piece& p : pieces_)
        if (p.owner != 0) receive(g, p, [](const void*, std::size_t) {});
    done();
  }
  void done() {
    armed_ = false;
    pieces_.clear();
    slots_.clear();
    buf_.clear();
    buf_.shrink_to_fit();
  }

 private:
  static std::size_t element_size(dtype t) noexcept { return t == dtype::f32 ? 4 : 2; }
  template <class F>
  static void for_chunks(std::size_t bytes, F&& f) {
    for (std::size_t at = 0; at < bytes; at += chunk_floats * 4) f(at, std::min(chunk_floats * 4, bytes - at));
  }

  std::vector<own_slot> slots_;
  std::vector<piece> pieces_;
  std::vector<float> buf_;  // one chunk
  bool armed_ = false;
};

// An optimiser's own slot arenas in their storage type, for slot_stream::prepare: a run-time slot
// choice's inner 16-bit arenas (optim/slot_choice.hpp), not the float copies its state() hands out.
template <class Opt>
std::vector<slot_stream::own_slot> own_slots_of(Opt& opt) {
  std::vector<slot_stream::own_slot> v;
  bool inner = false;
  if constexpr (requires { opt.visit([](auto&) {}); }) {
    opt.visit([&]<class O>(O& o) {
      if constexpr (requires { o.state(); typename O::slot_type; }) {
        for (const auto& sl : o.state().slots)
          v.push_back({sl.name, sparselm::dtype_of<typename O::slot_type>(), std::as_bytes(sl.slots->all())});
        inner = true;
      }
    });
  }
  if (!inner)
    for (const auto& sl : opt.state().slots)
      v.push_back({sl.name, sparselm::dtype_of<typename Opt::slot_type>(), std::as_bytes(sl.slots->all())});
  return v;
}

}  // namespace sparselm::io
