#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of checkpoint tensors.
//
//   std::uint32_t c = io::crc32c(bytes.data(), bytes.size());        // crc32c("123456789") = 0xE3069283
//   c = io::crc32c(more.data(), more.size(), c);                     // continue over further bytes
//
// It detects every error burst of up to 32 bits, so every single-byte change of a tensor. With SSE
// 4.2 (the programs are built with -march=native) it uses the CPU's crc32 instruction, 8 bytes at
// a time; otherwise a byte-wise table (the same values).

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace sparselm::io {

namespace detail {
constexpr std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
inline constexpr auto crc32c_lut = crc32c_table();
}  // namespace detail

// The CRC-32C of n bytes at p, continuing from `crc` (0 to start).
inline std::uint32_t crc32c(const void* p, std::size_t n, std::uint32_t crc = 0) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint32_t c = ~crc;
#if defined(__SSE4_2__)
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, b += 8) {
    std::uint64_t w;
    std::memcpy(&w, b, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = std::uint32_t(c64);
#endif
  for (; n > 0; --n, ++b) c = detail::crc32c_lut[(c ^ *b) & 0xFFu] ^ (c >> 8);
  return ~c;
}

// Eight lower-case hex digits, as stored in safetensors metadata.
inline std::string crc32c_hex(std::uint32_t c) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, c >>= 4) s[std::size_t(i)] = digits[c & 0xFu];
  return s;
}

}  // namespace sparselm::io
