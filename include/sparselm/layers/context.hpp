#pragma once
// The step context and the layer concept for layers (core/step_context.hpp, core/layer.hpp). Each
// layer keeps its temporaries in a workspace type of its own, which the pass's scratch pool holds
// once per type (scratch::get, core/step_context.hpp); there is no central list of slots.

#include "sparselm/core/layer.hpp"
#include "sparselm/core/step_context.hpp"
