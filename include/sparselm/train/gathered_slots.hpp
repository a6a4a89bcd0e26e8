#pragma once
// Sharded optimiser state with 16-bit slots (a run-time slot choice, optim/slot_choice.hpp, holding
// bf16 or half slots): the whole-layout slots gathered to rank 0 in their own type for a checkpoint
// (half the bytes of float copies). Used by train/trainer.hpp (gather_optimizer_state,
// visit_gathered16, checkpoint_state).

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/optim/concepts.hpp"
#include "sparselm/parallel/replica_group.hpp"

namespace sparselm {

class gathered_slots16 {
 public:
  // Gathers opt's slots if it is a run-time choice holding bf16 or half slots (rank 0 receives,
  // the others only send): true; false (nothing done) for any other optimiser. bytes_of(elem) gives
  // each rank's byte range for elements of that size.
  template <class Opt, class BytesOf>
  bool gather(Opt& opt, parallel::replica_group& g, const std::shared_ptr<const arena_layout>& layout,
              BytesOf&& bytes_of) {
    held_ = {};
    bool done = false;
    if constexpr (requires { opt.visit([](auto&) {}); }) {
      opt.visit([&]<class O>(O& o) {
        if constexpr (requires { o.state(); typename O::slot_type; }) {
          using S = typename O::slot_type;
          if constexpr (std::is_same_v<S, bf16> || std::is_same_v<S, half>) {
            const auto own = o.state();
            slots<S> full;
            const auto bytes = bytes_of(sizeof(S));
            for (const auto& sl : own.slots) {
              full.names.push_back(sl.name);
              full.arenas.push_back(g.rank() == 0 ? arena<S>(layout) : arena<S>());
              g.gather_bytes(std::as_bytes(sl.slots->all()), std::as_writable_bytes(full.arenas.back().all()), bytes);
            }
            held_ = std::move(full);
            done = true;
          }
        }
      });
    }
    return done;
  }

  void clear() { held_ = {}; }
  bool empty() const noexcept { return std::holds_alternative<std::monostate>(held_); }

  // f(optimizer_state<bf16 or half>) over the gathered slots, step `step`: true; false when empty.
  template <class F>
  bool visit(std::size_t step, F&& f) {
    return std::visit(
        [&]<class G>(G& gs) {
          if constexpr (std::is_same_v<G, std::monostate>) {
            return false;
          } else {
            optim::optimizer_state<typename G::value_type> st;
            st.step = step;
            for (std::size_t k = 0; k < gs.arenas.size(); ++k) st.slots.push_back({gs.names[k], &gs.arenas[k]});
            f(std::as_const(st));
            return true;
          }
        },
        held_);
  }

  // Float (or T) copies of the gathered slots appended to out (rank 0's values; empty arenas on the
  // other ranks).
  template <class T>
  void widen(std::vector<arena<T>>& out, const std::shared_ptr<const arena_layout>& layout) {
    std::visit(
        [&]<class G>(G& gs) {
          if constexpr (!std::is_same_v<G, std::monostate>) {
            for (auto& a : gs.arenas) {
              out.push_back(a.all().empty() ? arena<T>() : arena<T>(layout));
              auto src = a.all();
              auto dst = out.back().all();
              for (std::size_t i = 0; i < src.size() && i < dst.size(); ++i) dst[i] = T(float(src[i]));
            }
          }
        },
        held_);
  }

 private:
  template <class S>
  struct slots {
    using value_type = S;
    std::vector<std::string> names;
    std::vector<arena<S>> arenas;
  };
  std::variant<std::monostate, slots<bf16>, slots<half>> held_;
};

}  // namespace sparselm
