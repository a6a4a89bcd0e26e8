// sparselm::kernels, part of the compiled companion library: the native-ISA instances of the fp32 block-sparse products (each B of sparselm::block_sizes) and of the fused feed-forward,
// defined here once (the headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_BSR
#include "sparselm/kernels/bsr.hpp"
#include "sparselm/kernels/bsr_ffn.hpp"
