// sparselm::kernels, part of the compiled companion library: the native-ISA instances of the bf16 block-sparse products (each B of sparselm::block_sizes above 1),
// defined here once (the headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_BSR_BF16
#include "sparselm/kernels/bsr_bf16.hpp"
