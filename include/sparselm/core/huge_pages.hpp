#pragma once
// Transparent huge pages for large blocks: the arenas (weights, gradients, optimiser slots) and the
// activation buffers ask the kernel to back them with 2 MiB pages where it can.
//
//   void* p = std::aligned_alloc(64, bytes);
//   sparselm::detail::advise_huge_pages(p, bytes);   // a hint: nothing happens below huge_page_min_bytes
//
// Each first touch of a 4 KiB page is a page fault; a model's first step touches every page of its
// weights, gradients and slots, and under a hypervisor a fault costs microseconds. With 2 MiB pages
// one fault covers 512 of them (and the TLB holds 512 times more of the block). Linux honours the
// hint when /sys/kernel/mm/transparent_hugepage/enabled is "madvise" (Debian's default) or
// "always"; elsewhere, or with THP off, it is a no-op. Only the 2 MiB-aligned interior of a block
// is advised, so memory outside it keeps 4 KiB pages; a block is never larger for it.
// docs/design/architecture.md, "Memory".

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sparselm::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;
// Blocks from this size on are advised (a smaller one would hold at most one huge page).
inline constexpr std::size_t huge_page_min_bytes = std::size_t(4) << 20;

// Advises the whole 2 MiB pages inside [p, p + bytes); errors (THP compiled out) are ignored.
inline void advise_huge_pages(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p == nullptr || bytes < huge_page_min_bytes) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t lo = (begin + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  const std::uintptr_t hi = (begin + bytes) / huge_page_bytes * huge_page_bytes;
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace sparselm::detail
