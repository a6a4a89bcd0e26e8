// sparselm::kernels, part of the compiled companion library: the native-ISA instances of dense and block-sparse attention,
// defined here once (the headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_ATTENTION
#include "sparselm/kernels/attention.hpp"
#include "sparselm/kernels/block_sparse_attention.hpp"
