// sparselm::models, the compiled companion of the common model types (train/precompiled.hpp): the
// instances of the fp32 dense GPT and of its default trainer, defined here once for every target that
// links the library (one file per type, so that they compile in parallel).
#define SPARSELM_INSTANTIATE_MODELS
#include "sparselm/train/precompiled.hpp"

template class ::sparselm::gpt<float, ::sparselm::dense>;
template class ::sparselm::trainer<::sparselm::gpt<float, ::sparselm::dense>>;
