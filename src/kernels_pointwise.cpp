// sparselm::kernels, part of the compiled companion library: the native-ISA instances of cross-entropy, layer norm and embedding,
// defined here once (the headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_POINTWISE
#include "sparselm/kernels/cross_entropy.hpp"
#include "sparselm/kernels/layer_norm.hpp"
#include "sparselm/kernels/embedding.hpp"
