#pragma once
// The one place that includes xsimd. Kernels take the architecture as a template parameter
// (defaulting to the best one the compiler was told it may use), so tests can run the portable
// path and the native path side by side.
//
// The library never forces an instruction set: built without -march flags, `native_arch` is
// SSE2 on x86-64; build your program with -march=native (or link sparselm::native) to get
// AVX2/AVX-512 kernels.

#include <xsimd/xsimd.hpp>

#include <cstddef>

namespace sparselm {

using native_arch = xsimd::default_arch;

template <class T, class Arch = native_arch>
using simd = xsimd::batch<T, Arch>;

// Number of lanes of T for an architecture.
template <class T, class Arch = native_arch>
inline constexpr std::size_t simd_width = xsimd::batch<T, Arch>::size;

// True when the compiler may emit AVX-512F instructions in this translation unit.
inline constexpr bool has_avx512 =
#if defined(__AVX512F__)
    true;
#else
    false;
#endif

// True when AVX512-BF16 dot products (vdpbf16ps) may be used.
inline constexpr bool has_avx512_bf16 =
#if defined(__AVX512BF16__)
    true;
#else
    false;
#endif

}  // namespace sparselm
