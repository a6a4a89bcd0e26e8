#pragma once
// The block_sparse<B> sparsity tag; it lives in sparsity.hpp beside `dense` and the
// `sparsity_type` concept. This header exists so that users can include it by its name.

#include "sparselm/sparse/sparsity.hpp"
