#pragma once
// Umbrella header for users. Library headers include what they use, never this file.

#include "sparselm/version.hpp"
#include "sparselm/core/arena.hpp"
#include "sparselm/core/dtype.hpp"
#include "sparselm/core/error.hpp"
#include "sparselm/core/rng.hpp"
#include "sparselm/core/simd.hpp"
#include "sparselm/core/tensor.hpp"
#include "sparselm/core/threads.hpp"
#include "sparselm/core/view.hpp"
