#pragma once
// Per-thread scratch memory for kernels: 64-byte aligned, grows on demand, never shrinks.
//
// A kernel's worker (the body run by one thread) asks for `scratch(n, slot)`; different slots are
// independent buffers that can be held at the same time. Buffers shared between threads (e.g.
// per-block partial sums) are allocated by the caller instead, since the calling thread is also
// worker 0 of the team.

#include <array>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <new>

namespace sparselm::kernels::detail {

struct aligned_free {
  void operator()(float* p) const noexcept { std::free(p); }
};

inline constexpr std::size_t scratch_slots = 8;

// A 64-byte aligned buffer of at least n floats owned by the calling thread (contents undefined).
inline float* scratch(std::size_t n, std::size_t slot = 0) {
  struct store {
    std::array<std::unique_ptr<float, aligned_free>, scratch_slots> p;
    std::array<std::size_t, scratch_slots> cap{};
  };
  thread_local store s;
  if (n > s.cap[slot]) {
    std::size_t bytes = ((n * sizeof(float) + 4095) / 4096) * 4096;
    float* q = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!q) throw std::bad_alloc();
    s.p[slot].reset(q);
    s.cap[slot] = bytes / sizeof(float);
  }
  return s.p[slot].get();
}

// An owning, 64-byte aligned float buffer for data shared between threads.
class aligned_buffer {
 public:
  explicit aligned_buffer(std::size_t n) {
    std::size_t bytes = ((std::max<std::size_t>(n, 1) * sizeof(float) + 63) / 64) * 64;
    p_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!p_) throw std::bad_alloc();
  }
  float* data() const noexcept { return p_.get(); }

 private:
  std::unique_ptr<float, aligned_free> p_;
};

}  // namespace sparselm::kernels::detail
