#pragma once
// The model and trainer types of sparselm::models, the optional compiled companion library: GPT in
// fp32, dense and block-sparse (B = 16), each with its default trainer (trainer<Model>, AdamW). A
// target that links sparselm::models compiles with SPARSELM_PRECOMPILED_MODELS, under which this
// header declares those types extern template: a translation unit that builds such a model and
// trains it compiles no model, layer or optimiser code -- the constructors, init, train_step and
// evaluate are defined out of line in their headers, and their instances come from the library.
// Without the macro (or without linking the library) the header changes nothing and the types are
// compiled where they are used, as for any other model.
//
//   #include <sparselm/models/gpt.hpp>
//   #include <sparselm/train/precompiled.hpp>   // also included by <sparselm/sparselm.hpp>
//   #include <sparselm/train/trainer.hpp>
//   sparselm::gpt<float> model(cfg);              // target_link_libraries(app PRIVATE sparselm::models)
//   sparselm::trainer t(model, {}, sparselm::optim::adamw<>(), schedule);
//   t.train_step(micro_batches);                  // the library's instance
//
// Only the listed types are precompiled; another model or policy bundle is compiled as usual.
#include "sparselm/models/gpt.hpp"
#include "sparselm/sparse/sparsity.hpp"
#include "sparselm/train/trainer.hpp"

// The sparsities of the precompiled GPTs (each with gpt<float, S> and trainer<gpt<float, S>>).
#define SPARSELM_FOR_EACH_PRECOMPILED_GPT(X) X(::sparselm::dense) X(::sparselm::block_sparse<16>)

#if defined(SPARSELM_PRECOMPILED_MODELS) && !defined(SPARSELM_INSTANTIATE_MODELS)
#define SPARSELM_EXTERN_GPT(S)                  \
  extern template class ::sparselm::gpt<float, S>; \
  extern template class ::sparselm::trainer<::sparselm::gpt<float, S>>;
SPARSELM_FOR_EACH_PRECOMPILED_GPT(SPARSELM_EXTERN_GPT)
#undef SPARSELM_EXTERN_GPT
#endif
