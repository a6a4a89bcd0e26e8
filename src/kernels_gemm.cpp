// sparselm::kernels, part of the compiled companion library: the native-ISA instances of the fp32, bf16 and f16 GEMMs,
// defined here once (the headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_GEMM
#include "sparselm/kernels/gemm.hpp"
#include "sparselm/kernels/gemm_bf16.hpp"
