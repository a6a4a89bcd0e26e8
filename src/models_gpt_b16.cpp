// sparselm::models, the compiled companion of the common model types (train/precompiled.hpp): the
// instances of the fp32 block-sparse (B = 16) GPT and of its default trainer, defined here once for
// every target that links the library (one file per type, so that they compile in parallel).
#define SPARSELM_INSTANTIATE_MODELS
#include "sparselm/train/precompiled.hpp"

template class ::sparselm::gpt<float, ::sparselm::block_sparse<16>>;
template class ::sparselm::trainer<::sparselm::gpt<float, ::sparselm::block_sparse<16>>>;
