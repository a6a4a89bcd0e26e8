// sparselm::kernels, part of the compiled companion library: the native-ISA instances of the
// optimisers' updates (AdamW, Adam, LAMB, SGD with float, bf16 and half slots), defined here once (the
// headers declare them extern template for every target that links the library).
#define SPARSELM_INSTANTIATE_OPTIM
#include "sparselm/optim/adam.hpp"
#include "sparselm/optim/lamb.hpp"
#include "sparselm/optim/sgd.hpp"
